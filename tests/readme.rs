//! The README's shell blocks, run top to bottom as a newcomer would: one
//! bash session on a fresh directory (so the tour's daemon, variables and
//! alias carry on to the later blocks), and the test fails at the first
//! block that does not do what it says: a command that exits non-zero, or
//! a `curl` the daemon answers with an error status.
//!
//! Two HTML comments, invisible on the rendered page, steer it:
//! - `<!-- readme-test: skip (why) -->` before a block leaves it out; the
//!   reason is required (a daemon that runs until stopped, a server this
//!   machine does not have, a benchmark).
//! - `<!-- readme-test: file NAME -->` before any block writes its text to
//!   `NAME`, as the README asks the reader to save it.
//!
//! The harness supplies what the tour's first steps build: the binary at
//! `target/release/tessera` (the one this test was built with, so `cargo
//! build --release` has nothing left to do) and the repository's `seeds/`
//! and `examples/`. The tour's daemon listens on 127.0.0.1:7700 as the
//! README says, so that port must be free.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest the whole README may take to run.
const DEADLINE: Duration = Duration::from_secs(300);

/// What a comment before a block asks of it.
#[derive(Debug, PartialEq)]
enum Directive {
    /// Leave the block out, for this reason.
    Skip(String),
    /// Write the block to this file.
    File(String),
}

/// One fenced block of the README.
#[derive(Debug)]
struct Block {
    /// The line of its opening fence (1-based).
    line: usize,
    /// The fence's language (`sh`, `yaml`, …).
    lang: String,
    /// Its text.
    text: String,
    /// The comment before it, if it is a `readme-test` one.
    directive: Option<Directive>,
}

/// A `<!-- readme-test: … -->` comment, parsed; an unknown or reasonless
/// one is an error, so a typo never silently runs or skips a block.
fn directive(line: &str, at: usize) -> Option<Directive> {
    let inner = line
        .trim()
        .strip_prefix("<!-- readme-test:")?
        .strip_suffix("-->")?
        .trim();
    if let Some(why) = inner.strip_prefix("skip") {
        let why = why
            .trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .trim();
        assert!(!why.is_empty(), "README.md:{at}: a skip says why");
        return Some(Directive::Skip(why.to_string()));
    }
    if let Some(name) = inner.strip_prefix("file ") {
        let name = name.trim();
        assert!(
            !name.is_empty() && !name.contains('/'),
            "README.md:{at}: a file directive names a plain file"
        );
        return Some(Directive::File(name.to_string()));
    }
    panic!("README.md:{at}: unknown readme-test directive {inner:?}");
}

/// Every fenced block, with the directive on the last non-blank line
/// before it.
fn blocks(readme: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut last: Option<(usize, &str)> = None;
    let mut lines = readme.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let Some(lang) = line.strip_prefix("```") else {
            if !line.trim().is_empty() {
                last = Some((i + 1, line));
            }
            continue;
        };
        let mut text = String::new();
        for (_, l) in lines.by_ref() {
            if l.starts_with("```") {
                break;
            }
            text.push_str(l);
            text.push('\n');
        }
        out.push(Block {
            line: i + 1,
            lang: lang.trim().to_string(),
            text,
            directive: last.and_then(|(at, l)| directive(l, at)),
        });
        last = None;
    }
    out
}

/// The bash script that runs the blocks in order, each announced by a
/// `::block N` line (its README line) so a failure names it.
fn script(blocks: &[Block]) -> String {
    let mut s = String::from(
        "set -eo pipefail\n\
         shopt -s expand_aliases\n\
         # A curl the daemon answers with an error status fails the block.\n\
         curl() { command curl --fail-with-body \"$@\"; }\n\
         # The harness built target/release/tessera already.\n\
         cargo() { [ \"$*\" = 'build --release' ] || { echo \"cargo $* is not run here\" >&2; return 1; }; }\n",
    );
    for b in blocks {
        match (&b.directive, b.lang.as_str()) {
            (Some(Directive::Skip(_)), _) => {}
            (Some(Directive::File(name)), _) => {
                s.push_str(&format!(
                    "cat > {name} <<'README_BLOCK_END'\n{}README_BLOCK_END\n",
                    b.text
                ));
            }
            (None, "sh") => {
                s.push_str(&format!("echo '::block {}'\n{}\n", b.line, b.text));
            }
            (None, _) => {}
        }
    }
    s.push_str("echo '::done'\n");
    s
}

/// The README line of the last block the output announced.
fn last_block(output: &str) -> Option<&str> {
    output
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("::block "))
}

#[test]
fn directives_are_read_and_every_shell_block_runs_or_says_why_not() {
    let readme = "a\n<!-- readme-test: skip (needs X) -->\n```sh\nx\n```\n\n<!-- readme-test: file a.yaml -->\n\n```yaml\nk: v\n```\n```sh\necho hi\n```\n";
    let b = blocks(readme);
    assert_eq!(b.len(), 3);
    assert_eq!(b[0].directive, Some(Directive::Skip("needs X".into())));
    assert_eq!(b[1].directive, Some(Directive::File("a.yaml".into())));
    assert_eq!((b[2].line, b[2].directive.is_none()), (12, true));
    let s = script(&b);
    assert!(s.contains("cat > a.yaml <<'README_BLOCK_END'\nk: v\nREADME_BLOCK_END"));
    assert!(s.contains("echo '::block 12'\necho hi\n") && !s.contains("\nx\n"));
    for bad in [
        "<!-- readme-test: skip -->",
        "<!-- readme-test: skip () -->",
        "<!-- readme-test: run -->",
    ] {
        let text = format!("{bad}\n```sh\nx\n```\n");
        assert!(std::panic::catch_unwind(|| blocks(&text)).is_err(), "{bad}");
    }
}

#[test]
fn the_readme_shell_blocks_run_in_order_on_a_fresh_directory() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let blocks = blocks(&readme);
    let run: Vec<usize> = blocks
        .iter()
        .filter(|b| b.lang == "sh" && b.directive.is_none())
        .map(|b| b.line)
        .collect();
    assert!(
        run.len() >= 8,
        "the README runs its tour and examples: {run:?}"
    );
    // `set -e` does not see a command that fails before `&&`, so each
    // command of a block that runs stands on its own line.
    for b in blocks.iter().filter(|b| run.contains(&b.line)) {
        for (i, line) in b.text.lines().enumerate() {
            assert!(
                !line.contains("&&"),
                "README.md:{}: one command per line (a failure before && would pass unseen): {line}",
                b.line + 1 + i
            );
        }
    }
    if let Err(e) = std::net::TcpListener::bind("127.0.0.1:7700") {
        panic!(
            "the README's daemon listens on 127.0.0.1:7700, which is taken ({e}); stop what holds it"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tessera"), release.join("tessera")).unwrap();
    for shared in ["seeds", "examples"] {
        std::os::unix::fs::symlink(repo.join(shared), dir.path().join(shared)).unwrap();
    }
    std::fs::write(dir.path().join("readme.sh"), script(&blocks)).unwrap();
    let log = dir.path().join("readme.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = Command::new("bash")
        .arg("readme.sh")
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0)
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > DEADLINE {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The tour's daemon (and anything else a block left running) goes
    // with the script's process group.
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .status();
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let serve_log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    let at = last_block(&output).unwrap_or("(before the first block)");
    let ok = status.is_some_and(|s| s.success()) && output.ends_with("::done\n");
    assert!(
        ok,
        "README.md:{at}: this block did not do what the text says ({}):\n{output}\n--- serve.log ---\n{serve_log}",
        status.map_or("still running after the deadline".to_string(), |s| s
            .to_string())
    );
}
