//! The encoder levels' judge: a media encoder's features against the reference's, element-wise under the dtype's
//! L4 tolerance, or, when the reference recorded its own float32-vs-float64 noise there, under the noise policy as L4
//! judges logits; and whether they reach the decoder (zeroing them must move the prompt's last logits). Pure: the run
//! stage's outputs and the reference's features in, a judgement out.

use crate::error::{Error, Result, bail};
use crate::feed::inputs::{Inputs, TensorData};
use crate::judge::golden::{Hex, Noise};
use crate::judge::profile::Profile;
use crate::judge::tolerance::Tolerance;
use crate::judge::verdict::{NoiseJudgement, OverLimit, Verdict, judge_noise};
use mobius_numeric::{Comparison, compare};

/// What the run stage measured for one encoder.
pub struct ComponentOutputs<'a> {
    pub shape: &'a [i64],
    pub features: &'a [f32],
    /// The prompt's last logits with the features, and with them zeroed.
    pub with: &'a [f32],
    pub zeroed: &'a [f32],
}

/// The reference's features as the golden stores them.
pub struct ReferenceFeatures<'a> {
    /// The shape of the whole state (with every frame).
    pub shape: &'a [i64],
    /// The stored values: every frame, or those of `frames` ([1, frames, hidden]).
    pub values: &'a [f32],
    /// Which frames (along the second dimension) `values` holds, when not every one.
    pub frames: Option<&'a [i64]>,
    /// The reference's own float32-vs-float64 noise over the whole state.
    pub noise: Option<Noise>,
}

impl<'a> ReferenceFeatures<'a> {
    /// The stored features `name` of a features file (`file` names it in errors): the values, and, where some frames
    /// were left out, `<name>.frames` (their indices, ascending) with `<name>.shape` (the whole state's); and
    /// `<name>.noise` (p50, p99, max) when the reference recorded it.
    pub fn read(stored: &'a Inputs, name: &str, file: &str) -> Result<ReferenceFeatures<'a>> {
        let get = |n: &str| stored.get(n).map(|t| (t.shape.as_slice(), &t.data));
        let Some((shape, TensorData::F32(values))) = get(name) else {
            return Err(match get(name) {
                None => Error::new(format!("{file}: no tensor `{name}`")),
                Some(_) => Error::new(format!("{file}: tensor `{name}` must be float32")),
            });
        };
        let ints = |n: String| -> Result<Option<&'a [i64]>> {
            match get(&n) {
                None => Ok(None),
                Some((_, TensorData::I64(v))) => Ok(Some(v)),
                Some(_) => bail!("{file}: tensor `{n}` must be int64"),
            }
        };
        let frames = ints(format!("{name}.frames"))?;
        let whole = ints(format!("{name}.shape"))?;
        let shape = match (frames, whole) {
            (None, None) => shape,
            (Some(frames), Some(whole)) => {
                let ascending = frames.windows(2).all(|w| w[0] < w[1]);
                let fits = whole.len() == 3
                    && shape.len() == 3
                    && (whole[0], whole[2]) == (shape[0], shape[2])
                    && shape[1] == frames.len() as i64
                    && frames.first().is_some_and(|&f| f >= 0)
                    && frames.last().is_some_and(|&f| f < whole[1]);
                if !ascending || !fits {
                    bail!(
                        "{file}: tensor `{name}.frames` ({} frames) does not index `{name}` {shape:?} within the whole state {whole:?}",
                        frames.len()
                    );
                }
                whole
            }
            _ => bail!("{file}: `{name}.frames` and `{name}.shape` go together: one is missing"),
        };
        let noise = match get(&format!("{name}.noise")) {
            None => None,
            Some(([3], TensorData::F32(v))) if v.iter().all(|x| x.is_finite() && *x >= 0.0) => {
                let hex = |x: f32| Hex(f64::from(x));
                Some(Noise { p50: hex(v[0]), p99: hex(v[1]), max: hex(v[2]) })
            }
            Some(_) => bail!("{file}: tensor `{name}.noise` must be float32 [3]: p50, p99 and max, finite and non-negative"),
        };
        Ok(ReferenceFeatures { shape, values, frames, noise })
    }

    /// The package's values at the frames the reference kept, for a state of the reference's whole shape (else
    /// nothing lines up: `None`).
    pub fn kept<'g>(&self, got_shape: &[i64], got: &'g [f32]) -> Option<std::borrow::Cow<'g, [f32]>> {
        if got_shape != self.shape {
            return None;
        }
        let Some(frames) = self.frames else { return Some(std::borrow::Cow::Borrowed(got)) };
        let cols = (*self.shape.last()?).max(1) as usize;
        let rows = frames.iter().map(|&f| got.get(f as usize * cols..(f as usize + 1) * cols));
        Some(std::borrow::Cow::Owned(rows.collect::<Option<Vec<&[f32]>>>()?.concat()))
    }

    /// The frame (second-dimension index) of stored row `row`.
    fn frame_of(&self, row: usize) -> usize {
        self.frames.and_then(|f| f.get(row)).map_or(row, |&f| f as usize)
    }
}

/// The judgement, with every number its report prints.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentReport {
    pub verdict: Verdict,
    /// `vision_encoder` or `audio_encoder`.
    pub component: &'static str,
    /// The features' tensor: `image_features` or `audio_features`.
    pub tensor: &'static str,
    pub got_shape: Vec<i64>,
    pub want_shape: Vec<i64>,
    pub comparison: Comparison,
    /// The noise-floor judgement, when the reference recorded its noise (it replaces atol/rtol then).
    pub noise: Option<NoiseJudgement>,
    /// How many frames were compared, when the reference stores only some of them.
    pub frames_compared: Option<usize>,
    /// Feature columns (the last dimension), for `[row, column]` positions.
    pub cols: usize,
    /// How far zeroing the features moved the prompt's last logits, and the least that shows they arrive.
    pub moved: f64,
    pub floor: f64,
    pub reasons: Vec<ComponentReason>,
    pub tolerance: Tolerance,
}

/// Why an encoder fails, naming the encoder (`component`) and its features tensor, with the numbers it was decided
/// by (its render module words it). A position is `[frame, column]`.
#[derive(Debug, Clone, PartialEq)]
pub enum ComponentReason {
    Shape {
        component: &'static str,
        tensor: &'static str,
        got: Vec<i64>,
        want: Vec<i64>,
    },
    /// The noise-floor judgement's statistics over their limits, and the largest difference.
    OverNoise {
        component: &'static str,
        tensor: &'static str,
        over: Vec<OverLimit>,
        at: [usize; 2],
        expected: f32,
        got: f32,
    },
    /// Values outside atol + rtol * |ref|, and the worst.
    OutsideTolerance {
        component: &'static str,
        tensor: &'static str,
        violations: usize,
        of: usize,
        at: [usize; 2],
        expected: f32,
        got: f32,
    },
    /// Zeroing the features moved the prompt's last logits by no more than `floor`.
    Unreached {
        component: &'static str,
        tensor: &'static str,
        moved: f64,
        floor: f64,
    },
}

/// Judges one encoder (`component`, whose features tensor is `tensor`) against the reference's features.
pub fn judge(
    component: &'static str,
    tensor: &'static str,
    got: &ComponentOutputs,
    want: &ReferenceFeatures,
    tol: &Tolerance,
) -> ComponentReport {
    let mut reasons = Vec::new();
    let want_shape = want.shape;
    let same_shape = got.shape == want_shape;
    if !same_shape {
        reasons.push(ComponentReason::Shape { component, tensor, got: got.shape.to_vec(), want: want_shape.to_vec() });
    }
    let cols = (*want_shape.last().unwrap_or(&1)).max(1) as usize;
    let kept = want.kept(got.shape, got.features);
    let got_values: &[f32] = kept.as_deref().unwrap_or(&[]);
    let frame_of = |row| want.frame_of(row);
    let c = compare(got_values, want.values, tol.atol, tol.rtol);
    let noise = want.noise.as_ref().filter(|_| got_values.len() == want.values.len()).map(|n| judge_noise(got_values, want.values, n, tol));
    let over = noise.as_ref().map(NoiseJudgement::over_limits);
    match over {
        Some(over) if !over.is_empty() => {
            let i = c.max_abs_at;
            reasons.push(ComponentReason::OverNoise {
                component,
                tensor,
                over,
                at: [frame_of(i / cols), i % cols],
                expected: want.values.get(i).copied().unwrap_or(f32::NAN),
                got: got_values.get(i).copied().unwrap_or(f32::NAN),
            });
        }
        Some(_) => {}
        None => {
            if let Some(i) = c.worst_violation_at.filter(|_| kept.is_some()) {
                reasons.push(ComponentReason::OutsideTolerance {
                    component,
                    tensor,
                    violations: c.violations,
                    of: want.values.len(),
                    at: [frame_of(i / cols), i % cols],
                    expected: want.values[i],
                    got: got_values[i],
                });
            }
        }
    }
    let moved = compare(got.with, got.zeroed, 0.0, 0.0).max_abs;
    let floor = (100.0 * tol.atol).max(1e-3);
    if moved <= floor {
        reasons.push(ComponentReason::Unreached { component, tensor, moved, floor });
    }
    let verdict = if reasons.is_empty() { Verdict::Pass } else { Verdict::Fail };
    ComponentReport {
        verdict,
        component,
        tensor,
        got_shape: got.shape.to_vec(),
        want_shape: want_shape.to_vec(),
        comparison: c,
        noise,
        frames_compared: want.frames.map(<[i64]>::len),
        cols,
        moved,
        floor,
        reasons,
        tolerance: *tol,
    }
}

/// What an encoder level decided, as the reports read it.
#[derive(Debug, Clone)]
pub struct Judged {
    pub report: ComponentReport,
    pub numbers: Numbers,
}

/// An encoder's features against the reference's.
#[derive(Debug, Clone, PartialEq)]
pub struct Numbers {
    pub component: &'static str,
    pub max_abs: f64,
    pub cosine: f64,
    /// How far zeroing the features moved the prompt's last logits.
    pub moved: f64,
    pub atol: f64,
    /// max |diff| per feature row (one row per media token).
    pub rows: Profile,
}

/// An encoder's numbers and its per-row |diff| (rows are the last dimension's runs of `cols` values).
pub fn numbers(component: &'static str, got: &[f32], want: &[f32], cols: usize, atol: f64, moved: f64) -> Numbers {
    let c = compare(got, want, 0.0, 0.0);
    let rows = Profile::of(
        got.chunks(cols.max(1))
            .zip(want.chunks(cols.max(1)))
            .map(|(g, w)| g.iter().zip(w).map(|(&a, &b)| (a as f64 - b as f64).abs()).fold(0.0, f64::max))
            .collect::<Vec<_>>()
            .into_iter(),
    );
    Numbers { component, max_abs: c.max_abs, cosine: c.cosine, moved, atol, rows }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::inputs::NamedTensor;

    fn tensor(name: &str, shape: &[i64], data: TensorData) -> NamedTensor {
        NamedTensor { name: name.into(), shape: shape.to_vec(), data }
    }

    /// A [1, 6, 2] state whose value at [f, c] is f + c/10, stored at frames 0, 2 and 4, with a recorded noise.
    fn stored(frames: &[i64], noise: Option<[f32; 3]>) -> Inputs {
        let values = frames.iter().flat_map(|&f| [f as f32, f as f32 + 0.1]).collect();
        let mut tensors = vec![
            tensor("audio_features", &[1, frames.len() as i64, 2], TensorData::F32(values)),
            tensor("audio_features.frames", &[frames.len() as i64], TensorData::I64(frames.to_vec())),
            tensor("audio_features.shape", &[3], TensorData::I64(vec![1, 6, 2])),
        ];
        if let Some(n) = noise {
            tensors.push(tensor("audio_features.noise", &[3], TensorData::F32(n.to_vec())));
        }
        Inputs { tensors }
    }

    fn state(at: Option<(usize, f32)>) -> Vec<f32> {
        let mut v: Vec<f32> = (0..6).flat_map(|f| [f as f32, f as f32 + 0.1]).collect();
        if let Some((i, d)) = at {
            v[i] += d;
        }
        v
    }

    fn judge_state(want: &ReferenceFeatures, features: &[f32]) -> ComponentReport {
        let got = ComponentOutputs { shape: &[1, 6, 2], features, with: &[0.0, 1.0], zeroed: &[0.0, 0.0] };
        judge(
            "audio_encoder",
            "audio_features",
            &got,
            want,
            &Tolerance::builtin(crate::judge::tolerance::Logits::Prefill, crate::vocab::Dtype::F32),
        )
    }

    #[test]
    fn only_the_stored_frames_are_compared_and_a_failure_names_the_real_frame() {
        let inputs = stored(&[0, 2, 4], None);
        let want = ReferenceFeatures::read(&inputs, "audio_features", "f.safetensors").unwrap();
        assert_eq!(want.shape, &[1, 6, 2]);
        // A frame the reference left out is not judged; one it kept is, and the failure names frame 4, not row 2.
        assert_eq!(judge_state(&want, &state(Some((3, 5.0)))).verdict, Verdict::Pass);
        let r = judge_state(&want, &state(Some((9, 5.0))));
        assert_eq!((r.verdict, r.frames_compared), (Verdict::Fail, Some(3)));
        assert!(r.reasons[0].to_string().contains("worst at [4, 1]"), "{:?}", r.reasons);
        // Another number of frames than the reference's is a shape failure, never a comparison of rows that differ.
        let got = ComponentOutputs { shape: &[1, 5, 2], features: &state(None)[..10], with: &[0.0, 1.0], zeroed: &[0.0, 0.0] };
        let r = judge(
            "audio_encoder",
            "audio_features",
            &got,
            &want,
            &Tolerance::builtin(crate::judge::tolerance::Logits::Prefill, crate::vocab::Dtype::F32),
        );
        assert!(r.verdict == Verdict::Fail && r.reasons[0].to_string().contains("shape [1, 5, 2]"), "{:?}", r.reasons);
    }

    #[test]
    fn a_recorded_noise_judges_in_multiples_of_it() {
        let inputs = stored(&[0, 2, 4], Some([1e-3, 1e-3, 1e-3]));
        let want = ReferenceFeatures::read(&inputs, "audio_features", "f.safetensors").unwrap();
        // 0.15 is far outside atol+rtol (1e-4) but 150x the noise, under the f32 limits (200/200/250).
        let r = judge_state(&want, &state(Some((4, 0.15))));
        assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.reasons);
        assert!(r.noise.is_some_and(|n| n.multiple[2] > 100.0 && n.score < 1.0));
        let r = judge_state(&want, &state(Some((4, 0.3))));
        assert_eq!(r.verdict, Verdict::Fail);
        let why = r.reasons[0].to_string();
        assert!(why.contains("noise policy") && why.contains("[2, 0]"), "{why}");
    }

    #[test]
    fn stored_frames_that_do_not_fit_are_refused_naming_the_file() {
        for (frames, shape) in [(vec![0, 2, 6], vec![1, 6, 2]), (vec![2, 0, 4], vec![1, 6, 2]), (vec![0, 2, 4], vec![1, 6, 3])] {
            let mut inputs = stored(&frames, None);
            inputs.tensors[2].data = TensorData::I64(shape);
            let e = ReferenceFeatures::read(&inputs, "audio_features", "f.safetensors").err().unwrap().to_string();
            assert!(e.contains("f.safetensors") && e.contains("audio_features.frames"), "{e}");
        }
        let mut inputs = stored(&[0, 2, 4], None);
        inputs.tensors.remove(2);
        let e = ReferenceFeatures::read(&inputs, "audio_features", "f.safetensors").err().unwrap().to_string();
        assert!(e.contains("go together"), "{e}");
        let inputs = stored(&[0, 2, 4], Some([1e-3, f32::NAN, 1e-3]));
        let e = ReferenceFeatures::read(&inputs, "audio_features", "f.safetensors").err().unwrap().to_string();
        assert!(e.contains("audio_features.noise"), "{e}");
    }

    #[test]
    fn component_rows_hold_each_rows_worst() {
        let c = numbers("vision_encoder", &[0.0, 1.0, 2.0, 3.5], &[0.0, 1.5, 2.0, 3.0], 2, 1e-4, 0.7);
        assert_eq!(c.rows.values, vec![0.5, 0.5]);
        assert_eq!((c.max_abs, c.moved), (0.5, 0.7));
    }
}
