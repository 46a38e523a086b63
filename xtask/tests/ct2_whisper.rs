//! The real tier's CTranslate2 Whisper reader (`xtask/reference/ct2_whisper.py`), on a tiny model.bin written by
//! `ct2_whisper.py` beside this file: it converts one that is Whisper's, and refuses, naming the file and what is
//! wrong, another revision, a non-zero K bias, a missing tensor, another decoder option, an untied head and a
//! tensor it would not place; and hostile files (issue 46), naming the file and the tensor or field: a byte count
//! that is not whole values, a non-UTF-8 name, an alias to no tensor, fused Q/K/V rows not 3 x d_model, an empty
//! option, a tensor count of 4 billion, a NaN in the token embedding, an inf in conv1 and an FFN weight of the wrong
//! width. It needs the reference venv (numpy): without it the test says it did not run, except under `CI`, where
//! that is a failure.

#![cfg(unix)]

mod common;

use std::process::Command;

use mobius_conformance::paths::workspace_root as workspace;

#[test]
fn a_checkpoint_that_is_not_whispers_is_refused_naming_the_file_and_what_differs() {
    let Some(py) = common::venv_python("the CTranslate2 reader runs numpy") else { return };
    let dir = std::env::temp_dir().join(format!("mobius-ct2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(py)
        .arg(workspace().join("xtask/tests/ct2_whisper.py"))
        .arg(&dir)
        .env("PYTHONPATH", workspace().join("xtask"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("converted\n"), "{stdout}");
    assert_eq!(stdout.matches("refused: ").count(), 15, "{stdout}");
}
