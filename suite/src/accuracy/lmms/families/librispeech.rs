//! LibriSpeech (`tasks/librispeech/utils.py`): a fixed instruction for the audio, each utterance's word edits
//! against its `gt` ([`wer`]), and the task's number the corpus WER (all edits over all reference words, x100), in
//! points already, lower better. The paired test compares word edits, each utterance weighed by its words.

use crate::accuracy::doc::{self, Doc};
use crate::accuracy::lmms::{Direction, Facts, HookKind, ItemScore, MediaItem, Medium, Scorer};
use crate::accuracy::scorers::wer;
use crate::error::Result;

pub struct LibriSpeech;

const FACTS: Facts = Facts {
    name: "librispeech",
    datasets: &["lmms-lab/librispeech", "lmms-lab-audio/librispeech"],
    hooks: &[
        ("utils.librispeech_doc_to_audio", HookKind::DocToVisual),
        ("utils.librispeech_doc_to_text", HookKind::DocToText),
        ("utils.librispeech_doc_to_target", HookKind::DocToTarget),
        ("utils.librispeech_process_result", HookKind::ProcessResults),
        ("utils.librispeech_wer", HookKind::Aggregation),
    ],
    target: "gt",
    medium: Medium::Audio,
    metrics: &[("wer", Direction::LowerIsBetter)],
    binary: false,
};

impl Scorer for LibriSpeech {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn question(&self, _d: &Doc, pre: &str, post: &str) -> Result<String> {
        Ok(format!("{pre}Please recognize the speech and only output the recognized content:{post}"))
    }

    /// The one transcript, a string.
    fn answers(&self, d: &Doc) -> Result<Vec<String>> {
        Ok(vec![doc::text(d, "gt")?])
    }

    /// The document's `task` (`asr_en`).
    fn kind(&self, d: &Doc) -> Result<String> {
        doc::text(d, "task")
    }

    fn score(&self, item: &MediaItem, prediction: &str) -> ItemScore {
        let e = wer::utterance(&item.answers[0], prediction);
        let value = if e.words == 0 { 0.0 } else { 100.0 * e.edits as f64 / e.words as f64 };
        ItemScore { values: [("wer".to_string(), value)].into(), edits: Some(e) }
    }

    /// lmms-eval 0.7.3's `compute_wer` prints the first utterance's first reference word (`ref_items[0]`: an
    /// `IndexError` when it has none) and divides by the words of all of them (a `ZeroDivisionError` when there are
    /// none): such a task is refused. A later utterance with no reference words is scored as lmms-eval scores it,
    /// its prediction's words counted as insertions over no words of its own.
    fn check(&self, items: &[MediaItem]) -> Result<()> {
        let words = |it: &MediaItem| wer::utterance(&it.answers[0], "").words;
        if let Some(first) = items.first().filter(|it| words(it) == 0) {
            crate::error::bail!(
                "document {}: its transcript {:?} has no words after lmms-eval's normalization, and lmms-eval 0.7.3's \
                 compute_wer raises IndexError on a first utterance without words (it prints ref_items[0]): the gate \
                 cannot score this task as lmms-eval does",
                first.doc,
                first.answers[0]
            );
        }
        Ok(())
    }

    /// `librispeech_wer`: corpus WER.
    fn aggregate(&self, _metric: &str, scores: &[ItemScore]) -> f64 {
        wer::corpus(&scores.iter().filter_map(|s| s.edits).collect::<Vec<_>>())
    }

    /// WER is in points already.
    fn points(&self, metric: &str, scores: &[ItemScore]) -> f64 {
        self.aggregate(metric, scores)
    }

    /// An utterance's word edits.
    fn item_value(&self, metric: &str, s: &ItemScore) -> Option<f64> {
        match &s.edits {
            Some(e) => Some(e.edits as f64),
            None => s.values.get(metric).copied(),
        }
    }

    /// An utterance moves the corpus WER by up to its share of the reference words.
    fn item_weights(&self, reference: &[ItemScore]) -> Vec<f64> {
        let words: usize = reference.iter().filter_map(|s| s.edits.as_ref().map(|e| e.words)).sum();
        reference.iter().map(|r| 100.0 * r.edits.map_or(0, |e| e.words) as f64 / words.max(1) as f64).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accuracy::lmms::Media;

    fn item(doc: usize, gt: &str) -> MediaItem {
        let media = Media::Samples { samples: vec![], rate: 16_000 };
        MediaItem { doc, question: String::new(), answers: vec![gt.to_string()], kind: "asr_en".into(), media }
    }

    /// lmms-eval 0.7.3 raises on a first utterance whose transcript normalizes to no words (IndexError), and on
    /// none with words at all (ZeroDivisionError): refused at load, naming the document. A later one without words
    /// is lmms-eval's insertions over nothing: its prediction's words add to the edits, nothing to the words.
    #[test]
    fn a_transcript_without_words_is_refused_where_lmms_eval_raises_and_scored_where_it_scores() {
        let e = LibriSpeech.check(&[item(0, "..."), item(1, "the cat")]).unwrap_err().to_string();
        assert!(e.contains("document 0") && e.contains("IndexError"), "{e}");
        assert!(LibriSpeech.check(&[item(0, "?"), item(1, "!")]).is_err(), "no words at all");
        let items = [item(0, "the cat"), item(1, "...")];
        LibriSpeech.check(&items).unwrap();
        let scores: Vec<ItemScore> =
            [("the cat", &items[0]), ("a dog", &items[1])].iter().map(|(p, it)| LibriSpeech.score(it, p)).collect();
        // lmms-eval: (0 + 2 insertions) over (2 + 0) words = 100.
        assert_eq!(LibriSpeech.aggregate("wer", &scores), 100.0);
    }
}
