//! The noun log (`journal/nouns/`, `src/store/noun_log/`): a noun put is
//! acknowledged once its record is durable, and its object and ref file
//! are written afterwards without fsync. These tests SIGKILL the daemon
//! under concurrent puts and check that every acknowledged version comes
//! back with its exact body, that ref files on disk are whole JSON, and
//! that fsck is clean; and that a torn log tail is cut while a damaged
//! record with valid ones after it refuses the start.

use crate::support;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use support::{DaemonProcess, check_puts, fsck_is_clean, offline, puts_then_kill};
use tessera::store::log::segment;

/// Every file under `nouns/`: ref files parse as JSON naming their noun,
/// and nothing else is there but their hidden shadows.
fn check_ref_files(root: &Path) {
    let mut refs = 0;
    for path in files(&root.join("nouns")) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') {
            assert!(name.ends_with(".swap"), "{}", path.display());
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let noun: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not whole JSON: {e}", path.display()));
        assert_eq!(
            format!("{}.json", noun["key"].as_str().unwrap()),
            name,
            "{}",
            path.display()
        );
        refs += 1;
    }
    assert!(refs > 0, "no ref files under nouns/");
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// The noun log's segments, in order.
fn segments(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root.join("journal/nouns"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    out.sort();
    out
}

/// The segment holding records, and the length of its valid records.
fn written_segment(root: &Path) -> (PathBuf, u64, u64) {
    for path in segments(root) {
        let bytes = std::fs::read(&path).unwrap();
        let end = segment::read::<std::io::Error>(&bytes[..], |_, _| Ok(())).unwrap();
        if end.records > 0 {
            return (path, end.records, end.valid_len);
        }
    }
    panic!("no noun log segment holds records");
}

#[test]
fn every_acknowledged_put_survives_sigkill_with_its_body_and_whole_ref_files() {
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut acked = Vec::new();
    for round in 0..3 {
        acked.extend(puts_then_kill(
            root.path(),
            &rt,
            round,
            4,
            400 + 300 * round,
        ));
    }
    assert!(
        acked.len() > 100,
        "the load wrote too little to prove anything: {}",
        acked.len()
    );
    check_puts(root.path(), &rt, &acked);
    check_ref_files(root.path());
    fsck_is_clean(root.path());
}

#[test]
fn a_torn_noun_log_tail_is_cut_and_the_puts_before_it_are_kept() {
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let acked = puts_then_kill(root.path(), &rt, 0, 4, 500);
    assert!(!acked.is_empty());
    let (path, _, valid_len) = written_segment(root.path());
    // Half a record where the next would go: a write cut by the crash.
    let mut torn = Vec::new();
    segment::encode(b"{\"ref_len\":10}\n0123456789", &mut torn);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = valid_len as usize;
    bytes.splice(
        at..at + torn.len() / 2,
        torn[..torn.len() / 2].iter().copied(),
    );
    std::fs::write(&path, &bytes).unwrap();

    let fsck = offline(&["fsck"], root.path());
    let said = String::from_utf8_lossy(&fsck.stdout);
    assert!(fsck.status.success(), "a torn tail is not damage: {said}");
    assert!(said.contains("the noun log holds"), "{said}");

    check_puts(root.path(), &rt, &acked);
    check_ref_files(root.path());
    fsck_is_clean(root.path());
}

#[test]
fn a_damaged_noun_log_record_with_valid_records_after_it_refuses_the_start() {
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let acked = puts_then_kill(root.path(), &rt, 0, 4, 500);
    let (path, records, _) = written_segment(root.path());
    assert!(records >= 2, "{records} record(s)");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[segment::HEADER + 3] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();
    let before = std::fs::read(root.path().join("nouns/r0/c0/k0.json")).ok();

    let out = offline(&["serve", "--listen", "127.0.0.1:0"], root.path());
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the daemon started: {log}");
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        log.contains(&format!("journal/nouns/{name}")) && log.contains("at byte 0"),
        "{log}"
    );
    assert!(
        log.contains("acknowledged noun puts would be lost"),
        "{log}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the refused start changed the log"
    );
    assert_eq!(
        std::fs::read(root.path().join("nouns/r0/c0/k0.json")).ok(),
        before
    );
    let fsck = offline(&["fsck"], root.path());
    let said = String::from_utf8_lossy(&fsck.stdout);
    assert!(!fsck.status.success(), "{said}");
    assert!(said.contains(&format!("journal/nouns/{name}")), "{said}");
    drop(acked);
}

#[test]
fn a_graceful_stop_leaves_an_empty_noun_log_and_the_puts_in_their_files() {
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let daemon = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        for v in 0..3 {
            let env = json!({"expected_version": v, "body": {"v": v}});
            let r = daemon
                .admin
                .put_json("/v1/nouns/ns/st/k", &env)
                .await
                .unwrap();
            assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        }
    });
    daemon.signal("TERM");
    let (status, log) = daemon.wait();
    assert_eq!(status.code(), Some(0), "{log}");
    assert_eq!(segments(root.path()), Vec::<PathBuf>::new());
    let noun: Value =
        serde_json::from_slice(&std::fs::read(root.path().join("nouns/ns/st/k.json")).unwrap())
            .unwrap();
    assert_eq!(noun["versions"].as_array().unwrap().len(), 3);
    let out = offline(&["fsck"], root.path());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && !said.contains("noun log"), "{said}");
}
