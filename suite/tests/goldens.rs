//! Goldens: derived from a reference run, written atomically, read back exactly (inline or sidecar), and rejected
//! with the file and field named when corrupt.

use std::path::PathBuf;

use mobius_conformance::feed::inputs::Inputs;
use mobius_conformance::judge::golden::{self, GenerationGolden, GoldenPaths, Hex, PositionTop, PrefillGolden, Provenance, ReferenceRun};

fn run(vocab: usize) -> ReferenceRun {
    let logits = |shift: usize| (0..vocab).map(|i| (((i * 7919 + shift) % 1009) as f32) / 97.0 - 5.0).collect::<Vec<f32>>();
    ReferenceRun {
        input_ids: vec![2, 40, 41],
        input_hash: Inputs::from_token_ids(&[2, 40, 41]).hash(),
        prefill_logits: logits(0),
        prefill_logits_f64: Some(logits(0).iter().enumerate().map(|(i, &x)| x as f64 + (i % 5) as f64 * 1e-7).collect()),
        positions: (0..3)
            .map(|p| PositionTop {
                ids: vec![p, p + 1],
                logits: vec![Hex(1.5), Hex(0.25 - p as f64)],
                logsumexp: Hex(3.0 + p as f64),
                noise: Some(Hex(1e-6)),
            })
            .collect(),
        generated_tokens: vec![5, 6, 1],
        step_logits: vec![logits(0), logits(1), logits(2)],
        generated_text: "hi".into(),
        provenance: Provenance {
            reference: "fixtures/x/hf".into(),
            transformers: "5.14.1".into(),
            torch: "2.15.0".into(),
            dtype: "float32".into(),
            device: "cpu".into(),
            weights: None,
        },
    }
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mobius-goldens-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn write_all(paths: &GoldenPaths, files: &golden::GoldenFiles) {
    golden::write_atomic(&paths.prefill, &files.prefill).unwrap();
    golden::write_atomic(&paths.generation, &files.generation).unwrap();
    if let Some(s) = &files.sidecar {
        golden::write_atomic(&paths.sidecar(), s).unwrap();
    }
}

#[test]
fn small_vocabularies_inline_the_full_logits_and_round_trip_exactly() {
    let d = dir("inline");
    let r = run(512);
    let paths = GoldenPaths::new(&d, "causal-lm", "x");
    let files = golden::from_reference(&r, "m", "p", 3, "x.logits.safetensors").unwrap();
    assert!(files.sidecar.is_none());
    write_all(&paths, &files);
    let g = PrefillGolden::load(&paths.prefill).unwrap();
    assert_eq!(g.full_logits(&paths.prefill).unwrap().unwrap(), r.prefill_logits, "bit-exact through hex floats");
    assert_eq!(g.top1_id as usize, mobius_numeric::argmax(&r.prefill_logits));
    let generation = GenerationGolden::load(&paths.generation).unwrap();
    assert_eq!((generation.generated_tokens.clone(), generation.steps.len()), (vec![5, 6, 1], 3));
    // Deterministic bytes: regenerating gives the same files (what makes `regen-goldens` print UNCHANGED).
    assert_eq!(golden::from_reference(&r, "m", "p", 3, "x.logits.safetensors").unwrap(), files);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn the_reference_noise_floor_is_recorded_and_optional() {
    let d = dir("noise");
    let mut r = run(512);
    let paths = GoldenPaths::new(&d, "causal-lm", "n");
    write_all(&paths, &golden::from_reference(&r, "m", "p", 3, "n.logits.safetensors").unwrap());
    let n = PrefillGolden::load(&paths.prefill).unwrap().reference_noise.expect("noise recorded");
    // |f32 - f64| is (i % 5) * 1e-7 (to f32 rounding of the logits themselves): max 4e-7, median 2e-7.
    assert!((n.max.0 - 4e-7).abs() < 1e-9 && (n.p50.0 - 2e-7).abs() < 1e-9 && (n.p99.0 - 4e-7).abs() < 1e-9, "{n:?}");
    // A float64 run of another length is refused; none at all gives a golden without noise (judged by atol/rtol).
    r.prefill_logits_f64 = Some(vec![0.0; 3]);
    assert!(golden::from_reference(&r, "m", "p", 3, "n.logits.safetensors").unwrap_err().to_string().contains("float64"));
    r.prefill_logits_f64 = None;
    let files = golden::from_reference(&r, "m", "p", 3, "n.logits.safetensors").unwrap();
    assert!(!String::from_utf8_lossy(&files.prefill).contains("reference_noise"));
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn large_vocabularies_use_a_safetensors_sidecar() {
    let d = dir("sidecar");
    let r = run(262_144);
    let paths = GoldenPaths::new(&d, "causal-lm", "big");
    let files = golden::from_reference(&r, "m", "p", 3, "big.logits.safetensors").unwrap();
    assert!(files.sidecar.is_some() && files.prefill.len() < 20_000, "the JSON stays small: {} bytes", files.prefill.len());
    write_all(&paths, &files);
    let g = PrefillGolden::load(&paths.prefill).unwrap();
    assert_eq!(g.last_logits_file.as_deref(), Some("big.logits.safetensors"));
    assert_eq!(g.full_logits(&paths.prefill).unwrap().unwrap(), r.prefill_logits);
    std::fs::remove_file(paths.sidecar()).unwrap();
    let e = g.full_logits(&paths.prefill).unwrap_err().to_string();
    assert!(e.contains("big.logits.safetensors"), "{e}");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn corrupt_goldens_name_file_and_field() {
    let d = dir("corrupt");
    let paths = GoldenPaths::new(&d, "t", "x");
    write_all(&paths, &golden::from_reference(&run(64), "m", "p", 3, "x.logits.safetensors").unwrap());
    let good = std::fs::read_to_string(&paths.prefill).unwrap();
    let load = |text: &str| {
        std::fs::write(&paths.prefill, text).unwrap();
        PrefillGolden::load(&paths.prefill).unwrap_err().to_string()
    };
    let first_hex = good.split('"').find(|s| s.starts_with("0x") || s.starts_with("-0x")).unwrap().to_string();
    let e = load(&good.replacen(&first_hex, "0xZZ", 1));
    assert!(e.contains("x.json") && e.contains("0xZZ"), "{e}");
    let e = load(&good.replacen("\"top1_id\"", "\"top1\"", 1));
    assert!(e.contains("x.json") && e.contains("top1"), "{e}");
    let e = load(&good.replacen(&format!("\"{first_hex}\",\n"), "", 1));
    assert!(e.contains("x.json") && e.contains("top10_logits"), "{e}");
    let e = load("{ not json");
    assert!(e.contains("x.json"), "{e}");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn non_finite_reference_logits_are_refused() {
    let mut r = run(64);
    r.prefill_logits[9] = f32::NAN;
    let e = golden::from_reference(&r, "m", "p", 3, "s").unwrap_err().to_string();
    assert!(e.contains("not finite at id 9"), "{e}");
}

#[test]
fn atomic_write_replaces_whole_files_and_leaves_no_temp() {
    let d = dir("atomic");
    let p = d.join("g.json");
    golden::write_atomic(&p, b"old").unwrap();
    golden::write_atomic(&p, b"new contents").unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"new contents");
    let names: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("g.json")]);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_case_goldens_change_together_or_not_at_all() {
    let d = dir("all-or-nothing");
    let (a, b) = (d.join("t/x.json"), d.join("t/x_generation.json"));
    golden::write_all_atomic(&[(a.clone(), b"old L4".to_vec()), (b.clone(), b"old L5".to_vec())]).unwrap();
    // The second write fails (its folder is a file: as a full disk or a read-only folder would fail it) after the
    // first was staged: neither target changes, and no temp file is left.
    let blocked = d.join("blocked");
    std::fs::write(&blocked, b"a file, not a folder").unwrap();
    let e = golden::write_all_atomic(&[(a.clone(), b"new L4".to_vec()), (blocked.join("x_generation.json"), b"new L5".to_vec())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("blocked"), "{e}");
    assert_eq!(std::fs::read(&a).unwrap(), b"old L4", "the first golden changed without the second");
    let names: Vec<_> = std::fs::read_dir(d.join("t")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.starts_with('.')), "temp files left: {names:?}");
    golden::write_all_atomic(&[(a.clone(), b"new L4".to_vec()), (b.clone(), b"new L5".to_vec())]).unwrap();
    assert_eq!((std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap()), (b"new L4".to_vec(), b"new L5".to_vec()));
    std::fs::remove_dir_all(d).unwrap();
}

#[cfg(target_os = "linux")]
#[test]
fn temp_files_of_dead_writers_are_removed_and_live_ones_kept() {
    let d = dir("stale-temps");
    std::fs::create_dir_all(d.join("t")).unwrap();
    let dead = d.join("t/.x.json.tmp.4000000000");
    let live = d.join(format!("t/.x.json.tmp.{}", std::process::id()));
    let other = d.join("t/.keep");
    for p in [&dead, &live, &other] {
        std::fs::write(p, b"x").unwrap();
    }
    assert_eq!(golden::remove_stale_temps(&d), vec![dead.clone()]);
    assert!(!dead.exists() && live.exists() && other.exists());
    std::fs::remove_dir_all(d).unwrap();
}

/// Every prompt position goes into the golden, one entry per input id; a count that does not match the prompt is
/// refused when the golden is made and when it is read.
#[test]
fn positions_are_one_per_prompt_token() {
    let r = run(64);
    let files = golden::from_reference(&r, "m", "p", 3, "x.logits.safetensors").unwrap();
    let g = PrefillGolden::parse("g.json", std::str::from_utf8(&files.prefill).unwrap()).unwrap();
    assert_eq!(g.positions, r.positions);
    let short = ReferenceRun { positions: r.positions[..2].to_vec(), ..r.clone() };
    let e = golden::from_reference(&short, "m", "p", 3, "x.logits.safetensors").unwrap_err().to_string();
    assert!(e.contains("2 prompt positions for 3 input ids"), "{e}");
    let mut v: serde_json::Value = serde_json::from_slice(&files.prefill).unwrap();
    v["positions"].as_array_mut().unwrap().pop();
    let e = PrefillGolden::parse("g.json", &v.to_string()).unwrap_err().to_string();
    assert!(e.contains("g.json") && e.contains("field `positions` has 2 entries but `input_ids` has 3"), "{e}");
    v["positions"].as_array_mut().unwrap().push(serde_json::json!({"ids": [1], "logits": [], "logsumexp": "0x1p+0"}));
    let e = PrefillGolden::parse("g.json", &v.to_string()).unwrap_err().to_string();
    assert!(e.contains("field `positions[2]` needs as many `logits` as `ids`"), "{e}");
}
