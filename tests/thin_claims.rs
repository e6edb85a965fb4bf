//! Thin claims (issue 32): a claim answered the whole brief, so an
//! orchestrator that claims for an agent read the prompt's content,
//! against seed 000's thin relay. A claim with `"thin": true` answers the
//! handle, task id, attempt, lease and routing facts only; the agent
//! fetches the rest with the handle (`GET /v1/worker/prompt`). Checked on
//! the claim route, with `max`, on a submit's `claim_next`, and on the
//! claim by id.

use crate::support;

use serde_json::{Value, json};
use support::*;

/// A brief whose text must not reach a thin claim's holder.
const SECRET: &str = "the-brief-only-the-agent-reads";

/// The fields a thin claim carries, and nothing else: the task's
/// traits (priority, labels, run settings) among them.
const THIN_FIELDS: [&str; 14] = [
    "attempt",
    "check_policy",
    "handle",
    "kind",
    "lease",
    "lease_ttl_s",
    "namespace",
    "on_upstream_failure",
    "priority",
    "prompt_url",
    "queue",
    "tags",
    "target_cohorts",
    "task_id",
];

/// Checks `claim` is thin, for task `id`, and that its handle fetches
/// the prompt with the brief.
async fn is_thin(t: &Team, claim: &Value, id: &str) {
    let text = claim.to_string();
    assert!(
        !text.contains(SECRET),
        "a thin claim carries the brief: {text}"
    );
    let mut fields: Vec<&str> = claim
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(fields, THIN_FIELDS, "{claim}");
    assert_eq!(claim["task_id"], json!(id));
    assert_eq!(claim["attempt"], json!(1));
    assert_eq!(claim["queue"], json!("work.external"));
    assert_eq!(claim["kind"], json!("verb.solve_draft"));
    assert_eq!(claim["namespace"], json!(NS));
    assert!(claim["lease"]["id"].is_string(), "{claim}");
    let handle = claim["handle"].as_str().unwrap();
    let agent = t.d.client(handle);
    let r = agent
        .get(claim["prompt_url"].as_str().unwrap())
        .await
        .unwrap();
    assert_status!(r, 200);
    let prompt = body(&r);
    assert_eq!(prompt["task_id"], json!(id));
    assert_eq!(prompt["brief"]["secret"], json!(SECRET), "{prompt}");
}

async fn enqueue_one(t: &Team) -> String {
    enqueue(
        &t.requester,
        &spec("verb.solve_draft", json!({"secret": SECRET})),
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thin_claim_answers_the_handle_and_routing_facts_without_the_brief() {
    let t = Team::start().await;
    let path = "/v1/queues/work.external/claim";

    let id = enqueue_one(&t).await;
    let r = t
        .worker
        .post_json(path, &json!({"thin": true}))
        .await
        .unwrap();
    assert_status!(r, 200);
    is_thin(&t, &body(&r), &id).await;

    let ids = [enqueue_one(&t).await, enqueue_one(&t).await];
    let r = t
        .worker
        .post_json(path, &json!({"thin": true, "max": 5}))
        .await
        .unwrap();
    assert_status!(r, 200);
    let many = body(&r);
    let claims = many["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 2, "{many}");
    for (claim, id) in claims.iter().zip(&ids) {
        is_thin(&t, claim, id).await;
    }

    // A full claim still carries the brief, for a worker that acts itself.
    let id = enqueue_one(&t).await;
    let full = claim(&t.worker, "work.external").await.unwrap();
    assert_eq!(claimed_id(&full), id);
    assert_eq!(full["task"]["brief"]["secret"], json!(SECRET));
    assert!(full["token"].is_string(), "{full}");

    // A submit's claim_next answers the next claim thin when asked.
    let next = enqueue_one(&t).await;
    let r = t
        .worker
        .post_json(
            &format!("/v1/tasks/{id}/submit"),
            &json!({"lease_id": lease(&full), "ok": true, "outputs": [],
                "claim_next": {"queue": "work.external", "thin": true}}),
        )
        .await
        .unwrap();
    assert!(
        r.status.is_success(),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    is_thin(&t, &body(&r)["next"], &next).await;
}

/// The claim by id answers thin too (with `{"thin": true}`), and whole
/// with no body or `{}`; a field it does not know is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_by_id_answers_thin_when_asked() {
    let t = Team::start().await;
    let id = enqueue_one(&t).await;
    let path = format!("/v1/tasks/{id}/claim");
    let r = t
        .worker
        .post_json(&path, &json!({"thin": true, "wait": 1}))
        .await
        .unwrap();
    assert_status!(r, 400, "unknown_field");
    let r = t
        .worker
        .post_json(&path, &json!({"thin": true}))
        .await
        .unwrap();
    assert_status!(r, 200);
    is_thin(&t, &body(&r), &id).await;

    for whole in [None, Some(json!({}))] {
        let id = enqueue_one(&t).await;
        let path = format!("/v1/tasks/{id}/claim");
        let r = match &whole {
            None => t.worker.post_bytes(&path, Vec::new()).await.unwrap(),
            Some(b) => t.worker.post_json(&path, b).await.unwrap(),
        };
        assert_status!(r, 200);
        let full = body(&r);
        assert_eq!(full["task"]["brief"]["secret"], json!(SECRET), "{full}");
        assert!(full["token"].is_string(), "{full}");
    }
}
