//! Property tests: arbitrary bytes and arbitrary mutations of valid files fed to the case, policy and golden
//! parsers give errors, never panics; and what they accept keeps the suite's promises: no input makes the process
//! abort, bad input never passes, no trial vanishes without a word, no path leaves the suite root.

mod common;

use mobius_conformance::judge::golden::{GenerationGolden, PrefillGolden};
use mobius_conformance::judge::tolerance::{Logits, Policy, Tolerance};
use mobius_conformance::judge::{prefill, stream, verdict};
use mobius_conformance::paths;
use mobius_conformance::plan::case::Case;
use mobius_conformance::plan::hub::HubRef;
use mobius_conformance::plan::suite::Suite;
use mobius_conformance::vocab::Dtype;
use mobius_conformance::vocab::MAX_NEW_TOKENS;
use proptest::prelude::*;

const CASE: &str = include_str!("../../cases/causal-lm/gemma3-tiny.yaml");
const POLICY: &str = include_str!("../../cases/tolerances.yaml");
const PREFILL: &str = include_str!("../../goldens/causal-lm/qwen3-tiny.json");
const GENERATION: &str = include_str!("../../goldens/causal-lm/qwen3-tiny_generation.json");

#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    Delete(usize, usize),
    Insert(usize, String),
    Replace(usize, char),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 0usize..64).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), "[ -~\\n\\t\\u{80}-\\u{10ffff}]{0,12}").prop_map(|(a, s)| Mutation::Insert(a, s)),
        (any::<usize>(), any::<char>()).prop_map(|(a, c)| Mutation::Replace(a, c)),
        (any::<usize>(), 0usize..200).prop_map(|(a, n)| Mutation::Duplicate(a, n)),
    ]
}

/// Applies mutations on char boundaries, so the text stays a `str` (bytes are covered by the byte tests).
fn mutate(text: &str, ms: &[Mutation]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for m in ms {
        let n = chars.len().max(1);
        match m {
            Mutation::Truncate(a) => chars.truncate(a % n),
            Mutation::Delete(a, k) => {
                let a = a % n;
                let b = (a + k).min(chars.len());
                if a < b {
                    chars.drain(a..b);
                }
            }
            Mutation::Insert(a, s) => {
                let a = (a % n).min(chars.len());
                chars.splice(a..a, s.chars());
            }
            Mutation::Replace(a, c) => {
                if !chars.is_empty() {
                    let i = a % chars.len();
                    chars[i] = *c;
                }
            }
            Mutation::Duplicate(a, k) => {
                let a = (a % n).min(chars.len());
                let b = (a + k).min(chars.len());
                let copy: Vec<char> = chars[a..b].to_vec();
                chars.splice(b..b, copy);
            }
        }
    }
    chars.into_iter().collect()
}

fn parse_all(text: &str) {
    let _ = Case::parse("cases/t/x.yaml", "t", "x", text);
    let _ = Policy::parse("tolerances.yaml", text);
    let _ = PrefillGolden::parse("x.json", text);
    let _ = GenerationGolden::parse("x_generation.json", text);
}

#[test]
fn the_unmutated_files_parse() {
    Case::parse("cases/causal-lm/gemma3-tiny.yaml", "causal-lm", "gemma3-tiny", CASE).unwrap();
    Policy::parse("tolerances.yaml", POLICY).unwrap();
    PrefillGolden::parse("qwen3-tiny.json", PREFILL).unwrap();
    GenerationGolden::parse("qwen3-tiny_generation.json", GENERATION).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        parse_all(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn mutated_case_files_never_panic(ms in proptest::collection::vec(mutation(), 1..6)) {
        let text = mutate(CASE, &ms);
        if let Err(e) = Case::parse("cases/t/x.yaml", "t", "x", &text) {
            prop_assert!(e.to_string().contains("cases/t/x.yaml"), "error does not name the file: {e}");
        }
    }

    #[test]
    fn mutated_policies_never_panic(ms in proptest::collection::vec(mutation(), 1..6)) {
        let _ = Policy::parse("tolerances.yaml", &mutate(POLICY, &ms));
    }

    #[test]
    fn mutated_goldens_never_panic(ms in proptest::collection::vec(mutation(), 1..6)) {
        if let Err(e) = PrefillGolden::parse("x.json", &mutate(PREFILL, &ms)) {
            prop_assert!(e.to_string().contains("x.json"), "{e}");
        }
        if let Err(e) = GenerationGolden::parse("x_generation.json", &mutate(GENERATION, &ms)) {
            prop_assert!(e.to_string().contains("x_generation.json"), "{e}");
        }
    }
}

/// `root.join(p)` with `.` and `..` applied by text, as a path walk would (no symlinks involved).
fn normalize(root: &std::path::Path, p: &str) -> std::path::PathBuf {
    let mut out = root.to_path_buf();
    for c in std::path::Path::new(p).components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::CurDir => {}
            std::path::Component::RootDir | std::path::Component::Prefix(_) => out = std::path::PathBuf::from(c.as_os_str()),
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// What a case asks generation to reserve is bounded: no case that loads can make the process abort.
    #[test]
    fn a_case_that_loads_asks_for_a_bounded_stream(ms in proptest::collection::vec(mutation(), 1..6), n in any::<u32>()) {
        let text = mutate(&CASE.replace("max_new_tokens: 16", &format!("max_new_tokens: {n}")), &ms);
        if let Ok(c) = Case::parse("cases/t/x.yaml", "t", "x", &text) {
            prop_assert!((1..=MAX_NEW_TOKENS).contains(&c.max_new_tokens()), "{}", c.max_new_tokens());
        }
    }

    /// A prefill golden that loads, judged against logits 1% (and 0.1) off, fails: nothing in it can switch the
    /// check off (NaN, infinities, ids the package lacks).
    #[test]
    fn bad_prefill_never_passes(ms in proptest::collection::vec(mutation(), 1..6)) {
        let Ok(g) = PrefillGolden::parse("x.json", &mutate(PREFILL, &ms)) else { return Ok(()) };
        let off = |x: f64| (x * 1.01 + 0.1) as f32;
        let (got, reference) = match &g.last_logits {
            Some(l) => (l.iter().map(|h| off(h.0)).collect::<Vec<f32>>(), Some(l.iter().map(|h| h.0 as f32).collect::<Vec<f32>>())),
            None => {
                let mut v = vec![0.0f32; 512];
                for (&id, w) in g.top10_ids.iter().zip(&g.top10_logits) {
                    if let Some(x) = usize::try_from(id).ok().and_then(|i| v.get_mut(i)) {
                        *x = off(w.0);
                    }
                }
                (v, None)
            }
        };
        prop_assume!(reference.as_ref().is_none_or(|r| r.iter().zip(&got).any(|(a, b)| a != b)));
        let tol = Tolerance::builtin(Logits::Prefill, Dtype::F32);
        let r = prefill::judge_prefill(&got, &g, reference.as_deref(), &tol);
        prop_assert_eq!(r.verdict, verdict::Verdict::Fail, "{:?}", r.reasons);
    }

    /// A generation golden that loads, against a stream that differs at every step, fails.
    #[test]
    fn bad_generation_never_passes(ms in proptest::collection::vec(mutation(), 1..6)) {
        let Ok(g) = GenerationGolden::parse("x_generation.json", &mutate(GENERATION, &ms)) else { return Ok(()) };
        prop_assert!(!g.generated_tokens.is_empty());
        let got: Vec<i64> = g.generated_tokens.iter().map(|t| t.wrapping_add(1)).collect();
        let r = stream::judge_generation(&got, &g, None, &Tolerance::builtin(Logits::Stream, Dtype::F32));
        prop_assert_eq!(r.verdict, verdict::Verdict::Fail, "{:?}", r.reasons);
    }

    /// A case that does not load still plans failing trials under its name; one that loads plans nothing the
    /// guess for a broken copy of it would miss (so a filter finds the failure either way).
    #[test]
    fn no_trial_vanishes(ms in proptest::collection::vec(mutation(), 1..4)) {
        let text = mutate(CASE, &ms);
        let s = common::Scratch::new(&format!("fuzz-plan-{:x}", text.len() * 31 + ms.len()));
        common::write(&s.0.join("cases/t/x.yaml"), &text);
        let plan: Vec<String> = mobius_conformance::trial::matrix::plan(&Suite::open(&s.0)).into_iter().map(|t| t.name).collect();
        prop_assert!(!plan.is_empty());
        let guess: Vec<String> =
            mobius_conformance::trial::matrix::guessed(&Suite::open(&s.0), "x", Some(&text)).iter().map(ToString::to_string).collect();
        match Case::parse("cases/t/x.yaml", "t", "x", &text) {
            Ok(_) => {
                for n in &plan {
                    prop_assert!(guess.contains(n), "{} is planned but a broken copy would not plan it", n);
                }
            }
            Err(_) => {
                prop_assert!(plan.contains(&"x/case".to_string()));
                prop_assert!(plan.iter().any(|n| n.starts_with("x/text/")), "{:?}", plan);
            }
        }
    }

    /// A path that passes the text check cannot climb out of the root; an accepted `hf://` id names a subfolder
    /// of its repository only.
    #[test]
    fn accepted_paths_stay_inside(p in "[a-z./\\\\:]{0,16}", hub in "hf://[a-z./@:]{0,24}") {
        let root = std::path::Path::new("/suite/root");
        if paths::stays_inside(&p) {
            prop_assert!(normalize(root, &p).starts_with(root), "{:?} leaves the root", p);
        }
        if let Some(Ok(h)) = HubRef::parse(&hub) {
            prop_assert!(!h.subfolder.starts_with('/') && h.subfolder.split('/').all(|c| c != ".." && c != "."), "{:?}", h);
            prop_assert!(!h.revision.contains("..") && !h.repo.contains(".."), "{:?}", h);
        }
    }
}
