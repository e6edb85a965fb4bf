//! The logs know how far they reach. What broke: a missing or emptied
//! newest journal segment, or a closed one emptied or cut exactly at a
//! record boundary, lost the records in it with no log line and a clean
//! fsck (one reproduction: 1,264 acknowledged tasks); a record that did not
//! follow from the state it met was applied; a noun log cut in the middle
//! rolled intact ref files back to the versions it still held, under a
//! "torn tail" warning. Each is now refused, naming the file, by the start
//! and by fsck; `tessera recover --salvage` keeps what precedes.

use crate::support;

use std::path::{Path, PathBuf};

use serde_json::json;
use support::{DaemonProcess, body, offline, refused_start, text};
use tessera::client::Client;
use tessera::store::log::segment;

async fn enqueue(c: &Client, i: usize) -> String {
    let spec = json!({"namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read", "producer_surface": "s", "brief": {"i": i}});
    let r = c.post_json("/v1/tasks", &spec).await.unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    body(&r)["task_id"].as_str().unwrap().to_string()
}

/// One run of the daemon that enqueues `n` tasks (provisioning `q` the
/// first time), ended by SIGTERM or SIGKILL; the ids acknowledged.
fn run(rt: &tokio::runtime::Runtime, root: &Path, n: usize, kill: bool) -> Vec<String> {
    let d = DaemonProcess::spawn(root);
    let ids = rt.block_on(async {
        let r = d
            .admin
            .post_json("/v1/queues", &json!({"name": "q"}))
            .await
            .unwrap();
        assert!(r.status == 200 || r.status == 201);
        let mut ids = Vec::new();
        for i in 0..n {
            ids.push(enqueue(&d.admin, i).await);
        }
        ids
    });
    if kill {
        d.kill();
    } else {
        d.signal("TERM");
        let (status, log) = d.wait();
        assert_eq!(status.code(), Some(0), "{log}");
    }
    ids
}

fn segment_path(root: &Path, n: u64) -> PathBuf {
    root.join("journal").join(segment::segment_name(n))
}

/// The byte offsets where the records of a segment start (its header
/// first).
fn record_starts(bytes: &[u8]) -> Vec<usize> {
    let mut at = 0;
    let mut starts = Vec::new();
    while at + segment::HEADER <= bytes.len() {
        let n = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if n == 0 {
            break;
        }
        starts.push(at);
        at += segment::HEADER + n;
    }
    starts
}

/// The tasks a daemon on `root` still has, of `ids`.
fn kept(rt: &tokio::runtime::Runtime, root: &Path, ids: &[String]) -> Vec<String> {
    let d = DaemonProcess::spawn(root);
    let kept = rt.block_on(async {
        let mut kept = Vec::new();
        for id in ids {
            if d.admin
                .get(&format!("/v1/tasks/{id}"))
                .await
                .unwrap()
                .status
                == 200
            {
                kept.push(id.clone());
            }
        }
        kept
    });
    d.signal("TERM");
    let (status, log) = d.wait();
    assert_eq!(status.code(), Some(0), "{log}");
    kept
}

/// A way of damaging a file, by its path.
type Damage = fn(&Path);

/// Each way of damaging a journal segment, on the newest segment of a
/// killed daemon and on a closed one: the start is refused naming the
/// file, fsck exits 1 naming it, and salvage keeps every task before it.
#[test]
fn a_journal_segment_missing_emptied_or_cut_at_a_record_refuses_the_start() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let faults: [(&str, Damage); 3] = [
        ("missing", |p| std::fs::remove_file(p).unwrap()),
        ("emptied", |p| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(0)
                .unwrap()
        }),
        ("cut at its last record", |p| {
            let bytes = std::fs::read(p).unwrap();
            let starts = record_starts(&bytes);
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            f.set_len(*starts.last().unwrap() as u64).unwrap();
        }),
    ];
    for (which, newest) in [("the newest segment", true), ("a closed segment", false)] {
        for (how, damage) in faults {
            let root = tempfile::tempdir().unwrap();
            let first = run(&rt, root.path(), 4, false);
            let second = run(&rt, root.path(), 4, newest);
            let third = if newest {
                Vec::new()
            } else {
                run(&rt, root.path(), 4, false)
            };
            let victim = segment_path(root.path(), 1);
            assert!(victim.exists(), "{which}: segment 1 holds the second run");
            damage(&victim);
            let name = segment::segment_name(1);
            let log = refused_start(root.path());
            assert!(log.contains(&name), "{which} {how}: {log}");
            let fsck = offline(&["fsck"], root.path());
            assert_eq!(
                fsck.status.code(),
                Some(1),
                "{which} {how}: {}",
                text(&fsck)
            );
            assert!(
                text(&fsck).contains(&name),
                "{which} {how}: {}",
                text(&fsck)
            );
            let report = offline(&["recover"], root.path());
            assert_eq!(
                report.status.code(),
                Some(1),
                "{which} {how}: {}",
                text(&report)
            );
            let salvage = offline(&["recover", "--salvage"], root.path());
            assert_eq!(
                salvage.status.code(),
                Some(0),
                "{which} {how}: {}",
                text(&salvage)
            );
            let all: Vec<String> = [first.clone(), second, third].concat();
            let have = kept(&rt, root.path(), &all);
            for id in &first {
                assert!(have.contains(id), "{which} {how}: {id} preceded the damage");
            }
            assert!(have.len() < all.len(), "{which} {how}: nothing was lost?");
            let fsck = offline(&["fsck"], root.path());
            assert_eq!(
                fsck.status.code(),
                Some(0),
                "{which} {how}: {}",
                text(&fsck)
            );
        }
    }
}

/// A missing `journal/reach.json` beside segments that carry headers is
/// damage, not an old root: refused; salvage takes the segments as found
/// (whole here) and writes a new reach, losing nothing.
#[test]
fn a_missing_journal_reach_refuses_and_salvage_takes_the_segments_as_found() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut ids = run(&rt, root.path(), 3, false);
    ids.extend(run(&rt, root.path(), 3, true));
    std::fs::remove_file(root.path().join("journal/reach.json")).unwrap();
    let log = refused_start(root.path());
    assert!(log.contains("journal/reach.json"), "{log}");
    assert_eq!(offline(&["fsck"], root.path()).status.code(), Some(1));
    let salvage = offline(&["recover", "--salvage"], root.path());
    assert_eq!(salvage.status.code(), Some(0), "{}", text(&salvage));
    assert_eq!(kept(&rt, root.path(), &ids), ids);
}

/// A record that does not follow from the state it meets (the claim
/// before a submit is gone from the middle of a segment) refuses the
/// start naming the segment and the record's offset, instead of being
/// applied to a state it never met.
#[test]
fn a_record_that_does_not_follow_from_what_precedes_it_refuses_the_start() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        let r = d
            .admin
            .post_json("/v1/queues", &json!({"name": "q"}))
            .await
            .unwrap();
        assert_eq!(r.status, 201);
        let id = enqueue(&d.admin, 0).await;
        let c = body(
            &d.admin
                .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
                .await
                .unwrap(),
        );
        let r = d
            .admin
            .post_json(
                &format!("/v1/tasks/{id}/submit"),
                &json!({"lease_id": c["lease"]["id"], "ok": true}),
            )
            .await
            .unwrap();
        assert_eq!(r.status, 201);
    });
    d.kill();
    let seg = segment_path(root.path(), 0);
    let bytes = std::fs::read(&seg).unwrap();
    let starts = record_starts(&bytes);
    let claim = starts
        .iter()
        .position(|at| bytes[at + segment::HEADER..].starts_with(b"{\"claimed\""))
        .expect("a claim record");
    let (from, to) = (starts[claim], starts[claim + 1]);
    let mut without = bytes[..from].to_vec();
    without.extend_from_slice(&bytes[to..]);
    without.resize(bytes.len(), 0);
    std::fs::write(&seg, &without).unwrap();
    let log = refused_start(root.path());
    assert!(log.contains(&segment::segment_name(0)), "{log}");
    assert!(log.contains(&format!("at byte {from}")), "{log}");
    assert!(log.contains("submits under a lease"), "{log}");
}

/// The noun log's segments are checked the same way, and replay never
/// moves a ref file back: a noun log whose tail was lost (zeroed, so it
/// reads as a clean end) while the ref files hold later versions is
/// refused, and the ref file keeps every acknowledged version.
#[test]
fn a_noun_log_that_lost_records_whose_refs_are_on_disk_never_moves_a_ref_back() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        for v in 0..4u64 {
            let r = d
                .admin
                .put_json(
                    "/v1/nouns/ns/s/k",
                    &json!({"expected_version": v, "body": {"v": v + 1}}),
                )
                .await
                .unwrap();
            assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        }
    });
    d.kill();
    let ref_file = root.path().join("nouns/ns/s/k.json");
    let before = std::fs::read(&ref_file).unwrap();
    let versions = |b: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(b).unwrap()["versions"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(versions(&before), 4);
    let log_dir = root.path().join("journal/nouns");
    let seg = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("the open noun log segment");
    let bytes = std::fs::read(&seg).unwrap();
    let starts = record_starts(&bytes);
    assert_eq!(starts.len(), 5, "its header and four puts");
    // Versions 3 and 4 gone from the log: zeroed, as a lost page reads.
    let mut lost = bytes.clone();
    for b in &mut lost[starts[3]..] {
        *b = 0;
    }
    std::fs::write(&seg, &lost).unwrap();
    let log = refused_start(root.path());
    assert!(
        log.contains("nouns/ns/s/k.json") && log.contains("version 4"),
        "{log}"
    );
    assert_eq!(
        std::fs::read(&ref_file).unwrap(),
        before,
        "the ref file was not moved back"
    );
    let fsck = offline(&["fsck"], root.path());
    assert_eq!(fsck.status.code(), Some(1), "{}", text(&fsck));

    // Emptied, or missing: the noun log's reach says the segment existed.
    for how in ["emptied", "missing"] {
        std::fs::write(&seg, &bytes).unwrap();
        match how {
            "emptied" => std::fs::OpenOptions::new()
                .write(true)
                .open(&seg)
                .unwrap()
                .set_len(0)
                .unwrap(),
            _ => std::fs::remove_file(&seg).unwrap(),
        }
        let log = refused_start(root.path());
        assert!(
            log.contains(&format!(
                "journal/nouns/{}",
                seg.file_name().unwrap().to_string_lossy()
            )),
            "{how}: {log}"
        );
        assert_eq!(std::fs::read(&ref_file).unwrap(), before, "{how}");
    }
    std::fs::write(&seg, &bytes).unwrap();
    let d = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        let r = d.admin.get("/v1/nouns/ns/s/k?version=4").await.unwrap();
        assert_eq!(r.status, 200);
    });
    d.kill();
}

/// A torn tail is only the last group commit's write, in part: the tail
/// of the newest segment of a killed daemon flipped (its final record
/// written whole, then changed) or cut short (the file shorter than it
/// was made) loses acknowledged tasks, so it refuses the start naming
/// the file, where it was taken for one unacknowledged record before.
#[test]
fn a_flipped_or_cut_tail_of_the_newest_segment_refuses_the_start() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    for how in ["flipped", "cut"] {
        let root = tempfile::tempdir().unwrap();
        let ids = run(&rt, root.path(), 6, true);
        let seg = segment_path(root.path(), 0);
        let mut bytes = std::fs::read(&seg).unwrap();
        let starts = record_starts(&bytes);
        let last = *starts.last().unwrap();
        match how {
            "flipped" => {
                bytes[last + segment::HEADER + 5] ^= 0x20;
                std::fs::write(&seg, &bytes).unwrap();
            }
            _ => {
                let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
                f.set_len(last as u64 + 20).unwrap();
            }
        }
        let log = refused_start(root.path());
        assert!(log.contains(&segment::segment_name(0)), "{how}: {log}");
        assert_eq!(
            offline(&["fsck"], root.path()).status.code(),
            Some(1),
            "{how}"
        );
        let salvage = offline(&["recover", "--salvage"], root.path());
        assert_eq!(salvage.status.code(), Some(0), "{how}: {}", text(&salvage));
        let have = kept(&rt, root.path(), &ids);
        assert_eq!(
            have,
            ids[..5],
            "{how}: salvage keeps the five before the damage"
        );
    }
}
