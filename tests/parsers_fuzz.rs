//! Property tests: arbitrary bytes and arbitrary mutations of valid files fed to the case, policy and golden
//! parsers give errors, never panics.

use mobius_conformance::case::Case;
use mobius_conformance::golden::{GenerationGolden, PrefillGolden};
use mobius_conformance::tolerance::Policy;
use proptest::prelude::*;

const CASE: &str = include_str!("../cases/causal-lm/gemma3-tiny.yaml");
const POLICY: &str = include_str!("../cases/tolerances.yaml");
const PREFILL: &str = include_str!("../goldens/causal-lm/qwen3-tiny.json");
const GENERATION: &str = include_str!("../goldens/causal-lm/qwen3-tiny_generation.json");

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
