//! The executable slice and the Blueprint flow, run as a newcomer runs
//! them: each example binary itself, checked for its output, its exit
//! status, and that its temporary root is gone afterwards.

use std::path::PathBuf;
use std::process::Command;

/// The example binary, built beside the test binaries (`cargo test` builds
/// examples too); built on demand when only this test target was built.
fn example_binary(name: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_tessera"));
    let path = bin
        .parent()
        .expect("target dir")
        .join("examples")
        .join(name);
    if !path.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--example", name])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo build --example");
        assert!(status.success(), "building the example failed");
    }
    path
}

#[test]
fn the_example_runs_end_to_end_and_removes_its_root() {
    let out = Command::new(example_binary("team_private_work"))
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the example failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "result: sum of squares = 244",
        "4/4 boundaries held",
        "held   the server queue is unknown to the worker key (404, as a missing queue)",
        "held   a late submit on the expired first lease is fenced",
        "run fingerprint:",
        "content fingerprint:",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
    for (role, part) in [
        ("child", " (partial-a)"),
        ("child", " (partial-b)"),
        ("parent", ""),
    ] {
        assert!(
            stdout.lines().any(|l| names_a_task(l, role, part)),
            "no {role} task{part} line in:\n{stdout}"
        );
    }
    let root = stdout
        .lines()
        .find_map(|l| l.strip_prefix("temporary root: "))
        .and_then(|l| l.strip_suffix(" (removed at exit)"))
        .expect("the example names its root");
    assert!(
        !PathBuf::from(root).exists(),
        "the temporary root {root} is still there"
    );
}

#[test]
fn the_blueprint_flow_example_runs_each_step_with_its_own_key() {
    let out = Command::new(example_binary("blueprint_flow"))
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the example failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for step in ["design", "implement", "review"] {
        let line = format!("step {step} (t");
        let tail = format!(", key verb.{step}):");
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&line) && l.contains(&tail)),
            "no {line}…{tail} line in:\n{stdout}"
        );
    }
    assert!(
        stdout.lines().any(|l| l.starts_with("GET /v1/tasks/t")
            && l.contains("/output?path=$.parts[\"patch.diff\"]: 56 bytes")),
        "no output line in:\n{stdout}"
    );
    for want in [
        "  consumes: nothing",
        "  consumes plan <- design $.parts[\"plan.md\"]: ready, 70 bytes",
        "  consumes notes <- implement $.out: ready, 32 bytes",
        "  consumes patch <- implement $.parts[\"patch.diff\"]: ready, 56 bytes",
        "flow finished: 3/3 steps succeeded",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
    let root = stdout
        .lines()
        .find_map(|l| l.strip_prefix("temporary root: "))
        .and_then(|l| l.strip_suffix(" (removed at exit)"))
        .expect("the example names its root");
    assert!(
        !PathBuf::from(root).exists(),
        "the temporary root {root} is still there"
    );
}

/// Whether `line` names a `role` task (`<receipt>  child t<digits> (partial-a)`).
fn names_a_task(line: &str, role: &str, part: &str) -> bool {
    line.split_once(&format!("  {role} t"))
        .and_then(|(_, rest)| rest.strip_suffix(part))
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}
