//! The journal is folded into a new snapshot while the daemon serves:
//! closed segments are deleted once a snapshot covers them, a restart has
//! every task with its state and receipts, and SIGKILL in the middle of
//! folds under load loses nothing acknowledged (`tessera fsck` clean).
//! Segments of 1 MiB and a fold past 1 MiB make folds frequent.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::{DaemonProcess, TestDaemon, body, fsck_is_clean};
use tessera::client::Client;

const CONFIG: &str = "[queue]\njournal_segment_mib = 1\nfold_journal_mib = 1\n";

/// The journal's segment numbers, and whether a snapshot is there.
fn journal(root: &Path) -> (Vec<u64>, bool) {
    let mut segments = Vec::new();
    let mut snapshot = false;
    for e in std::fs::read_dir(root.join("journal")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name == "snapshot.jsonl" {
            snapshot = true;
        } else if let Some(n) = name.strip_suffix(".log") {
            segments.push(n.parse::<u64>().unwrap());
        }
    }
    segments.sort_unstable();
    (segments, snapshot)
}

/// A task spec whose brief is padded so a few hundred fill a segment.
fn padded(i: usize) -> Value {
    json!({"namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read",
           "producer_surface": "s", "brief": {"i": i, "pad": "p".repeat(4096)}})
}

/// What was acknowledged: task ids, and each receipt with its task.
#[derive(Default)]
struct Acked {
    tasks: Vec<String>,
    receipts: Vec<(String, String)>,
}

/// Enqueues `n` padded tasks from `w` and claims and submits every other
/// one; stops at the first failed request (a killed daemon), keeping what
/// was acknowledged before it.
async fn load(c: Client, w: usize, n: usize) -> Acked {
    let mut acked = Acked::default();
    for i in 0..n {
        let Ok(r) = c.post_json("/v1/tasks", &padded(w * 1_000_000 + i)).await else {
            break;
        };
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        acked
            .tasks
            .push(body(&r)["task_id"].as_str().unwrap().to_string());
        if i % 2 == 1 {
            continue;
        }
        let Ok(claim) = c.post_json("/v1/queues/q/claim", &json!({})).await else {
            break;
        };
        if claim.status == 204 {
            continue;
        }
        assert_eq!(
            claim.status,
            200,
            "{}",
            String::from_utf8_lossy(&claim.body)
        );
        let claim = body(&claim);
        let id = claim["task"]["task_id"].as_str().unwrap().to_string();
        let Ok(r) = c
            .post_json(
                &format!("/v1/tasks/{id}/submit"),
                &json!({"lease_id": claim["lease"]["id"], "ok": true}),
            )
            .await
        else {
            break;
        };
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let sha = body(&r)["receipt_sha256"].as_str().unwrap().to_string();
        acked.receipts.push((id, sha));
    }
    acked
}

/// Runs `workers` loads of `n` tasks each at once.
async fn load_all(c: &Client, workers: usize, n: usize) -> Acked {
    let all: Vec<_> = (0..workers)
        .map(|w| tokio::spawn(load(c.clone(), w, n)))
        .collect();
    let mut acked = Acked::default();
    for a in all {
        let a = a.await.unwrap();
        acked.tasks.extend(a.tasks);
        acked.receipts.extend(a.receipts);
    }
    acked
}

/// Every acknowledged task is there (in `state` when one is given), and
/// each acknowledged receipt is read back by its sha256 from its task.
async fn check(c: &Client, acked: &Acked, states: &BTreeMap<String, String>) {
    for id in &acked.tasks {
        let r = c.get(&format!("/v1/tasks/{id}")).await.unwrap();
        assert_eq!(r.status, 200, "{id}: {}", String::from_utf8_lossy(&r.body));
        if let Some(state) = states.get(id) {
            assert_eq!(body(&r)["state"].as_str(), Some(state.as_str()), "{id}");
        }
    }
    let mut by_task: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, sha) in &acked.receipts {
        by_task.entry(id).or_default().push(sha);
    }
    for (id, shas) in by_task {
        let r = c.get(&format!("/v1/tasks/{id}/receipts")).await.unwrap();
        assert_eq!(r.status, 200, "{id}: {}", String::from_utf8_lossy(&r.body));
        let have: Vec<String> = body(&r)["receipts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["sha256"].as_str().unwrap().to_string())
            .collect();
        for sha in shas {
            assert!(
                have.iter().any(|h| h == sha),
                "{id}: receipt {sha} is missing: {have:?}"
            );
        }
    }
}

async fn states(c: &Client, ids: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for id in ids {
        let t = body(&c.get(&format!("/v1/tasks/{id}")).await.unwrap());
        out.insert(id.clone(), t["state"].as_str().unwrap().to_string());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn closed_segments_are_folded_into_a_snapshot_while_serving_and_a_restart_has_every_task_and_receipt()
 {
    let mut d = TestDaemon::start_with(|c| {
        c.queue.journal_segment_mib = 1;
        c.queue.fold_journal_mib = 1;
    })
    .await;
    let r = d
        .admin
        .post_json("/v1/queues", &json!({"name": "q"}))
        .await
        .unwrap();
    assert_eq!(r.status, 201);
    let mut acked = load_all(&d.admin, 4, 400).await;
    assert_eq!(acked.tasks.len(), 1600);

    // While the daemon serves, folds write the snapshot and delete the
    // segments they cover, until the journal is back to a few segments
    // (a fold that starts while the load still writes leaves later
    // segments to the next one).
    let root = d.root().to_path_buf();
    support::eventually(30, || {
        let (segments, snapshot) = journal(&root);
        async move { snapshot && segments.first().is_some_and(|n| *n > 2) && segments.len() <= 4 }
    })
    .await;
    let r = d.admin.get("/v1/status").await.unwrap();
    let folds = &body(&r)["storage"]["folds"];
    assert!(
        folds["done"].as_u64() >= Some(1) && folds["looks"].as_u64() >= Some(1),
        "the status shows the folds: {folds}"
    );
    assert_eq!(folds["failed"], 0, "{folds}");
    assert!(folds["last_tasks"].as_u64() >= Some(1), "{folds}");
    let more = load_all(&d.admin, 2, 50).await;
    acked.tasks.extend(more.tasks);
    acked.receipts.extend(more.receipts);
    let before = states(&d.admin, &acked.tasks).await;
    check(&d.admin, &acked, &before).await;

    d.restart().await;
    check(&d.admin, &acked, &before).await;
    d.stop().await;
    fsck_is_clean(&root);
}

#[test]
fn sigkill_during_folds_under_load_loses_nothing_acknowledged() {
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut acked = Acked::default();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut first_segments = Vec::new();
    for round in 0..8 {
        let d = DaemonProcess::spawn_with_config(root.path(), CONFIG);
        rt.block_on(async {
            if round == 0 {
                let r = d
                    .admin
                    .post_json("/v1/queues", &json!({"name": "q"}))
                    .await
                    .unwrap();
                assert_eq!(r.status, 201);
            }
            check(&d.admin, &acked, &BTreeMap::new()).await;
        });
        let workers: Vec<_> = (0..6)
            .map(|w| rt.spawn(load(d.admin.clone(), round * 10 + w, 100_000)))
            .collect();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(700 + rng % 1500));
        d.kill();
        for w in workers {
            let a = rt.block_on(w).unwrap();
            acked.tasks.extend(a.tasks);
            acked.receipts.extend(a.receipts);
        }
        first_segments.push(journal(root.path()).0.first().copied().unwrap_or(0));
    }
    assert!(
        acked.tasks.len() > 800,
        "the load did too little to prove anything: {}",
        acked.tasks.len()
    );
    assert!(
        journal(root.path()).1 && first_segments.iter().any(|n| *n > 0),
        "folds deleted segments under load: first segment after each round {first_segments:?}"
    );

    eprintln!(
        "{} tasks, {} receipts acknowledged; first segment after each round {first_segments:?}",
        acked.tasks.len(),
        acked.receipts.len()
    );
    let d = DaemonProcess::spawn_with_config(root.path(), CONFIG);
    rt.block_on(check(&d.admin, &acked, &BTreeMap::new()));
    d.signal("TERM");
    let (status, log) = d.wait();
    assert_eq!(status.code(), Some(0), "{log}");
    fsck_is_clean(root.path());
}
