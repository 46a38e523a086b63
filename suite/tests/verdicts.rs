//! Every verdict path, driven with crafted logits and goldens (no ONNX Runtime involved).

use mobius_conformance::judge::golden::{GenerationGolden, Hex, Noise, PositionTop, PrefillGolden, StepTop};
use mobius_conformance::judge::prefill::{judge_positions, judge_prefill, with_positions};
use mobius_conformance::judge::stream::{DivergenceKind, judge_generation, judge_step_logits, with_step_logits};
use mobius_conformance::judge::tolerance::{Logits, Tolerance};
use mobius_conformance::judge::verdict::Verdict;
use mobius_conformance::vocab::Dtype;
use mobius_numeric::PositionLogits;
use mobius_numeric::TopK;

/// A verdict's reasons as its message words them.
fn words(reasons: &[impl ToString]) -> Vec<String> {
    reasons.iter().map(ToString::to_string).collect()
}

fn f32_l4() -> Tolerance {
    Tolerance::builtin(Logits::Prefill, Dtype::F32)
}

/// A reference vector over a 32-token vocabulary with a clear top-1 at id 7 (margin 1.0).
fn reference() -> Vec<f32> {
    (0..32)
        .map(|i| match i {
            7 => 3.0,
            9 => 2.0,
            _ => (i as f32) * 0.01 - 0.5,
        })
        .collect()
}

fn prefill_golden(r: &[f32]) -> PrefillGolden {
    let top = TopK::of(r, 10);
    PrefillGolden {
        top1_id: top.ids[0],
        top2_id: top.ids[1],
        top10_ids: top.ids.clone(),
        top10_logits: top.logits.iter().map(|&x| Hex(x as f64)).collect(),
        logits_summary: mobius_numeric::summary(r).iter().map(|&x| Hex(x)).collect(),
        input_ids: vec![2, 10, 11],
        input_hash: None,
        vocab_size: Some(r.len()),
        last_logits: Some(r.iter().map(|&x| Hex(x as f64)).collect()),
        last_logits_file: None,
        provenance: None,
        reference_noise: None,
        positions: Vec::new(),
        component_norms: None,
        component_shapes: None,
    }
}

#[test]
fn l4_pass_within_tolerance() {
    let r = reference();
    let got: Vec<f32> = r.iter().map(|x| x + 5e-5).collect();
    let rep = judge_prefill(&got, &prefill_golden(&r), Some(&r), &f32_l4());
    assert_eq!(rep.verdict, Verdict::Pass, "{:?}", rep.reasons);
    assert!(rep.comparison.unwrap().max_abs < 1e-4);
}

#[test]
fn l4_fails_on_a_small_whole_vector_error_that_keeps_the_argmax() {
    // A 1% weight error in a norm-heavy model: argmax unchanged, logits off by ~1e-2.
    let r = reference();
    let mut got = r.clone();
    got[20] += 0.02;
    let rep = judge_prefill(&got, &prefill_golden(&r), Some(&r), &f32_l4());
    assert_eq!(rep.verdict, Verdict::Fail);
    assert_eq!(rep.got_top.ids[0], 7, "argmax alone would have passed");
    assert!(rep.reasons[0].to_string().contains("worst at id 20"), "{:?}", rep.reasons);
}

#[test]
fn l4_near_tie_flip_is_ambiguous() {
    let mut r = reference();
    r[9] = 2.995; // reference margin 0.005 < f32 near-tie margin 0.01
    let mut got = r.clone();
    got[7] = 2.9975;
    got[9] = 2.9976;
    let mut tol = f32_l4();
    tol.atol = 1e-2;
    let rep = judge_prefill(&got, &prefill_golden(&r), Some(&r), &tol);
    assert_eq!(rep.verdict, Verdict::Ambiguous, "{:?}", rep.reasons);
    assert_eq!(rep.got_top.ids[0], 9);
    assert!(words(&rep.reasons).iter().any(|s| s.contains("near-tie")), "{:?}", rep.reasons);
}

#[test]
fn l4_real_argmax_flip_fails() {
    let r = reference();
    let mut got = r.clone();
    got[9] = 3.5;
    let mut tol = f32_l4();
    tol.atol = 10.0; // even with a loose vector check, a flip the reference was sure about is a failure
    let rep = judge_prefill(&got, &prefill_golden(&r), Some(&r), &tol);
    assert_eq!(rep.verdict, Verdict::Fail);
    assert!(words(&rep.reasons).iter().any(|s| s.contains("argmax is 9") && s.contains("not a near-tie")), "{:?}", rep.reasons);
}

#[test]
fn l4_without_full_logits_uses_the_top10() {
    let r = reference();
    let mut g = prefill_golden(&r);
    g.last_logits = None;
    let mut got = r.clone();
    got[7] += 0.5;
    let rep = judge_prefill(&got, &g, None, &f32_l4());
    assert_eq!(rep.verdict, Verdict::Fail);
    assert!(rep.reasons[0].to_string().contains("top-10"), "{:?}", rep.reasons);
    assert!(rep.comparison.is_none());
}

#[test]
fn l4_vocab_mismatch_fails() {
    let r = reference();
    let rep = judge_prefill(&r[..31], &prefill_golden(&r), Some(&r), &f32_l4());
    assert_eq!(rep.verdict, Verdict::Fail);
    assert!(rep.reasons[0].to_string().contains("vocabulary size"), "{:?}", rep.reasons);
}

/// A golden stream 0..8 whose step 3 is a near-tie between 103 and 203.
fn generation_golden() -> GenerationGolden {
    let tokens: Vec<i64> = (0..8).map(|i| 100 + i).collect();
    let steps = tokens
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let second = if i == 3 { 9.995 } else { 8.0 };
            StepTop { ids: vec![t, t + 100, t + 200], logits: vec![Hex(10.0), Hex(second), Hex(7.0)] }
        })
        .collect();
    GenerationGolden {
        model_id: "m".into(),
        prompt: "p".into(),
        generated_tokens: tokens,
        generated_text: None,
        input_hash: None,
        max_new_tokens: Some(8),
        steps,
        provenance: None,
    }
}

fn l5(dtype: Dtype) -> Tolerance {
    Tolerance::builtin(Logits::Stream, dtype)
}

#[test]
fn l5_exact_stream_passes() {
    let g = generation_golden();
    let rep = judge_generation(&g.generated_tokens.clone(), &g, None, &l5(Dtype::F32));
    assert_eq!((rep.verdict, rep.matches, rep.first_divergence), (Verdict::Pass, 8, None));
}

#[test]
fn l5_near_tie_flip_with_teacher_forced_agreement_is_ambiguous() {
    let g = generation_golden();
    // Free-running: flips to the reference's runner-up at step 3, then drifts on its own path.
    let got = vec![100, 101, 102, 203, 500, 501, 502, 503];
    // Teacher-forced: only step 3 disagrees.
    let forced = vec![100, 101, 102, 203, 104, 105, 106, 107];
    let rep = judge_generation(&got, &g, Some(&forced), &l5(Dtype::F32));
    let d = rep.first_divergence.clone().unwrap();
    assert_eq!((d.index, d.kind), (3, DivergenceKind::NearTieFlip));
    let tf = rep.teacher_forced.clone().unwrap();
    assert_eq!((tf.agree, tf.near_tie_disagreements.clone(), tf.real_disagreements.clone()), (7, vec![3], vec![]));
    assert_eq!(rep.verdict, Verdict::Ambiguous, "{:?}", rep.reasons);
}

#[test]
fn l5_near_tie_flip_hiding_a_real_bug_fails() {
    let g = generation_golden();
    let got = vec![100, 101, 102, 203, 500, 501, 502, 503];
    let forced = vec![100, 101, 102, 203, 104, 999, 999, 107];
    let rep = judge_generation(&got, &g, Some(&forced), &l5(Dtype::F32));
    assert_eq!(rep.verdict, Verdict::Fail);
    assert_eq!(rep.teacher_forced.unwrap().real_disagreements, vec![5, 6]);
}

#[test]
fn l5_real_divergence_fails_and_reports_where() {
    let g = generation_golden();
    let got = vec![100, 301, 302, 303, 304, 305, 306, 307];
    let forced = vec![100, 301, 102, 103, 104, 105, 106, 107];
    let rep = judge_generation(&got, &g, Some(&forced), &l5(Dtype::F32));
    let d = rep.first_divergence.clone().unwrap();
    assert_eq!((d.index, d.kind, d.expected, d.got), (1, DivergenceKind::Real, Some(101), Some(301)));
    assert_eq!(rep.verdict, Verdict::Fail);
    assert_eq!(rep.teacher_forced.unwrap().agree, 7, "teacher forcing shows the rest of the stream is fine");
}

#[test]
fn l5_ratio_follows_the_dtype() {
    let g = generation_golden();
    let got = vec![100, 101, 102, 103, 104, 105, 106, 999];
    let rep = judge_generation(&got, &g, None, &l5(Dtype::Bf16));
    assert_eq!(rep.verdict, Verdict::Pass, "7/8 = 0.875 >= 0.8 at bf16; got {:?}", rep.reasons);
    let rep = judge_generation(&got, &g, None, &l5(Dtype::Int4));
    assert_eq!(rep.verdict, Verdict::Fail, "int4 is judged by kernel parity against its dequantized reference: 1.0");
    let rep = judge_generation(&got, &g, None, &l5(Dtype::F16));
    assert_eq!(rep.verdict, Verdict::Fail, "7/8 = 0.875 < 0.9 at f16");
}

#[test]
fn l5_short_stream_counts_missing_tokens() {
    let g = generation_golden();
    let got = vec![100, 101, 102, 1];
    let rep = judge_generation(&got, &g, None, &l5(Dtype::F32));
    assert_eq!((rep.verdict, rep.matches), (Verdict::Fail, 3));
    assert_eq!(rep.first_divergence.unwrap().index, 3);
}

#[test]
fn l5_golden_without_steps_is_unclassified() {
    let mut g = generation_golden();
    g.steps.clear();
    let rep = judge_generation(&[100, 999], &g, Some(&[100, 999]), &l5(Dtype::F32));
    assert_eq!(rep.first_divergence.unwrap().kind, DivergenceKind::Unclassified);
    assert_eq!(rep.verdict, Verdict::Fail);
}

#[test]
fn staleness_by_hash_prompt_or_ids() {
    use mobius_conformance::feed::inputs::Inputs;
    use mobius_conformance::judge::verdict::{Stale, staleness};
    let inputs = Inputs::from_token_ids(&[2, 10, 11]);
    let hash = inputs.hash();
    assert_eq!(staleness(Some(&hash), Some("p"), &[], "p", &inputs), None);
    let other = Inputs::from_token_ids(&[2, 10, 12]).hash();
    let stale = staleness(Some(&other), None, &[], "p", &inputs).unwrap();
    assert_eq!(stale, Stale::InputHash { golden: other.clone(), case: hash.clone() });
    assert!(stale.to_string().contains(&format!("input_hash {other}; the case's inputs hash to {hash}")), "{stale}");
    // mobius' goldens: no hash; their prompt or input ids give them away.
    let stale = staleness(None, Some("Describe this image."), &[], "Describe this image in detail.", &inputs).unwrap();
    assert!(matches!(&stale, Stale::Prompt { golden, .. } if golden == "Describe this image."), "{stale:?}");
    assert!(stale.to_string().contains("but the case states \"Describe this image in detail.\""), "{stale}");
    let stale = staleness(None, None, &[2, 10], "p", &inputs).unwrap();
    assert_eq!(stale, Stale::InputIds { golden: vec![2, 10], case: vec![2, 10, 11] });
    assert!(stale.to_string().contains("input ids [2, 10], but the case's prompt tokenizes to [2, 10, 11]"), "{stale}");
    assert_eq!(staleness(None, None, &[2, 10, 11], "p", &inputs), None);
}

/// A golden that records the reference's float32-vs-float64 noise (p50 1e-6, p99 4e-6, max 1e-5).
fn noisy_golden(r: &[f32]) -> PrefillGolden {
    PrefillGolden { reference_noise: Some(Noise { max: Hex(1e-5), p50: Hex(1e-6), p99: Hex(4e-6) }), ..prefill_golden(r) }
}

#[test]
fn noise_policy_judges_in_multiples_of_the_reference_noise_not_atol() {
    let r = reference();
    let mut tol = f32_l4();
    (tol.noise_multiple_p50, tol.noise_multiple_p99, tol.noise_multiple_max) = (100.0, 100.0, 100.0);
    // 2e-4 everywhere: over atol 1e-4, but 200x the p50 noise and 50x the p99: fails on p50 alone.
    let got: Vec<f32> = r.iter().map(|x| x + 2e-4).collect();
    let rep = judge_prefill(&got, &noisy_golden(&r), Some(&r), &tol);
    assert_eq!(rep.verdict, Verdict::Fail, "{:?}", rep.reasons);
    let n = rep.noise.unwrap();
    assert!((n.multiple[0] - 200.0).abs() < 1.0 && (n.multiple[1] - 50.0).abs() < 1.0, "{n:?}");
    assert!(words(&rep.reasons).iter().any(|x| x.contains("p50 |diff|") && x.contains("limit 100x")), "{:?}", rep.reasons);
    assert!(!words(&rep.reasons).iter().any(|x| x.contains("atol")), "atol/rtol must not judge a golden with noise: {:?}", rep.reasons);
    // The same error judged with a looser multiple passes, though it breaks atol 1e-4: the policy, not atol, decides.
    tol.noise_multiple_p50 = 400.0;
    let rep = judge_prefill(&got, &noisy_golden(&r), Some(&r), &tol);
    assert_eq!(rep.verdict, Verdict::Pass, "{:?}", rep.reasons);
    assert!(rep.noise.unwrap().score <= 1.0);
    // One element far off moves only the max.
    let mut spike = r.clone();
    spike[3] += 0.05;
    let rep = judge_prefill(&spike, &noisy_golden(&r), Some(&r), &tol);
    assert_eq!(rep.verdict, Verdict::Fail);
    assert!(words(&rep.reasons).iter().any(|x| x.contains("max |diff| 5.000e-2")), "{:?}", rep.reasons);
}

#[test]
fn noise_floor_is_at_least_half_an_ulp_and_scales_with_the_dtype() {
    let r = reference();
    let zero = PrefillGolden { reference_noise: Some(Noise { max: Hex(0.0), p50: Hex(0.0), p99: Hex(0.0) }), ..prefill_golden(&r) };
    let mut tol = f32_l4();
    let rep = judge_prefill(&r, &zero, Some(&r), &tol);
    let n = rep.noise.unwrap();
    // Largest |logit| 3.0: half an ulp is 3 * 2^-24.
    assert!((n.floor[0] - 3.0 * f64::from(f32::EPSILON) / 2.0).abs() < 1e-15, "{n:?}");
    assert_eq!(rep.verdict, Verdict::Pass);
    tol.noise_dtype_scale = 8192.0;
    let n16 = judge_prefill(&r, &zero, Some(&r), &tol).noise.unwrap();
    assert!((n16.floor[2] / n.floor[2] - 8192.0).abs() < 1e-9);
    // NaN from the package is the worst there is.
    let mut nan = r.clone();
    nan[0] = f32::NAN;
    assert_eq!(judge_prefill(&nan, &noisy_golden(&r), Some(&r), &f32_l4()).verdict, Verdict::Fail);
}

/// The package's logits at the golden's stored ids, per step: the reference's own, with `edit` applied.
fn step_logits(golden: &GenerationGolden, edit: impl Fn(usize, usize, f32) -> f32) -> Vec<Vec<f32>> {
    golden.steps.iter().enumerate().map(|(i, s)| s.logits.iter().enumerate().map(|(k, h)| edit(i, k, h.0 as f32)).collect()).collect()
}

#[test]
fn l5_decode_only_bug_fails_at_the_step_where_logits_leave_tolerance() {
    let g = generation_golden();
    let tol = l5(Dtype::F32);
    // A decode-path bug (a KV-cache write off by a little): prefill and every greedy token stay exact, but from
    // step 5 on the runner-up's logit moves by 0.075, as the x1.05 value-cache mutant does.
    let got = step_logits(&g, |i, k, x| if i >= 5 && k == 1 { x + 0.075 } else { x });
    let s = judge_step_logits(&got, &g, &tol).expect("the golden stores per-step logits");
    let o = s.first_out.expect("out of tolerance");
    assert_eq!((o.step, o.id, s.steps_out), (5, 205, 3));
    assert!((s.max_abs - 0.075).abs() < 1e-5, "{}", s.max_abs);
    let r = with_step_logits(judge_generation(&g.generated_tokens, &g, None, &tol), &s);
    assert_eq!(r.verdict, Verdict::Fail, "{:?}", r.reasons);
    let why = r.reasons.last().unwrap().to_string();
    assert!(why.contains("from step 5 on") && why.contains("the greedy tokens still all agree"), "{why}");

    // Clean: float32 rounding only, far inside atol.
    let clean = judge_step_logits(&step_logits(&g, |_, _, x| x + 2e-6), &g, &tol).unwrap();
    assert_eq!(clean.first_out, None);
    let r = with_step_logits(judge_generation(&g.generated_tokens, &g, None, &tol), &clean);
    assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.reasons);

    // The same drift at f16 sits inside f16's tolerance: the verdict follows the dtype's policy.
    assert_eq!(judge_step_logits(&got, &g, &l5(Dtype::F16)).unwrap().first_out, None);
}

#[test]
fn l5_step_logits_say_whether_the_tokens_still_agree() {
    let g = generation_golden();
    let tol = l5(Dtype::F32);
    let got = step_logits(&g, |i, _, x| if i >= 2 { x - 1.0 } else { x });
    let s = judge_step_logits(&got, &g, &tol).unwrap();
    let mut tokens = g.generated_tokens.clone();
    tokens[6] = 999;
    let r = with_step_logits(judge_generation(&tokens, &g, Some(&tokens), &tol), &s);
    assert_eq!(r.verdict, Verdict::Fail);
    let why = r.reasons.last().unwrap().to_string();
    assert!(why.contains("from step 2 on") && why.contains("still agree there (they first diverge at step 6)"), "{why}");
    // A missing step (a package that stopped early) is out of tolerance, never silently skipped.
    let short = judge_step_logits(&step_logits(&g, |_, _, x| x)[..4], &g, &tol).unwrap();
    assert_eq!(short.first_out.map(|o| o.step), Some(4));
    // mobius' goldens store no steps: nothing to judge.
    let bare = GenerationGolden { steps: vec![], ..g };
    assert_eq!(judge_step_logits(&[], &bare, &tol), None);
}

/// A golden over `n` prompt positions whose stored top-2 logits are (p, p - 1) at ids (p, p + 1), logsumexp p + 1,
/// noise `noise` at each (None: no noise floor); and the package's numbers for it, the reference's own.
fn positions_golden(n: usize, noise: Option<f64>) -> (PrefillGolden, Vec<PositionLogits>) {
    let r = reference();
    let positions: Vec<PositionTop> = (0..n)
        .map(|p| PositionTop {
            ids: vec![p as i64, p as i64 + 1],
            logits: vec![Hex(p as f64), Hex(p as f64 - 1.0)],
            logsumexp: Hex(p as f64 + 1.0),
            noise: noise.map(Hex),
        })
        .collect();
    let got = positions
        .iter()
        .map(|p| PositionLogits { watched: p.logits.iter().map(|h| h.0 as f32).collect(), logsumexp: p.logsumexp.0 })
        .collect();
    let golden = PrefillGolden {
        input_ids: (0..n as i64).collect(),
        reference_noise: noise.map(|n| Noise { max: Hex(n), p50: Hex(n / 4.0), p99: Hex(n / 2.0) }),
        positions,
        ..prefill_golden(&r)
    };
    (golden, got)
}

#[test]
fn l4_over_every_position_names_the_first_position_out_of_tolerance() {
    let tol = f32_l4();
    let (golden, mut got) = positions_golden(12, None);
    let same = judge_positions(&got, &golden, &tol).unwrap();
    assert_eq!((same.first_out, same.positions_out, same.max_abs), (None, 0, 0.0));
    // From position 7 on, the runner-up logit is off by 0.01 (> atol+rtol*|ref|), and position 9's logsumexp more.
    for p in &mut got[7..] {
        p.watched[1] += 0.01;
    }
    got[9].logsumexp += 0.5;
    let p = judge_positions(&got, &golden, &tol).unwrap();
    let o = p.first_out.unwrap();
    assert_eq!((o.position, o.id, p.positions_out, p.max_at), (7, Some(8), 5, 9));
    assert!((p.max_abs - 0.5).abs() < 1e-9 && p.per_position[..7].iter().all(|&d| d == 0.0), "{p:?}");
    let r = reference();
    let rep = with_positions(judge_prefill(&r, &golden, Some(&r), &tol), p);
    assert_eq!(rep.verdict, Verdict::Fail);
    assert!(
        words(&rep.reasons).iter().any(|x| x.contains("from position 7 on (5 of 12 positions)") && x.contains("at id 8")),
        "{:?}",
        rep.reasons
    );
    // The logsumexp alone (a change outside the stored top-k) is named as such.
    let (golden, mut got) = positions_golden(4, None);
    got[2].logsumexp -= 0.01;
    let o = judge_positions(&got, &golden, &tol).unwrap().first_out.unwrap();
    assert_eq!((o.position, o.id), (2, None));
    let rep = with_positions(judge_prefill(&r, &golden, Some(&r), &tol), judge_positions(&got, &golden, &tol).unwrap());
    assert!(words(&rep.reasons).iter().any(|x| x.contains("at its logsumexp")), "{:?}", rep.reasons);
    // A missing position or a NaN is out of tolerance; a golden without positions is not judged.
    let p = judge_positions(&got[..3], &golden, &tol).unwrap();
    assert_eq!(p.per_position[3], f64::INFINITY);
    let mut nan = got.clone();
    nan[1].watched[0] = f32::NAN;
    let p = judge_positions(&nan, &golden, &tol).unwrap();
    assert_eq!((p.per_position[1], p.first_out.unwrap().position), (f64::INFINITY, 1));
    assert!(judge_positions(&[], &prefill_golden(&r), &tol).is_none());
}

#[test]
fn l4_positions_use_the_reference_noise_there_when_the_golden_has_it() {
    let mut tol = f32_l4();
    tol.noise_multiple_max = 100.0;
    // Noise 1e-5 at each position: the bound is 100 x 1e-5 = 1e-3 (over the half-ulp floor at these magnitudes).
    let (golden, mut got) = positions_golden(6, Some(1e-5));
    got[3].watched[0] += 9e-4;
    let p = judge_positions(&got, &golden, &tol).unwrap();
    assert!(p.by_noise && p.first_out.is_none(), "{p:?}");
    got[4].watched[0] += 2e-3;
    let o = judge_positions(&got, &golden, &tol).unwrap().first_out.unwrap();
    assert_eq!(o.position, 4);
    assert!((o.bound - 1e-3).abs() < 1e-12, "{o:?}");
    // f16's scale widens it, as at the last position.
    tol.noise_dtype_scale = 8192.0;
    assert!(judge_positions(&got, &golden, &tol).unwrap().first_out.is_none());
}
