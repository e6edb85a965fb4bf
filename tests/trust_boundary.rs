//! The trust boundary, second pass: what a key could do through splits,
//! contract checks, held requests and lease ids before each rule was
//! decided at its cause. Each test is a class of the defect, tried through
//! the routes that reach the same rule.
//!
//! - A split child pinned a noun (or depended on a task) private to the
//!   requester: the children's authority had the requester's key id, so it
//!   owned the requester's private records, and a worker's own probing
//!   contract then read them through the checks, bit by bit.
//! - A contract that only marked parts `required` was never checked.

use crate::support;

use serde_json::{Value, json};
use support::{NS, Team, body, claim, enqueue, lease, put_noun, spec, submit, task};
use tessera::client::Client;

/// Puts a noun private to `c` (its key owns it) and returns its pin.
async fn private_noun(c: &Client, store: &str, key: &str, value: Value) -> Value {
    let r = c
        .put_json(
            &format!("/v1/nouns/{NS}/{store}/{key}"),
            &json!({"expected_version": 0, "visibility": "private", "body": value}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    let b = body(&r);
    json!({"namespace": NS, "store": store, "key": key, "version": b["version"], "sha256": b["sha256"]})
}

/// A contract that probes its input with `input_schema` (a worker's own).
fn probe(schema: Value) -> Value {
    json!({
        "contract": "probe.v1",
        "operation": {"name": "sum_of_squares"},
        "input_schema": schema,
        "output_schema": {"type": "object"},
        "shims": "none",
        "execution": {"worker": "external", "server_fallback": false},
    })
}

/// Claims task `id` as `c` by id; the claim.
async fn claim_id(c: &Client, id: &str) -> Value {
    let r = c
        .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
        .await
        .unwrap();
    assert_status!(r, 200);
    body(&r)
}

/// A split child of the team's envelope with this brief (and more fields).
fn child(brief: Value, extra: Value) -> Value {
    let mut c = json!({"queue": "work.external", "kind": "verb.compute", "effect_class": "read", "brief": brief});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// A split child may pin (or depend on) only what both the requester and
/// the splitting worker may read: the requester's private nouns and
/// tasks, and the worker's own, are refused as if missing; the same noun
/// shared on the surface is taken.
#[tokio::test(flavor = "multi_thread")]
async fn a_split_child_pins_and_depends_only_on_what_both_keys_may_read() {
    let t = Team::start().await;
    let theirs = private_noun(&t.requester, "work.inputs", "mine", json!({"pin": 4711})).await;
    let workers = private_noun(&t.worker, "work.inputs", "own", json!({"pin": 1})).await;
    let shared = put_noun(&t.requester, "work.inputs", "shared", json!({"pin": 2})).await;
    let contract = put_noun(&t.worker, "work.contracts", "probe", probe(json!({}))).await;
    let mut private_task = spec("verb.compute", json!({}));
    private_task["visibility_scope"] = json!("private");
    let private_task = enqueue(&t.requester, &private_task).await;
    let parent = enqueue(&t.requester, &spec("verb.compute", json!({}))).await;
    let c = claim_id(&t.worker, &parent).await;
    let split = format!("/v1/tasks/{parent}/split");
    let refused = [
        (
            "the requester's private input",
            child(
                json!({"input_ref": theirs, "contract_ref": contract}),
                json!({}),
            ),
        ),
        (
            "the requester's private contract",
            child(json!({"contract_ref": theirs}), json!({})),
        ),
        (
            "the worker's private input",
            child(json!({"input_ref": workers}), json!({})),
        ),
        (
            "a private upstream",
            child(json!({}), json!({"depends_on": [private_task]})),
        ),
    ];
    for (what, c_spec) in &refused {
        let r = t
            .worker
            .post_json(
                &split,
                &json!({"lease_id": lease(&c), "children": [c_spec]}),
            )
            .await
            .unwrap();
        assert!(
            r.status == 422 || r.status == 404,
            "{what}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        let text = String::from_utf8_lossy(&r.body);
        assert!(!text.contains("4711"), "{what} echoed: {text}");
    }
    let seen = task(&t.requester, &parent).await;
    assert_eq!(seen["children"], json!([]), "nothing was split");
    let ok = child(
        json!({"input_ref": shared, "contract_ref": contract}),
        json!({}),
    );
    let r = t
        .worker
        .post_json(&split, &json!({"lease_id": lease(&c), "children": [ok]}))
        .await
        .unwrap();
    assert_status!(r, 200);
}

/// A contract check runs only on pins the submitting key may read: two
/// probing contracts whose answers would differ on a private input give
/// the same verdict, on the key route and the worker route, and nothing
/// of the input reaches the answer or the receipt.
#[tokio::test(flavor = "multi_thread")]
async fn a_check_never_tells_the_submitter_about_a_pin_it_may_not_read() {
    let t = Team::start().await;
    let secret = private_noun(&t.requester, "work.inputs", "secret", json!({"pin": 4711})).await;
    let mut verdicts = Vec::new();
    for (route, guess) in [
        ("key", 4711),
        ("key", 1234),
        ("worker", 4711),
        ("worker", 1234),
    ] {
        let schema = json!({"type": "object", "properties": {"pin": {"const": guess}}});
        let contract = put_noun(
            &t.requester,
            "work.contracts",
            &format!("p{route}{guess}"),
            probe(schema),
        )
        .await;
        let brief = json!({"input_ref": secret, "contract_ref": contract});
        let id = enqueue(&t.requester, &spec("verb.compute", brief)).await;
        let c = claim_id(&t.worker, &id).await;
        let out = put_noun(
            &t.worker,
            "work.outputs",
            &format!("o{route}{guess}"),
            json!({}),
        )
        .await;
        let r = match route {
            "key" => submit(&t.worker, &id, &lease(&c), true, json!([out])).await,
            _ => {
                let handle = t.d.client(c["handle"].as_str().unwrap());
                handle
                    .post_bytes("/v1/worker/submit", bytes::Bytes::from_static(b"{}"))
                    .await
                    .unwrap()
            }
        };
        assert_status!(r, 201);
        let answer = body(&r);
        let receipts = body(
            &t.requester
                .get(&format!("/v1/tasks/{id}/receipts"))
                .await
                .unwrap(),
        );
        let checks = receipts["receipts"][0]["receipt"]["checks"].clone();
        assert!(!checks.to_string().contains("4711"), "{checks}");
        let names: Vec<(Value, Value)> = checks
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].clone(), c["ok"].clone()))
            .collect();
        assert!(
            names.contains(&(json!("input_is_readable"), json!(false))),
            "{route}: {checks}"
        );
        assert!(
            !names.iter().any(|(n, _)| n == "input_matches_schema"),
            "{route}: the input was checked: {checks}"
        );
        verdicts.push((
            route,
            answer["state"].clone(),
            answer["failed_checks"].clone(),
            names,
        ));
    }
    for pair in verdicts.chunks(2) {
        assert_eq!(
            (&pair[0].1, &pair[0].2, &pair[0].3),
            (&pair[1].1, &pair[1].2, &pair[1].3),
            "{}: a right and a wrong guess answer alike",
            pair[0].0
        );
    }
}

/// The contract of a step that only marks its parts `required` (no
/// schema, no checks) is checked on every submit route: missing parts
/// fail the attempt, staged ones pass.
#[tokio::test(flavor = "multi_thread")]
async fn required_parts_are_checked_even_when_the_contract_declares_nothing_else() {
    let t = Team::start().await;
    let contract = json!({
        "contract": "design.v1",
        "operation": {"name": "design"},
        "directive": "Write the plan.",
        "parts": [{"name": "plan", "required": true}, {"name": "notes"}],
        "shims": "none",
        "execution": {"worker": "external", "server_fallback": false},
    });
    let contract = put_noun(&t.requester, "work.contracts", "design", contract).await;
    let brief = json!({"contract_ref": contract});
    for (route, stage) in [
        ("worker", None),
        ("worker", Some("notes")),
        ("key", None),
        ("worker", Some("plan")),
        ("key", Some("plan")),
    ] {
        let id = enqueue(&t.requester, &spec("verb.compute", brief.clone())).await;
        let c = claim(&t.worker, "work.external").await.unwrap();
        assert_eq!(support::claimed_id(&c), id);
        let handle = t.d.client(c["handle"].as_str().unwrap());
        if let Some(part) = stage {
            let r = handle
                .post_bytes(
                    &format!("/v1/worker/artifact?name={part}"),
                    bytes::Bytes::from_static(b"text"),
                )
                .await
                .unwrap();
            assert_status!(r, 200);
        }
        let r = match route {
            "key" => {
                let out = put_noun(&t.worker, "work.outputs", &format!("d{id}"), json!({})).await;
                submit(&t.worker, &id, &lease(&c), true, json!([out])).await
            }
            _ => handle
                .post_bytes("/v1/worker/submit", bytes::Bytes::from_static(b"done"))
                .await
                .unwrap(),
        };
        assert_status!(r, 201);
        let answer = body(&r);
        let want = if stage == Some("plan") {
            "succeeded"
        } else {
            "failed"
        };
        assert_eq!(
            answer["state"],
            json!(want),
            "{route} staging {stage:?}: {answer}"
        );
        if want == "failed" {
            assert!(
                answer["failed_checks"].to_string().contains("parts_staged"),
                "{answer}"
            );
        }
    }
}

/// Issues a key like the team's worker (same surface, claim and submit,
/// and enqueue so that it may also resume) and returns its client.
async fn second_worker(t: &Team) -> Client {
    let scopes = json!([
        format!("namespace:{NS}"),
        "surface:team_example",
        "nouns:read",
        "cas:write",
        "verbs:claim",
        "verbs:submit",
        "verbs:enqueue"
    ]);
    let grants = json!({"queues": ["work.external"], "kinds": ["verb.compute"], "effect_classes": ["read", "write-internal"], "scopes": scopes});
    let r =
        t.d.admin
            .post_json("/v1/keys", &json!({"label": "second", "grants": grants}))
            .await
            .unwrap();
    assert_status!(r, 201);
    t.d.client(body(&r)["secret"].as_str().unwrap())
}

/// Calls on a claim are its claimant's: another key of the same surface
/// that knows the lease id (a leaked log line, say) is refused on every
/// lease route, before and after a restart, and the claim is untouched;
/// an admin may still end it.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_id_alone_does_not_make_a_caller_the_claimant() {
    let mut t = Team::start().await;
    let other = second_worker(&t).await;
    let id = enqueue(&t.requester, &spec("verb.compute", json!({}))).await;
    let c = claim_id(&t.worker, &id).await;
    let l = lease(&c);
    for round in ["before a restart", "after a restart"] {
        let out = put_noun(
            &other,
            "work.outputs",
            &format!("o{}", round.len()),
            json!({}),
        )
        .await;
        let calls = [
            ("heartbeat", json!({"lease_id": l})),
            ("release", json!({"lease_id": l})),
            (
                "park",
                json!({"lease_id": l, "reason": "mine now", "needs": {}}),
            ),
            (
                "split",
                json!({"lease_id": l, "children": [child(json!({}), json!({}))]}),
            ),
            (
                "submit",
                json!({"lease_id": l, "ok": true, "outputs": [out]}),
            ),
        ];
        for (route, b) in calls {
            let r = other
                .post_json(&format!("/v1/tasks/{id}/{route}"), &b)
                .await
                .unwrap();
            assert_status!(r, 403, "forbidden");
            let seen = task(&t.requester, &id).await;
            assert_eq!(
                (
                    seen["state"].clone(),
                    seen["attempt"].clone(),
                    seen["receipts"].clone()
                ),
                (json!("claimed"), json!(1), json!([])),
                "{round}: {route} by another key changed the claim"
            );
        }
        t.d.restart().await;
    }
    let r = t
        .worker
        .post_json(
            &format!("/v1/tasks/{id}/heartbeat"),
            &json!({"lease_id": l}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    let r =
        t.d.admin
            .post_json(&format!("/v1/tasks/{id}/release"), &json!({"lease_id": l}))
            .await
            .unwrap();
    assert_status!(r, 200);
    assert_eq!(task(&t.requester, &id).await["state"], json!("queued"));
}

/// Sends a request's head now and its body later, on its own connection.
struct Held {
    stream: tokio::net::TcpStream,
    body: Vec<u8>,
}

impl Held {
    async fn start(base: &str, bearer: &str, path: &str, body: &Value) -> Held {
        use tokio::io::AsyncWriteExt;
        let addr = base.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let body = serde_json::to_vec(body).unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {bearer}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        Held { stream, body }
    }

    /// Sends the body and returns the answer's status.
    async fn finish(mut self) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.stream.write_all(&self.body).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = self.stream.read(&mut buf).await.unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        text.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

/// A rule is decided with the state it applies to: a resume whose head
/// was sent while its key could resume, and whose body arrives after that
/// key parked the task itself, does not resume its own park; a lease call
/// whose body arrives after the claim moved to another key is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_request_is_decided_with_the_state_its_body_meets() {
    let t = Team::start().await;
    let both = second_worker(&t).await;
    let secret = both.bearer().unwrap().to_string();
    let base = t.d.admin.base().to_string();
    let input = put_noun(&t.requester, "work.inputs", "fresh", json!({"v": 1})).await;

    let id = enqueue(&t.requester, &spec("verb.compute", json!({}))).await;
    let held = Held::start(
        &base,
        &secret,
        &format!("/v1/tasks/{id}/resume"),
        &json!({"input_ref": input}),
    )
    .await;
    let c = claim_id(&both, &id).await;
    let park = json!({"lease_id": lease(&c), "reason": "needs input", "needs": {}});
    assert_status!(
        both.post_json(&format!("/v1/tasks/{id}/park"), &park)
            .await
            .unwrap(),
        200
    );
    assert_eq!(held.finish().await, 403, "its own park");
    assert_eq!(task(&t.requester, &id).await["state"], json!("parked"));
    let r = t
        .resumer
        .post_json(
            &format!("/v1/tasks/{id}/resume"),
            &json!({"input_ref": input}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);

    let id = enqueue(&t.requester, &spec("verb.compute", json!({}))).await;
    let c = claim_id(&both, &id).await;
    let l = lease(&c);
    let held = Held::start(
        &base,
        &secret,
        &format!("/v1/tasks/{id}/heartbeat"),
        &json!({"lease_id": l}),
    )
    .await;
    let r =
        t.d.admin
            .post_json(&format!("/v1/tasks/{id}/release"), &json!({"lease_id": l}))
            .await
            .unwrap();
    assert_status!(r, 200);
    let c = claim_id(&t.worker, &id).await;
    assert_eq!(
        held.finish().await,
        409,
        "the lease no longer holds the task"
    );
    assert_eq!(
        task(&t.requester, &id).await["lease"]["holder"],
        c["lease"]["holder"]
    );
}

/// Task ids are not a sequence: the ids a key gets say nothing of how
/// many tasks another key created between them (random, 16 digits), while
/// claims still go oldest first, also across a restart (snapshot and
/// journal replay alike).
#[tokio::test(flavor = "multi_thread")]
async fn task_ids_count_nothing_and_claims_still_go_oldest_first() {
    let mut t = Team::start().await;
    let mut mine = vec![enqueue(&t.requester, &spec("verb.compute", json!({"n": 0}))).await];
    for round in 1..4 {
        let mut theirs = spec("verb.compute", json!({}));
        theirs["producer_surface"] = json!("surface:elsewhere");
        for i in 0..25 {
            theirs["brief"] = json!({"round": round, "i": i});
            enqueue(&t.outsider, &theirs).await;
        }
        mine.push(enqueue(&t.requester, &spec("verb.compute", json!({"n": round}))).await);
    }
    let numbers: Vec<u64> = mine.iter().map(|id| id[1..].parse().unwrap()).collect();
    assert!(
        mine.iter().all(|id| id.len() == 17),
        "t and 16 digits: {mine:?}"
    );
    let steps: Vec<i128> = numbers
        .windows(2)
        .map(|w| w[1] as i128 - w[0] as i128)
        .collect();
    assert!(
        !steps.contains(&26),
        "an id tells how many tasks came between: {mine:?}"
    );
    let listed = body(&t.requester.get("/v1/tasks").await.unwrap());
    let order: Vec<String> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(order, mine, "a list goes oldest first");
    t.d.restart().await;
    let first = claim(&t.worker, "work.external").await.unwrap();
    assert_eq!(
        support::claimed_id(&first),
        mine[0],
        "oldest first after a restart"
    );
    let next = claim(&t.worker, "work.external").await.unwrap();
    assert_eq!(support::claimed_id(&next), mine[1]);
}

/// A part name is a file name a person reads in a listing: one holding a
/// control or format character (newline, tab, a bidi override, a
/// zero-width space) is refused wherever a part is named, the worker's
/// artifact route, the `stage_part` tool over `/mcp`, and a contract's
/// `parts`, and nothing is staged.
#[tokio::test(flavor = "multi_thread")]
async fn part_names_with_control_or_format_characters_are_refused_everywhere() {
    let t = Team::start().await;
    let id = enqueue(&t.requester, &spec("verb.compute", json!({}))).await;
    let c = claim_id(&t.worker, &id).await;
    let handle = t.d.client(c["handle"].as_str().unwrap());
    let names = [
        "a\nb",
        "a\tb",
        "report\u{202e}dm.exe",
        "a\u{200b}b",
        "\u{feff}plan.md",
        "a\u{2028}b",
    ];
    for name in names {
        let q: String = form_urlencoded::byte_serialize(name.as_bytes()).collect();
        let r = handle
            .post_bytes(
                &format!("/v1/worker/artifact?name={q}"),
                bytes::Bytes::from_static(b"x"),
            )
            .await
            .unwrap();
        assert_status!(r, 400, "invalid_part_name");
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "stage_part", "arguments": {"name": name, "content": "x"}}});
        let r = handle
            .send(
                http::Method::POST,
                "/mcp",
                Some(bytes::Bytes::from(call.to_string())),
                &[("accept", "application/json, text/event-stream")],
            )
            .await
            .unwrap();
        let answer = body(&r);
        assert_eq!(
            answer["result"]["isError"],
            json!(true),
            "{name:?}: {answer}"
        );
        assert_eq!(
            answer["result"]["structuredContent"]["error"]["code"],
            json!("invalid_part_name"),
            "{name:?}"
        );
    }
    let parts = body(&handle.get("/v1/worker/parts").await.unwrap());
    assert_eq!(parts["parts"], json!([]), "nothing was staged: {parts}");

    let contract = json!({
        "contract": "design.v1", "directive": "Plan.",
        "parts": [{"name": "plan\u{202e}dm.exe", "required": true}],
    });
    let contract = put_noun(&t.requester, "work.contracts", "bidi", contract).await;
    let id = enqueue(
        &t.requester,
        &spec("verb.compute", json!({"contract_ref": contract})),
    )
    .await;
    let c = claim_id(&t.worker, &id).await;
    let handle = t.d.client(c["handle"].as_str().unwrap());
    let r = handle
        .post_bytes("/v1/worker/submit", bytes::Bytes::from_static(b"done"))
        .await
        .unwrap();
    assert_status!(r, 201);
    let checks = body(&r)["failed_checks"].clone();
    assert_eq!(checks[0]["name"], json!("contract_is_valid"), "{checks}");
    assert_eq!(checks[0]["keyword"], json!("part_name"), "{checks}");
}

/// Revoking a key ends what it holds open at once: a long-poll claim
/// waiting for work answers 401 then, and takes nothing afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_keys_long_poll_ends_at_once_and_claims_nothing() {
    let t = Team::start().await;
    let scopes = json!([
        format!("namespace:{NS}"),
        "surface:team_example",
        "nouns:read",
        "verbs:claim"
    ]);
    let grants = json!({"queues": ["work.external"], "kinds": ["verb.compute"], "effect_classes": ["write-internal"], "scopes": scopes});
    let r =
        t.d.admin
            .post_json("/v1/keys", &json!({"label": "poller", "grants": grants}))
            .await
            .unwrap();
    let b = body(&r);
    let poller = t.d.client(b["secret"].as_str().unwrap());
    let key_id = b["key_id"].as_str().unwrap().to_string();
    let started = std::time::Instant::now();
    let waiting = tokio::spawn(async move {
        poller
            .post_json("/v1/queues/work.external/claim", &json!({"wait_ms": 20000}))
            .await
            .unwrap()
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_status!(
        t.d.admin
            .delete(&format!("/v1/keys/{key_id}"))
            .await
            .unwrap(),
        200
    );
    let r = waiting.await.unwrap();
    assert_status!(r, 401, "unauthenticated");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "at once, not at the poll's end"
    );
    let id = enqueue(&t.requester, &spec("verb.compute", json!({}))).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(task(&t.requester, &id).await["state"], json!("queued"));
}
