//! SIGKILL the daemon in the middle of a write load, restart it on the same
//! root, and check that every acknowledged write is there with its hash.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::{DaemonProcess, body};

#[test]
fn every_acknowledged_noun_version_survives_sigkill() {
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut acked: Vec<(String, u64, String)> = Vec::new();
    for round in 0..4u64 {
        let daemon = DaemonProcess::spawn(root.path());
        let admin = daemon.admin.clone();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = (0..8)
            .map(|w| {
                let admin = admin.clone();
                let stop = stop.clone();
                rt.spawn(async move {
                    let mut mine = Vec::new();
                    let url = format!("/v1/nouns/load/w{w}/key");
                    let mut version = 0;
                    let current = admin.get(&format!("{url}/versions")).await.unwrap();
                    if current.status == 200 {
                        version = body(&current)["versions"].as_array().unwrap().len() as u64;
                    }
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let env = json!({"expected_version": version, "body": {"round": round, "v": version + 1, "pad": "x".repeat(512)}});
                        match admin.put_json(&url, &env).await {
                            Ok(r) if r.status == 201 => {
                                let b = body(&r);
                                version = b["version"].as_u64().unwrap();
                                mine.push((url.clone(), version, b["sha256"].as_str().unwrap().to_string()));
                            }
                            Ok(r) => panic!("unexpected {}: {}", r.status, String::from_utf8_lossy(&r.body)),
                            Err(_) => break, // killed mid-request: not acknowledged
                        }
                    }
                    mine
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300 + 150 * round));
        daemon.kill();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in writers {
            acked.extend(rt.block_on(w).unwrap());
        }
    }
    assert!(
        acked.len() > 20,
        "the load wrote too little to prove anything: {}",
        acked.len()
    );

    let daemon = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        for (url, version, sha) in &acked {
            let r = daemon
                .admin
                .get(&format!("{url}?version={version}&sha256={sha}"))
                .await
                .unwrap();
            assert_eq!(
                r.status,
                200,
                "{url} v{version} was acknowledged but is gone: {}",
                String::from_utf8_lossy(&r.body)
            );
        }
    });
    daemon.kill();
    let fsck = support::offline(&["fsck"], root.path());
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stdout)
    );
}

#[test]
fn sixteen_clients_creating_nouns_lose_nothing_acknowledged_to_sigkill() {
    // Noun puts share their log syncs (store/noun_log): each round of this
    // test kills the daemon at a random moment while sixteen clients
    // create nouns in new stores (new directories, new fan-out
    // directories) and add versions, so kills land before, between and
    // after group commits and ref swaps.
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut rng = Rng::new();
    let mut acked = Vec::new();
    for round in 0..6u64 {
        // Two versions per key: a create, then a new version.
        acked.extend(support::puts_then_kill(
            root.path(),
            &rt,
            round,
            2,
            100 + rng.below(400),
        ));
    }
    assert!(
        acked.len() > 50,
        "the load wrote too little to prove anything: {}",
        acked.len()
    );

    support::check_puts(root.path(), &rt, &acked);
    support::fsck_is_clean(root.path());
}

/// A small xorshift generator: enough randomness for kill timing.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        println!("seed {seed}");
        Rng(seed | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What the load was told, and so must find again after any crash.
#[derive(Default)]
struct Acked {
    tasks: Vec<String>,
    receipts: Vec<(String, String)>,
    /// Leases of attempts that a kill interrupted: (task, lease).
    orphaned: Vec<(String, String)>,
}

async fn worker_loop(
    admin: tessera::client::Client,
    w: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Acked {
    use std::sync::atomic::Ordering;
    let mut acked = Acked::default();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let spec = json!({"namespace": "load", "queue": "q", "kind": "verb.compute", "effect_class": "write-internal", "producer_surface": "load", "brief": {"w": w, "i": i}});
        let Ok(r) = admin.post_json("/v1/tasks", &spec).await else {
            break;
        };
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        acked
            .tasks
            .push(body(&r)["task_id"].as_str().unwrap().to_string());
        let Ok(c) = admin.post_json("/v1/queues/q/claim", &json!({})).await else {
            break;
        };
        if c.status == 204 {
            continue;
        }
        assert_eq!(c.status, 200, "{}", String::from_utf8_lossy(&c.body));
        let c = body(&c);
        let (id, lease) = (
            c["task"]["task_id"].as_str().unwrap().to_string(),
            c["lease"]["id"].as_str().unwrap().to_string(),
        );
        if i % 3 == 0 {
            match admin
                .post_json(
                    &format!("/v1/tasks/{id}/heartbeat"),
                    &json!({"lease_id": lease}),
                )
                .await
            {
                Ok(r) => assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body)),
                Err(_) => {
                    acked.orphaned.push((id, lease));
                    break;
                }
            }
        }
        match admin
            .post_json(
                &format!("/v1/tasks/{id}/submit"),
                &json!({"lease_id": lease, "ok": i % 5 != 0, "final": i % 5 == 0}),
            )
            .await
        {
            Ok(r) if r.status == 201 => acked
                .receipts
                .push((id, body(&r)["receipt_sha256"].as_str().unwrap().to_string())),
            Ok(r) => panic!(
                "submit {id}: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ),
            Err(_) => {
                acked.orphaned.push((id, lease));
                break;
            }
        }
    }
    acked
}

async fn all_tasks(admin: &tessera::client::Client) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/tasks?limit=1000&cursor={c}"),
            None => "/v1/tasks?limit=1000".to_string(),
        };
        let page = body(&admin.get(&path).await.unwrap());
        out.extend(page["tasks"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
}

async fn check_invariants(admin: &tessera::client::Client, acked: &Acked, read_receipts: bool) {
    let tasks = all_tasks(admin).await;
    let by_id: std::collections::HashMap<String, &serde_json::Value> = tasks
        .iter()
        .map(|t| (t["task_id"].as_str().unwrap().to_string(), t))
        .collect();
    assert_eq!(by_id.len(), tasks.len(), "a task is listed twice");
    for id in &acked.tasks {
        assert!(by_id.contains_key(id), "acknowledged task {id} is gone");
    }
    for (id, sha) in &acked.receipts {
        let t = by_id[id];
        assert_eq!(
            t["receipts"],
            json!([sha]),
            "acknowledged receipt of {id} is gone or not alone"
        );
        if read_receipts {
            let r = admin
                .get(&format!("/v1/tasks/{id}/receipts"))
                .await
                .unwrap();
            assert_eq!(
                body(&r)["receipts"][0]["sha256"],
                json!(sha),
                "the receipt object of {id} is unreadable"
            );
        }
    }
    for t in &tasks {
        let receipts = t["receipts"].as_array().unwrap().len();
        assert!(receipts <= 1, "{} has {receipts} receipts", t["task_id"]);
        let state = t["state"].as_str().unwrap();
        assert_eq!(
            state == "claimed",
            !t["lease"].is_null(),
            "lease and state disagree for {}",
            t["task_id"]
        );
        if receipts == 1 {
            assert!(
                state == "succeeded" || state == "failed",
                "{} has a receipt but is {state}",
                t["task_id"]
            );
        }
    }
    let queues = body(&admin.get("/v1/queues").await.unwrap());
    let counted: u64 = queues["queues"][0]["counts"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(
        counted,
        tasks.len() as u64,
        "per-state counts must cover each task exactly once"
    );
}

#[test]
fn the_queue_loses_nothing_acknowledged_across_twenty_sigkills() {
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut rng = Rng::new();
    let mut acked = Acked::default();
    {
        let d = DaemonProcess::spawn(root.path());
        rt.block_on(async {
            let r = d.admin.post_json("/v1/queues", &json!({"name": "q", "lease_ttl_s": 1, "max_attempts": 1000, "backoff": {"base_ms": 10, "cap_ms": 50}})).await.unwrap();
            assert_eq!(r.status, 201);
        });
        d.kill();
    }
    // At least 22 rounds, and more (up to 80) until the load has done
    // enough to prove something: a slower backend or a busy machine does
    // less in each round's few hundred milliseconds.
    let mut round = 0;
    while round < 22 || (acked.receipts.len() <= 100 && round < 80) {
        round += 1;
        let d = DaemonProcess::spawn(root.path());
        rt.block_on(check_invariants(&d.admin, &acked, false));
        rt.block_on(async {
            for (id, lease) in &acked.orphaned {
                let r = d
                    .admin
                    .post_json(
                        &format!("/v1/tasks/{id}/submit"),
                        &json!({"lease_id": lease, "ok": true}),
                    )
                    .await
                    .unwrap();
                // 201: the interrupted submit never landed; 200: it landed
                // and this is its idempotent resend; 409: another attempt
                // holds (or ended) the task, and this stale lease is fenced.
                if r.status == 201 || r.status == 200 {
                    acked.receipts.push((
                        id.clone(),
                        body(&r)["receipt_sha256"].as_str().unwrap().to_string(),
                    ));
                } else {
                    assert_eq!(r.status, 409, "{}", String::from_utf8_lossy(&r.body));
                }
            }
        });
        acked.orphaned.clear();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let workers: Vec<_> = (0..8)
            .map(|w| rt.spawn(worker_loop(d.admin.clone(), w, stop.clone())))
            .collect();
        std::thread::sleep(Duration::from_millis(50 + rng.below(300)));
        d.kill();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in workers {
            let a = rt.block_on(w).unwrap();
            acked.tasks.extend(a.tasks);
            acked.receipts.extend(a.receipts);
            acked.orphaned.extend(a.orphaned);
        }
    }
    assert!(
        acked.receipts.len() > 100,
        "the load did too little to prove anything: {}",
        acked.receipts.len()
    );

    let d = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        check_invariants(&d.admin, &acked, true).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let c = d
                .admin
                .post_json("/v1/queues/q/claim", &json!({"wait_ms": 300}))
                .await
                .unwrap();
            if c.status == 200 {
                let c = body(&c);
                let id = c["task"]["task_id"].as_str().unwrap();
                let r = d
                    .admin
                    .post_json(
                        &format!("/v1/tasks/{id}/submit"),
                        &json!({"lease_id": c["lease"]["id"], "ok": true}),
                    )
                    .await
                    .unwrap();
                assert_eq!(r.status, 201);
                continue;
            }
            let open = all_tasks(&d.admin)
                .await
                .into_iter()
                .filter(|t| {
                    !matches!(
                        t["state"].as_str(),
                        Some("succeeded" | "failed" | "cancelled")
                    )
                })
                .count();
            if open == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{open} tasks never ended"
            );
        }
        check_invariants(&d.admin, &acked, true).await;
    });
    d.kill();
}
