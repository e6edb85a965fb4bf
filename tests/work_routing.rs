//! The task lifecycle over real HTTP: enqueue, claim, lease, fence, submit,
//! park and resume by another key, split and reclaim, dependencies on
//! failed and cancelled upstreams, cancellation, server queues and
//! admin-only effect classes.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn queues_are_provisioned_by_admin_and_listed_with_counts() {
    let t = Team::start().await;
    let r = t
        .requester
        .post_json("/v1/queues", &json!({"name": "mine"}))
        .await
        .unwrap();
    assert_status!(r, 403, "forbidden");
    let bad =
        t.d.admin
            .post_json("/v1/queues", &json!({"name": "q", "lease_ttl_s": 0}))
            .await
            .unwrap();
    assert_status!(bad, 400, "invalid_field");
    let again = t.d.admin.post_json("/v1/queues", &json!({"name": "work.external", "lease_ttl_s": 30, "max_attempts": 3, "backoff": {"base_ms": 50, "cap_ms": 200}})).await.unwrap();
    assert_status!(again, 200);
    enqueue(&t.requester, &spec("verb.solve_draft", json!({"n": 1}))).await;
    let list = body(&t.worker.get("/v1/queues").await.unwrap());
    let names: Vec<&str> = list["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["work.external", "work.short"],
        "a key sees the queues it was issued"
    );
    assert_eq!(list["queues"][0]["counts"]["queued"], json!(1));
    let mut unknown = spec("verb.solve_draft", json!({}));
    unknown["queue"] = json!("never.provisioned");
    let r = t.d.admin.post_json("/v1/tasks", &unknown).await.unwrap();
    assert_status!(r, 404, "unknown_queue");
}

#[tokio::test(flavor = "multi_thread")]
async fn enqueue_is_idempotent_per_namespace_and_strict_about_fields() {
    let t = Team::start().await;
    let mut s = spec("verb.solve_draft", json!({"a": 1, "b": [1, 2]}));
    s["idempotency_key"] = json!("work-request-unique-id");
    let first = t.requester.post_json("/v1/tasks", &s).await.unwrap();
    assert_status!(first, 201);
    let id = body(&first)["task_id"].clone();
    let mut reordered = s.clone();
    reordered["brief"] = json!({"b": [1, 2], "a": 1});
    let again = t
        .requester
        .post_json("/v1/tasks", &reordered)
        .await
        .unwrap();
    assert_status!(again, 200);
    assert_eq!(body(&again)["task_id"], id);
    assert_eq!(body(&again)["created"], json!(false));
    // Tags are a set: another order or a repeat is the same spec.
    let mut tagged = spec("verb.solve_draft", json!({}));
    tagged["idempotency_key"] = json!("tagged-request");
    tagged["tags"] = json!(["zeta", "alpha"]);
    let first_tagged = t.requester.post_json("/v1/tasks", &tagged).await.unwrap();
    assert_status!(first_tagged, 201);
    tagged["tags"] = json!(["alpha", "zeta", "alpha"]);
    let same = t.requester.post_json("/v1/tasks", &tagged).await.unwrap();
    assert_status!(same, 200);
    assert_eq!(body(&same)["task_id"], body(&first_tagged)["task_id"]);
    let mut changed = s.clone();
    changed["brief"] = json!({"a": 2});
    let conflict = t.requester.post_json("/v1/tasks", &changed).await.unwrap();
    assert_status!(conflict, 409, "idempotency_conflict");
    assert_eq!(body(&conflict)["error"]["details"]["task_id"], id);

    let mut extra = spec("verb.solve_draft", json!({}));
    extra["model"] = json!("big");
    assert_status!(
        t.requester.post_json("/v1/tasks", &extra).await.unwrap(),
        400,
        "unknown_field"
    );
    let mut not_object = spec("verb.solve_draft", json!([1]));
    not_object["tags"] = json!([]);
    assert_status!(
        t.requester
            .post_json("/v1/tasks", &not_object)
            .await
            .unwrap(),
        400,
        "invalid_field"
    );
    let mut bad_dep = spec("verb.solve_draft", json!({}));
    bad_dep["depends_on"] = json!(["t999"]);
    assert_status!(
        t.requester.post_json("/v1/tasks", &bad_dep).await.unwrap(),
        422,
        "unknown_upstream"
    );
    let mut other_surface = spec("verb.solve_draft", json!({}));
    other_surface["producer_surface"] = json!("surface:elsewhere");
    assert_status!(
        t.requester
            .post_json("/v1/tasks", &other_surface)
            .await
            .unwrap(),
        403,
        "forbidden"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn claims_follow_priority_then_order_and_long_poll_wakes_on_enqueue() {
    let t = Team::start().await;
    assert!(
        claim(&t.worker, "work.external").await.is_none(),
        "204 when nothing is queued"
    );
    let low = enqueue(&t.requester, &spec("verb.solve_draft", json!({"n": "low"}))).await;
    let mut hi = spec("verb.solve_draft", json!({"n": "high"}));
    hi["priority"] = json!(5);
    let high = enqueue(&t.requester, &hi).await;
    let later = enqueue(
        &t.requester,
        &spec("verb.solve_draft", json!({"n": "later"})),
    )
    .await;
    let order: Vec<String> = [
        claim(&t.worker, "work.external").await.unwrap(),
        claim(&t.worker, "work.external").await.unwrap(),
        claim(&t.worker, "work.external").await.unwrap(),
    ]
    .iter()
    .map(claimed_id)
    .collect();
    assert_eq!(order, [high, low, later]);

    let worker = t.worker.clone();
    let waiting = tokio::spawn(async move {
        worker
            .post_json("/v1/queues/work.external/claim", &json!({"wait_ms": 10000}))
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let id = enqueue(&t.requester, &spec("verb.verify_gate", json!({}))).await;
    let got = waiting.await.unwrap();
    assert_status!(got, 200);
    assert_eq!(body(&got)["task"]["task_id"], json!(id));
    let only = t
        .worker
        .post_json(
            "/v1/queues/work.external/claim",
            &json!({"kinds": ["verb.compute"], "wait_ms": 50}),
        )
        .await
        .unwrap();
    assert_status!(only, 204);
    let too_long = t
        .worker
        .post_json("/v1/queues/work.external/claim", &json!({"wait_ms": 30001}))
        .await
        .unwrap();
    assert_status!(too_long, 400, "invalid_field");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_carries_a_lease_token_and_handle_and_heartbeats_extend_it() {
    let t = Team::start().await;
    let id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let c = t
        .worker
        .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
        .await
        .unwrap();
    assert_status!(c, 200);
    let c = body(&c);
    assert_eq!(c["lease"]["fence"], json!(1));
    assert!(c["handle"].as_str().unwrap().starts_with("wh-"));
    assert!(c["token"].as_str().unwrap().starts_with("wt1."));
    assert_eq!(c["prompt_url"], json!("/v1/worker/prompt"));
    let again = t
        .worker
        .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
        .await
        .unwrap();
    assert_status!(again, 409, "invalid_state");
    let before = c["lease"]["expires_at"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let hb = t
        .worker
        .post_json(
            &format!("/v1/tasks/{id}/heartbeat"),
            &json!({"lease_id": lease(&c)}),
        )
        .await
        .unwrap();
    assert_status!(hb, 200);
    assert!(body(&hb)["expires_at"].as_str().unwrap() > before.as_str());
    let seen = task(&t.requester, &id).await;
    assert_eq!(seen["lease"]["holder"], json!(t.ids["worker"]));
    assert!(
        seen["lease"].get("id").is_none(),
        "only the holder sees the lease id"
    );
    let bad = t
        .worker
        .post_json(
            &format!("/v1/tasks/{id}/heartbeat"),
            &json!({"lease_id": "nope"}),
        )
        .await
        .unwrap();
    assert_status!(bad, 409, "stale_lease");
    let rel = t
        .worker
        .post_json(
            &format!("/v1/tasks/{id}/release"),
            &json!({"lease_id": lease(&c)}),
        )
        .await
        .unwrap();
    assert_status!(rel, 200);
    assert_eq!(body(&rel)["state"], json!("queued"));
    let second = claim(&t.worker, "work.external").await.unwrap();
    assert_eq!(
        second["lease"]["fence"],
        json!(2),
        "a release counts as an attempt"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn lease_expiry_requeues_with_backoff_fences_the_late_worker_and_exhausts_attempts() {
    let mut t = Team::start().await;
    let mut s = spec("verb.solve_draft", json!({}));
    s["queue"] = json!("work.short");
    let id = enqueue(&t.requester, &s).await;
    let first = claim(&t.worker, "work.short").await.unwrap();
    let w = t.worker.clone();
    let i = id.clone();
    eventually(5, || {
        let w = w.clone();
        let i = i.clone();
        async move { task(&w, &i).await["state"] == "queued" }
    })
    .await;
    let seen = task(&t.worker, &id).await;
    assert_eq!(
        seen["attempt"],
        json!(1),
        "the expired claim counted as an attempt"
    );
    assert!(seen["not_before"].is_string(), "a retry waits its backoff");

    let w = t.worker.clone();
    let second = loop {
        if let Some(c) = claim(&w, "work.short").await {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(second["lease"]["fence"], json!(2));
    let late = submit(&t.worker, &id, &lease(&first), true, json!([])).await;
    assert_status!(late, 409, "stale_lease");
    assert_eq!(
        task(&t.worker, &id).await["receipts"],
        json!([]),
        "a stale lease wrote nothing"
    );

    t.d.restart().await;
    let late = submit(&t.worker, &id, &lease(&first), true, json!([])).await;
    assert_status!(late, 409, "stale_lease");
    let w = t.worker.clone();
    let i = id.clone();
    eventually(5, || {
        let w = w.clone();
        let i = i.clone();
        async move { task(&w, &i).await["state"] == "failed" }
    })
    .await;
    let done = task(&t.worker, &id).await;
    assert_eq!(done["reason"], json!("attempts_exhausted"));
    let after = submit(&t.worker, &id, &lease(&second), true, json!([])).await;
    assert_status!(after, 409, "stale_lease");
}

#[tokio::test(flavor = "multi_thread")]
async fn submit_writes_a_checked_receipt_and_a_resend_gets_the_same_one() {
    let t = Team::start().await;
    let id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let c = claim(&t.worker, "work.external").await.unwrap();
    let out = put_noun(
        &t.worker,
        "work.artifacts",
        "result",
        json!({"sum_of_squares": 195}),
    )
    .await;
    let mut wrong = out.clone();
    wrong["sha256"] = json!("0".repeat(64));
    let r = submit(&t.worker, &id, &lease(&c), true, json!([wrong])).await;
    assert_status!(r, 422, "invalid_pin");
    let r = submit(&t.worker, &id, &lease(&c), true, json!([{"store": "work.artifacts", "key": "missing", "version": 1, "sha256": "0".repeat(64)}])).await;
    assert_status!(r, 422, "invalid_pin");
    let private = t
        .requester
        .put_json(
            &format!("/v1/nouns/{NS}/secret/plan"),
            &json!({"expected_version": 0, "body": 1, "visibility": "private"}),
        )
        .await
        .unwrap();
    let private_pin =
        json!({"store": "secret", "key": "plan", "version": 1, "sha256": body(&private)["sha256"]});
    let r = submit(&t.worker, &id, &lease(&c), true, json!([private_pin])).await;
    assert_status!(r, 422, "invalid_pin");
    assert_eq!(
        task(&t.worker, &id).await["state"],
        json!("claimed"),
        "refused submits changed nothing"
    );

    let r = submit(&t.worker, &id, &lease(&c), true, json!([out])).await;
    assert_status!(r, 201);
    let receipt = body(&r)["receipt_sha256"].as_str().unwrap().to_string();
    let again = submit(&t.worker, &id, &lease(&c), true, json!([out])).await;
    assert_status!(again, 200);
    assert_eq!(body(&again)["receipt_sha256"], json!(receipt));
    let different = submit(&t.worker, &id, &lease(&c), false, json!([out])).await;
    assert_status!(different, 409, "submit_conflict");

    let receipts = body(
        &t.requester
            .get(&format!("/v1/tasks/{id}/receipts"))
            .await
            .unwrap(),
    );
    let rec = &receipts["receipts"][0];
    assert_eq!(rec["sha256"], json!(receipt));
    let r = &rec["receipt"];
    assert_eq!(
        (
            r["task_id"].clone(),
            r["attempt"].clone(),
            r["state"].clone(),
            r["ok"].clone()
        ),
        (json!(id), json!(1), json!("succeeded"), json!(true))
    );
    assert_eq!(r["outputs"][0]["sha256"], out["sha256"]);
    assert_eq!(r["by_key"], json!(t.ids["worker"]));
    assert_eq!(r["prev"], Value::Null);
    assert_eq!(
        tessera::store::Sha256::of(&tessera::store::canonical_json(r)).hex(),
        receipt,
        "the receipt's canonical bytes hash to its name"
    );
    let packs = t.d.root().join("objects/packs");
    eventually(5, || {
        let packs = packs.clone();
        async move { std::fs::read_dir(&packs).unwrap().count() >= 1 }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_parks_for_missing_input_and_another_key_resumes_it() {
    let t = Team::start().await;
    let id = enqueue(
        &t.requester,
        &spec("verb.solve_draft", json!({"input_ref": null})),
    )
    .await;
    let c = claim(&t.worker, "work.external").await.unwrap();
    let needs = json!({"noun": "work.inputs/numbers", "type": "noun.input", "schema": {"numbers": "array of integers"}});
    let r = t
        .worker
        .post_json(
            &format!("/v1/tasks/{id}/park"),
            &json!({"lease_id": lease(&c), "reason": "input noun missing", "needs": needs}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    let seen = task(&t.requester, &id).await;
    assert_eq!(
        (seen["state"].clone(), seen["park"]["needs"].clone()),
        (json!("parked"), needs)
    );
    assert_status!(
        submit(&t.worker, &id, &lease(&c), true, json!([])).await,
        409,
        "stale_lease"
    );

    let pin = put_noun(
        &t.resumer,
        "work.inputs",
        "numbers",
        json!({"numbers": [3, 4, 12]}),
    )
    .await;
    let r = t
        .worker
        .post_json(
            &format!("/v1/tasks/{id}/resume"),
            &json!({"input_ref": pin}),
        )
        .await
        .unwrap();
    assert_status!(r, 403, "forbidden");
    let r = t
        .outsider
        .post_json(
            &format!("/v1/tasks/{id}/resume"),
            &json!({"input_ref": pin}),
        )
        .await
        .unwrap();
    assert_status!(r, 404, "not_found");
    let r = t
        .resumer
        .post_json(
            &format!("/v1/tasks/{id}/resume"),
            &json!({"input_ref": pin}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    assert_eq!(body(&r)["state"], json!("queued"));
    let again = t
        .resumer
        .post_json(
            &format!("/v1/tasks/{id}/resume"),
            &json!({"input_ref": pin}),
        )
        .await
        .unwrap();
    assert_status!(again, 409, "invalid_state");
    let c2 = claim(&t.worker, "work.external").await.unwrap();
    assert_eq!(
        c2["task"]["brief"]["input_ref"], pin,
        "the new pin replaced brief.input_ref"
    );
    assert_eq!(c2["lease"]["fence"], json!(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn split_children_inherit_the_envelope_and_the_parent_is_reclaimed_with_their_receipts() {
    let t = Team::start().await;
    let mut parent_spec = spec("verb.solve_draft", json!({"numbers": [1, 2, 3, 4]}));
    parent_spec["visibility_scope"] = json!("allowlist_surfaces");
    parent_spec["allowed_surfaces"] = json!(["surface:partner"]);
    let parent = enqueue(&t.requester, &parent_spec).await;
    let c = claim(&t.worker, "work.external").await.unwrap();
    let child = |half: Value| json!({"queue": "work.external", "kind": "verb.compute", "effect_class": "write-internal", "brief": {"numbers": half}});
    let widen = json!({"lease_id": lease(&c), "children": [{"queue": "work.external", "kind": "verb.compute", "effect_class": "write-internal", "brief": {}, "visibility_scope": "public"}]});
    assert_status!(
        t.worker
            .post_json(&format!("/v1/tasks/{parent}/split"), &widen)
            .await
            .unwrap(),
        422,
        "split_widens"
    );
    let too_many: Vec<Value> = (0..65).map(|_| child(json!([]))).collect();
    let r = t
        .worker
        .post_json(
            &format!("/v1/tasks/{parent}/split"),
            &json!({"lease_id": lease(&c), "children": too_many}),
        )
        .await
        .unwrap();
    assert_status!(r, 422, "split_limit");

    let r = t.worker.post_json(&format!("/v1/tasks/{parent}/split"), &json!({"lease_id": lease(&c), "children": [child(json!([1, 2])), child(json!([3, 4]))]})).await.unwrap();
    assert_status!(r, 200);
    let kids: Vec<String> = body(&r)["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let p = task(&t.requester, &parent).await;
    assert_eq!(p["state"], json!("waiting"));
    for k in &kids {
        let kv = task(&t.worker, k).await;
        assert_eq!(kv["visibility_scope"], json!("allowlist_surfaces"));
        assert_eq!(kv["allowed_surfaces"], json!(["partner"]));
        assert_eq!(kv["producer_surface"], json!(SURFACE));
        assert_eq!(kv["parent"], json!(parent));
    }
    let mut receipts = Vec::new();
    for _ in 0..2 {
        let cc = claim(&t.worker, "work.external").await.unwrap();
        let kid = claimed_id(&cc);
        assert!(kids.contains(&kid));
        let sum: i64 = cc["task"]["brief"]["numbers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_i64().unwrap().pow(2))
            .sum();
        let pin = put_noun(
            &t.worker,
            "work.artifacts",
            &format!("partial-{kid}"),
            json!({"partial": sum}),
        )
        .await;
        let r = submit(&t.worker, &kid, &lease(&cc), true, json!([pin])).await;
        assert_status!(r, 201);
        receipts.push(body(&r)["receipt_sha256"].clone());
    }
    let again = claim(&t.worker, "work.external").await.unwrap();
    assert_eq!(
        claimed_id(&again),
        parent,
        "the parent is queued again once both children ended"
    );
    assert_eq!(again["lease"]["fence"], json!(2));
    let seen: Vec<Value> = again["task"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["receipt"].clone())
        .collect();
    assert_eq!(seen.len(), 2);
    for r in &receipts {
        assert!(seen.contains(r), "the reclaimer sees each child's receipt");
    }
    assert!(
        again["task"]["children"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["state"] == "succeeded" && c["ok"] == true)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn split_depth_is_bounded() {
    let t = Team::start_with(|c| c.queue.max_split_depth = 1).await;
    let root = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let c = claim(&t.worker, "work.external").await.unwrap();
    let child = json!({"queue": "work.external", "kind": "verb.compute", "effect_class": "write-internal", "brief": {}});
    assert_status!(
        t.worker
            .post_json(
                &format!("/v1/tasks/{root}/split"),
                &json!({"lease_id": lease(&c), "children": [child]})
            )
            .await
            .unwrap(),
        200
    );
    let cc = claim(&t.worker, "work.external").await.unwrap();
    let r = t
        .worker
        .post_json(
            &format!("/v1/tasks/{}/split", claimed_id(&cc)),
            &json!({"lease_id": lease(&cc), "children": [child]}),
        )
        .await
        .unwrap();
    assert_status!(r, 422, "split_limit");
}

#[tokio::test(flavor = "multi_thread")]
async fn dependents_wait_for_upstreams_and_go_on_after_failure_or_cancellation() {
    let t = Team::start().await;
    let failing = enqueue(
        &t.requester,
        &spec("verb.solve_draft", json!({"n": "fails"})),
    )
    .await;
    let cancelled = enqueue(
        &t.requester,
        &spec("verb.solve_draft", json!({"n": "cancelled"})),
    )
    .await;
    let mut dep = spec("verb.verify_gate", json!({}));
    dep["depends_on"] = json!([failing, cancelled]);
    let downstream = enqueue(&t.requester, &dep).await;
    assert_eq!(
        task(&t.requester, &downstream).await["state"],
        json!("pending")
    );

    let c = t
        .worker
        .post_json(&format!("/v1/tasks/{failing}/claim"), &json!({}))
        .await
        .unwrap();
    let c = body(&c);
    let r = t
        .worker
        .post_json(
            &format!("/v1/tasks/{failing}/submit"),
            &json!({"lease_id": lease(&c), "ok": false, "final": true}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    assert_eq!(
        task(&t.requester, &downstream).await["state"],
        json!("pending"),
        "one upstream still open"
    );
    let r = t
        .worker
        .post_json(&format!("/v1/tasks/{cancelled}/cancel"), &json!({}))
        .await
        .unwrap();
    assert_status!(r, 403, "forbidden");
    let r = t
        .requester
        .post_json(&format!("/v1/tasks/{cancelled}/cancel"), &json!({}))
        .await
        .unwrap();
    assert_status!(r, 200);
    let again = t
        .requester
        .post_json(&format!("/v1/tasks/{cancelled}/cancel"), &json!({}))
        .await
        .unwrap();
    assert_status!(again, 409, "invalid_state");

    let c = claim(&t.worker, "work.external").await.unwrap();
    assert_eq!(claimed_id(&c), downstream);
    let up = c["task"]["upstream"].as_array().unwrap();
    let failed = up
        .iter()
        .find(|u| u["task_id"] == failing.as_str())
        .unwrap();
    assert_eq!(
        (failed["state"].clone(), failed["ok"].clone()),
        (json!("failed"), json!(false))
    );
    assert!(
        failed["receipt"].is_string(),
        "the failed upstream's receipt is visible"
    );
    let gone = up
        .iter()
        .find(|u| u["task_id"] == cancelled.as_str())
        .unwrap();
    assert_eq!(
        (gone["state"].clone(), gone["ok"].clone()),
        (json!("cancelled"), json!(false))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_reaches_every_live_descendant_and_terminal_tasks_never_change() {
    let t = Team::start().await;
    let parent = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let c = claim(&t.worker, "work.external").await.unwrap();
    let child = json!({"queue": "work.external", "kind": "verb.compute", "effect_class": "write-internal", "brief": {}});
    let r = t
        .worker
        .post_json(
            &format!("/v1/tasks/{parent}/split"),
            &json!({"lease_id": lease(&c), "children": [child, child]}),
        )
        .await
        .unwrap();
    let kids: Vec<String> = body(&r)["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let kc = t
        .worker
        .post_json(&format!("/v1/tasks/{}/claim", kids[0]), &json!({}))
        .await
        .unwrap();
    let kc = body(&kc);
    assert_status!(
        submit(&t.worker, &kids[0], &lease(&kc), true, json!([])).await,
        201
    );
    let r =
        t.d.admin
            .post_json(&format!("/v1/tasks/{parent}/cancel"), &json!({}))
            .await
            .unwrap();
    assert_status!(r, 200);
    assert_eq!(
        task(&t.requester, &parent).await["state"],
        json!("cancelled")
    );
    assert_eq!(
        task(&t.requester, &kids[0]).await["state"],
        json!("succeeded"),
        "a terminal child never changes"
    );
    assert_eq!(
        task(&t.requester, &kids[1]).await["state"],
        json!("cancelled")
    );
    assert!(claim(&t.worker, "work.external").await.is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn server_queues_need_an_explicit_grant_and_some_effect_classes_need_admin() {
    let t = Team::start().await;
    let mut server_task = spec("verb.solve_draft", json!({}));
    server_task["queue"] = json!("work.server");
    let r = t
        .requester
        .post_json("/v1/tasks", &server_task)
        .await
        .unwrap();
    assert_status!(r, 404, "unknown_queue");
    let r =
        t.d.admin
            .post_json("/v1/tasks", &server_task)
            .await
            .unwrap();
    assert_status!(r, 403, "forbidden");
    let r = t
        .worker
        .post_json("/v1/queues/work.server/claim", &json!({}))
        .await
        .unwrap();
    assert_status!(r, 404, "unknown_queue");
    let r =
        t.d.admin
            .post_json("/v1/queues/work.server/claim", &json!({}))
            .await
            .unwrap();
    assert_status!(r, 403, "forbidden");
    let mut tagged = spec(
        "verb.solve_draft",
        json!({"execution": {"worker": "server"}}),
    );
    tagged["tags"] = json!(["queue:work.server", "model:big"]);
    let id = enqueue(&t.requester, &tagged).await;
    assert_eq!(
        task(&t.requester, &id).await["queue"],
        json!("work.external"),
        "tags route nothing"
    );
    let server_worker = t.d.admin.post_json("/v1/keys", &json!({"label": "server worker", "grants": {"queues": ["work.server"], "kinds": ["verb.solve_draft"], "effect_classes": ["write-internal"], "scopes": [format!("namespace:{NS}"), format!("surface:{SURFACE}"), "verbs:claim", "verbs:enqueue"]}})).await.unwrap();
    let sw = t.d.client(body(&server_worker)["secret"].as_str().unwrap());
    let sid = enqueue(&sw, &server_task).await;
    assert_eq!(claimed_id(&claim(&sw, "work.server").await.unwrap()), sid);

    let mut repo = spec("verb.solve_draft", json!({}));
    repo["effect_class"] = json!("write-repo");
    let r = t.requester.post_json("/v1/tasks", &repo).await.unwrap();
    assert_status!(r, 403, "forbidden");
    let rid = enqueue(&t.d.admin, &repo).await;
    assert!(
        claim(&t.worker, "work.external")
            .await
            .is_some_and(|c| claimed_id(&c) == id),
        "the worker skips the admin-only task"
    );
    let r = t
        .worker
        .post_json(&format!("/v1/tasks/{rid}/claim"), &json!({}))
        .await
        .unwrap();
    assert_status!(r, 403, "forbidden");
    let r =
        t.d.admin
            .post_json(&format!("/v1/tasks/{rid}/claim"), &json!({}))
            .await
            .unwrap();
    assert_status!(r, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn lists_show_only_what_the_key_may_see_page_by_page() {
    let t = Team::start().await;
    for i in 0..5 {
        enqueue(&t.requester, &spec("verb.solve_draft", json!({"i": i}))).await;
    }
    let mut private = spec("verb.solve_draft", json!({}));
    private["visibility_scope"] = json!("private");
    let hidden = enqueue(&t.requester, &private).await;
    let page = body(&t.worker.get("/v1/tasks?limit=3").await.unwrap());
    assert_eq!(page["tasks"].as_array().unwrap().len(), 3);
    let cursor = page["next_cursor"].as_str().unwrap().to_string();
    let rest = body(
        &t.worker
            .get(&format!("/v1/tasks?limit=3&cursor={cursor}"))
            .await
            .unwrap(),
    );
    assert_eq!(
        rest["tasks"].as_array().unwrap().len(),
        2,
        "the requester's private task is not listed for the worker"
    );
    assert_eq!(rest["next_cursor"], Value::Null);
    assert_status!(
        t.worker.get(&format!("/v1/tasks/{hidden}")).await.unwrap(),
        404,
        "not_found"
    );
    assert_eq!(task(&t.requester, &hidden).await["state"], json!("queued"));
    assert!(
        body(&t.outsider.get("/v1/tasks").await.unwrap())["tasks"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let filtered = body(
        &t.requester
            .get("/v1/tasks?state=queued&kind=verb.solve_draft&queue=work.external")
            .await
            .unwrap(),
    );
    assert_eq!(filtered["tasks"].as_array().unwrap().len(), 6);
    assert_status!(
        t.requester.get("/v1/tasks?state=bogus").await.unwrap(),
        400,
        "invalid_query"
    );
}

#[path = "../examples/team_private_work/scenario.rs"]
mod scenario;

#[tokio::test(flavor = "multi_thread")]
async fn the_team_private_work_scenario_holds_step_by_step_and_repeats_exactly() {
    let first = TestDaemon::start().await;
    let rep = scenario::run(&first.admin)
        .await
        .expect("the scenario runs");
    assert_eq!(rep.steps.len(), 6, "{:#?}", rep.steps);
    assert_eq!(rep.children.len(), 2, "{:?}", rep.children);
    assert!(
        !rep.children.contains(&rep.parent) && rep.children[0] != rep.children[1],
        "three tasks: {} and {:?}",
        rep.parent,
        rep.children
    );
    assert_eq!(
        rep.park_needs["input_ref"],
        json!({"namespace": NS, "store": "work.inputs", "key": "numbers"})
    );
    assert_eq!(rep.park_needs["type"], json!("noun.input"));
    assert_eq!(rep.result, 244, "3²+4²+12²+5²+1²+7²");
    let checks: Vec<(&str, bool)> = rep
        .checks
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["ok"] == true))
        .collect();
    assert_eq!(
        checks,
        [
            ("contract_is_valid", true),
            ("input_matches_schema", true),
            ("output_matches_schema", true),
            ("result_is_non_negative", true),
            ("result_matches_recomputation", true)
        ]
    );
    for b in &rep.boundaries {
        assert!(
            b.held(),
            "boundary broken: {}: expected {}, got {} {}",
            b.name,
            b.expected,
            b.got,
            b.code
        );
    }
    assert_eq!(rep.boundaries.len(), 4);
    assert_eq!(rep.receipts.len(), 3);
    let parent = &rep.receipt_records[2];
    assert_eq!(
        (parent["ok"].clone(), parent["attempt"].clone()),
        (json!(true), json!(3)),
        "park, split and combine are three attempts"
    );
    assert_eq!(parent["outputs"][0]["sha256"], rep.artifact["sha256"]);
    assert_eq!(parent["evidence"][0]["sha256"], rep.self_check["sha256"]);
    let self_check = body(
        &first
            .admin
            .get(&format!(
                "/v1/nouns/{NS}/work.evidence/sum-squares-self-check"
            ))
            .await
            .unwrap(),
    );
    assert_eq!(
        (
            self_check["combined"].clone(),
            self_check["recomputed"].clone(),
            self_check["ok"].clone()
        ),
        (json!(244), json!(244), json!(true))
    );
    let types = body(
        &first
            .admin
            .get(&format!(
                "/v1/nouns/{NS}/work.artifacts/sum-squares-result/versions"
            ))
            .await
            .unwrap(),
    );
    assert_eq!(types["versions"][0]["type"], json!("noun.eval_run"));

    let second = TestDaemon::start().await;
    let again = scenario::run(&second.admin)
        .await
        .expect("the scenario runs again");
    assert_eq!(
        again.content_fingerprint(),
        rep.content_fingerprint(),
        "same input, same content fingerprint"
    );
    assert_ne!(
        again.run_fingerprint(),
        rep.run_fingerprint(),
        "receipts hold their time and key, so run fingerprints differ"
    );
}

/// A solve_draft task under the example contract, claimed by the worker.
async fn contract_task(t: &Team, numbers: Value) -> (String, Value) {
    let contract = json!({
        "contract": "tessera.work.example.v1",
        "operation": {"name": "sum_of_squares"},
        "input_schema": {"type": "object", "required": ["numbers"]},
        "output_schema": {"type": "object", "required": ["sum_of_squares"], "additionalProperties": false, "properties": {"sum_of_squares": {"type": "integer"}}},
        "checks": [{"name": "output_matches_schema"}, {"name": "result_matches_recomputation", "recompute": "sum_of_squares"}],
        "shims": "none",
        "execution": {"worker": "external", "server_fallback": false},
    });
    let contract_pin = put_noun(&t.requester, "work.contracts", "c", contract).await;
    let input_pin = put_noun(
        &t.requester,
        "work.inputs",
        "n",
        json!({"numbers": numbers}),
    )
    .await;
    let id = enqueue(
        &t.requester,
        &spec(
            "verb.solve_draft",
            json!({"contract_ref": contract_pin, "input_ref": input_pin}),
        ),
    )
    .await;
    let c = t
        .worker
        .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
        .await
        .unwrap();
    (id, body(&c))
}

/// The daemon reads a task's contract and input as its requester, again
/// when the checks run: a pin the requester can no longer read fails its
/// check without a word about the noun, and no check detail echoes an
/// instance value.
#[tokio::test(flavor = "multi_thread")]
async fn contract_checks_read_pins_as_the_requester_and_never_echo_values() {
    let t = Team::start().await;
    let (id, c) = contract_task(&t, json!([1, 2, 3])).await;
    let brief = &c["task"]["brief"];
    let (contract_sha, input_sha) = (
        brief["contract_ref"]["sha256"]
            .as_str()
            .unwrap()
            .to_string(),
        brief["input_ref"]["sha256"].as_str().unwrap().to_string(),
    );
    let r =
        t.d.admin
            .post_json(
                &format!("/v1/nouns/{NS}/work.contracts/c/quarantine"),
                &json!({}),
            )
            .await
            .unwrap();
    assert_status!(r, 200);
    let out = put_noun(
        &t.worker,
        "work.artifacts",
        "secretive",
        json!({"sum_of_squares": "s3cr3t-value"}),
    )
    .await;
    let r = submit(&t.worker, &id, &lease(&c), true, json!([out])).await;
    assert_status!(r, 201);
    assert_eq!(body(&r)["state"], json!("failed"));
    let rec = body(
        &t.requester
            .get(&format!("/v1/tasks/{id}/receipts"))
            .await
            .unwrap(),
    );
    let checks = &rec["receipts"][0]["receipt"]["checks"];
    assert_eq!(checks[0]["name"], json!("contract_is_valid"));
    assert_eq!(checks[0]["ok"], json!(false));
    assert!(
        checks[0]["detail"]
            .as_str()
            .unwrap()
            .contains("not readable by the task's requester"),
        "{checks}"
    );
    assert!(!checks.to_string().contains(&contract_sha), "{checks}");
    let r =
        t.d.admin
            .post_json(
                &format!("/v1/nouns/{NS}/work.contracts/c/unquarantine"),
                &json!({}),
            )
            .await
            .unwrap();
    assert_status!(r, 200);

    let (id, c) = contract_task(&t, json!([1, 2, 3])).await;
    let r = submit(&t.worker, &id, &lease(&c), true, json!([out])).await;
    assert_status!(r, 201);
    let rec = body(
        &t.requester
            .get(&format!("/v1/tasks/{id}/receipts"))
            .await
            .unwrap(),
    );
    let checks = rec["receipts"][0]["receipt"]["checks"].to_string();
    assert!(
        checks.contains("/sum_of_squares: must be integer (`type`), found a string"),
        "{checks}"
    );
    for secret in ["s3cr3t-value", "\"numbers\"", &input_sha] {
        assert!(!checks.contains(secret), "{secret} echoed in {checks}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_contract_check_fails_the_task_with_its_message() {
    let t = Team::start().await;
    let (id, c) = contract_task(&t, json!([1, 2, 3])).await;
    let wrong = put_noun(
        &t.worker,
        "work.artifacts",
        "wrong",
        json!({"sum_of_squares": 15}),
    )
    .await;
    let r = submit(&t.worker, &id, &lease(&c), true, json!([wrong])).await;
    assert_status!(r, 201);
    assert_eq!(
        (body(&r)["state"].clone(), body(&r)["ok"].clone()),
        (json!("failed"), json!(false))
    );
    let seen = task(&t.requester, &id).await;
    assert_eq!(
        seen["reason"],
        json!(
            "check result_matches_recomputation failed: output 0: /sum_of_squares: differs from the recomputation (`recompute`), found an integer"
        )
    );
    let rec = body(
        &t.requester
            .get(&format!("/v1/tasks/{id}/receipts"))
            .await
            .unwrap(),
    );
    let checks = &rec["receipts"][0]["receipt"]["checks"];
    assert_eq!(
        checks
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["ok"] == false)
            .count(),
        1
    );

    // Generic nouns still accept any JSON; only a task's contract is checked.
    let r = t
        .worker
        .put_json(
            &format!("/v1/nouns/{NS}/work.artifacts/free"),
            &json!({"expected_version": 0, "body": {"anything": ["goes", 1, null]}}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    let (id2, c2) = contract_task(&t, json!([2])).await;
    let bad_shape = put_noun(
        &t.worker,
        "work.artifacts",
        "shape",
        json!({"sum_of_squares": 4, "extra": true}),
    )
    .await;
    let r = submit(&t.worker, &id2, &lease(&c2), true, json!([bad_shape])).await;
    assert_eq!(body(&r)["state"], json!("failed"));
    assert!(
        task(&t.requester, &id2).await["reason"]
            .as_str()
            .unwrap()
            .starts_with("check output_matches_schema failed")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn promotion_needs_every_stage_receipt_and_distinct_actors_then_adds_a_public_version() {
    let t = Team::start().await;
    let (solve, c) = contract_task(&t, json!([3, 4])).await;
    let artifact = put_noun(
        &t.worker,
        "work.artifacts",
        "result",
        json!({"sum_of_squares": 25}),
    )
    .await;
    assert_status!(
        submit(&t.worker, &solve, &lease(&c), true, json!([artifact])).await,
        201
    );
    let promote = |stages: Value, pin: Value| json!({"pin": pin, "stages": stages});

    // Only the solve stage: the verify_gate stage is missing.
    let r =
        t.d.admin
            .post_json("/v1/promotions", &promote(json!([solve]), artifact.clone()))
            .await
            .unwrap();
    assert_status!(r, 422, "promotion_refused");
    assert!(
        body(&r)["error"]["details"]["problems"]
            .to_string()
            .contains("verb.verify_gate")
    );

    // A verify_gate by the same worker key: not distinct actors.
    let gate = enqueue(&t.requester, &spec("verb.verify_gate", json!({}))).await;
    let gc = body(
        &t.worker
            .post_json(&format!("/v1/tasks/{gate}/claim"), &json!({}))
            .await
            .unwrap(),
    );
    assert_status!(
        submit(&t.worker, &gate, &lease(&gc), true, json!([artifact])).await,
        201
    );
    let r =
        t.d.admin
            .post_json(
                "/v1/promotions",
                &promote(json!([solve, gate]), artifact.clone()),
            )
            .await
            .unwrap();
    assert_status!(r, 422, "promotion_refused");
    assert!(
        body(&r)["error"]["details"]["problems"]
            .to_string()
            .contains("same key")
    );

    // An independent reviewer key passes the gate.
    let reviewer = t.d.admin.post_json("/v1/keys", &json!({"label": "reviewer", "grants": {"queues": ["work.external"], "kinds": ["verb.verify_gate"], "effect_classes": ["write-internal"], "scopes": [format!("namespace:{NS}"), format!("surface:{SURFACE}"), "nouns:read", "verbs:claim", "verbs:submit"]}})).await.unwrap();
    let reviewer = t.d.client(body(&reviewer)["secret"].as_str().unwrap());
    let gate2 = enqueue(&t.requester, &spec("verb.verify_gate", json!({}))).await;
    let rc = body(
        &reviewer
            .post_json(&format!("/v1/tasks/{gate2}/claim"), &json!({}))
            .await
            .unwrap(),
    );
    let r = reviewer
        .post_json(
            &format!("/v1/tasks/{gate2}/submit"),
            &json!({"lease_id": lease(&rc), "ok": true, "evidence": [artifact]}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);

    let mut wrong = artifact.clone();
    wrong["sha256"] = json!("1".repeat(64));
    let r =
        t.d.admin
            .post_json("/v1/promotions", &promote(json!([solve, gate2]), wrong))
            .await
            .unwrap();
    assert_status!(r, 422, "promotion_refused");
    let r = t
        .requester
        .post_json(
            "/v1/promotions",
            &promote(json!([solve, gate2]), artifact.clone()),
        )
        .await
        .unwrap();
    assert_status!(r, 403, "forbidden");
    let before = body(
        &t.d.admin
            .get(&format!("/v1/nouns/{NS}/work.artifacts/result/versions"))
            .await
            .unwrap(),
    );
    assert_eq!(
        before["versions"].as_array().unwrap().len(),
        1,
        "refused promotions changed nothing"
    );

    let r =
        t.d.admin
            .post_json(
                "/v1/promotions",
                &promote(json!([solve, gate2]), artifact.clone()),
            )
            .await
            .unwrap();
    assert_status!(r, 201);
    let record_sha = body(&r)["promotion_sha256"].as_str().unwrap().to_string();
    let record = &body(&r)["promotion"];
    assert_eq!(record["to"]["version"], json!(2));
    assert_eq!(
        record["to"]["sha256"], artifact["sha256"],
        "the same bytes, a new version"
    );
    assert_eq!(record["stages"].as_array().unwrap().len(), 2);
    assert!(
        support::object_stored(t.d.root(), &record_sha),
        "the promotion record is an object"
    );
    let after = body(
        &t.d.admin
            .get(&format!("/v1/nouns/{NS}/work.artifacts/result/versions"))
            .await
            .unwrap(),
    );
    assert_eq!(
        after["versions"][0]["visibility"],
        json!("surface_only"),
        "version 1 is never rewritten"
    );
    assert_eq!(after["versions"][1]["visibility"], json!("public"));
    let r = t
        .outsider
        .get(&format!("/v1/nouns/{NS}/work.artifacts/result"))
        .await
        .unwrap();
    assert_status!(r, 200);
    let r = t
        .outsider
        .get(&format!("/v1/nouns/{NS}/work.artifacts/result?version=1"))
        .await
        .unwrap();
    // To the outsider version 1 is missing: answered as a version never
    // written, naming the latest it may see.
    assert_status!(r, 404, "version_not_found");
    assert_eq!(
        body(&r)["error"]["details"],
        json!({"version": 1, "latest": 2})
    );
    // The promotion record is kept for audit and nothing names it: fsck
    // knows it for what it is, not for a lost noun's object.
    let mut t = t;
    t.d.stop().await;
    fsck_is_clean(t.d.root());
}

/// The promotion gate's stages are the operator's policy: a contract a
/// requester wrote cannot lower them, an admin-provisioned queue sets
/// them, and a stage counts only when its receipt holds exactly the pin
/// promoted (the same bytes under another name do not count).
#[tokio::test(flavor = "multi_thread")]
async fn promotion_stages_come_from_admin_policy_and_exact_pins() {
    let t = Team::start().await;
    let (solve, c) = contract_task(&t, json!([3, 4])).await;
    let mut lax = body(
        &t.requester
            .get(&format!("/v1/nouns/{NS}/work.contracts/c"))
            .await
            .unwrap(),
    );
    lax["required_stages"] = json!(["verb.solve_draft"]);
    put_noun(&t.requester, "work.contracts", "c", lax).await;
    let artifact = put_noun(
        &t.worker,
        "work.artifacts",
        "result",
        json!({"sum_of_squares": 25}),
    )
    .await;
    let twin = put_noun(
        &t.worker,
        "work.artifacts",
        "twin",
        json!({"sum_of_squares": 25}),
    )
    .await;
    assert_eq!(artifact["sha256"], twin["sha256"]);
    assert_status!(
        submit(&t.worker, &solve, &lease(&c), true, json!([artifact])).await,
        201
    );

    let promote = |pin: &Value| json!({"pin": pin, "stages": [solve]});
    let r =
        t.d.admin
            .post_json("/v1/promotions", &promote(&artifact))
            .await
            .unwrap();
    assert_status!(r, 422, "promotion_refused");
    assert!(
        body(&r)["error"]["details"]["problems"]
            .to_string()
            .contains("verb.verify_gate"),
        "a requester's contract does not lower the policy"
    );

    let policy = json!({"name": "work.external", "lease_ttl_s": 30, "max_attempts": 3, "backoff": {"base_ms": 50, "cap_ms": 200}, "required_stages": ["verb.solve_draft"]});
    assert_status!(
        t.d.admin.post_json("/v1/queues", &policy).await.unwrap(),
        200
    );
    let r =
        t.d.admin
            .post_json("/v1/promotions", &promote(&twin))
            .await
            .unwrap();
    assert_status!(r, 422, "promotion_refused");
    assert!(
        body(&r)["error"]["details"]["problems"]
            .to_string()
            .contains("exactly this pin"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let r =
        t.d.admin
            .post_json("/v1/promotions", &promote(&artifact))
            .await
            .unwrap();
    assert_status!(r, 201);
    assert_eq!(
        body(&r)["promotion"]["required_stages"],
        json!(["verb.solve_draft"])
    );
}

/// One request per job: a submit with `claim_next` answers the next claim
/// (or `null` when none is ready), a resend of the submit (whose answer
/// was lost) claims afresh, and every task is claimed once; `max` claims
/// several.
#[tokio::test(flavor = "multi_thread")]
async fn a_submit_claims_the_next_task_and_a_claim_takes_several() {
    let t = Team::start().await;
    let ids: Vec<String> = {
        let mut ids = Vec::new();
        for i in 0..4 {
            ids.push(enqueue(&t.requester, &spec("verb.compute", json!({"i": i}))).await);
        }
        ids
    };
    let first = claim(&t.worker, "work.external").await.unwrap();
    let id = claimed_id(&first);
    let body_of = |c: &Value| json!({"lease_id": lease(c), "ok": true, "claim_next": {"queue": "work.external"}});
    let r = t
        .worker
        .post_json(&format!("/v1/tasks/{id}/submit"), &body_of(&first))
        .await
        .unwrap();
    assert_status!(r, 201);
    let next = body(&r)["next"].clone();
    assert_eq!(next["lease"]["fence"], json!(1), "{next}");
    assert_ne!(claimed_id(&next), id);
    let again = t
        .worker
        .post_json(&format!("/v1/tasks/{id}/submit"), &body_of(&first))
        .await
        .unwrap();
    assert_status!(again, 200);
    let many = t
        .worker
        .post_json("/v1/queues/work.external/claim", &json!({"max": 5}))
        .await
        .unwrap();
    assert_status!(many, 200);
    let claims = body(&many)["claims"].as_array().unwrap().clone();
    let resent_claim = body(&again)["next"].clone();
    let taken: Vec<String> = claims
        .iter()
        .map(claimed_id)
        .chain([claimed_id(&next)])
        .chain(resent_claim.get("task").map(|_| claimed_id(&resent_claim)))
        .collect();
    let mut all: Vec<String> = taken.clone();
    all.push(id.clone());
    all.sort();
    all.dedup();
    assert_eq!(all.len(), ids.len(), "every task claimed once: {taken:?}");
    let last = claimed_id(&next);
    let r = t
        .worker
        .post_json(&format!("/v1/tasks/{last}/submit"), &body_of(&next))
        .await
        .unwrap();
    assert_status!(r, 201);
    assert_eq!(body(&r)["next"], Value::Null, "nothing left: next is null");
    let r = t
        .worker
        .post_json(
            &format!("/v1/tasks/{last}/submit"),
            &json!({"lease_id": lease(&next), "ok": true, "claim_next": {"queue": "work.server"}}),
        )
        .await
        .unwrap();
    assert_status!(r, 404, "unknown_queue");
    let r = t
        .worker
        .post_json("/v1/queues/work.external/claim", &json!({"max": 101}))
        .await
        .unwrap();
    assert_status!(r, 400, "invalid_field");
}
