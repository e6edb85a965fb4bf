//! Three daemons on one PostgreSQL database (`serve --queue-url`), each
//! on a root of its own: one queue and one set of keys whichever daemon
//! is asked, fencing across daemons, and a SIGKILL of the daemon
//! that holds leases and leads maintenance losing nothing acknowledged,
//! its leases claimable again on the others once they lapse; every
//! daemon's event stream carries every change, resumable on any of them.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::sse::Stream;
use support::{DaemonProcess, body, claimed_id, lease, submit};
use tessera::client::Client;

/// The leader's lease row lasts this long unless renewed
/// (`pg::shared::LEADER_TTL`).
const LEADER_TTL: Duration = Duration::from_secs(5);

/// A task's lease in these tests.
const LEASE_TTL: Duration = Duration::from_secs(2);

fn spec(i: usize) -> Value {
    json!({
        "namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read",
        "producer_surface": "s", "brief": {"i": i}
    })
}

/// Three daemons on roots `a`, `b`, `c` under `dir`, sharing `url`: the
/// first one's admin key works on all three.
fn three(dir: &Path, url: &str) -> Vec<DaemonProcess> {
    let first = DaemonProcess::spawn_shared(&dir.join("a"), url);
    let mut all = vec![];
    for name in ["b", "c"] {
        all.push(DaemonProcess::spawn_shared_beside(
            &dir.join(name),
            url,
            &first,
        ));
    }
    all.insert(0, first);
    all
}

async fn claim_on(c: &Client) -> Option<Value> {
    let r = c.post_json("/v1/queues/q/claim", &json!({})).await.unwrap();
    match r.status.as_u16() {
        200 => Some(body(&r)),
        204 => None,
        s => panic!("claim answered {s}: {}", String::from_utf8_lossy(&r.body)),
    }
}

async fn state_on(c: &Client, id: &str) -> (String, u64) {
    let r = c.get(&format!("/v1/tasks/{id}")).await.unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let t = body(&r);
    (
        t["state"].as_str().unwrap().to_string(),
        t["attempt"].as_u64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_daemons_serve_one_queue_fence_across_each_other_and_a_killed_one_loses_nothing() {
    let url = support::pg::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemons = three(dir.path(), &url);
    let (a, b, c) = (
        daemons[0].admin.clone(),
        daemons[1].admin.clone(),
        daemons[2].admin.clone(),
    );
    let config = json!({"name": "q", "lease_ttl_s": LEASE_TTL.as_secs()});
    let r = a.post_json("/v1/queues", &config).await.unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));

    // Enqueued on each daemon, seen by every one.
    let mut made = BTreeSet::new();
    for (i, d) in [&a, &b, &c].iter().enumerate() {
        for j in 0..5 {
            let r = d.post_json("/v1/tasks", &spec(i * 5 + j)).await.unwrap();
            assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
            made.insert(body(&r)["task_id"].as_str().unwrap().to_string());
        }
    }
    for d in [&a, &b, &c] {
        let listed = body(&d.get("/v1/tasks?limit=100").await.unwrap());
        let ids: BTreeSet<String> = listed["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["task_id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids, made, "every daemon lists every task");
    }

    // Claims on two daemons take different tasks; a claim made on one is
    // submitted through another, once.
    let on_b = claim_on(&b).await.expect("a task for b");
    let on_c = claim_on(&c).await.expect("a task for c");
    assert_ne!(claimed_id(&on_b), claimed_id(&on_c));
    let r = submit(&a, &claimed_id(&on_c), &lease(&on_c), true, json!([])).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let again = submit(&b, &claimed_id(&on_c), &lease(&on_c), true, json!([])).await;
    assert_eq!(
        again.status, 200,
        "a resend on another daemon is the same receipt"
    );
    assert_eq!(body(&again)["receipt_sha256"], body(&r)["receipt_sha256"]);
    assert!(body(&r)["receipt_sha256"].is_string());

    // The worker handle minted on b works on c.
    let handle = on_b["handle"].as_str().unwrap().to_string();
    let prompt = c
        .with_bearer(&handle)
        .get("/v1/worker/prompt")
        .await
        .unwrap();
    assert_eq!(
        prompt.status,
        200,
        "{}",
        String::from_utf8_lossy(&prompt.body)
    );

    // The daemon that leads maintenance (the first to start) holds a
    // lease and is killed: nothing it acknowledged is lost, and its lease
    // is claimable again on the others once it lapses and a new leader
    // takes over.
    let held = claim_on(&a).await.expect("a task for a");
    let held_id = claimed_id(&held);
    let killed = daemons.remove(0);
    let killed_at = Instant::now();
    killed.kill();
    for id in &made {
        state_on(&b, id).await;
    }
    // Its lease (shorter than the leader's) has lapsed by the time another
    // daemon leads: back in the queue within the leader's TTL + 1 s.
    let deadline = killed_at + LEADER_TTL + Duration::from_secs(1);
    loop {
        let (state, attempt) = state_on(&c, &held_id).await;
        if state == "queued" {
            assert_eq!(attempt, 1, "the lapsed attempt counts");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the killed leader's lease was not ended within the leader TTL + 1 s: {state}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The lapsed lease is fenced on every daemon: a late submit under it
    // is refused, and the task's next claim has a new attempt.
    let late = submit(&b, &held_id, &lease(&held), true, json!([])).await;
    assert_eq!(late.status, 409, "{}", String::from_utf8_lossy(&late.body));
    assert_eq!(body(&late)["error"]["code"], "stale_lease");
    // Claimable again once the queue's backoff after the lapse is over.
    let until = Instant::now() + Duration::from_secs(30);
    let reclaimed = loop {
        match claim_on(&b).await {
            Some(next) if claimed_id(&next) == held_id => break next,
            Some(_) => {}
            None => {
                assert!(
                    Instant::now() < until,
                    "the killed daemon's task never became claimable again"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(reclaimed["lease"]["fence"], 2);
    let done = submit(&c, &held_id, &lease(&reclaimed), true, json!([])).await;
    assert_eq!(done.status, 201, "{}", String::from_utf8_lossy(&done.body));
    let receipts = body(&b.get(&format!("/v1/tasks/{held_id}")).await.unwrap());
    assert_eq!(receipts["state"], "succeeded");
    for d in daemons {
        d.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_daemon_streams_every_change_and_a_reader_resumes_on_another() {
    let url = support::pg::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let daemons = three(dir.path(), &url);
    let (a, b, c) = (
        daemons[0].admin.clone(),
        daemons[1].admin.clone(),
        daemons[2].admin.clone(),
    );
    let key = daemons[0].admin_key().to_string();
    let r = a
        .post_json("/v1/queues", &json!({"name": "q"}))
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));

    // A reader on b sees what a and c do, in the order it was done.
    let mut on_b = Stream::open(b.base(), &key, None).await;
    let first = body(&a.post_json("/v1/tasks", &spec(1)).await.unwrap())["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let claim = claim_on(&c).await.expect("the task for c");
    let r = submit(&a, &first, &lease(&claim), true, json!([])).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let seen = on_b
        .until(|e| e.data["task_id"] == first && e.data["state"] == "succeeded")
        .await;
    let states: Vec<&str> = seen
        .iter()
        .filter(|e| e.event == "task" && e.data["task_id"] == first)
        .map(|e| e.data["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["queued", "claimed", "succeeded"]);
    let id_of = |state: &str| {
        seen.iter()
            .find(|e| e.data["task_id"] == first && e.data["state"] == state)
            .and_then(|e| e.id.clone())
            .unwrap()
    };
    let (claimed, succeeded) = (id_of("claimed"), id_of("succeeded"));
    drop(on_b);

    // Its Last-Event-ID resumes on the two other daemons, with the same
    // ids, whether or not they were reading when it was sent.
    let second = body(&c.post_json("/v1/tasks", &spec(2)).await.unwrap())["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    for d in [&c, &a] {
        let mut resumed = Stream::open(d.base(), &key, Some(&claimed)).await;
        let next = resumed.next(10).await.expect("the event after the claim");
        assert_eq!(
            (next.data["task_id"].as_str(), next.data["state"].as_str()),
            (Some(first.as_str()), Some("succeeded")),
            "{next:?}"
        );
        assert_eq!(next.id.as_deref(), Some(succeeded.as_str()));
        let then = resumed.next(10).await.expect("the second task");
        assert_eq!(
            (then.data["task_id"].as_str(), then.data["state"].as_str()),
            (Some(second.as_str()), Some("queued")),
            "{then:?}"
        );
    }
    for d in daemons {
        d.kill();
    }
}

/// What one daemon's load loop was told.
#[derive(Default)]
struct Acked {
    enqueued: Vec<String>,
    /// (task, receipt) of each submit answered 201.
    submitted: Vec<(String, String)>,
}

/// Enqueues, claims and submits through `c` until `stop` is set or the
/// daemon stops answering; what it acknowledged.
async fn load(c: Client, n: usize, stop: Arc<AtomicBool>) -> Acked {
    let mut acked = Acked::default();
    let mut i = 0;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let Ok(r) = c.post_json("/v1/tasks", &spec(n * 100_000 + i)).await else {
            return acked;
        };
        if r.status == 201 {
            acked
                .enqueued
                .push(body(&r)["task_id"].as_str().unwrap().to_string());
        }
        let Ok(r) = c.post_json("/v1/queues/q/claim", &json!({})).await else {
            return acked;
        };
        if r.status != 200 {
            continue;
        }
        let claim = body(&r);
        let id = claimed_id(&claim);
        let sent = json!({"lease_id": lease(&claim), "ok": true, "outputs": []});
        let Ok(r) = c.post_json(&format!("/v1/tasks/{id}/submit"), &sent).await else {
            return acked;
        };
        if r.status == 201 {
            let receipt = body(&r)["receipt_sha256"].as_str().unwrap().to_string();
            acked.submitted.push((id, receipt));
        }
    }
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_under_load_on_three_loses_nothing_acknowledged_and_its_leases_come_back() {
    let url = support::pg::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemons = three(dir.path(), &url);
    let admin = daemons[0].admin.clone();
    let config = json!({"name": "q", "lease_ttl_s": LEASE_TTL.as_secs()});
    let r = admin.post_json("/v1/queues", &config).await.unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> = daemons
        .iter()
        .enumerate()
        .flat_map(|(n, d)| {
            let stop = stop.clone();
            (0..4).map(move |k| (n * 4 + k, d.admin.clone(), stop.clone()))
        })
        .map(|(n, c, stop)| tokio::spawn(load(c, n, stop)))
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The second daemon (not the leader: the first to start leads) dies
    // under load, holding whatever claims it made.
    let killed = daemons.remove(1);
    let killed_at = Instant::now();
    killed.kill();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::SeqCst);
    let mut acked = Acked::default();
    for l in loops {
        let a = l.await.unwrap();
        acked.enqueued.extend(a.enqueued);
        acked.submitted.extend(a.submitted);
    }
    assert!(
        acked.submitted.len() > 10,
        "the load did some work: {} submits",
        acked.submitted.len()
    );

    let survivor = daemons[1].admin.clone();
    for id in &acked.enqueued {
        state_on(&survivor, id).await;
    }
    // Each acknowledged submit is the task's one accepted receipt.
    let mut seen = BTreeSet::new();
    for (id, receipt) in &acked.submitted {
        assert!(seen.insert(id.clone()), "task {id} was submitted twice");
        let t = body(&survivor.get(&format!("/v1/tasks/{id}")).await.unwrap());
        assert_eq!(t["state"], "succeeded", "{t}");
        assert_eq!(
            t["receipts"],
            json!([receipt]),
            "one receipt, the acknowledged one"
        );
    }
    // The killed daemon's claims lapse and go back to the queue within the
    // lease TTL + 1 s (the leader lives).
    let deadline = killed_at + LEASE_TTL + Duration::from_secs(1);
    loop {
        let listed = body(
            &survivor
                .get("/v1/tasks?state=claimed&limit=1000")
                .await
                .unwrap(),
        );
        let claimed = listed["tasks"].as_array().unwrap().len();
        if claimed == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{claimed} claims of the killed daemon outlived their lease + 1 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for d in daemons {
        d.kill();
    }
}

/// A daemon on a fresh database, with its root under `dir` and queue
/// `q` provisioned; the database's URL.
async fn one_with_a_queue(dir: &Path) -> (String, DaemonProcess) {
    let url = support::pg::fresh_database().await;
    let a = DaemonProcess::spawn_shared(&dir.join("a"), &url);
    let r = a
        .admin
        .post_json("/v1/queues", &json!({"name": "q"}))
        .await
        .unwrap();
    assert_status!(r, 201);
    (url, a)
}

/// [`one_with_a_queue`], and a second daemon on the same database.
async fn two_with_a_queue(dir: &Path) -> (DaemonProcess, DaemonProcess) {
    let (url, a) = one_with_a_queue(dir).await;
    let b = DaemonProcess::spawn_shared_beside(&dir.join("b"), &url, &a);
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_staged_through_another_daemon_counts_for_the_contract_of_a_submit_here() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_with_a_queue(dir.path()).await;
    // Nouns are each root's own: the contract lives where the submit is
    // checked.
    let contract = json!({"contract": "design.v1", "directive": "Plan.",
                          "parts": [{"name": "plan.md", "required": true}]});
    let pin = support::put_noun(&a.admin, "work.contracts", "c", contract).await;
    let task = json!({
        "namespace": support::NS, "queue": "q", "kind": "verb.draft", "effect_class": "read",
        "producer_surface": "s", "brief": {"contract_ref": pin}
    });
    let r = a.admin.post_json("/v1/tasks", &task).await.unwrap();
    assert_status!(r, 201);
    // Claimed through a, which keeps the claim for its submit...
    let c = claim_on(&a.admin).await.expect("a task");
    let id = claimed_id(&c);
    // ...and the part staged through b.
    let handle = b.admin.with_bearer(c["handle"].as_str().unwrap());
    let r = handle
        .post_bytes("/v1/worker/artifact?name=plan.md", b"# Plan".to_vec())
        .await
        .unwrap();
    assert_status!(r, 200);
    let r = a
        .admin
        .post_json(
            &format!("/v1/tasks/{id}/submit"),
            &json!({"lease_id": lease(&c), "ok": true}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    assert_eq!(
        body(&r)["state"],
        "succeeded",
        "the contract saw the part staged through the other daemon: {}",
        String::from_utf8_lossy(&r.body)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_under_a_claim_made_elsewhere_is_decided_on_the_task_as_it_is_now() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_with_a_queue(dir.path()).await;
    let r = a.admin.post_json("/v1/tasks", &spec(0)).await.unwrap();
    assert_status!(r, 201);
    // Claimed through a (which keeps that claim), released and claimed
    // again through b: a's claim is stale, the new lease is b's.
    let first = claim_on(&a.admin).await.expect("a task");
    let id = claimed_id(&first);
    let r = b
        .admin
        .post_json(
            &format!("/v1/tasks/{id}/release"),
            &json!({"lease_id": lease(&first)}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    let second = claim_on(&b.admin).await.expect("the task again");
    assert_eq!(claimed_id(&second), id);
    let r = submit(&a.admin, &id, &lease(&second), true, json!([])).await;
    assert_status!(r, 201);
    assert_eq!(body(&r)["state"], "succeeded");
    let stale = submit(&a.admin, &id, &lease(&first), true, json!([])).await;
    assert_status!(stale, 409);
    assert_eq!(state_on(&b.admin, &id).await, ("succeeded".into(), 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_submits_through_a_daemon_share_commits_with_the_claims_they_ask_for() {
    let dir = tempfile::tempdir().unwrap();
    let (url, a) = one_with_a_queue(dir.path()).await;
    let items: Vec<Value> = (0..128).map(spec).collect();
    support::enqueue_batch(&a.admin, &items).await;
    let r = a
        .admin
        .post_json("/v1/queues/q/claim", &json!({"max": 64}))
        .await
        .unwrap();
    let claims = body(&r)["claims"].as_array().unwrap().clone();
    assert_eq!(claims.len(), 64);
    // Every submit at once; every other one claims the next task with it.
    let submits = claims.into_iter().enumerate().map(|(i, c)| {
        let admin = a.admin.clone();
        tokio::spawn(async move {
            let mut ask = json!({"lease_id": lease(&c), "ok": true});
            if i % 2 == 0 {
                ask["claim_next"] = json!({"queue": "q"});
            }
            let r = admin
                .post_json(&format!("/v1/tasks/{}/submit", claimed_id(&c)), &ask)
                .await
                .unwrap();
            assert_status!(r, 201);
            body(&r)["next"]["task"]["task_id"]
                .as_str()
                .map(String::from)
        })
    });
    let mut next = BTreeSet::new();
    for s in submits.collect::<Vec<_>>() {
        next.extend(s.await.unwrap());
    }
    assert_eq!(next.len(), 32, "each claim_next took a task of its own");
    let db = support::pg::connect(&url).await;
    let commits: i64 = db
        .query_one(
            "SELECT count(DISTINCT xid) FROM events WHERE from_state = 'claimed' AND to_state = 'succeeded'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        commits < 64,
        "64 submits took {commits} commits: none shared one"
    );
    let apart: i64 = db
        .query_one(
            "SELECT count(*) FROM events c WHERE c.from_state = 'queued' AND c.to_state = 'claimed' \
             AND NOT EXISTS (SELECT 1 FROM events d WHERE d.xid = c.xid AND d.to_state = 'succeeded') \
             AND c.xid > (SELECT min(xid) FROM events WHERE to_state = 'succeeded')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        apart, 0,
        "each next claim committed with the submits it followed"
    );
}
