//! A Blueprint flow end to end over real HTTP: `seeds/blueprint-flow`
//! (design → implement → review) imported by the real `tessera import`,
//! each step claimed by its own worker key holding only that step's kind.
//! Each worker's prompt carries its `consumes` resolved against the
//! upstream's receipt (pointer to the ctx-dir file, sha256, size, the
//! content inline); `GET /v1/tasks/{id}/output?path=` answers one part's
//! raw bytes. A part over the inline limit is a pointer whose URL the
//! agent's handle reads (`GET /v1/worker/consumes/{name}`). A failed upstream and an upstream the claimant may not see are
//! shown as missing, never dropped.

use crate::support;

use std::path::Path;

use serde_json::{Value, json};
use support::flow::*;
use support::*;

#[tokio::test]
async fn blueprint_flow_runs_end_to_end_with_separate_worker_keys() {
    let d = TestDaemon::start().await;
    provision(&d.admin).await;
    let importer = issue(
        &d.admin,
        "importer",
        &KINDS,
        &["cas:write", "verbs:enqueue"],
    )
    .await;
    let pack = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/blueprint-flow");
    // The plan shows the flow as its steps, with what each reads.
    let planned = import(&d.admin, &pack, &["--plan"], 2, &importer).await;
    for want in [
        "flow change (pack.yaml:19)",
        "  implement  change.implement  plan <- design $.parts[\"plan.md\"]",
    ] {
        assert!(planned.contains(want), "{want:?} not in:\n{planned}");
    }
    import(&d.admin, &pack, &[], 0, &importer).await;
    // Planned again, the applied pack has nothing to change: every field
    // it set (the flow's placement and check policy among them) reads
    // back the same from the daemon's view of each task.
    let again = import(&d.admin, &pack, &["--plan"], 0, &importer).await;
    assert!(!again.contains("conflict"), "{again}");
    println!("{again}");
    let (designer, implementer, reviewer) = (
        worker(&d.admin, "verb.design").await,
        worker(&d.admin, "verb.implement").await,
        worker(&d.admin, "verb.review").await,
    );
    // Only the first step is claimable: the others wait for their upstreams.
    assert!(claim(&implementer, "work.external").await.is_none());

    let (design_id, agent) = claim_as_agent(&designer).await;
    let p = prompt(&agent).await;
    assert_eq!(p["step"], "design");
    assert_eq!(p["consumes"], json!([]));
    assert!(p["prompt"].as_str().unwrap().contains("plan.md"), "{p:#}");
    let plan = b"# Plan\n1. add the flag\n2. test it\n";
    let plan_sha = stage(&agent, "plan.md", plan).await;
    finish(&agent, "", "design done").await;

    let (implement_id, agent) = claim_as_agent(&implementer).await;
    let p = prompt(&agent).await;
    assert_eq!(p["step"], "implement");
    let entry = consumed(&p, "plan");
    assert_eq!(entry["status"], "ready", "{entry:#}");
    assert_eq!(entry["role"], "data");
    assert_eq!(entry["path"], "$.parts[\"plan.md\"]");
    assert_eq!(entry["task_id"], design_id);
    assert_eq!(entry["state"], "succeeded");
    assert_eq!(entry["ok"], true);
    assert_eq!(entry["sha256"], plan_sha);
    assert_eq!(entry["size"], plan.len());
    assert_eq!(entry["body"], String::from_utf8_lossy(plan).as_ref());
    // The pointer is the file in the upstream's ctx-dir (the flow's placement).
    let file = entry["file_path"].as_str().unwrap();
    assert!(
        file.ends_with(&format!("flows/{design_id}/plan.md")),
        "{file}"
    );
    assert_eq!(std::fs::read(file).unwrap(), plan);
    let patch = b"--- a/import.rs\n+++ b/import.rs\n+    dry_run: bool,\n";
    let patch_sha = stage(&agent, "patch.diff", patch).await;
    finish(&agent, "", "Added the flag as planned.").await;

    let (review_id, agent) = claim_as_agent(&reviewer).await;
    let p = prompt(&agent).await;
    let names: Vec<&str> = p["consumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["notes", "patch", "plan"]);
    assert_eq!(consumed(&p, "plan")["sha256"], plan_sha);
    assert_eq!(consumed(&p, "patch")["sha256"], patch_sha);
    assert_eq!(consumed(&p, "patch")["task_id"], implement_id);
    let notes = consumed(&p, "notes");
    assert_eq!(notes["status"], "ready");
    assert_eq!(notes["body"], "Added the flag as planned.");
    assert!(
        notes["file_path"]
            .as_str()
            .unwrap()
            .ends_with("/implement.md")
    );
    finish(&agent, "", "approve").await;
    assert_eq!(task(&reviewer, &review_id).await["state"], "succeeded");

    // The final pull of one part: raw bytes, sha256 in a header.
    let r = reviewer
        .get(&format!(
            "/v1/tasks/{implement_id}/output?path=%24.parts%5B%22patch.diff%22%5D"
        ))
        .await
        .unwrap();
    assert_status!(r, 200);
    assert_eq!(r.body.as_ref(), patch);
    assert_eq!(r.header("x-tessera-sha256"), Some(patch_sha.as_str()));
    let r = reviewer
        .get(&format!("/v1/tasks/{implement_id}/output?path=%24.out"))
        .await
        .unwrap();
    assert_status!(r, 200);
    assert_eq!(r.body.as_ref(), b"Added the flag as planned.");
    for (query, status, code) in [
        ("%24.parts%5B%22none.md%22%5D", 404, "not_found"),
        ("%24.output", 400, "invalid_query"),
        ("%24.parts%5Bplan.md%5D", 400, "invalid_query"),
    ] {
        let r = reviewer
            .get(&format!("/v1/tasks/{implement_id}/output?path={query}"))
            .await
            .unwrap();
        assert_status!(r, status, code);
    }
}

/// A spec in the team's namespace; `brief` as given.
fn step(kind: &str, visibility: &str, brief: Value, depends_on: &[&str]) -> Value {
    let mut s = spec(kind, brief);
    s["visibility_scope"] = json!(visibility);
    s["depends_on"] = json!(depends_on);
    s
}

#[tokio::test]
async fn a_failed_or_hidden_upstream_is_shown_as_missing() {
    let d = TestDaemon::start().await;
    provision(&d.admin).await;
    let requester = d.client(&issue(&d.admin, "requester", &KINDS, &["verbs:enqueue"]).await);
    let designer = worker(&d.admin, "verb.design").await;
    let implementer = worker(&d.admin, "verb.implement").await;
    let consumes = json!({"plan": {"step": "design", "path": "$.parts[\"plan.md\"]"}});

    // A design that fails for good (after staging its part): its dependent
    // still runs and sees the part as missing, with the upstream's state.
    let design = enqueue(
        &requester,
        &step("verb.design", "surface_only", json!({}), &[]),
    )
    .await;
    let implement = enqueue(
        &requester,
        &step(
            "verb.implement",
            "surface_only",
            json!({"consumes": consumes}),
            &[&design],
        ),
    )
    .await;
    let (_, agent) = claim_as_agent(&designer).await;
    stage(&agent, "plan.md", b"# Plan").await;
    finish(&agent, "?ok=false&final=true", "cannot plan this").await;
    let (id, agent) = claim_as_agent(&implementer).await;
    assert_eq!(id, implement);
    let entry = consumed(&prompt(&agent).await, "plan").clone();
    assert_eq!(entry["status"], "missing", "{entry:#}");
    assert_eq!(entry["state"], "failed");
    assert_eq!(entry["ok"], false);
    assert_eq!(entry["task_id"], design);
    assert_eq!(entry["reason"], "the upstream has not succeeded");
    assert!(entry.get("body").is_none() && entry.get("sha256").is_none());
    let r = agent.get("/v1/worker/consumes/plan").await.unwrap();
    assert_status!(r, 404, "not_found");
    finish(&agent, "", "skipped").await;

    // An upstream only its requester (and admin) may see: the worker's
    // prompt names neither its id, nor its state, nor its part.
    let private = enqueue(&requester, &step("verb.design", "private", json!({}), &[])).await;
    let after = enqueue(
        &requester,
        &step(
            "verb.implement",
            "surface_only",
            json!({"consumes": consumes}),
            &[&private],
        ),
    )
    .await;
    let c = d
        .admin
        .post_json(&format!("/v1/tasks/{private}/claim"), &json!({}))
        .await
        .unwrap();
    assert_status!(c, 200);
    let admin_agent = d.client(body(&c)["handle"].as_str().unwrap());
    stage(&admin_agent, "plan.md", b"# Secret plan").await;
    finish(&admin_agent, "", "done").await;
    let (id, agent) = claim_as_agent(&implementer).await;
    assert_eq!(id, after);
    let p = prompt(&agent).await;
    let entry = consumed(&p, "plan");
    assert_eq!(entry["status"], "missing");
    assert_eq!(
        entry["reason"],
        "no upstream step \"design\" that this key may see"
    );
    for hidden in ["task_id", "state", "ok", "sha256", "body"] {
        assert!(entry.get(hidden).is_none(), "{hidden} shown: {entry:#}");
    }
    assert!(!p.to_string().contains("Secret plan"));
    let r = agent.get("/v1/worker/consumes/plan").await.unwrap();
    assert_status!(r, 404, "not_found");
    assert!(!p.to_string().contains(&format!("\"{private}\"")));
}

#[tokio::test]
async fn an_upstream_part_over_the_inline_limit_is_a_pointer_the_handle_can_read() {
    let d = TestDaemon::start().await;
    provision(&d.admin).await;
    let requester = d.client(&issue(&d.admin, "requester", &KINDS, &["verbs:enqueue"]).await);
    let designer = worker(&d.admin, "verb.design").await;
    let implementer = worker(&d.admin, "verb.implement").await;
    let design = enqueue(
        &requester,
        &step("verb.design", "surface_only", json!({}), &[]),
    )
    .await;
    let consumes = json!({"plan": {"step": "design", "path": "$.parts[\"plan.md\"]"}});
    enqueue(
        &requester,
        &step(
            "verb.implement",
            "surface_only",
            json!({"consumes": consumes}),
            &[&design],
        ),
    )
    .await;
    let (_, agent) = claim_as_agent(&designer).await;
    let big = vec![b'x'; 16 * 1024 + 1];
    let sha = stage(&agent, "plan.md", &big).await;
    finish(&agent, "", "done").await;

    let (_, agent) = claim_as_agent(&implementer).await;
    let entry = consumed(&prompt(&agent).await, "plan").clone();
    assert_eq!(entry["status"], "ready", "{entry:#}");
    assert_eq!(entry["size"], big.len());
    assert_eq!(entry["sha256"], sha);
    assert!(entry.get("body").is_none(), "too large to inline");
    // The agent, holding only its handle, reads it through the worker route.
    assert_eq!(entry["url"], "/v1/worker/consumes/plan");
    let r = agent.get("/v1/worker/consumes/plan").await.unwrap();
    assert_status!(r, 200);
    assert_eq!(r.body.as_ref(), big.as_slice());
    assert_eq!(r.header("x-tessera-sha256"), Some(sha.as_str()));
    let r = agent.get("/v1/worker/consumes/other").await.unwrap();
    assert_status!(r, 404, "not_found");
    // A key that may see the upstream reads the same bytes by address.
    let r = implementer
        .get(&format!(
            "/v1/tasks/{design}/output?path=%24.parts%5B%22plan.md%22%5D"
        ))
        .await
        .unwrap();
    assert_status!(r, 200);
    assert_eq!(r.header("x-tessera-sha256"), Some(sha.as_str()));
}
