//! `docs/delivery.md` backs every claim with a test named as
//! `path.rs::function`. This file keeps it honest: every name in the
//! document must be a test function in that file, so renaming or deleting
//! a test breaks the build of the claim, not just the claim. It also holds
//! the test for one claim no other test showed (fsck compares ctx-dirs
//! with their receipts).

use crate::support;

use std::path::Path;

use serde_json::json;
use support::*;

/// Every `path.rs::name` inside backticks in `text`, in order.
fn references(text: &str) -> Vec<(String, String)> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| {
            let (file, name) = code.split_once(".rs::")?;
            let ident = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            let path = !file.contains(char::is_whitespace);
            (ident && path).then(|| (format!("{file}.rs"), name.to_string()))
        })
        .collect()
}

/// Whether `source` defines `name` as a test: `fn name(` whose attributes
/// (the `#[...]` and comment lines right above it) include `#[test]` or
/// `#[tokio::test…]`.
fn is_test(source: &str, name: &str) -> bool {
    let lines: Vec<&str> = source.lines().collect();
    lines.iter().enumerate().any(|(i, line)| {
        line.contains(&format!("fn {name}("))
            && lines[..i]
                .iter()
                .rev()
                .map(|l| l.trim())
                .take_while(|l| l.starts_with("#[") || l.starts_with("//"))
                .any(|l| l.starts_with("#[test]") || l.starts_with("#[tokio::test"))
    })
}

#[test]
fn every_test_this_document_names_exists() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(repo.join("docs/delivery.md")).expect("docs/delivery.md");
    let refs = references(&doc);
    assert!(
        refs.len() >= 40,
        "docs/delivery.md names only {} tests; every claim names one",
        refs.len()
    );
    let mut missing = Vec::new();
    for (file, name) in &refs {
        let source = std::fs::read_to_string(repo.join(file)).unwrap_or_default();
        if !is_test(&source, name) {
            missing.push(format!("{file}::{name}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/delivery.md names tests that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn references_are_found_only_in_code_spans_and_must_be_test_functions() {
    let text = "see `tests/a.rs::one_test` and `src/x/y.rs::two`, not tests/b.rs::three \
                nor `not a.rs::ref` nor `tests/c.rs::Upper`";
    assert_eq!(
        references(text),
        [
            ("tests/a.rs".to_string(), "one_test".to_string()),
            ("src/x/y.rs".to_string(), "two".to_string()),
        ]
    );
    let source = "#[test]\nfn real() {}\nfn helper() {}\n#[tokio::test(flavor = \"multi_thread\")]\nasync fn other() {}\n";
    assert!(is_test(source, "real"));
    assert!(is_test(source, "other"));
    assert!(!is_test(source, "helper"));
    assert!(!is_test(source, "absent"));
}

#[tokio::test]
async fn fsck_finds_a_ctx_dir_that_differs_from_its_receipt() {
    let mut t = Team::start().await;
    let id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let c = claim(&t.worker, "work.external").await.unwrap();
    let agent = t.d.client(c["handle"].as_str().unwrap());
    let r = agent
        .post_bytes("/v1/worker/submit", b"the result".to_vec())
        .await
        .unwrap();
    assert_status!(r, 201);
    // A receipt may live only in its journal record until the daemon
    // writes it as an object, at the latest on the next start; fsck checks
    // a ctx-dir against a written receipt.
    t.d.restart().await;
    t.d.stop().await;
    let fsck = || support::offline(&["fsck"], t.d.root());
    let clean = fsck();
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );
    let file =
        t.d.root()
            .join(format!("workspace/{NS}/tasks/{id}/ctx/solve_draft.md"));
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("edited by hand\n");
    std::fs::write(&file, text).unwrap();
    let found = fsck();
    let out = String::from_utf8_lossy(&found.stdout);
    let err = String::from_utf8_lossy(&found.stderr);
    assert_eq!(found.status.code(), Some(1), "{out}{err}");
    assert!(out.contains(&format!("tasks/{id}/ctx")), "{out}");
}
