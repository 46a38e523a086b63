//! The README's first screen stays runnable: every `cargo xtask` command it names is a task whose `--help` answers
//! and lists each option the README passes it, every `cargo test -p P --test T` names a test target that exists, and
//! every document it links to is there.

use std::path::Path;
use std::process::Command;

use mobius_conformance::paths::workspace_root;

/// The `cargo ...` commands of the README: the lines of its code blocks, and the ones it quotes in backticks.
fn commands(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            let command = line.split(" #").next().unwrap_or(line).trim();
            if command.starts_with("cargo ") {
                out.push(command.to_string());
            }
            continue;
        }
        out.extend(line.split('`').skip(1).step_by(2).filter(|q| q.starts_with("cargo ")).map(str::to_string));
    }
    out
}

fn xtask_help(task: &str) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_xtask")).args([task, "--help"]).output().unwrap();
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

#[test]
fn every_command_of_the_quick_start_runs_and_every_link_is_there() {
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let first_screen = readme.lines().count();
    assert!(first_screen <= 60, "the README is the first screen, {first_screen} lines: reference material goes to docs/");
    let commands = commands(&readme);
    assert!(commands.len() >= 5, "{commands:?}");
    let mut checked = 0;
    for c in &commands {
        let words: Vec<&str> = c.split_whitespace().collect();
        match words.as_slice() {
            ["cargo", "xtask", "--help"] => {
                let o = Command::new(env!("CARGO_BIN_EXE_xtask")).arg("--help").output().unwrap();
                assert!(o.status.success(), "{c}");
            }
            ["cargo", "xtask", task, rest @ ..] => {
                let (ok, help) = xtask_help(task);
                assert!(ok, "`{c}`: `xtask {task} --help` fails: {help}");
                for flag in rest.iter().filter(|w| w.starts_with("--")) {
                    assert!(help.contains(flag), "`{c}`: `xtask {task} --help` does not list {flag}:\n{help}");
                }
            }
            ["cargo", "test", rest @ ..] => {
                let package = rest.iter().position(|w| *w == "-p").map(|i| rest[i + 1]);
                let test = rest.iter().position(|w| *w == "--test").map(|i| rest[i + 1]);
                if let (Some(p), Some(t)) = (package, test) {
                    // A test target: `tests/<t>.rs`, or a `[[test]]` of that name in the package's manifest.
                    let manifest = std::fs::read_to_string(root.join(p).join("Cargo.toml")).unwrap_or_default();
                    let declared = manifest.split("[[test]]").skip(1).any(|b| b.contains(&format!("name = \"{t}\"")));
                    assert!(declared || root.join(p).join("tests").join(format!("{t}.rs")).is_file(), "`{c}`: {p} has no test target {t}");
                }
            }
            // A tool of its own (`cargo insta review`), installed by the reviewer.
            ["cargo", "insta", "review" | "reject"] => {}
            _ => panic!("`{c}`: a command this test does not know how to check; teach it"),
        }
        checked += 1;
    }
    assert_eq!(checked, commands.len());
    // Every document linked from the first screen is there.
    for link in readme.split("](").skip(1).filter_map(|r| r.split(')').next()).filter(|l| !l.starts_with("http")) {
        assert!(Path::new(&root).join(link).is_file(), "README links to {link}, which is not there");
    }
}

#[test]
fn the_command_reader_finds_block_lines_and_quoted_commands() {
    let text = "a `cargo xtask localize <trial>` b\n```sh\ncargo test -p harness --test conformance   # note\n```\n`not cargo`";
    assert_eq!(commands(text), ["cargo xtask localize <trial>", "cargo test -p harness --test conformance"]);
}
