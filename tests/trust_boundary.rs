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

mod support;

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
