//! A daemon partitioned from the queue database while it leads
//! maintenance and holds a lease: it runs in a network namespace of its
//! own whose link to the database this test takes down (packets go
//! unanswered, nothing is refused), or, where the test cannot make a
//! namespace, behind a relay on loopback that stalls. The others take
//! over maintenance and end its lapsed lease within the leader's TTL and
//! a second, and a worker on them finishes the task; the partitioned
//! daemon's `/healthz` answers 503 within seconds instead of hanging, and
//! once the link is back its late submit under the lapsed lease is
//! refused, the task keeping the one receipt it got.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::netns::Netns;
use support::relay::Relay;
use support::{DaemonProcess, body, claimed_id, lease, submit};
use tessera::client::Client;

/// The leader's lease row lasts this long unless renewed
/// (`pg::shared::LEADER_TTL`).
const LEADER_TTL: Duration = Duration::from_secs(5);

/// A task's lease in this test.
const LEASE_TTL: Duration = Duration::from_secs(2);

fn spec() -> Value {
    json!({
        "namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read",
        "producer_surface": "s", "brief": {}
    })
}

async fn state_on(c: &Client, id: &str) -> (String, u64) {
    let t = body(&c.get(&format!("/v1/tasks/{id}")).await.unwrap());
    (
        t["state"].as_str().unwrap().to_string(),
        t["attempt"].as_u64().unwrap(),
    )
}

/// How the partitioned daemon is cut from the database.
enum Partition {
    /// Its namespace's link to the database goes down.
    Link(Netns),
    /// Its relay on loopback stalls.
    Stall,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_is_replaced_its_lease_ends_and_its_late_submit_is_refused() {
    let url = support::pg::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let (partition, bind, listen) = match Netns::create() {
        Some(ns) => {
            let (bind, listen) = (ns.db_host.clone(), format!("{}:0", ns.api_ns));
            (Partition::Link(ns), bind, listen)
        }
        None => {
            eprintln!("cannot make a network namespace here; partitioning on loopback");
            (Partition::Stall, "127.0.0.1".into(), "127.0.0.1:0".into())
        }
    };
    let relay = Relay::start(&format!("{bind}:0"), &url).await;
    let wrap: Vec<&str> = match &partition {
        Partition::Link(ns) => ns.wrap().to_vec(),
        Partition::Stall => Vec::new(),
    };
    // The first to start leads maintenance.
    let p = DaemonProcess::spawn_shared_at(
        &dir.path().join("p"),
        &relay.url(&url, &bind),
        None,
        &wrap,
        &listen,
    );
    let others: Vec<DaemonProcess> = ["a", "b"]
        .iter()
        .map(|n| DaemonProcess::spawn_shared_beside(&dir.path().join(n), &url, &p))
        .collect();
    let (on_p, a, b) = (
        p.admin.clone(),
        others[0].admin.clone(),
        others[1].admin.clone(),
    );
    let config = json!({"name": "q", "lease_ttl_s": LEASE_TTL.as_secs()});
    let r = a.post_json("/v1/queues", &config).await.unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = a.post_json("/v1/tasks", &spec()).await.unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let id = body(&r)["task_id"].as_str().unwrap().to_string();
    let r = on_p
        .post_json("/v1/queues/q/claim", &json!({}))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let held = body(&r);
    assert_eq!(claimed_id(&held), id);
    assert_eq!(on_p.get("/healthz").await.unwrap().status, 200);

    let cut_at = Instant::now();
    match &partition {
        Partition::Link(ns) => ns.cut(),
        Partition::Stall => relay.stall(),
    }
    // Its late submit, sent during the partition, waits or fails; it is
    // never accepted.
    let late = {
        let (on_p, id, lease) = (on_p.clone(), id.clone(), lease(&held));
        tokio::spawn(async move { submit(&on_p, &id, &lease, true, json!([])).await })
    };
    // It says it cannot reach the database within seconds.
    let asked = Instant::now();
    let h = on_p.get("/healthz").await.unwrap();
    assert_eq!(h.status, 503, "{}", String::from_utf8_lossy(&h.body));
    assert!(
        asked.elapsed() < Duration::from_secs(6),
        "/healthz took {:?} to answer",
        asked.elapsed()
    );

    // The others take maintenance over and end its lease, which lapsed
    // meanwhile (it is shorter), within the leader's TTL and a second.
    let deadline = cut_at + LEADER_TTL + Duration::from_secs(1);
    loop {
        let (state, attempt) = state_on(&a, &id).await;
        if state == "queued" {
            assert_eq!(attempt, 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the partitioned leader's lease was not ended within the leader TTL + 1 s: {state}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A worker on another daemon finishes it (once the queue's backoff
    // after the lapse is over).
    let until = Instant::now() + Duration::from_secs(30);
    let again = loop {
        let r = b.post_json("/v1/queues/q/claim", &json!({})).await.unwrap();
        if r.status == 200 {
            break body(&r);
        }
        assert!(Instant::now() < until, "the task never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(claimed_id(&again), id);
    assert_eq!(again["lease"]["fence"], 2);
    let done = submit(&b, &id, &lease(&again), true, json!([])).await;
    assert_eq!(done.status, 201, "{}", String::from_utf8_lossy(&done.body));
    let receipt = body(&done)["receipt_sha256"].clone();

    match &partition {
        Partition::Link(ns) => ns.heal(),
        Partition::Stall => relay.restore(),
    }
    let sent = late.await.unwrap();
    assert!(
        [409, 503].contains(&sent.status.as_u16()),
        "the submit sent during the partition: {} {}",
        sent.status,
        String::from_utf8_lossy(&sent.body)
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while on_p.get("/healthz").await.unwrap().status != 200 {
        assert!(
            Instant::now() < deadline,
            "the partitioned daemon never recovered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = submit(&on_p, &id, &lease(&held), true, json!([])).await;
    assert_eq!(
        after.status,
        409,
        "{}",
        String::from_utf8_lossy(&after.body)
    );
    assert_eq!(body(&after)["error"]["code"], "stale_lease");
    for d in [&on_p, &a, &b] {
        let t = body(&d.get(&format!("/v1/tasks/{id}")).await.unwrap());
        assert_eq!(t["state"], "succeeded", "{t}");
        assert_eq!(t["receipts"], json!([receipt]), "one receipt: {t}");
    }
    p.kill();
    for d in others {
        d.kill();
    }
}
