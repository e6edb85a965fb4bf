//! A daemon whose queue database goes away (`serve --queue-url`, reached
//! through a TCP relay on loopback that this test cuts and restores):
//! `/healthz` answers 503 with the cause while the database cannot be
//! reached, task calls answer `503 queue_unavailable` instead of serving
//! from memory, and both recover by themselves once it is back.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::relay::Relay;
use support::{DaemonProcess, body};
use tessera::client::Client;

async fn health(c: &Client) -> (u16, Value) {
    let r = c.get("/healthz").await.unwrap();
    (r.status.as_u16(), body(&r))
}

async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "{what} within 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn spec() -> Value {
    json!({
        "namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read",
        "producer_surface": "s", "brief": {}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_database_answers_503_with_the_cause_and_recovers_without_a_restart() {
    let url = support::pg::fresh_database().await;
    let relay = Relay::start("127.0.0.1:0", &url).await;
    let relayed = relay.url(&url, "127.0.0.1");
    let dir = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn_shared(&dir.path().join("root"), &relayed);
    let admin = d.admin.clone();
    assert_eq!(health(&admin).await.0, 200);
    let r = admin
        .post_json("/v1/queues", &json!({"name": "q"}))
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = admin.post_json("/v1/tasks", &spec()).await.unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let task = body(&r)["task_id"].as_str().unwrap().to_string();

    relay.cut();
    until("/healthz answers 503", async || {
        health(&admin).await.0 == 503
    })
    .await;
    let (_, h) = health(&admin).await;
    assert_eq!(h["status"], "queue_unavailable", "{h}");
    assert!(
        h["queue"]
            .as_str()
            .is_some_and(|why| why.contains("queue database")),
        "the cause is named: {h}"
    );
    // Nothing is served from memory while the database is away.
    let r = admin.post_json("/v1/tasks", &spec()).await.unwrap();
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(body(&r)["error"]["code"], "queue_unavailable");
    let r = admin.get(&format!("/v1/tasks/{task}")).await.unwrap();
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    // Nor keys: a look at them older than a second could miss a
    // revocation made on another daemon, so no key is trusted on one.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    for route in ["/v1/keys", "/v1/nouns"] {
        let r = admin.get(route).await.unwrap();
        assert_eq!(
            r.status,
            503,
            "{route}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(body(&r)["error"]["code"], "queue_unavailable", "{route}");
    }

    relay.restore();
    until("/healthz answers 200 again", async || {
        health(&admin).await.0 == 200
    })
    .await;
    let r = admin.post_json("/v1/tasks", &spec()).await.unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = admin.get(&format!("/v1/tasks/{task}")).await.unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    d.kill();
}
