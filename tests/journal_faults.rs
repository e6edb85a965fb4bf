//! Faults in the journal and the snapshot: only a damaged final record (a
//! crash's torn write) is cut; every other fault refuses the start with a
//! message naming the file and the offset, `tessera fsck` reports it, and
//! `tessera recover` shows it and salvages only when told to.

use crate::support;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{DaemonProcess, body, offline};

const SEGMENT0: &str = "journal/00000000000000000000.log";

/// Starts the daemon, provisions queue `q` (the first time), enqueues `n`
/// tasks, and stops it with SIGTERM; returns the ids acknowledged.
fn fill(rt: &tokio::runtime::Runtime, root: &Path, n: usize) -> Vec<String> {
    let d = DaemonProcess::spawn(root);
    let admin = d.admin.clone();
    let ids = rt.block_on(async {
        let q = json!({"name": "q"});
        let r = admin.post_json("/v1/queues", &q).await.unwrap();
        assert!(r.status == 200 || r.status == 201);
        let mut ids = Vec::new();
        for i in 0..n {
            ids.push(enqueue(&admin, i).await);
        }
        ids
    });
    d.signal("TERM");
    let (status, log) = d.wait();
    assert_eq!(status.code(), Some(0), "{log}");
    ids
}

/// A start that must be refused: its exit code and what it logged.
fn refused_start(root: &Path) -> String {
    let out = offline(&["serve", "--listen", "127.0.0.1:0"], root);
    assert!(
        !out.status.success(),
        "the daemon started on a damaged journal"
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn enqueue(c: &tessera::client::Client, i: usize) -> String {
    let spec = json!({"namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read", "producer_surface": "s", "brief": {"i": i}});
    let r = c.post_json("/v1/tasks", &spec).await.unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    body(&r)["task_id"].as_str().unwrap().to_string()
}

fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x20;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_flipped_bit_mid_journal_refuses_the_start_and_recover_salvages_on_request() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let ids = fill(&rt, root.path(), 40);
    let seg = root.path().join(SEGMENT0);
    let len = std::fs::metadata(&seg).unwrap().len() as usize;
    flip(&seg, len / 2);
    let damaged = std::fs::read(&seg).unwrap();

    let log = refused_start(root.path());
    for want in [
        SEGMENT0,
        "at byte",
        "valid record(s) follow it",
        "tessera recover",
    ] {
        assert!(log.contains(want), "{want:?} missing from:\n{log}");
    }
    let fsck = offline(&["fsck"], root.path());
    assert_eq!(fsck.status.code(), Some(1));
    assert!(text(&fsck).contains(SEGMENT0), "{}", text(&fsck));
    let report = offline(&["recover"], root.path());
    assert_eq!(report.status.code(), Some(1), "{}", text(&report));
    assert!(
        text(&report).contains("salvaging would keep"),
        "{}",
        text(&report)
    );
    assert_eq!(
        std::fs::read(&seg).unwrap(),
        damaged,
        "a report changes nothing"
    );

    let salvage = offline(&["recover", "--salvage"], root.path());
    assert_eq!(salvage.status.code(), Some(0), "{}", text(&salvage));
    let aside = std::fs::read_dir(root.path().join("journal/salvaged"))
        .unwrap()
        .count();
    assert!(aside >= 1, "what was dropped is kept aside");
    let d = DaemonProcess::spawn(root.path());
    let kept = rt.block_on(async {
        let mut kept = 0;
        for id in &ids {
            let r = d.admin.get(&format!("/v1/tasks/{id}")).await.unwrap();
            if r.status == 200 {
                kept += 1;
            }
        }
        kept
    });
    assert!(kept > 0 && kept < ids.len(), "kept {kept} of {}", ids.len());
    d.kill();
    let fsck = offline(&["fsck"], root.path());
    assert_eq!(fsck.status.code(), Some(0), "{}", text(&fsck));
}

/// A segment a graceful stop sealed has no torn tail: cut at its end (a
/// few bytes, or exactly at a record boundary), it is damage, refused
/// naming the file, not a torn write to drop. (A real torn tail, in the
/// preallocated segment of a killed daemon, is cut: see
/// `a_killed_daemons_preallocated_segment_is_trimmed_and_a_torn_record_in_its_zeros_is_cut`.)
#[test]
fn a_sealed_segment_cut_at_its_end_is_refused_not_taken_for_a_torn_tail() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    for cut in ["three bytes", "one whole record"] {
        let root = tempfile::tempdir().unwrap();
        let ids = fill(&rt, root.path(), 5);
        let seg = root.path().join(SEGMENT0);
        let bytes = std::fs::read(&seg).unwrap();
        let len = match cut {
            "three bytes" => bytes.len() - 3,
            _ => {
                let mut at = 0;
                let mut starts = Vec::new();
                while at < bytes.len() {
                    starts.push(at);
                    let n = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
                    at += 8 + n;
                }
                *starts.last().unwrap()
            }
        };
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        f.set_len(len as u64).unwrap();
        drop(f);
        let fsck = offline(&["fsck"], root.path());
        assert_eq!(fsck.status.code(), Some(1), "{cut}: {}", text(&fsck));
        assert!(
            text(&fsck).contains("00000000000000000000.log"),
            "{cut}: {}",
            text(&fsck)
        );
        let log = refused_start(root.path());
        assert!(
            log.contains("sealed") && log.contains("00000000000000000000.log"),
            "{cut}: {log}"
        );
        let salvage = offline(&["recover", "--salvage"], root.path());
        assert_eq!(salvage.status.code(), Some(0), "{cut}: {}", text(&salvage));
        let d = DaemonProcess::spawn(root.path());
        rt.block_on(async {
            for id in &ids[..4] {
                let r = d.admin.get(&format!("/v1/tasks/{id}")).await.unwrap();
                assert_eq!(r.status, 200, "{cut}: {id} was before the cut");
            }
        });
        d.signal("TERM");
        let (status, log) = d.wait();
        assert_eq!(status.code(), Some(0), "{log}");
        let fsck = offline(&["fsck"], root.path());
        assert_eq!(
            fsck.status.code(),
            Some(0),
            "{cut}: after salvage {}",
            text(&fsck)
        );
    }
}

#[test]
fn a_missing_segment_refuses_the_start() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    for _ in 0..3 {
        fill(&rt, root.path(), 2);
    }
    std::fs::remove_file(root.path().join("journal/00000000000000000001.log")).unwrap();
    let log = refused_start(root.path());
    assert!(
        log.contains("00000000000000000001.log") && log.contains("missing"),
        "{log}"
    );
    let fsck = offline(&["fsck"], root.path());
    assert_eq!(fsck.status.code(), Some(1));
}

#[test]
fn an_inapplicable_record_refuses_the_start_naming_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    fill(&rt, root.path(), 2);
    let seg = root.path().join(SEGMENT0);
    let offset = std::fs::metadata(&seg).unwrap().len();
    let payload = br#"{"heartbeat":{"id":"t99","expires_at":"2026-01-01T00:00:00Z"}}"#;
    let mut record = (payload.len() as u32).to_le_bytes().to_vec();
    record.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    record.extend_from_slice(payload);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&record);
    std::fs::write(&seg, bytes).unwrap();
    let log = refused_start(root.path());
    for want in [
        SEGMENT0,
        &format!("at byte {offset}"),
        "cannot apply",
        "t99",
    ] {
        assert!(log.contains(want), "{want:?} missing from:\n{log}");
    }
}

#[test]
fn a_damaged_or_missing_snapshot_refuses_the_start() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    for _ in 0..10 {
        fill(&rt, root.path(), 1);
    }
    // Past eight closed segments, the next daemon folds them into a
    // snapshot in the background.
    let snap = root.path().join("journal/snapshot.jsonl");
    let d = DaemonProcess::spawn(root.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !snap.exists() {
        assert!(
            Instant::now() < deadline,
            "the ten segments were not folded"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    d.signal("TERM");
    let (status, log) = d.wait();
    assert_eq!(status.code(), Some(0), "{log}");
    let good = std::fs::read(&snap).unwrap();
    flip(&snap, good.len() / 2);
    let log = refused_start(root.path());
    assert!(
        log.contains("journal/snapshot.jsonl") && log.contains("line"),
        "{log}"
    );
    assert_eq!(offline(&["fsck"], root.path()).status.code(), Some(1));

    std::fs::remove_file(&snap).unwrap();
    let log = refused_start(root.path());
    assert!(log.contains("snapshot is missing"), "{log}");
    let report = offline(&["recover", "--salvage"], root.path());
    assert!(
        !report.status.success(),
        "a missing snapshot cannot be salvaged"
    );

    std::fs::write(&snap, &good).unwrap();
    let d = DaemonProcess::spawn(root.path());
    let n = rt.block_on(async {
        body(&d.admin.get("/v1/tasks").await.unwrap())["tasks"]
            .as_array()
            .unwrap()
            .len()
    });
    assert_eq!(n, 10);
    d.kill();
}

/// A submit projects its ctx-dir and then journals its record; a kill
/// between the two must not leave a result the journal does not have.
/// Here the kill comes right after a projection a submit would have made
/// (its files, with the daemon's owner mark), before any record.
#[test]
fn a_result_the_journal_does_not_have_is_removed_at_restart() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let ids = fill(&rt, root.path(), 1);
    let d = DaemonProcess::spawn(root.path());
    let claim = rt.block_on(async {
        let r = d
            .admin
            .post_json(&format!("/v1/tasks/{}/claim", ids[0]), &json!({}))
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        body(&r)
    });
    d.kill();
    let ctx = root
        .path()
        .join("workspace/ns/tasks")
        .join(&ids[0])
        .join("ctx");
    std::fs::create_dir_all(&ctx).unwrap();
    std::fs::write(ctx.join(".tessera-owner"), format!("{} ctx", ids[0])).unwrap();
    let header = tessera::worker::front_matter::Header {
        task_id: ids[0].clone(),
        step: "k".into(),
        attempt: claim["lease"]["fence"].as_u64().unwrap() as u32,
        ok: true,
        sha256: tessera::store::Sha256::of(b"never recorded").hex(),
        size: 14,
    };
    std::fs::write(
        ctx.join("k.md"),
        tessera::worker::front_matter::encode(&header, b"never recorded"),
    )
    .unwrap();
    let d = DaemonProcess::spawn(root.path());
    d.signal("TERM");
    let (status, log) = d.wait();
    assert_eq!(status.code(), Some(0));
    assert!(!ctx.exists(), "the unrecorded result is gone");
    assert!(
        log.contains("removed a result the journal does not have"),
        "{log}"
    );
    assert_eq!(offline(&["fsck"], root.path()).status.code(), Some(0));
}

/// Nesting: every JSON body past the depth limit is refused with 400
/// `too_deep` (enqueue, split child, noun put), and the deepest brief that
/// is accepted goes through claim, split, park, resume and a restart.
#[test]
fn a_deep_brief_is_refused_and_the_deepest_accepted_one_survives_park_resume_and_restart() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    fill(&rt, root.path(), 0);
    let nest = |levels: usize| {
        let mut v = json!("leaf");
        for _ in 0..levels {
            v = json!([v]);
        }
        v
    };
    let spec = |brief: serde_json::Value| json!({"namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read", "producer_surface": "s", "brief": {"deep": brief}});
    let d = DaemonProcess::spawn(root.path());
    let parent = rt.block_on(async {
        for deep in [nest(200), nest(63)] {
            let r = d.admin.post_json("/v1/tasks", &spec(deep)).await.unwrap();
            assert_eq!((r.status.as_u16(), r.error_code().as_deref()), (400, Some("too_deep")));
        }
        let r = d.admin.put_json("/v1/nouns/ns/s/deep", &json!({"expected_version": 0, "body": nest(100)})).await.unwrap();
        assert_eq!((r.status.as_u16(), r.error_code().as_deref()), (400, Some("too_deep")));
        let r = d.admin.post_json("/v1/tasks", &spec(nest(60))).await.unwrap();
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let id = body(&r)["task_id"].as_str().unwrap().to_string();
        let c = body(&d.admin.post_json(&format!("/v1/tasks/{id}/claim"), &json!({})).await.unwrap());
        let lease = c["lease"]["id"].clone();
        let child = json!({"queue": "q", "kind": "verb.k", "effect_class": "read", "brief": {"deep": nest(70)}});
        let r = d.admin.post_json(&format!("/v1/tasks/{id}/split"), &json!({"lease_id": lease, "children": [child]})).await.unwrap();
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
        let park = json!({"lease_id": lease, "reason": "input", "needs": nest(40)});
        assert_eq!(d.admin.post_json(&format!("/v1/tasks/{id}/park"), &park).await.unwrap().status, 200);
        id
    });
    d.kill();
    let d = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        let input = d
            .admin
            .put_json(
                "/v1/nouns/ns/s/input",
                &json!({"expected_version": 0, "producer_surface": "s", "body": {"n": 1}}),
            )
            .await
            .unwrap();
        assert_eq!(
            input.status,
            201,
            "{}",
            String::from_utf8_lossy(&input.body)
        );
        let pin =
            json!({"store": "s", "key": "input", "version": 1, "sha256": body(&input)["sha256"]});
        let key = json!({"label": "resumer", "grants": {"queues": ["q"], "kinds": ["verb.k"], "effect_classes": ["read"], "scopes": ["namespace:ns", "surface:s", "nouns:read", "verbs:enqueue"]}});
        let issued = body(&d.admin.post_json("/v1/keys", &key).await.unwrap());
        let resumer = d.admin.with_bearer(issued["secret"].as_str().unwrap());
        let r = resumer
            .post_json(
                &format!("/v1/tasks/{parent}/resume"),
                &json!({"input_ref": pin}),
            )
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    });
    d.kill();
    let d = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        let t = body(&d.admin.get(&format!("/v1/tasks/{parent}")).await.unwrap());
        assert_eq!(t["state"], json!("queued"));
        assert_eq!(d.admin.get("/healthz").await.unwrap().status, 200);
    });
    d.kill();
    assert_eq!(offline(&["fsck"], root.path()).status.code(), Some(0));
}

#[test]
fn a_killed_daemons_preallocated_segment_is_trimmed_and_a_torn_record_in_its_zeros_is_cut() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(root.path());
    let mut ids = rt.block_on(async {
        let r = d
            .admin
            .post_json("/v1/queues", &json!({"name": "q"}))
            .await
            .unwrap();
        assert_eq!(r.status, 201);
        let mut ids = Vec::new();
        for i in 0..5 {
            ids.push(enqueue(&d.admin, i).await);
        }
        ids
    });
    d.kill();

    let seg = root.path().join(SEGMENT0);
    let bytes = std::fs::read(&seg).unwrap();
    assert_eq!(bytes.len(), 64 << 20, "a segment is preallocated");
    let valid = bytes.iter().rposition(|b| *b != 0).unwrap() + 1;
    let mut torn = Vec::new();
    torn.extend_from_slice(&200u32.to_le_bytes());
    torn.extend_from_slice(&0xdead_beefu32.to_le_bytes());
    torn.extend_from_slice(b"{\"event\":\"enq");
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &torn, valid as u64).unwrap();
    drop(f);
    let fsck = offline(&["fsck"], root.path());
    assert_eq!(fsck.status.code(), Some(0), "a torn tail: {}", text(&fsck));

    let d = DaemonProcess::spawn(root.path());
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        valid as u64,
        "the start cut the torn record and the zeros after it"
    );
    rt.block_on(async {
        ids.push(enqueue(&d.admin, 5).await);
        for id in &ids {
            let r = d.admin.get(&format!("/v1/tasks/{id}")).await.unwrap();
            assert_eq!(r.status, 200, "{id}");
        }
    });
    d.signal("TERM");
    let (status, log) = d.wait();
    assert_eq!(status.code(), Some(0), "{log}");
    let next = std::fs::read(root.path().join("journal/00000000000000000001.log")).unwrap();
    assert_eq!(next.last(), Some(&b'}'), "a graceful stop trims the zeros");
    let fsck = offline(&["fsck"], root.path());
    assert_eq!(fsck.status.code(), Some(0), "{}", text(&fsck));
}
