//! Worker credentials over real HTTP: handles cannot be guessed (130 bits,
//! and guessing is throttled), a dead credential looks like any other,
//! the claimant's current grants bound its worker, and calls on one task
//! take turns so the ctx-dir holds exactly the winning submit.
//!
//! What broke: handles were 32 bits and found by guessing; a claim-only
//! key's worker completed a task; parts were staged after the claimant was
//! revoked; parallel submits left a refused body in `<step>.md`; a stale
//! submit deleted the current ctx-dir; a part staged during a submit was
//! acknowledged and never folded; the last admin key could be revoked.

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use tessera::auth::throttle::Budget;
use tessera::client::{Client, Reply};
use tessera::config::Config;
use tessera::worker::front_matter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Every test here finishes within this, or fails.
const BOUND: Duration = Duration::from_secs(90);

async fn bounded<F: std::future::Future<Output = ()>>(f: F) {
    tokio::time::timeout(BOUND, f)
        .await
        .expect("the test finished in time");
}

/// Budgets so large that no test is throttled unless it means to be.
fn roomy(c: &mut Config) {
    let lots = Budget {
        burst: 100_000,
        per_second: 100_000,
    };
    c.limits.worker_failures_per_peer = lots;
    c.limits.worker_failures_overall = lots;
}

/// A claim's handle and token as clients.
struct Worker {
    id: String,
    handle: Client,
    token: Client,
    claim: Value,
}

fn worker_of(d: &TestDaemon, c: Value) -> Worker {
    Worker {
        id: claimed_id(&c),
        handle: d.client(c["handle"].as_str().unwrap()),
        token: d.client(c["token"].as_str().unwrap()),
        claim: c,
    }
}

async fn claim_as(t: &Team, key: &Client, queue: &str) -> Worker {
    worker_of(&t.d, claim(key, queue).await.expect("a task to claim"))
}

/// Issues a key with the team worker's queues, kinds and effect classes,
/// the team's namespace and surface, and `scopes` besides.
async fn team_key(t: &Team, scopes: &[&str], expires_at: Option<String>) -> (Client, String) {
    let mut all = vec![
        format!("namespace:{NS}"),
        format!("surface:{SURFACE}"),
        "nouns:read".into(),
    ];
    all.extend(scopes.iter().map(|s| s.to_string()));
    let r =
        t.d.admin
            .post_json(
                "/v1/keys",
                &json!({"label": "extra", "expires_at": expires_at, "grants": {
                    "queues": ["work.external", "work.short"],
                    "kinds": ["verb.solve_draft", "verb.verify_gate", "verb.compute"],
                    "effect_classes": ["read", "write-internal"],
                    "scopes": all,
                }}),
            )
            .await
            .unwrap();
    assert_status!(r, 201);
    let b = body(&r);
    (
        t.d.client(b["secret"].as_str().unwrap()),
        b["key_id"].as_str().unwrap().to_string(),
    )
}

async fn stage(c: &Client, name: &str, bytes: &[u8]) -> Reply {
    c.post_bytes(&format!("/v1/worker/artifact?name={name}"), bytes.to_vec())
        .await
        .unwrap()
}

async fn submit_body(c: &Client, bytes: &[u8]) -> Reply {
    c.post_bytes("/v1/worker/submit", bytes.to_vec())
        .await
        .unwrap()
}

fn ctx_dir(root: &Path, id: &str) -> PathBuf {
    root.join("workspace")
        .join(NS)
        .join("tasks")
        .join(id)
        .join("ctx")
}

/// The ctx-dir's files and their bytes.
fn ctx_files(root: &Path, id: &str) -> Vec<(String, Vec<u8>)> {
    let dir = ctx_dir(root, id);
    files_under(&dir)
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(dir.join(&f)).unwrap();
            (f, bytes)
        })
        .collect()
}

/// The body of `<step>.md`, checked against its front matter.
fn step_body(root: &Path, id: &str) -> Vec<u8> {
    let md = std::fs::read(ctx_dir(root, id).join("solve_draft.md")).unwrap();
    let (h, b) = front_matter::decode(&md).expect("front matter");
    assert_eq!(h.sha256, tessera::store::Sha256::of(b).hex());
    b.to_vec()
}

async fn receipt(c: &Client, id: &str) -> Value {
    let r = body(&c.get(&format!("/v1/tasks/{id}/receipts")).await.unwrap());
    assert_eq!(
        r["receipts"].as_array().unwrap().len(),
        1,
        "one receipt: {r}"
    );
    r["receipts"][0]["receipt"].clone()
}

/// A worker call whose head is on the wire but whose body is not, so the
/// daemon has checked its credential on arrival and waits for the rest.
struct Held {
    stream: TcpStream,
    body: Vec<u8>,
}

impl Held {
    async fn post(d: &TestDaemon, path: &str, bearer: &str, body: &[u8]) -> Held {
        let addr = d.admin.base().trim_start_matches("http://").to_string();
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {bearer}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        Held {
            stream,
            body: body.to_vec(),
        }
    }

    /// Sends the body and reads the answer: the status and the error code.
    async fn finish(mut self) -> (u16, Option<String>) {
        self.stream.write_all(&self.body).await.unwrap();
        let mut raw = Vec::new();
        self.stream.read_to_end(&mut raw).await.unwrap();
        let text = String::from_utf8_lossy(&raw);
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line in {text:?}"));
        let payload = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let code = serde_json::from_str::<Value>(payload)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
        (status, code)
    }
}

/// Long enough for the daemon to have read the heads sent before it.
async fn let_heads_arrive() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn handles_are_26_base32_characters_and_a_thousand_claims_never_repeat_one() {
    bounded(async {
        let t = Team::start().await;
        let items: Vec<Value> = (0..1000)
            .map(|_| spec("verb.solve_draft", json!({})))
            .collect();
        enqueue_batch(&t.requester, &items).await;
        let mut claimers = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let w = t.worker.clone();
            claimers.spawn(async move {
                let mut handles = Vec::new();
                while let Some(c) = claim(&w, "work.external").await {
                    handles.push(c["handle"].as_str().unwrap().to_string());
                }
                handles
            });
        }
        let handles: Vec<String> = claimers.join_all().await.concat();
        assert_eq!(handles.len(), 1000);
        let distinct: BTreeSet<&String> = handles.iter().collect();
        assert_eq!(distinct.len(), 1000, "a handle repeated");
        let mut letters = BTreeSet::new();
        for h in &handles {
            let rest = h.strip_prefix("wh-").unwrap_or_else(|| panic!("{h}"));
            assert_eq!(rest.len(), 26, "{h}");
            assert!(
                rest.bytes()
                    .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b)),
                "{h}"
            );
            letters.extend(rest.bytes());
        }
        assert_eq!(
            letters.len(),
            32,
            "every base32 letter turns up: each character is uniform"
        );
    })
    .await;
}

/// A well-formed handle that no claim minted.
fn guess(i: usize) -> String {
    format!("wh-{}{}", "a".repeat(25), (b'b' + i as u8) as char)
}

#[tokio::test(flavor = "multi_thread")]
async fn guessing_from_one_address_is_refused_with_retry_after_and_a_live_worker_is_still_served() {
    bounded(async {
        let t = Team::start_with(|c| {
            c.limits.worker_failures_per_peer = Budget {
                burst: 3,
                per_second: 1,
            };
        })
        .await;
        enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
        let live = claim_as(&t, &t.worker, "work.external").await;
        let anon = t.d.admin.anonymous();
        for i in 0..3 {
            let r = anon.with_bearer(&guess(i)).get("/v1/worker/prompt").await;
            assert_status!(r.unwrap(), 401, "unauthenticated");
        }
        let refused = anon
            .with_bearer(&guess(3))
            .get("/v1/worker/prompt")
            .await
            .unwrap();
        assert_status!(refused, 429, "too_many_failures");
        let wait: u64 = refused
            .header("retry-after")
            .and_then(|v| v.parse().ok())
            .expect("a Retry-After in seconds");
        assert!((1..=2).contains(&wait), "Retry-After {wait}");
        // A valid credential on the same address is served all the same,
        // and spends nothing the guesser could use.
        assert_status!(live.handle.get("/v1/worker/prompt").await.unwrap(), 200);
        let r = anon.with_bearer(&guess(4)).get("/v1/worker/prompt").await;
        assert_status!(r.unwrap(), 429, "too_many_failures");
        // Keys are not throttled: the claimant still reads its task.
        assert_eq!(task(&t.worker, &live.id).await["state"], json!("claimed"));
        tokio::time::sleep(Duration::from_secs(wait)).await;
        assert_status!(
            anon.with_bearer(&guess(5))
                .get("/v1/worker/prompt")
                .await
                .unwrap(),
            401,
            "unauthenticated"
        );
        assert_status!(submit_body(&live.handle, b"done").await, 201);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_overall_budget_refuses_once_everyone_together_has_spent_it() {
    bounded(async {
        let t = Team::start_with(|c| {
            c.limits.worker_failures_overall = Budget {
                burst: 2,
                per_second: 1,
            };
        })
        .await;
        let anon = t.d.admin.anonymous();
        for i in 0..2 {
            let r = anon.with_bearer(&guess(i)).get("/v1/worker/prompt").await;
            assert_status!(r.unwrap(), 401, "unauthenticated");
        }
        let r = anon.get("/v1/worker/prompt").await.unwrap();
        assert_status!(r, 429, "too_many_failures");
        assert!(r.header("retry-after").is_some());
    })
    .await;
}

/// A request with `bearer` from the loopback source address `from` (any
/// of 127.0.0.0/8 reaches the daemon on 127.0.0.1); its status, and for
/// `/mcp` the status its tool call met (a tool error carries it).
async fn status_from(
    from: std::net::Ipv4Addr,
    base: &str,
    method: &str,
    path: &str,
    bearer: &str,
    body: &str,
) -> u16 {
    let addr: std::net::SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((from, 0).into()).unwrap();
    let mut s = socket.connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {bearer}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if path != "/mcp" {
        return status;
    }
    let (_, b) = text.split_once("\r\n\r\n").expect("a body");
    // One chunk of a chunked body: the JSON between its size lines.
    let json = &b[b.find('{').expect("JSON")..=b.rfind('}').expect("JSON")];
    let answer: Value = serde_json::from_str(json).expect("a JSON-RPC answer");
    let result = &answer["result"];
    assert!(result.is_object(), "not a tool result: {answer}");
    if result["isError"] == json!(true) {
        return result["structuredContent"]["status"].as_u64().unwrap_or(0) as u16;
    }
    status
}

/// Guessers on 100 addresses keep the overall failure budget spent, and
/// a genuine worker on an address of its own, or on a guesser's, is
/// served on every call, over the worker route and over `/mcp`; the
/// guesses themselves are refused with 429.
#[tokio::test(flavor = "multi_thread")]
async fn a_genuine_worker_is_served_while_a_hundred_addresses_guess() {
    bounded(async {
        let t = Team::start().await;
        enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
        let live = claim_as(&t, &t.worker, "work.external").await;
        let handle = live.claim["handle"].as_str().unwrap().to_string();
        let base = t.d.admin.base().to_string();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let refused = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let guessers: Vec<_> = (0..100u8)
            .map(|i| {
                let (base, stop, refused) = (base.clone(), stop.clone(), refused.clone());
                tokio::spawn(async move {
                    let from = std::net::Ipv4Addr::new(127, 0, 1, i + 1);
                    let mut n = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let got = status_from(from, &base, "GET", "/v1/worker/prompt", &guess(n % 20), "").await;
                        assert!(got == 401 || got == 429, "a guess answered {got}");
                        if got == 429 {
                            refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        n += 1;
                    }
                })
            })
            .collect();
        let mcp = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_prompt", "arguments": {}}}).to_string();
        let mut answers = Vec::new();
        for i in 0..60u8 {
            let from = std::net::Ipv4Addr::new(127, 0, if i % 2 == 0 { 2 } else { 1 }, if i % 2 == 0 { 1 } else { i / 2 + 1 });
            let (method, path, b) = match i % 3 {
                0 => ("GET", "/v1/worker/prompt", ""),
                1 => ("POST", "/v1/worker/heartbeat", "{}"),
                _ => ("POST", "/mcp", mcp.as_str()),
            };
            answers.push((from, path, status_from(from, &base, method, path, &handle, b).await));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for g in guessers {
            g.await.unwrap();
        }
        assert!(refused.load(std::sync::atomic::Ordering::Relaxed) > 0, "the guessers spent the budget");
        let failed: Vec<_> = answers.iter().filter(|a| a.2 != 200).collect();
        assert!(failed.is_empty(), "the live worker was refused: {failed:?}");
    })
    .await;
}

/// An agent that keeps retrying its own finished handle spends only its
/// own failures: another worker behind the same address is served.
#[tokio::test(flavor = "multi_thread")]
async fn a_finished_handle_retried_does_not_lock_out_its_neighbours() {
    bounded(async {
        let t = Team::start_with(|c| {
            c.limits.worker_failures_per_peer = Budget {
                burst: 3,
                per_second: 1,
            };
        })
        .await;
        enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
        enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
        let done = claim_as(&t, &t.worker, "work.external").await;
        let neighbour = claim_as(&t, &t.worker, "work.external").await;
        assert_status!(submit_body(&done.handle, b"done").await, 201);
        let mut seen = Vec::new();
        for _ in 0..10 {
            seen.push(
                done.handle
                    .get("/v1/worker/prompt")
                    .await
                    .unwrap()
                    .status
                    .as_u16(),
            );
        }
        assert_eq!(&seen[..3], [401, 401, 401]);
        assert!(seen[3..].iter().all(|s| *s == 429), "{seen:?}");
        for _ in 0..10 {
            assert_status!(
                neighbour.handle.get("/v1/worker/prompt").await.unwrap(),
                200
            );
        }
        assert_status!(submit_body(&neighbour.handle, b"done").await, 201);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_dead_credential_gets_the_same_401_byte_for_byte() {
    bounded(async {
        let t = Team::start_with(roomy).await;
        let anon = t.d.admin.anonymous();
        let mut dead: Vec<(&str, Client)> = vec![
            ("no credential", anon.clone()),
            ("unknown handle", anon.with_bearer(&guess(0))),
            ("garbage", anon.with_bearer("garbage")),
            ("short handle", anon.with_bearer("wh-12345678")),
            ("a key", t.worker.clone()),
        ];

        // A task that succeeded: its handle and token, and a forged token.
        enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
        let done = claim_as(&t, &t.worker, "work.external").await;
        assert_status!(submit_body(&done.handle, b"finished").await, 201);
        let token = done.claim["token"].as_str().unwrap().to_string();
        let (head, tag) = token.rsplit_once('.').unwrap();
        let flipped = if tag.starts_with('A') { "B" } else { "A" };
        let forged = format!("{head}.{flipped}{}", &tag[1..]);
        let payload = token.split('.').nth(1).unwrap();
        let other_payload = base64_json(&json!({
            "task_id": "t999", "attempt": 1, "role": "worker",
            "verbs": ["prompt", "artifact", "submit"], "exp": 4_000_000_000i64,
        }));
        let transplanted = token.replace(payload, &other_payload);
        dead.extend([
            ("a finished attempt's handle", done.handle.clone()),
            ("a finished attempt's token", done.token.clone()),
            ("a forged tag", anon.with_bearer(&forged)),
            (
                "another payload under the tag",
                anon.with_bearer(&transplanted),
            ),
        ]);

        // An attempt that was released; the task moved on to attempt 2.
        let released_id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
        let released = claim_as(&t, &t.worker, "work.external").await;
        assert_eq!(released.id, released_id);
        let r = t
            .worker
            .post_json(
                &format!("/v1/tasks/{released_id}/release"),
                &json!({"lease_id": lease(&released.claim)}),
            )
            .await
            .unwrap();
        assert_status!(r, 200);
        let again = claim_as(&t, &t.worker, "work.external").await;
        assert_eq!(again.id, released_id);
        dead.push(("an attempt the task moved on from", released.handle.clone()));

        // A revoked claimant.
        let (revoked_key, revoked_id) = team_key(&t, &["verbs:claim", "verbs:submit"], None).await;
        enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
        let of_revoked = claim_as(&t, &revoked_key, "work.external").await;
        assert_status!(
            t.d.admin
                .delete(&format!("/v1/keys/{revoked_id}"))
                .await
                .unwrap(),
            200
        );
        dead.push(("a revoked claimant's handle", of_revoked.handle.clone()));
        dead.push(("a revoked claimant's token", of_revoked.token.clone()));

        // A lapsed lease (1 s) and an expired claimant (2 s).
        let mut short = spec("verb.solve_draft", json!({}));
        short["queue"] = json!("work.short");
        enqueue(&t.requester, &short).await;
        let lapsed = claim_as(&t, &t.worker, "work.short").await;
        let expiry = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(2);
        let (expiring_key, _) = team_key(
            &t,
            &["verbs:claim", "verbs:submit"],
            Some(expiry.to_string()),
        )
        .await;
        enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
        let of_expired = claim_as(&t, &expiring_key, "work.external").await;
        assert_status!(
            of_expired.handle.get("/v1/worker/prompt").await.unwrap(),
            200
        );
        tokio::time::sleep(Duration::from_millis(2100)).await;
        dead.push(("a lapsed lease", lapsed.handle.clone()));
        dead.push(("an expired claimant", of_expired.handle.clone()));

        let first = anon.get("/v1/worker/prompt").await.unwrap();
        assert_status!(first, 401, "unauthenticated");
        for (what, c) in &dead {
            for r in [
                c.get("/v1/worker/prompt").await.unwrap(),
                stage(c, "p.md", b"x").await,
                submit_body(c, b"x").await,
                c.get(&format!("/v1/worker/prompt?task_id={}", again.id))
                    .await
                    .unwrap(),
            ] {
                assert_eq!(
                    (r.status.as_u16(), &r.body),
                    (401, &first.body),
                    "{what}: {}",
                    String::from_utf8_lossy(&r.body)
                );
            }
        }
        let malformed = anon
            .send(
                http::Method::GET,
                "/v1/worker/prompt",
                None,
                &[("authorization", "Basic eHl6")],
            )
            .await
            .unwrap();
        assert_eq!(
            (malformed.status.as_u16(), &malformed.body),
            (401, &first.body)
        );
        assert!(
            !ctx_dir(t.d.root(), &of_revoked.id).exists()
                && !ctx_dir(t.d.root(), &lapsed.id).exists()
                && !ctx_dir(t.d.root(), &released_id).exists(),
            "no dead credential wrote a ctx-dir"
        );
    })
    .await;
}

fn base64_json(v: &Value) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_only_keys_worker_cannot_submit_and_nothing_is_written() {
    bounded(async {
        let t = Team::start_with(roomy).await;
        let (claim_only, _) = team_key(&t, &["verbs:claim"], None).await;
        let id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
        let w = claim_as(&t, &claim_only, "work.external").await;
        assert_eq!(w.id, id);
        assert_status!(w.handle.get("/v1/worker/prompt").await.unwrap(), 200);
        assert_status!(stage(&w.handle, "plan.md", b"a plan").await, 200);
        let objects = files_under(&t.d.root().join("objects"));
        for c in [&w.handle, &w.token] {
            assert_status!(submit_body(c, b"the result").await, 403, "forbidden");
        }
        let seen = task(&t.requester, &id).await;
        assert_eq!(
            (seen["state"].clone(), seen["receipts"].clone()),
            (json!("claimed"), json!([]))
        );
        assert!(!ctx_dir(t.d.root(), &id).exists(), "no ctx-dir");
        assert_eq!(
            files_under(&t.d.root().join("objects")),
            objects,
            "not even the body was stored"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_claimants_worker_cannot_stage_or_submit() {
    bounded(async {
        let t = Team::start_with(roomy).await;
        let (key, key_id) = team_key(&t, &["verbs:claim", "verbs:submit"], None).await;
        let id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
        let w = claim_as(&t, &key, "work.external").await;
        assert_status!(stage(&w.handle, "before.md", b"kept").await, 200);
        assert_status!(
            t.d.admin
                .delete(&format!("/v1/keys/{key_id}"))
                .await
                .unwrap(),
            200
        );
        for c in [&w.handle, &w.token] {
            assert_status!(stage(c, "after.md", b"late").await, 401, "unauthenticated");
            assert_status!(submit_body(c, b"late").await, 401, "unauthenticated");
        }
        let seen = task(&t.requester, &id).await;
        assert_eq!(seen["staged"].as_object().unwrap().len(), 1, "{seen}");
        assert!(seen["staged"].get("before.md").is_some());
        assert!(!ctx_dir(t.d.root(), &id).exists());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn eight_parallel_submits_on_one_attempt_one_wins_and_the_ctx_dir_holds_its_body() {
    bounded(async {
        let t = Team::start_with(roomy).await;
        for round in 0..3 {
            let id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
            let w = claim_as(&t, &t.worker, "work.external").await;
            assert_eq!(w.id, id);
            assert_status!(stage(&w.handle, "part.md", b"the part").await, 200);
            let handle = w.claim["handle"].as_str().unwrap();
            let bodies: Vec<Vec<u8>> = (0..8)
                .map(|i| {
                    format!("round {round}, submit {i}\n")
                        .repeat(100 * (i + 1))
                        .into_bytes()
                })
                .collect();
            let mut held = Vec::new();
            for b in &bodies {
                held.push(Held::post(&t.d, "/v1/worker/submit", handle, b).await);
            }
            let_heads_arrive().await;
            let answers = futures_all(held.into_iter().map(Held::finish).collect()).await;
            let winners: Vec<usize> = (0..8).filter(|i| answers[*i].0 == 201).collect();
            assert_eq!(winners.len(), 1, "round {round}: {answers:?}");
            for (i, a) in answers.iter().enumerate() {
                if i != winners[0] {
                    assert_eq!(
                        (a.0, a.1.as_deref()),
                        (409, Some("already_submitted")),
                        "round {round}, submit {i}"
                    );
                }
            }
            let won = &bodies[winners[0]];
            assert_eq!(&step_body(t.d.root(), &id), won, "round {round}");
            assert_eq!(
                ctx_files(t.d.root(), &id)
                    .into_iter()
                    .map(|(f, _)| f)
                    .collect::<Vec<_>>(),
                [".tessera-owner", "part.md", "solve_draft.md"]
            );
            let rec = receipt(&t.requester, &id).await;
            assert_eq!(rec["projection"]["status"], json!("written"));
            assert_eq!(
                rec["out"]["sha256"],
                json!(tessera::store::Sha256::of(won).hex())
            );
            assert!(
                files_under(&t.d.root().join("tmp")).is_empty(),
                "no refused submit left a directory behind"
            );
        }
    })
    .await;
}

/// Runs the futures at once and returns their outputs in order.
async fn futures_all<T: Send + 'static>(
    futs: Vec<impl std::future::Future<Output = T> + Send + 'static>,
) -> Vec<T> {
    let handles: Vec<_> = futs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("the call task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_attempts_submit_after_the_reclaim_is_401_and_the_ctx_dir_is_untouched() {
    bounded(async {
        let t = Team::start_with(roomy).await;
        let mut s = spec("verb.solve_draft", json!({}));
        s["queue"] = json!("work.short");
        let id = enqueue(&t.requester, &s).await;
        let old = claim_as(&t, &t.worker, "work.short").await;
        let dir = ctx_dir(t.d.root(), &id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(".tessera-owner"), format!("{id} ctx")).unwrap();
        std::fs::write(dir.join("earlier.md"), b"from before").unwrap();
        let fresh = loop {
            if let Some(c) = claim(&t.worker, "work.short").await {
                break worker_of(&t.d, c);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(
            (fresh.id.as_str(), fresh.claim["lease"]["fence"].clone()),
            (id.as_str(), json!(2))
        );
        let before = ctx_files(t.d.root(), &id);
        assert_status!(
            submit_body(&old.token, b"stale").await,
            401,
            "unauthenticated"
        );
        assert_eq!(
            ctx_files(t.d.root(), &id),
            before,
            "the stale submit touched nothing"
        );
        assert_status!(submit_body(&fresh.handle, b"current").await, 201);
        let current = ctx_files(t.d.root(), &id);
        assert_eq!(step_body(t.d.root(), &id), b"current");
        for c in [&old.handle, &old.token] {
            assert_status!(submit_body(c, b"stale again").await, 401, "unauthenticated");
        }
        assert_eq!(
            ctx_files(t.d.root(), &id),
            current,
            "the current ctx-dir is intact"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_part_staged_while_a_submit_is_in_flight_is_folded_or_refused() {
    bounded(async {
        let t = Team::start_with(roomy).await;
        let mut outcomes = BTreeSet::new();
        for round in 0..12 {
            let id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
            let w = claim_as(&t, &t.worker, "work.external").await;
            assert_eq!(w.id, id);
            let handle = w.claim["handle"].as_str().unwrap();
            let part = format!("part of round {round}").into_bytes();
            let staging =
                Held::post(&t.d, "/v1/worker/artifact?name=racing.md", handle, &part).await;
            let submitting = Held::post(&t.d, "/v1/worker/submit", handle, b"final").await;
            let_heads_arrive().await;
            // Alternate who gets a head start, and by how much.
            let lead = Duration::from_millis((round / 2 % 3) as u64);
            let (staged, submitted) = if round % 2 == 0 {
                let a = tokio::spawn(staging.finish());
                tokio::time::sleep(lead).await;
                let b = tokio::spawn(submitting.finish());
                (a.await.unwrap(), b.await.unwrap())
            } else {
                let b = tokio::spawn(submitting.finish());
                tokio::time::sleep(lead).await;
                let a = tokio::spawn(staging.finish());
                (a.await.unwrap(), b.await.unwrap())
            };
            assert_eq!(
                submitted.0, 201,
                "round {round}: the submit itself succeeds"
            );
            let fold = body(
                &t.requester
                    .get(&format!("/v1/tasks/{id}/output"))
                    .await
                    .unwrap(),
            );
            let on_disk = ctx_files(t.d.root(), &id)
                .into_iter()
                .find(|(f, _)| f == "racing.md")
                .map(|(_, b)| b);
            let rec = receipt(&t.requester, &id).await;
            match staged {
                (200, _) => {
                    assert_eq!(
                        fold["parts"]["racing.md"],
                        json!(String::from_utf8(part.clone()).unwrap()),
                        "round {round}: acknowledged, so folded"
                    );
                    assert_eq!(
                        on_disk.as_deref(),
                        Some(part.as_slice()),
                        "round {round}: and projected"
                    );
                    assert!(rec["parts"].get("racing.md").is_some());
                    outcomes.insert("folded");
                }
                (409, _) => {
                    assert!(
                        fold["parts"].get("racing.md").is_none(),
                        "round {round}: refused, so not folded"
                    );
                    assert_eq!(on_disk, None, "round {round}: nor projected");
                    outcomes.insert("refused");
                }
                other => panic!("round {round}: the stage answered {other:?}"),
            }
        }
        eprintln!("outcomes seen: {outcomes:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_last_admin_key_cannot_be_revoked_but_one_of_two_can() {
    bounded(async {
        let d = TestDaemon::start().await;
        let keys = body(&d.admin.get("/v1/keys").await.unwrap());
        let first = keys["keys"][0]["key_id"].as_str().unwrap().to_string();
        let r = d.admin.delete(&format!("/v1/keys/{first}")).await.unwrap();
        assert_status!(r, 409, "last_admin_key");
        assert!(
            body(&r)["error"]["message"]
                .as_str()
                .unwrap()
                .contains("issue another admin key first"),
            "{}",
            String::from_utf8_lossy(&r.body)
        );
        assert_status!(d.admin.get("/v1/keys").await.unwrap(), 200);
        let r = d
            .admin
            .post_json(
                "/v1/keys",
                &json!({"label": "second admin", "grants": {"scopes": ["admin"]}}),
            )
            .await
            .unwrap();
        assert_status!(r, 201);
        let second = d.client(body(&r)["secret"].as_str().unwrap());
        let second_id = body(&r)["key_id"].as_str().unwrap().to_string();
        assert_status!(
            d.admin.delete(&format!("/v1/keys/{first}")).await.unwrap(),
            200
        );
        assert_status!(d.admin.get("/v1/keys").await.unwrap(), 401);
        assert_status!(
            second
                .delete(&format!("/v1/keys/{second_id}"))
                .await
                .unwrap(),
            409,
            "last_admin_key"
        );
    })
    .await;
}
