//! Retries, redrive and failure policy over real HTTP: a failed attempt
//! with attempts left is queued again after the backoff, unless the
//! submit says `final` or a contract check failed; requesters and admins
//! retry failed and cancelled tasks, one by id or many by filter;
//! `on_upstream_failure: cancel`; surface-less envelopes are refused; the
//! projected front matter carries the daemon's verdict; a retried task
//! survives SIGKILL.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use tessera::client::Client;

/// Claims `id` by id (retrying until its backoff has passed).
async fn claim_id(c: &Client, id: &str) -> Value {
    for _ in 0..250 {
        let r = c
            .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
            .await
            .unwrap();
        if r.status == 200 {
            return body(&r);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{id} never became claimable");
}

/// Submits a failure; `final` when asked.
async fn fail(c: &Client, id: &str, claim: &Value, final_failure: bool) -> Value {
    let mut b = json!({"lease_id": lease(claim), "ok": false});
    if final_failure {
        b["final"] = json!(true);
    }
    let r = c
        .post_json(&format!("/v1/tasks/{id}/submit"), &b)
        .await
        .unwrap();
    assert_status!(r, 201);
    body(&r)
}

async fn receipts(c: &Client, id: &str) -> Vec<Value> {
    let r = c.get(&format!("/v1/tasks/{id}/receipts")).await.unwrap();
    assert_status!(r, 200);
    body(&r)["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["receipt"].clone())
        .collect()
}

async fn retry(c: &Client, id: &str) -> tessera::client::Reply {
    c.post_json(&format!("/v1/tasks/{id}/retry"), &json!({}))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_attempt_is_retried_after_backoff_until_attempts_run_out() {
    let t = Team::start().await;
    let id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let c1 = claim_id(&t.worker, &id).await;
    let r = fail(&t.worker, &id, &c1, false).await;
    assert_eq!(r["state"], json!("queued"), "attempts left: queued again");
    let seen = task(&t.requester, &id).await;
    assert_eq!(seen["attempt"], json!(1));
    assert!(seen["not_before"].is_string(), "a retry waits its backoff");

    let c2 = claim_id(&t.worker, &id).await;
    assert_eq!(
        c2["lease"]["fence"],
        json!(2),
        "the next claim is attempt 2"
    );
    assert_eq!(fail(&t.worker, &id, &c2, false).await["state"], "queued");
    let c3 = claim_id(&t.worker, &id).await;
    assert_eq!(
        fail(&t.worker, &id, &c3, false).await["state"],
        "failed",
        "the last attempt's failure ends the task"
    );
    let rs = receipts(&t.requester, &id).await;
    let summary: Vec<(Value, Value, Value)> = rs
        .iter()
        .map(|r| (r["attempt"].clone(), r["ok"].clone(), r["retry"].clone()))
        .collect();
    assert_eq!(
        summary,
        [
            (json!(1), json!(false), json!(true)),
            (json!(2), json!(false), json!(true)),
            (json!(3), json!(false), json!(false)),
        ]
    );
    assert!(
        rs[1]["prev"].is_string() && rs[2]["prev"].is_string(),
        "receipts chain"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_final_failure_and_a_failed_contract_check_fail_at_once() {
    let t = Team::start().await;
    let id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let c = claim_id(&t.worker, &id).await;
    assert_eq!(fail(&t.worker, &id, &c, true).await["state"], "failed");
    let rs = receipts(&t.requester, &id).await;
    assert_eq!(
        (rs[0]["final"].clone(), rs[0]["retry"].clone()),
        (json!(true), json!(false))
    );
    let bad = t
        .worker
        .post_json(
            &format!("/v1/tasks/{id}/submit"),
            &json!({"lease_id": "x", "ok": true, "final": true}),
        )
        .await
        .unwrap();
    assert_status!(bad, 400, "invalid_field");

    let contract = json!({
        "contract": "c.v1",
        "output_schema": {"type": "object", "required": ["n"]},
        "checks": [{"name": "output_matches_schema"}],
    });
    let cpin = put_noun(&t.requester, "work.contracts", "c", contract).await;
    let id = enqueue(
        &t.requester,
        &spec("verb.solve_draft", json!({"contract_ref": cpin})),
    )
    .await;
    let c = claim_id(&t.worker, &id).await;
    let out = put_noun(&t.worker, "work.artifacts", "o", json!({"m": 1})).await;
    let r = submit(&t.worker, &id, &lease(&c), true, json!([out])).await;
    assert_status!(r, 201);
    assert_eq!(
        body(&r)["state"],
        json!("failed"),
        "a failed check is deterministic: no retry"
    );
    let rs = receipts(&t.requester, &id).await;
    assert_eq!(rs[0]["retry"], json!(false));
    assert!(rs[0]["failure"].as_str().unwrap().starts_with("check "));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_front_matter_carries_the_daemons_verdict() {
    let t = Team::start().await;
    let contract = json!({
        "contract": "c.v1",
        "output_schema": {"type": "object", "required": ["n"]},
        "checks": [{"name": "output_matches_schema"}],
    });
    let cpin = put_noun(&t.requester, "work.contracts", "c", contract).await;
    let id = enqueue(
        &t.requester,
        &spec("verb.solve_draft", json!({"contract_ref": cpin})),
    )
    .await;
    let c = claim_id(&t.worker, &id).await;
    let handle = t.d.admin.with_bearer(c["handle"].as_str().unwrap());
    let r = handle
        .post_bytes("/v1/worker/submit", b"{\"m\": 1}".to_vec())
        .await
        .unwrap();
    assert_status!(r, 201);
    assert_eq!(body(&r)["state"], json!("failed"));
    let file =
        t.d.root()
            .join("workspace")
            .join(NS)
            .join("tasks")
            .join(&id)
            .join("ctx/solve_draft.md");
    let bytes = std::fs::read(&file).unwrap();
    let (header, _) = tessera::worker::front_matter::decode(&bytes).unwrap();
    assert!(!header.ok, "ok: false after a daemon-failed attempt");

    let id = enqueue(&t.requester, &spec("verb.solve_draft", json!({"n": 2}))).await;
    let c = claim_id(&t.worker, &id).await;
    let handle = t.d.admin.with_bearer(c["handle"].as_str().unwrap());
    let r = handle
        .post_bytes("/v1/worker/submit?final=maybe", b"x".to_vec())
        .await
        .unwrap();
    assert_status!(r, 400, "invalid_query");
    let r = handle
        .post_bytes("/v1/worker/submit?final=true", b"x".to_vec())
        .await
        .unwrap();
    assert_status!(r, 400, "invalid_field");
    let r = handle
        .post_bytes("/v1/worker/submit?ok=false&final=true", b"gave up".to_vec())
        .await
        .unwrap();
    assert_status!(r, 201);
    assert_eq!(
        body(&r)["state"],
        json!("failed"),
        "the worker route takes final too"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_requeues_failed_cancelled_and_exhausted_tasks_for_their_requester_or_admin() {
    let t = Team::start().await;
    let failed = enqueue(&t.requester, &spec("verb.solve_draft", json!({"n": 1}))).await;
    let c = claim_id(&t.worker, &failed).await;
    fail(&t.worker, &failed, &c, true).await;
    let cancelled = enqueue(&t.requester, &spec("verb.solve_draft", json!({"n": 2}))).await;
    let r = t
        .requester
        .post_json(&format!("/v1/tasks/{cancelled}/cancel"), &json!({}))
        .await
        .unwrap();
    assert_status!(r, 200);
    let mut short = spec("verb.solve_draft", json!({"n": 3}));
    short["queue"] = json!("work.short");
    short["max_attempts"] = json!(1);
    let exhausted = enqueue(&t.requester, &short).await;
    claim_id(&t.worker, &exhausted).await;
    let w = t.worker.clone();
    let e = exhausted.clone();
    eventually(5, || {
        let w = w.clone();
        let e = e.clone();
        async move { task(&w, &e).await["state"] == "failed" }
    })
    .await;
    let queued = enqueue(&t.requester, &spec("verb.solve_draft", json!({"n": 4}))).await;

    assert_status!(retry(&t.worker, &failed).await, 403, "forbidden");
    assert_status!(retry(&t.outsider, &failed).await, 404, "not_found");
    let r = retry(&t.requester, &queued).await;
    assert_status!(r, 409, "not_retryable");
    assert_eq!(body(&r)["error"]["details"]["state"], json!("queued"));

    let r = retry(&t.requester, &failed).await;
    assert_status!(r, 200);
    assert_eq!(
        body(&r),
        json!({"task_id": failed, "state": "queued", "attempt": 1})
    );
    let c = claim_id(&t.worker, &failed).await;
    assert_eq!(c["lease"]["fence"], json!(2));
    let ok = submit(&t.worker, &failed, &lease(&c), true, json!([])).await;
    assert_status!(ok, 201);
    let rs = receipts(&t.requester, &failed).await;
    assert_eq!(rs.len(), 2);
    assert!(rs[1]["prev"].is_string(), "receipts keep chaining");

    let r = retry(&t.d.admin, &cancelled).await;
    assert_status!(r, 200);
    assert_eq!(body(&r)["state"], json!("queued"));
    assert_eq!(task(&t.requester, &cancelled).await["reason"], Value::Null);
    let r = retry(&t.requester, &exhausted).await;
    assert_status!(r, 200);
    assert_eq!(body(&r)["attempt"], json!(1));
    let c = claim_id(&t.worker, &exhausted).await;
    assert_eq!(
        c["lease"]["fence"],
        json!(2),
        "a retry past the limit gives one attempt"
    );
    assert_status!(retry(&t.requester, &failed).await, 409, "not_retryable");
}

#[tokio::test(flavor = "multi_thread")]
async fn bulk_retry_and_cancel_count_first_and_touch_only_what_the_key_may_act_on() {
    let t = Team::start().await;
    let mut mine = Vec::new();
    for n in 0..3 {
        mine.push(enqueue(&t.requester, &spec("verb.solve_draft", json!({"n": n}))).await);
    }
    let mut theirs = spec("verb.solve_draft", json!({"other": true}));
    theirs["producer_surface"] = json!("surface:elsewhere");
    let hidden = enqueue(&t.outsider, &theirs).await;

    let dry = t
        .requester
        .post_json("/v1/tasks/cancel", &json!({"dry_run": true}))
        .await
        .unwrap();
    assert_status!(dry, 200);
    assert_eq!(
        body(&dry),
        json!({"dry_run": true, "matched": 3, "tasks": [], "remaining": 3}),
        "a scoped key's count leaves out what it cannot see"
    );
    let admin_dry = body(
        &t.d.admin
            .post_json("/v1/tasks/cancel", &json!({"dry_run": true}))
            .await
            .unwrap(),
    );
    assert_eq!(admin_dry["matched"], json!(4));
    let worker_dry = body(
        &t.worker
            .post_json("/v1/tasks/cancel", &json!({"dry_run": true}))
            .await
            .unwrap(),
    );
    assert_eq!(worker_dry["matched"], json!(0), "seeing is not acting");

    let r = t
        .requester
        .post_json(
            "/v1/tasks/cancel",
            &json!({"limit": 2, "kind": "verb.solve_draft"}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    let b = body(&r);
    assert_eq!(
        (b["matched"].clone(), b["remaining"].clone()),
        (json!(3), json!(1))
    );
    assert_eq!(
        b["tasks"][0],
        json!({"task_id": mine[0], "state": "cancelled", "attempt": 0})
    );
    let r = body(
        &t.requester
            .post_json("/v1/tasks/cancel", &json!({}))
            .await
            .unwrap(),
    );
    assert_eq!(
        (r["tasks"].as_array().unwrap().len(), r["remaining"].clone()),
        (1, json!(0))
    );
    assert_eq!(task(&t.d.admin, &hidden).await["state"], json!("queued"));

    let dry = body(
        &t.requester
            .post_json(
                "/v1/tasks/retry",
                &json!({"dry_run": true, "state": "cancelled"}),
            )
            .await
            .unwrap(),
    );
    assert_eq!(dry["matched"], json!(3));
    let r = body(
        &t.requester
            .post_json("/v1/tasks/retry", &json!({"queue": "work.external"}))
            .await
            .unwrap(),
    );
    assert_eq!(
        (r["tasks"].as_array().unwrap().len(), r["remaining"].clone()),
        (3, json!(0))
    );
    for id in &mine {
        assert_eq!(task(&t.requester, id).await["state"], json!("queued"));
    }
    let bad = t
        .requester
        .post_json("/v1/tasks/retry", &json!({"state": "queued"}))
        .await
        .unwrap();
    assert_status!(bad, 400, "invalid_field");
    let bad = t
        .requester
        .post_json("/v1/tasks/retry", &json!({"bogus": 1}))
        .await
        .unwrap();
    assert_status!(bad, 400, "unknown_field");
}

#[tokio::test(flavor = "multi_thread")]
async fn dependents_run_after_a_failed_upstream_unless_they_ask_to_be_cancelled() {
    let t = Team::start().await;
    let up = enqueue(&t.requester, &spec("verb.solve_draft", json!({"up": 1}))).await;
    let mut runs = spec("verb.verify_gate", json!({"d": "runs"}));
    runs["depends_on"] = json!([up]);
    let runs = enqueue(&t.requester, &runs).await;
    let mut stops = spec("verb.verify_gate", json!({"d": "stops"}));
    stops["depends_on"] = json!([up]);
    stops["on_upstream_failure"] = json!("cancel");
    let stops = enqueue(&t.requester, &stops).await;
    let c = claim_id(&t.worker, &up).await;
    assert_eq!(fail(&t.worker, &up, &c, false).await["state"], "queued");
    assert_eq!(
        task(&t.requester, &stops).await["state"],
        json!("pending"),
        "a retried failure is not the end"
    );
    let c = claim_id(&t.worker, &up).await;
    fail(&t.worker, &up, &c, true).await;
    assert_eq!(task(&t.requester, &runs).await["state"], json!("queued"));
    let s = task(&t.requester, &stops).await;
    assert_eq!(
        (s["state"].clone(), s["reason"].clone()),
        (json!("cancelled"), json!(format!("upstream {up} failed")))
    );
    let mut late = spec("verb.verify_gate", json!({"d": "late"}));
    late["depends_on"] = json!([up]);
    late["on_upstream_failure"] = json!("cancel");
    let r = t.requester.post_json("/v1/tasks", &late).await.unwrap();
    assert_status!(r, 201);
    assert_eq!(body(&r)["state"], json!("cancelled"));

    let up2 = enqueue(&t.requester, &spec("verb.solve_draft", json!({"up": 2}))).await;
    let mut after_cancel = spec("verb.verify_gate", json!({"d": "c"}));
    after_cancel["depends_on"] = json!([up2]);
    let after_cancel = enqueue(&t.requester, &after_cancel).await;
    let r = t
        .requester
        .post_json(&format!("/v1/tasks/{up2}/cancel"), &json!({}))
        .await
        .unwrap();
    assert_status!(r, 200);
    assert_eq!(
        task(&t.requester, &after_cancel).await["state"],
        json!("queued"),
        "by default a cancelled upstream lets dependents run"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_only_admin_could_see_is_refused_at_enqueue() {
    let t = Team::start().await;
    let mut s = spec("verb.solve_draft", json!({}));
    s.as_object_mut().unwrap().remove("producer_surface");
    let r = t.d.admin.post_json("/v1/tasks", &s).await.unwrap();
    assert_status!(r, 422, "unclaimable_task");
    let msg = body(&r)["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("producer_surface"), "{msg}");
    s["visibility_scope"] = json!("allowlist_surfaces");
    let r = t.d.admin.post_json("/v1/tasks", &s).await.unwrap();
    assert_status!(r, 422, "unclaimable_task");
    let batch = body(
        &t.d.admin
            .post_json("/v1/batch/tasks", &json!({"items": [s]}))
            .await
            .unwrap(),
    );
    assert_eq!(batch["items"][0]["status"], json!(422));
    s["allowed_surfaces"] = json!([format!("surface:{SURFACE}")]);
    let id = enqueue(&t.d.admin, &s).await;
    let c = claim(&t.worker, "work.external")
        .await
        .expect("claimable by the team");
    assert_eq!(claimed_id(&c), id);
}

#[test]
fn a_retried_task_keeps_its_state_across_sigkill() {
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let d = DaemonProcess::spawn(root.path());
    let id = rt.block_on(async {
        let r = d
            .admin
            .post_json(
                "/v1/queues",
                &json!({"name": "q", "max_attempts": 2, "backoff": {"base_ms": 10, "cap_ms": 10}}),
            )
            .await
            .unwrap();
        assert_status!(r, 201);
        let spec = json!({"namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read", "producer_surface": "s", "brief": {}});
        let id = enqueue(&d.admin, &spec).await;
        let c = claim_id(&d.admin, &id).await;
        assert_eq!(fail(&d.admin, &id, &c, false).await["state"], "queued");
        let c = claim_id(&d.admin, &id).await;
        assert_eq!(fail(&d.admin, &id, &c, false).await["state"], "failed");
        let r = retry(&d.admin, &id).await;
        assert_status!(r, 200);
        id
    });
    d.kill();
    let d = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        let seen = task(&d.admin, &id).await;
        assert_eq!(
            (
                seen["state"].clone(),
                seen["attempt"].clone(),
                seen["receipts"].as_array().unwrap().len()
            ),
            (json!("queued"), json!(2), 2)
        );
        let c = claim_id(&d.admin, &id).await;
        assert_eq!(c["lease"]["fence"], json!(3));
    });
    d.kill();
}
