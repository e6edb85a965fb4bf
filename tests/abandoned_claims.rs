//! A long-poll claim whose client has gone must not take a task. A
//! `claim` tool call with `wait_ms` over `/mcp` or `tessera mcp` kept
//! waiting after its client closed the connection, cancelled the call
//! (`notifications/cancelled`) or exited, and claimed the next task that
//! arrived: it then sat claimed for a whole lease with nobody holding its
//! handle. Each transport here starts a long poll, abandons it, then
//! enqueues a task, which must stay queued with no attempt spent and go to
//! the next live claim as its first attempt.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use tessera::client::Client;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

/// How long a long poll here would wait, far past each check.
const WAIT_MS: u64 = 10_000;

/// How long an abandoned request is given to reach the daemon as gone.
const SETTLE: Duration = Duration::from_millis(400);

/// Issues a key that may enqueue, claim and submit on the team's queue;
/// returns its secret.
async fn worker_key(t: &Team) -> String {
    let scopes = json!([
        format!("namespace:{NS}"),
        format!("surface:{SURFACE}"),
        "nouns:read",
        "verbs:enqueue",
        "verbs:claim",
        "verbs:submit"
    ]);
    let grants = json!({
        "queues": ["work.external"],
        "kinds": ["verb.solve_draft"],
        "effect_classes": ["write-internal"],
        "scopes": scopes
    });
    let r =
        t.d.admin
            .post_json(
                "/v1/keys",
                &json!({"label": "long-poller", "grants": grants}),
            )
            .await
            .unwrap();
    assert_status!(r, 201);
    body(&r)["secret"].as_str().unwrap().to_string()
}

/// Sends one HTTP/1.1 request on a fresh connection, waits until the
/// daemon is long-polling on it, then closes the connection unanswered.
async fn send_then_close(base: &str, secret: &str, method: &str, path: &str, sent: &Value) {
    let addr = base.trim_start_matches("http://");
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let sent = sent.to_string();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {secret}\r\n\
         content-type: application/json\r\naccept: application/json, text/event-stream\r\n\
         mcp-protocol-version: 2025-11-25\r\ncontent-length: {}\r\n\r\n",
        sent.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(sent.as_bytes()).await.unwrap();
    tokio::time::sleep(SETTLE).await;
    let mut got = [0u8; 1];
    let answered = tokio::time::timeout(Duration::ZERO, conn.peek(&mut got)).await;
    assert!(
        answered.is_err(),
        "the daemon answered before the request was abandoned"
    );
    drop(conn);
    tokio::time::sleep(SETTLE).await;
}

/// Enqueues a task now that a long poll was abandoned: it stays queued with
/// no attempt spent, then the next live claim takes it as attempt 1.
async fn untaken(c: &Client) {
    let id = enqueue(c, &spec("verb.solve_draft", json!({"after": "abandoned"}))).await;
    for _ in 0..6 {
        let view = task(c, &id).await;
        assert_eq!(
            (&view["state"], &view["attempt"]),
            (&json!("queued"), &json!(0)),
            "an abandoned long poll took the task: {view}"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let live = claim(c, "work.external").await.expect("the task");
    assert_eq!(claimed_id(&live), id);
    assert_eq!(live["lease"]["fence"], json!(1), "{live}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_route_long_poll_whose_client_closed_takes_nothing() {
    let t = Team::start().await;
    let secret = worker_key(&t).await;
    let wait = json!({"wait_ms": WAIT_MS});
    let path = "/v1/queues/work.external/claim";
    send_then_close(t.d.admin.base(), &secret, "POST", path, &wait).await;
    untaken(&t.d.client(&secret)).await;

    // With `max`, the same.
    let wait = json!({"wait_ms": WAIT_MS, "max": 5});
    send_then_close(t.d.admin.base(), &secret, "POST", path, &wait).await;
    untaken(&t.d.client(&secret)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_submit_s_claim_next_whose_client_closed_takes_nothing() {
    let t = Team::start().await;
    let secret = worker_key(&t).await;
    let c = t.d.client(&secret);
    let first = enqueue(&c, &spec("verb.solve_draft", json!({"n": 1}))).await;
    let got = claim(&c, "work.external").await.expect("the task");
    let submit = json!({
        "lease_id": lease(&got), "ok": true, "outputs": [],
        "claim_next": {"queue": "work.external", "wait_ms": WAIT_MS}
    });
    let path = format!("/v1/tasks/{first}/submit");
    send_then_close(t.d.admin.base(), &secret, "POST", &path, &submit).await;
    // The submit itself was made before the wait; only the claim is not.
    assert_eq!(task(&c, &first).await["state"], json!("succeeded"));
    untaken(&c).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_claim_whose_connection_closed_takes_nothing() {
    let t = Team::start().await;
    let secret = worker_key(&t).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "claim", "arguments": {"queue": "work.external", "wait_ms": WAIT_MS}
    }});
    send_then_close(t.d.admin.base(), &secret, "POST", "/mcp", &call).await;
    untaken(&t.d.client(&secret)).await;
}

/// `tessera mcp` with `key`, initialized, with a `claim` of `wait_ms`
/// sent as request 2 and waiting.
async fn stdio_claiming(base: &str, key: &str) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["mcp", "--daemon", base])
        .env("TESSERA_KEY", key)
        .env_remove("TESSERA_HANDLE")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn tessera mcp");
    let stdin = child.stdin.as_mut().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "tessera-test", "version": "1"}
    }});
    stdin
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    let mut lines = BufReader::new(child.stdout.as_mut().unwrap()).lines();
    let answer = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("initialized in time")
        .unwrap()
        .expect("an answer");
    assert!(answer.contains("\"serverInfo\""), "{answer}");
    let claim = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "claim", "arguments": {"queue": "work.external", "wait_ms": WAIT_MS}
    }});
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let stdin = child.stdin.as_mut().unwrap();
    stdin
        .write_all(format!("{initialized}\n{claim}\n").as_bytes())
        .await
        .unwrap();
    stdin.flush().await.unwrap();
    tokio::time::sleep(SETTLE).await;
    child
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stdio_claim_the_client_cancelled_takes_nothing() {
    let t = Team::start().await;
    let secret = worker_key(&t).await;
    let mut child = stdio_claiming(t.d.admin.base(), &secret).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "the agent moved on"}});
    let stdin = child.stdin.as_mut().unwrap();
    stdin
        .write_all(format!("{cancel}\n").as_bytes())
        .await
        .unwrap();
    stdin.flush().await.unwrap();
    tokio::time::sleep(SETTLE).await;
    // The session goes on; the cancelled claim took nothing.
    untaken(&t.d.client(&secret)).await;
    drop(child.stdin.take());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("tessera mcp exits when stdin closes")
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stdio_claim_whose_client_exited_takes_nothing() {
    let t = Team::start().await;
    let secret = worker_key(&t).await;
    let mut child = stdio_claiming(t.d.admin.base(), &secret).await;
    // The client exits: both ends of its pipes close.
    drop(child.stdin.take());
    drop(child.stdout.take());
    tokio::time::sleep(SETTLE).await;
    untaken(&t.d.client(&secret)).await;
    let exited = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    assert!(
        exited.is_ok(),
        "tessera mcp still runs after its client left"
    );
}
