//! The table of lmms-eval task families: each family's scorer is one file here, and [`Family::scorer`] lists them.
//! A new family adds its variant to [`Family`], its file, and its line in the table.

mod chartqa;
mod docvqa;
mod librispeech;
mod ocrbench;

use super::{Family, HookKind, Medium, Scorer};

impl Family {
    /// The family's scorer: the table.
    pub fn scorer(self) -> &'static dyn Scorer {
        match self {
            Family::OcrBench => &ocrbench::OcrBench,
            Family::DocVqa => &docvqa::DocVqa,
            Family::ChartQa => &chartqa::ChartQa,
            Family::LibriSpeech => &librispeech::LibriSpeech,
        }
    }

    /// What a task feeds the model beside its text.
    pub fn medium(self) -> Medium {
        self.scorer().facts().medium
    }
}

/// The registry: `(dataset_path, function)` -> the family and the hook it is. Every lmms-eval function the suite
/// runs is one a family's scorer lists.
pub fn hook(dataset_path: &str, function: &str) -> Option<(Family, HookKind)> {
    let family = Family::ALL.into_iter().find(|f| f.scorer().facts().datasets.contains(&dataset_path))?;
    let f = function.trim();
    let kind = family.scorer().facts().hooks.iter().find(|(name, _)| *name == f).map(|(_, kind)| *kind)?;
    Some((family, kind))
}

/// The families a refusal names: `ocrbench (echo840/OCRBench), ...`.
pub fn known() -> String {
    Family::ALL
        .iter()
        .map(|f| {
            let s = f.scorer().facts();
            format!("{} ({})", s.name, s.datasets.first().copied().unwrap_or_default())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_knows_each_family_by_its_dataset_and_refuses_the_rest() {
        assert_eq!(hook("echo840/OCRBench", "utils.ocrbench_process_results"), Some((Family::OcrBench, HookKind::ProcessResults)));
        assert_eq!(hook("lmms-lab-audio/librispeech", " utils.librispeech_wer"), Some((Family::LibriSpeech, HookKind::Aggregation)));
        assert_eq!(hook("echo840/OCRBench", "utils.chartqa_process_results"), None);
        assert_eq!(hook("someone/else", "utils.ocrbench_doc_to_text"), None);
        assert_eq!(
            known(),
            "ocrbench (echo840/OCRBench), docvqa (lmms-lab/DocVQA), chartqa (lmms-lab/ChartQA), librispeech (lmms-lab/librispeech)"
        );
    }
}
