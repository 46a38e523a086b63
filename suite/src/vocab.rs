//! The suite's shared vocabulary: dtypes, execution-provider flavours, levels, modalities and devices, with their
//! names as case files and trial names spell them, the typed trial id, and the limits every stage agrees on. A leaf:
//! it imports nothing of the crate but the error type, and any stage may import it.

use std::fmt;

use serde::{Deserialize, Deserializer};

/// The most new tokens a case or golden may ask for: generation reserves room for them up front, and a greedy check
/// of a few thousand tokens is already far past what a golden can pin down.
pub const MAX_NEW_TOKENS: u32 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
    Int4,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::Int4 => "int4",
        }
    }

    /// The reference a variant of this dtype is judged against, when it is not the plain float32 one: int4 is
    /// judged against the float32 reference with the package's own int4 weights dequantized into it (kernel
    /// parity), which separates a broken kernel or packing from honest quantization loss. The accuracy gate
    /// judges the quantization loss itself.
    pub fn golden_suffix(self) -> Option<&'static str> {
        match self {
            Dtype::Int4 => Some("int4"),
            Dtype::F32 | Dtype::F16 | Dtype::Bf16 => None,
        }
    }

    /// The module golden a variant of this dtype is localized against, when it is not the plain float32 one: int4's
    /// is the kernel-parity reference's (as [`Dtype::golden_suffix`]); a half-precision dtype's is the reference with
    /// its weights rounded to that dtype, so that a module differs from the package's by the package's arithmetic
    /// alone (the weights' rounding reaches about an ulp of the dtype at the first norm, as much as a 1% weight error).
    pub fn module_golden_suffix(self) -> Option<&'static str> {
        match self {
            Dtype::F32 => None,
            Dtype::F16 | Dtype::Bf16 | Dtype::Int4 => Some(self.name()),
        }
    }

    /// Torch's name for a half-precision dtype, which a rounded reference is rounded to.
    pub fn torch_half(self) -> Option<&'static str> {
        match self {
            Dtype::F16 => Some("float16"),
            Dtype::Bf16 => Some("bfloat16"),
            Dtype::F32 | Dtype::Int4 => None,
        }
    }

    /// Accepts our short names and mobius' long ones.
    pub fn parse(s: &str) -> Option<Dtype> {
        Some(match s {
            "f32" | "float32" | "fp32" => Dtype::F32,
            "f16" | "float16" | "fp16" => Dtype::F16,
            "bf16" | "bfloat16" => Dtype::Bf16,
            "int4" | "q4" => Dtype::Int4,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ep {
    /// The builder's portable flavour: runs on CPU, or on CUDA when `MOBIUS_TEST_DEVICE=cuda`.
    Default,
    /// The CPU flavour (GroupQueryAttention, no `position_ids`).
    Cpu,
    /// The CUDA flavour: runs only on the CUDA execution provider.
    Cuda,
}

impl Ep {
    pub fn name(self) -> &'static str {
        match self {
            Ep::Default => "default",
            Ep::Cpu => "cpu",
            Ep::Cuda => "cuda",
        }
    }

    pub fn parse(s: &str) -> Option<Ep> {
        Some(match s {
            "default" => Ep::Default,
            "cpu" => Ep::Cpu,
            "cuda" => Ep::Cuda,
            _ => return None,
        })
    }
}

/// Declares the levels' ids, each with its name in trial names and case files and its short label in the reports'
/// matrix, once: what a level does lives in its own module under `level/`, listed in `level::ALL`.
macro_rules! levels {
    ($($(#[$doc:meta])* $id:ident => $name:literal ($short:literal),)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Level {
            $($(#[$doc])* $id,)*
        }

        impl Level {
            /// Every level, in the order trials of one variant sort.
            pub const ALL: &[Level] = &[$(Level::$id,)*];

            pub fn name(self) -> &'static str {
                match self {
                    $(Level::$id => $name,)*
                }
            }

            pub fn parse(s: &str) -> Option<Level> {
                match s {
                    $($name => Some(Level::$id),)*
                    _ => None,
                }
            }

            /// The label of its mark in the reports' matrix (a gate's follows its task's name; empty: the name alone).
            pub fn short(self) -> &'static str {
                match self {
                    $(Level::$id => $short,)*
                }
            }
        }
    };
}

levels! {
    /// Prefill: the last position's logits over the vocabulary, and every stored prompt position's, against the reference.
    L4 => "L4" ("L4"),
    /// Greedy generation with the KV cache: tokens and step logits against the reference's.
    L5 => "L5" ("L5"),
    /// The vision encoder's features against the reference's, and that they reach the decoder.
    VisionEncoder => "vision_encoder" ("vision"),
    /// The same for the audio encoder.
    AudioEncoder => "audio_encoder" ("audio"),
    /// The accuracy gate on a benchmark task.
    Accuracy => "accuracy" (""),
    /// The package as onnxruntime-genai runs it.
    Genai => "genai" ("genai"),
    /// The multimodal accuracy gate with every item through onnxruntime-genai's own processor and generator.
    AccuracyGenai => "accuracy_genai" ("genai"),
    /// The next-token distributions over a teacher-forced corpus against the fp32 reference's.
    Dist => "dist" ("dist"),
    /// Where along the model a failing prefill leaves the reference: the first module out of noise.
    Localize => "localize" ("localize"),
}

impl Level {
    /// A gate's level: its trials are named `<task>/<case>/<ep>/<dtype>/<level>`, one per benchmark task.
    pub fn is_gate(self) -> bool {
        matches!(self, Level::Accuracy | Level::AccuracyGenai)
    }

    /// The names `parse` takes, for messages.
    pub fn names() -> String {
        Level::ALL.iter().map(|l| l.name()).collect::<Vec<_>>().join(", ")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Modality {
    Text,
    Image,
    Audio,
    ImageAudio,
}

impl Modality {
    pub fn name(self) -> &'static str {
        match self {
            Modality::Text => "text",
            Modality::Image => "image",
            Modality::Audio => "audio",
            Modality::ImageAudio => "image+audio",
        }
    }

    /// The name in file names: `image_audio` for `image+audio`.
    pub fn slug(self) -> String {
        self.name().replace('+', "_")
    }

    pub fn parse(s: &str) -> Option<Modality> {
        Some(match s {
            "text" => Modality::Text,
            "image" => Modality::Image,
            "audio" => Modality::Audio,
            "image+audio" => Modality::ImageAudio,
            _ => return None,
        })
    }
}

macro_rules! deserialize_by_name {
    ($ty:ty, $what:literal, $expected:literal) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                <$ty>::parse(&s)
                    .ok_or_else(|| serde::de::Error::custom(format!(concat!("unknown ", $what, " {:?}, expected one of ", $expected), s)))
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
deserialize_by_name!(Dtype, "dtype", "f32, f16, bf16, int4 (or float32, float16, bfloat16)");
deserialize_by_name!(Ep, "ep", "default, cpu, cuda");
deserialize_by_name!(Modality, "modality", "text, image, audio, image+audio");

impl<'de> Deserialize<'de> for Level {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Level::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown level {s:?}, expected one of {}", Level::names())))
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where trials run: `cpu` (default), `cuda` or `cuda:<id>`, as `MOBIUS_TEST_DEVICE` (or `MOBIUS_TEST_EP`) names it
/// (read by [`crate::context::RunContext`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Cuda { id: i32 },
}

impl Device {
    pub fn parse(s: &str) -> Option<Device> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "cpu" => Some(Device::Cpu),
            "cuda" | "gpu" => Some(Device::Cuda { id: 0 }),
            other => other.strip_prefix("cuda:").and_then(|id| id.parse().ok()).map(|id| Device::Cuda { id }),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda { id } => write!(f, "cuda:{id}"),
        }
    }
}

/// A trial's name, typed. Its [`Display`](fmt::Display) is the libtest name; [`TrialId::parse`] reads one back;
/// [`TrialId::snapshot_stem`] names a stream's reviewed snapshot. The only place a trial name is built or read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TrialId {
    /// `<case>/<modality>/<ep>/<dtype>/<level>`.
    Conformance { case: String, modality: Modality, ep: Ep, dtype: Dtype, level: Level },
    /// `<task>/<case>/<ep>/<dtype>/accuracy`: the accuracy gate on one task; `.../accuracy_genai` for a multimodal
    /// task's items through onnxruntime-genai (`level` is one of the two).
    Accuracy { task: String, case: String, ep: Ep, dtype: Dtype, level: Level },
    /// `<case>/case`: a case file that does not load.
    Case { case: String },
}

impl TrialId {
    /// The case part of the name: the case's name, or `<task folder>/<case>` where two task folders share one.
    pub fn case(&self) -> &str {
        match self {
            TrialId::Conformance { case, .. } | TrialId::Accuracy { case, .. } | TrialId::Case { case } => case,
        }
    }

    pub fn level(&self) -> Option<Level> {
        match self {
            TrialId::Conformance { level, .. } => Some(*level),
            TrialId::Accuracy { level, .. } => Some(*level),
            TrialId::Case { .. } => None,
        }
    }

    /// The same trial of another case (`<case>` renamed, the rest kept).
    pub fn with_case(&self, name: &str) -> TrialId {
        let mut id = self.clone();
        match &mut id {
            TrialId::Conformance { case, .. } | TrialId::Accuracy { case, .. } | TrialId::Case { case } => *case = name.to_string(),
        }
        id
    }

    /// Reads a name [`Display`](fmt::Display) wrote. The case part may itself hold a `/` (a task folder), so the
    /// fields are read from the end.
    pub fn parse(name: &str) -> Option<TrialId> {
        if let Some(case) = name.strip_suffix("/case") {
            return (!case.is_empty()).then(|| TrialId::Case { case: case.to_string() });
        }
        let mut parts = name.rsplitn(5, '/');
        let (last, dtype, ep, fourth, rest) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let (ep, dtype) = (Ep::parse(ep)?, Dtype::parse(dtype)?);
        let level = Level::parse(last)?;
        if level.is_gate() {
            let (task, case) = match rest.split_once('/') {
                Some((task, head)) => (task.to_string(), format!("{head}/{fourth}")),
                None => (rest.to_string(), fourth.to_string()),
            };
            return Some(TrialId::Accuracy { task, case, ep, dtype, level });
        }
        Some(TrialId::Conformance { case: rest.to_string(), modality: Modality::parse(fourth)?, ep, dtype, level })
    }

    /// The name split before its last part: (`<case>/<modality>/<ep>/<dtype>`, `<level>`), (`<task>/<case>/<ep>/<dtype>`,
    /// `accuracy`) or (`<case>`, `case`): a JUnit classname and test name.
    pub fn group_and_leaf(&self) -> (String, String) {
        match self {
            TrialId::Conformance { case, modality, ep, dtype, level } => (format!("{case}/{modality}/{ep}/{dtype}"), level.to_string()),
            TrialId::Accuracy { task, case, ep, dtype, level } => (format!("{task}/{case}/{ep}/{dtype}"), level.to_string()),
            TrialId::Case { case } => (case.clone(), "case".into()),
        }
    }

    /// The file stem of a conformance trial's reviewed snapshot, `<case name>__<modality>__<ep>__<dtype>__<level>`
    /// (`case_name` without its task folder: snapshots live in the task's folder).
    pub fn snapshot_stem(&self, case_name: &str) -> Option<String> {
        match self {
            TrialId::Conformance { modality, ep, dtype, level, .. } => {
                Some(format!("{case_name}__{}__{ep}__{dtype}__{level}", modality.slug()))
            }
            TrialId::Accuracy { .. } | TrialId::Case { .. } => None,
        }
    }
}

impl fmt::Display for TrialId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrialId::Conformance { case, modality, ep, dtype, level } => write!(f, "{case}/{modality}/{ep}/{dtype}/{level}"),
            TrialId::Accuracy { task, case, ep, dtype, level } => write!(f, "{task}/{case}/{ep}/{dtype}/{level}"),
            TrialId::Case { case } => write!(f, "{case}/case"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trial_ids_round_trip_through_their_names() {
        let ids = [
            TrialId::Conformance { case: "qwen3-tiny".into(), modality: Modality::Text, ep: Ep::Cpu, dtype: Dtype::F32, level: Level::L4 },
            TrialId::Conformance {
                case: "audio/gemma4-mm".into(),
                modality: Modality::ImageAudio,
                ep: Ep::Default,
                dtype: Dtype::Int4,
                level: Level::AudioEncoder,
            },
            TrialId::Conformance { case: "x".into(), modality: Modality::Image, ep: Ep::Cuda, dtype: Dtype::Bf16, level: Level::Genai },
            TrialId::Accuracy {
                task: "arith".into(),
                case: "arith-tiny".into(),
                ep: Ep::Default,
                dtype: Dtype::F32,
                level: Level::Accuracy,
            },
            TrialId::Accuracy {
                task: "knowledge".into(),
                case: "real/gemma3".into(),
                ep: Ep::Cpu,
                dtype: Dtype::F16,
                level: Level::Accuracy,
            },
            TrialId::Accuracy {
                task: "ocrbench".into(),
                case: "real/gemma4".into(),
                ep: Ep::Cuda,
                dtype: Dtype::F16,
                level: Level::AccuracyGenai,
            },
            TrialId::Case { case: "broken".into() },
            TrialId::Case { case: "dir/broken".into() },
        ];
        for id in ids {
            assert_eq!(TrialId::parse(&id.to_string()).as_ref(), Some(&id), "{id}");
        }
        for bad in ["", "a/b", "a/text/cpu/f32/L9", "a/text/gpu/f32/L4", "/case", "t/c/cpu/f64/accuracy"] {
            assert_eq!(TrialId::parse(bad), None, "{bad}");
        }
        let id = TrialId::Conformance {
            case: "t/qwen".into(),
            modality: Modality::ImageAudio,
            ep: Ep::Cpu,
            dtype: Dtype::F16,
            level: Level::L5,
        };
        assert_eq!(id.snapshot_stem("qwen").as_deref(), Some("qwen__image_audio__cpu__f16__L5"));
    }
}
