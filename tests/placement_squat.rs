//! A placement squatted another task's ctx-dir (the trust boundary,
//! second pass). A template's fixed segment could have the shape of a task
//! id, so it could coincide with the `{task_id}` segment of another
//! template: task t5 placed at `flows/t8/{task_id}` created `flows/t8/` on
//! its way to `flows/t8/t5`, and the real t8, of another surface and
//! placed at `flows/{task_id}`, then found a directory no task owns at its
//! ctx-dir: every strict attempt failed with `500 projection_failed`, a
//! warn one had its projection skipped.
//!
//! Now no fixed segment before `{task_id}` may have the shape of a task id
//! (`t` and digits), wherever a template comes from: a task's placement
//! (enqueue, batch, MCP, import; split children inherit their parent's)
//! or a queue's. A task's `{task_id}` directory then lies on no other
//! task's path, so only that task ever creates it. Segments after
//! `{task_id}` lie inside the task's own directory and stay allowed.

use crate::support;

use std::process::Stdio;

use serde_json::{Value, json};
use support::*;
use tessera::client::{Client, Reply};

/// Templates whose fixed segments before `{task_id}` could be a task's
/// `{task_id}` directory (any case, leading zeros too).
const SQUATS: &[&str] = &[
    "t8/{task_id}",
    "flows/t8/{task_id}",
    "flows/T8/{task_id}/ctx",
    "a/t0/b/{task_id}",
    "t08/{task_id}",
];

/// Near misses that lie on no other task's path: accepted.
const ALLOWED: &[&str] = &[
    "flows/{task_id}/t8",
    "tasks/{task_id}/t8",
    "run-t8/{task_id}",
    "t/{task_id}",
    "tx8/{task_id}",
];

/// A spec in the team namespace placed at `template` under `policy`.
fn placed(template: &str, policy: &str) -> Value {
    let mut s = spec("verb.solve_draft", json!({"placed": template}));
    s["placement"] = json!(template);
    s["check_policy"] = json!(policy);
    s
}

/// The squatter's spec: the same namespace, its own surface.
fn squatter(template: &str, policy: &str) -> Value {
    let mut s = placed(template, policy);
    s["producer_surface"] = json!("surface:elsewhere");
    s
}

/// Asserts `r` refused a template as the placement field.
fn refused_placement(r: &Reply, template: &str) {
    assert_status!(r, 400, "invalid_field");
    let e = &body(r)["error"];
    assert_eq!(e["details"]["field"], json!("placement"), "{template}: {e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("has the shape of a task id"),
        "{template}: {e}"
    );
}

/// What the squatter (another surface, same namespace) tries with
/// `template`: a single enqueue under both policies and a batch. Returns
/// the tasks it got (none: each is refused, naming the field).
async fn try_squat(t: &Team, template: &str) -> Vec<String> {
    let mut got = Vec::new();
    for policy in ["warn", "strict"] {
        let r = t
            .outsider
            .post_json("/v1/tasks", &squatter(template, policy))
            .await
            .unwrap();
        match r.status.as_u16() {
            201 => got.push(body(&r)["task_id"].as_str().unwrap().to_string()),
            _ => refused_placement(&r, template),
        }
    }
    let r = t
        .outsider
        .post_json(
            "/v1/batch/tasks",
            &json!({"items": [squatter(template, "warn"), squatter(template, "strict")]}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    for item in body(&r)["items"].as_array().unwrap() {
        if item["status"] == 201 {
            got.push(item["result"]["task_id"].as_str().unwrap().to_string());
            continue;
        }
        assert_eq!(item["status"], 400, "{template}: {item}");
        assert_eq!(item["error"]["code"], "invalid_field", "{template}: {item}");
        assert_eq!(item["error"]["details"]["field"], "placement", "{item}");
    }
    got
}

/// [`try_squat`], which must be refused everywhere.
async fn squat(t: &Team, template: &str) {
    let got = try_squat(t, template).await;
    assert!(got.is_empty(), "{template} was accepted: {got:?}");
}

/// Claims `id` as `worker`, submits `body_text`, and returns the
/// projection record of its receipt.
async fn work_on(worker: &Client, id: &str, body_text: &str) -> Value {
    let r = worker
        .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
        .await
        .unwrap();
    assert_status!(r, 200);
    let handle = worker.with_bearer(body(&r)["handle"].as_str().unwrap());
    let r = handle
        .post_bytes("/v1/worker/submit", body_text.as_bytes().to_vec())
        .await
        .unwrap();
    assert_status!(r, 201);
    let r = body(
        &worker
            .get(&format!("/v1/tasks/{id}/receipts"))
            .await
            .unwrap(),
    );
    r["receipts"].as_array().unwrap().last().unwrap()["receipt"]["projection"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fixed_segment_shaped_like_a_task_id_is_refused_wherever_a_template_comes_from() {
    let t = Team::start().await;
    for template in SQUATS {
        squat(&t, template).await;
        let q = json!({"name": "work.placed", "placement": template});
        let r = t.d.admin.post_json("/v1/queues", &q).await.unwrap();
        refused_placement(&r, template);
    }
    for template in ALLOWED {
        let r = t
            .outsider
            .post_json("/v1/tasks", &squatter(template, "strict"))
            .await
            .unwrap();
        assert_status!(r, 201);
        let q = json!({"name": "work.placed", "placement": template});
        let r = t.d.admin.post_json("/v1/queues", &q).await.unwrap();
        assert!(r.status.is_success(), "{template}: {r:?}");
    }

    // Through MCP: the enqueue tool is the same route.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "enqueue", "arguments": {"spec": squatter("flows/t8/{task_id}", "warn")}}});
    let r = t
        .outsider
        .send(
            http::Method::POST,
            "/mcp",
            Some(serde_json::to_vec(&call).unwrap().into()),
            &[
                ("accept", "application/json, text/event-stream"),
                ("mcp-protocol-version", "2025-11-25"),
            ],
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    let result = &body(&r)["result"];
    assert_eq!(result["isError"], json!(true), "{result}");
    assert_eq!(
        result["structuredContent"]["status"],
        json!(400),
        "{result}"
    );
    assert_eq!(
        result["structuredContent"]["error"]["details"]["field"],
        json!("placement"),
        "{result}"
    );

    // Through an import: the pack's task is refused, naming the field.
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("squat");
    std::fs::create_dir_all(&pack).unwrap();
    std::fs::write(
        pack.join("pack.yaml"),
        format!(
            "pack: squat\nversion: \"1\"\nnamespace: {NS}\nproducer_surface: surface:{SURFACE}\n\
             defaults: {{queue: work.external, effect_class: write-internal, visibility_scope: surface_only}}\n\
             tasks:\n  - {{id: squat, kind: verb.solve_draft, placement: \"flows/t8/{{task_id}}\", brief: {{a: 1}}}}\n"
        ),
    )
    .unwrap();
    let key_file = dir.path().join("requester.key");
    std::fs::write(&key_file, t.requester.bearer().unwrap()).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("import")
        .arg(&pack)
        .args(["--server", t.d.admin.base(), "--key-file"])
        .arg(&key_file)
        .env_remove("TESSERA_KEY")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("placement") && stdout.contains("has the shape of a task id"),
        "{stdout}"
    );
}

/// The victim is a team task, placed at `flows/{task_id}` by its own
/// placement or by its queue's, under `policy`. The squatter, of another
/// surface, aims at its id before and after a restart, and whatever it
/// got is worked on first; the victim still projects its ctx-dir, and
/// the squatter got nothing.
async fn victim_projects(policy: &str, by_queue: bool) {
    let mut t = Team::start().await;
    if by_queue {
        let q = json!({"name": "work.external", "lease_ttl_s": 30, "max_attempts": 3, "placement": "flows/{task_id}"});
        assert_status!(t.d.admin.post_json("/v1/queues", &q).await.unwrap(), 200);
    }
    let mut s = spec("verb.solve_draft", json!({"victim": 1}));
    s["check_policy"] = json!(policy);
    if !by_queue {
        s["placement"] = json!("flows/{task_id}");
    }
    let victim = enqueue(&t.requester, &s).await;
    let mut got = Vec::new();
    for template in [
        format!("flows/{victim}/{{task_id}}"),
        format!("flows/{}/{{task_id}}", victim.to_uppercase()),
    ] {
        got.extend(try_squat(&t, &template).await);
    }
    // A near miss of the squatter's: placed inside its own directory.
    let near = enqueue(
        &t.outsider,
        &squatter(&format!("flows/{{task_id}}/{victim}"), "warn"),
    )
    .await;

    t.d.restart().await;
    got.extend(try_squat(&t, &format!("flows/{victim}/{{task_id}}")).await);
    for id in got.iter().chain([&near]) {
        work_on(&t.outsider, id, "squat").await;
    }
    let p = work_on(&t.worker, &victim, "victim").await;
    assert_eq!(p["status"], json!("written"), "{p}");
    assert_eq!(p["path"], json!(format!("workspace/{NS}/flows/{victim}")));
    let flows = t.d.root().join("workspace").join(NS).join("flows");
    assert_eq!(
        std::fs::read_to_string(flows.join(&victim).join(".tessera-owner")).unwrap(),
        format!("{victim} ctx\n")
    );
    assert!(got.is_empty(), "the squatter's tasks {got:?} were accepted");
    let q = json!({"name": "work.external", "placement": format!("flows/{victim}/{{task_id}}")});
    refused_placement(
        &t.d.admin.post_json("/v1/queues", &q).await.unwrap(),
        "queue",
    );
    let mut tops: Vec<String> = std::fs::read_dir(&flows)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    tops.sort();
    let mut want = vec![victim.clone(), near.clone()];
    want.sort();
    assert_eq!(tops, want, "nothing else was created beside them");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_warn_victim_placed_by_its_task_projects_whatever_the_squatter_tried() {
    victim_projects("warn", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_strict_victim_placed_by_its_task_projects_whatever_the_squatter_tried() {
    victim_projects("strict", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_warn_victim_placed_by_its_queue_projects_whatever_the_squatter_tried() {
    victim_projects("warn", true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_strict_victim_placed_by_its_queue_projects_whatever_the_squatter_tried() {
    victim_projects("strict", true).await;
}

/// A split child inherits its parent's (checked) placement, so the
/// squatter cannot aim at a child's id either.
#[tokio::test(flavor = "multi_thread")]
async fn a_split_child_projects_whatever_the_squatter_tried() {
    let t = Team::start().await;
    let parent = enqueue(&t.requester, &placed("flows/{task_id}", "strict")).await;
    let r = t
        .worker
        .post_json(&format!("/v1/tasks/{parent}/claim"), &json!({}))
        .await
        .unwrap();
    assert_status!(r, 200);
    let lease = body(&r)["lease"]["id"].clone();
    let kid = json!({"queue": "work.external", "kind": "verb.compute", "effect_class": "write-internal", "brief": {"part": 1}});
    let r = t
        .worker
        .post_json(
            &format!("/v1/tasks/{parent}/split"),
            &json!({"lease_id": lease, "children": [kid]}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    let child = body(&r)["children"][0].as_str().unwrap().to_string();
    assert_eq!(task(&t.requester, &child).await["parent"], json!(parent));
    let got = try_squat(&t, &format!("flows/{child}/{{task_id}}")).await;
    for id in &got {
        work_on(&t.outsider, id, "squat").await;
    }
    let p = work_on(&t.worker, &child, "half").await;
    assert_eq!(p["status"], json!("written"), "{p}");
    assert_eq!(p["path"], json!(format!("workspace/{NS}/flows/{child}")));
    assert!(got.is_empty(), "the squatter's tasks {got:?} were accepted");
}
