//! The worker I/O contract over real HTTP: a worker holding only a handle
//! fetches its prompt, stages parts, submits, and the result appears as
//! ctx-dir files and as the `{"out", "parts"}` fold; every credential
//! failure has its exact status (an ended attempt's credentials are dead:
//! 401); placement failures follow check_policy.

use crate::support;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use support::*;
use tessera::client::{Client, Reply};
use tessera::worker::front_matter;

/// A worker session: the claim's handle and token as clients.
struct Worker {
    id: String,
    handle: Client,
    token: Client,
    claim: Value,
}

async fn claim_worker(t: &Team, queue: &str) -> Worker {
    let c = claim(&t.worker, queue).await.expect("a task to claim");
    Worker {
        id: claimed_id(&c),
        handle: t.d.admin.with_bearer(c["handle"].as_str().unwrap()),
        token: t.d.admin.with_bearer(c["token"].as_str().unwrap()),
        claim: c,
    }
}

async fn stage(c: &Client, name: &str, body: &[u8]) -> Reply {
    let enc = percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC);
    c.post_bytes(&format!("/v1/worker/artifact?name={enc}"), body.to_vec())
        .await
        .unwrap()
}

async fn submit_body(c: &Client, body: &[u8]) -> Reply {
    c.post_bytes("/v1/worker/submit", body.to_vec())
        .await
        .unwrap()
}

/// The team namespace's area under the root.
fn area(root: &Path) -> PathBuf {
    root.join("workspace").join(NS)
}

fn ctx_dir(root: &Path, id: &str) -> PathBuf {
    area(root).join("tasks").join(id).join("ctx")
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn claim_prompt_two_parts_submit_files_and_fold() {
    let t = Team::start().await;
    let contract = put_noun(
        &t.requester,
        "work.contracts",
        "sum-squares",
        json!({"directive": "Sum the squares.", "system_prompt": "You are careful."}),
    )
    .await;
    let id = enqueue(
        &t.requester,
        &spec(
            "verb.solve_draft",
            json!({"contract_ref": contract, "numbers": [1, 2]}),
        ),
    )
    .await;
    let w = claim_worker(&t, "work.external").await;
    assert_eq!(w.id, id);
    assert_eq!(w.claim["handle"].as_str().unwrap().len(), 29);

    let p = w.handle.get("/v1/worker/prompt").await.unwrap();
    assert_status!(p, 200);
    let p = body(&p);
    assert_eq!(p["task_id"], json!(id));
    assert_eq!(p["attempt"], json!(1));
    assert_eq!(
        p["prompt"],
        json!("Sum the squares."),
        "the contract's directive when the brief has none"
    );
    assert_eq!(p["system"], json!("You are careful."));
    assert_eq!(p["agent"], json!("verb.solve_draft"));
    assert_eq!(p["context"]["steps"], json!([]));
    assert_eq!(p["context"]["task_metadata"]["step"], json!("solve_draft"));
    assert!(
        p["context"]["project_root"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/workspace/{NS}")),
        "the project root is the namespace's area"
    );
    assert!(
        p["context"]["work_dir"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/workspace/{NS}/tasks/{id}/work")),
        "the work dir is the daemon's"
    );
    assert_eq!(
        body(&w.token.get("/v1/worker/prompt").await.unwrap()),
        p,
        "token and handle see the same prompt"
    );

    assert_status!(stage(&w.handle, "plan.md", b"first plan").await, 200);
    assert_status!(
        stage(&w.token, "data.json", b"```json\n{\"k\": [1, 2]}\n```\n").await,
        200
    );
    assert_status!(
        stage(&w.handle, "plan.md", b"# Plan\n---\nfinal plan").await,
        200
    );
    assert_eq!(
        task(&t.requester, &id).await["state"],
        json!("claimed"),
        "staging never completes the attempt"
    );

    let s = submit_body(&w.handle, b"The sum is 5.").await;
    assert_status!(s, 201);
    let receipt = body(&s)["receipt_sha256"].as_str().unwrap().to_string();
    assert_eq!(body(&s)["state"], json!("succeeded"));

    let dir = ctx_dir(t.d.root(), &id);
    assert_eq!(
        listing(&dir),
        [".tessera-owner", "data.json", "plan.md", "solve_draft.md"]
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(".tessera-owner")).unwrap(),
        format!("{id} ctx\n"),
        "the daemon marks the ctx-dir it creates"
    );
    assert_eq!(
        std::fs::read(dir.join("plan.md")).unwrap(),
        b"# Plan\n---\nfinal plan",
        "a part lands raw; last write wins"
    );
    let md = std::fs::read(dir.join("solve_draft.md")).unwrap();
    let (h, b) = front_matter::decode(&md).expect("front matter");
    assert_eq!(b, b"The sum is 5.");
    assert_eq!(
        (h.task_id.as_str(), h.step.as_str(), h.attempt, h.ok, h.size),
        (id.as_str(), "solve_draft", 1, true, 13)
    );
    assert_eq!(h.sha256, tessera::store::Sha256::of(b"The sum is 5.").hex());

    let fold = body(
        &t.requester
            .get(&format!("/v1/tasks/{id}/output"))
            .await
            .unwrap(),
    );
    assert_eq!(
        fold,
        json!({"out": "The sum is 5.", "parts": {"plan.md": "# Plan\n---\nfinal plan", "data.json": {"k": [1, 2]}}})
    );
    let r = body(
        &t.requester
            .get(&format!("/v1/tasks/{id}/receipts"))
            .await
            .unwrap(),
    );
    let rec = &r["receipts"][0];
    assert_eq!(rec["sha256"], json!(receipt));
    assert_eq!(rec["receipt"]["projection"]["status"], json!("written"));
    assert_eq!(
        rec["receipt"]["by_key"],
        json!(t.ids["worker"]),
        "the worker acts under its claimant's key"
    );
    assert_eq!(rec["receipt"]["parts"].as_object().unwrap().len(), 2);
    assert_status!(
        t.outsider
            .get(&format!("/v1/tasks/{id}/output"))
            .await
            .unwrap(),
        404,
        "not_found"
    );

    // The attempt has ended: its credentials are dead, like any bad one.
    assert_status!(
        submit_body(&w.handle, b"again").await,
        401,
        "unauthenticated"
    );
    assert_status!(
        w.token.get("/v1/worker/prompt").await.unwrap(),
        401,
        "unauthenticated"
    );
    assert_status!(
        stage(&w.handle, "late.md", b"x").await,
        401,
        "unauthenticated"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn prompts_are_assembled_at_fetch_time_with_steps_pointing_at_finished_outputs() {
    let t = Team::start().await;
    let up = enqueue(
        &t.requester,
        &spec("verb.verify_gate", json!({"directive": "check"})),
    )
    .await;
    let mut s = spec(
        "verb.solve_draft",
        json!({"directive": "Use the check.", "agent": "drafter", "step": "draft"}),
    );
    s["depends_on"] = json!([up]);
    let down = enqueue(&t.requester, &s).await;
    let uw = claim_worker(&t, "work.external").await;
    assert_eq!(uw.id, up);
    assert_status!(submit_body(&uw.handle, b"gate passed").await, 201);
    let dw = claim_worker(&t, "work.external").await;
    assert_eq!(dw.id, down);
    let p = body(&dw.handle.get("/v1/worker/prompt").await.unwrap());
    assert_eq!(
        (p["prompt"].clone(), p["agent"].clone(), p["system"].clone()),
        (json!("Use the check."), json!("drafter"), Value::Null)
    );
    let steps = p["context"]["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1);
    let st = &steps[0];
    assert_eq!(
        (
            st["name"].clone(),
            st["task_id"].clone(),
            st["state"].clone(),
            st["ok"].clone()
        ),
        (
            json!("verify_gate"),
            json!(up),
            json!("succeeded"),
            json!(true)
        )
    );
    assert_eq!(
        st["sha256"],
        json!(tessera::store::Sha256::of(b"gate passed").hex())
    );
    assert_eq!(st["size_bytes"], json!(11));
    let file = st["file_path"].as_str().unwrap();
    assert!(
        file.ends_with(&format!("workspace/{NS}/tasks/{up}/ctx/verify_gate.md")),
        "{file}"
    );
    assert_eq!(
        front_matter::decode(&std::fs::read(file).unwrap())
            .unwrap()
            .1,
        b"gate passed"
    );
    assert!(
        !p.to_string().contains("gate passed"),
        "steps point at outputs, never carry them"
    );

    // A child that finishes after the claim appears on the next fetch.
    let child = json!({"queue": "work.external", "kind": "verb.compute", "effect_class": "write-internal", "brief": {"directive": "part"}});
    let lease = dw.claim["lease"]["id"].as_str().unwrap();
    let r = t
        .worker
        .post_json(
            &format!("/v1/tasks/{down}/split"),
            &json!({"lease_id": lease, "children": [child]}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    let cw = claim_worker(&t, "work.external").await;
    let brief_only = body(&cw.handle.get("/v1/worker/prompt").await.unwrap());
    assert!(
        brief_only["context"]["steps"]
            .as_array()
            .unwrap()
            .is_empty(),
        "a child sees none of its parent's steps"
    );
    assert_status!(submit_body(&cw.handle, b"half").await, 201);
    let again = claim_worker(&t, "work.external").await;
    assert_eq!(again.id, down);
    let p2 = body(&again.handle.get("/v1/worker/prompt").await.unwrap());
    let names: Vec<&str> = p2["context"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(names, [up.as_str(), cw.id.as_str()]);
    assert!(
        !names.contains(&down.as_str()),
        "the task is never among its own steps"
    );
    assert_status!(
        dw.handle.get("/v1/worker/prompt").await.unwrap(),
        401,
        "unauthenticated"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_bad_part_name_is_refused_and_nothing_is_staged() {
    let t = Team::start().await;
    enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let w = claim_worker(&t, "work.external").await;
    let long = "n".repeat(256);
    for name in [
        "",
        ".",
        "..",
        "a/b",
        "/etc/passwd",
        "..\\x",
        "a\\b",
        "a\0b",
        "solve_draft.md",
        ".tessera-owner",
        long.as_str(),
    ] {
        let r = stage(&w.handle, name, b"x").await;
        assert_status!(r, 400, "invalid_part_name");
    }
    let r = w
        .handle
        .post_bytes("/v1/worker/artifact", b"x".to_vec())
        .await
        .unwrap();
    assert_status!(r, 400, "invalid_part_name");
    assert_eq!(task(&t.worker, &w.id).await["staged"], json!({}));
    assert!(!ctx_dir(t.d.root(), &w.id).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_fail_with_exact_statuses_and_survive_a_restart() {
    let mut t = Team::start().await;
    enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let other = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let w = claim_worker(&t, "work.external").await;
    let anon = t.d.admin.anonymous();
    let token = w.claim["token"].as_str().unwrap().to_string();
    let (head, tag) = token.rsplit_once('.').unwrap();
    let flipped = format!(
        "{head}.{}{}",
        if tag.starts_with('A') { "B" } else { "A" },
        &tag[1..]
    );
    let other_task = format!("/v1/worker/prompt?task_id={other}");
    let cases: Vec<(Client, &str, u16, &str)> = vec![
        (anon.clone(), "/v1/worker/prompt", 401, "unauthenticated"),
        (
            anon.with_bearer("garbage"),
            "/v1/worker/prompt",
            401,
            "unauthenticated",
        ),
        (
            anon.with_bearer("wh-aaaaaaaaaaaaaaaaaaaaaaaaaa"),
            "/v1/worker/prompt",
            401,
            "unauthenticated",
        ),
        (
            anon.with_bearer("wh-XYZ"),
            "/v1/worker/prompt",
            401,
            "unauthenticated",
        ),
        (
            anon.with_bearer(&flipped),
            "/v1/worker/prompt",
            401,
            "unauthenticated",
        ),
        (
            anon.with_bearer("wt1.e30.AAAA"),
            "/v1/worker/prompt",
            401,
            "unauthenticated",
        ),
        (
            t.worker.clone(),
            "/v1/worker/prompt",
            401,
            "unauthenticated",
        ),
        (w.handle.clone(), &other_task, 403, "wrong_task"),
        (w.token.clone(), &other_task, 403, "wrong_task"),
    ];
    for (c, path, status, code) in &cases {
        let r = c.get(path).await.unwrap();
        assert_status!(r, *status, *code);
    }
    let r = anon
        .send(
            http::Method::GET,
            "/v1/worker/prompt",
            None,
            &[("authorization", "Basic xyz")],
        )
        .await
        .unwrap();
    assert_status!(r, 401, "unauthenticated");

    assert_status!(stage(&w.handle, "kept.md", b"survives").await, 200);
    t.d.restart().await;
    assert_status!(w.handle.get("/v1/worker/prompt").await.unwrap(), 200);
    assert_status!(
        w.token
            .get(&format!("/v1/worker/prompt?task_id={}", w.id))
            .await
            .unwrap(),
        200
    );
    assert_status!(submit_body(&w.token, b"after restart").await, 201);
    let fold = body(
        &t.requester
            .get(&format!("/v1/tasks/{}/output", w.id))
            .await
            .unwrap(),
    );
    assert_eq!(
        fold["parts"]["kept.md"],
        json!("survives"),
        "a part staged before the restart is kept"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lapsed_worker_is_fenced_after_the_task_is_reclaimed() {
    let t = Team::start().await;
    let mut s = spec("verb.solve_draft", json!({}));
    s["queue"] = json!("work.short");
    let id = enqueue(&t.requester, &s).await;
    let old = claim_worker(&t, "work.short").await;
    assert_status!(
        stage(&old.handle, "a.md", b"from the first attempt").await,
        200
    );
    let w = t.worker.clone();
    let fresh = loop {
        if let Some(c) = claim(&w, "work.short").await {
            break c;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(claimed_id(&fresh), id);
    assert_eq!(fresh["lease"]["fence"], json!(2));
    assert_status!(
        stage(&old.handle, "b.md", b"late").await,
        401,
        "unauthenticated"
    );
    assert_status!(
        submit_body(&old.token, b"late result").await,
        401,
        "unauthenticated"
    );
    assert_status!(
        old.handle.get("/v1/worker/prompt").await.unwrap(),
        401,
        "unauthenticated"
    );
    assert_eq!(
        task(&t.worker, &id).await["staged"],
        json!({}),
        "the old attempt's parts are not the new attempt's"
    );
    assert!(
        !ctx_dir(t.d.root(), &id).exists(),
        "nothing of the late worker landed"
    );
    let new = t.d.admin.with_bearer(fresh["handle"].as_str().unwrap());
    assert_status!(submit_body(&new, b"second attempt").await, 201);
    assert_eq!(
        listing(&ctx_dir(t.d.root(), &id)),
        [".tessera-owner", "solve_draft.md"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_projection_replaces_what_was_in_the_ctx_dir() {
    let t = Team::start().await;
    let id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    // What a crash between projecting and committing the receipt leaves:
    // this task's marked ctx-dir with an earlier attempt's files.
    let dir = ctx_dir(t.d.root(), &id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".tessera-owner"), format!("{id} ctx\n")).unwrap();
    std::fs::write(dir.join("stale-part.md"), b"from an earlier attempt").unwrap();
    std::fs::write(dir.join("solve_draft.md"), b"old").unwrap();
    let w = claim_worker(&t, "work.external").await;
    assert_status!(stage(&w.handle, "fresh.md", b"new").await, 200);
    assert_status!(submit_body(&w.handle, b"final").await, 201);
    assert_eq!(
        listing(&dir),
        [".tessera-owner", "fresh.md", "solve_draft.md"],
        "the directory shows one attempt"
    );
    assert!(
        listing(&t.d.root().join("tmp")).is_empty(),
        "the replaced directory is cleaned up"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn file_bodies_are_confined_to_the_work_dir() {
    let t = Team::start_with(|c| c.limits.worker_body_bytes = 1024).await;
    let mut allowed = spec("verb.solve_draft", json!({}));
    allowed["allow_file_submit"] = json!(true);
    enqueue(&t.requester, &allowed).await;
    let w = claim_worker(&t, "work.external").await;
    assert_status!(
        submit_body(&w.handle, b"@file:answer.txt").await,
        404,
        "file_not_found"
    );

    // The prompt fetch creates the work dir; its path is the daemon's.
    let p = body(&w.handle.get("/v1/worker/prompt").await.unwrap());
    let area = area(t.d.root()).canonicalize().unwrap();
    let abs = area.join("tasks").join(&w.id).join("work");
    assert_eq!(p["context"]["work_dir"], json!(abs));
    assert_eq!(p["context"]["project_root"], json!(area));
    std::fs::create_dir_all(abs.join("sub")).unwrap();
    std::fs::write(abs.join("answer.txt"), b"from a file").unwrap();
    std::fs::write(abs.join("sub/part.md"), b"part from a file").unwrap();
    std::fs::write(abs.join("big.bin"), vec![b'x'; 2048]).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"secret").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), abs.join("link")).unwrap();
    std::fs::write(abs.join("../sibling"), b"sibling").unwrap();

    let at = |p: &Path| format!("@file:{}", p.display()).into_bytes();
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (at(&outside.path().join("secret")), 422, "invalid_file_ref"),
        (b"@file:../sibling".to_vec(), 422, "invalid_file_ref"),
        (at(&abs.join("../sibling")), 422, "invalid_file_ref"),
        (at(&abs.join("link")), 422, "invalid_file_ref"),
        (b"@file:link".to_vec(), 422, "invalid_file_ref"),
        (at(&abs.join("missing.txt")), 404, "file_not_found"),
        (at(&abs.join("big.bin")), 413, "body_too_large"),
        (at(&abs.join("sub")), 422, "invalid_file_ref"),
    ];
    for (b, status, code) in &cases {
        assert_status!(stage(&w.handle, "p.md", b).await, *status, *code);
        assert_status!(submit_body(&w.handle, b).await, *status, *code);
    }
    assert_status!(stage(&w.handle, "p.md", b"@file:sub/part.md\n").await, 200);
    assert_status!(
        submit_body(&w.handle, &at(&abs.join("answer.txt"))).await,
        201
    );
    let fold = body(
        &t.requester
            .get(&format!("/v1/tasks/{}/output", w.id))
            .await
            .unwrap(),
    );
    assert_eq!(
        fold,
        json!({"out": "from a file", "parts": {"p.md": "part from a file"}})
    );

    enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let plain = claim_worker(&t, "work.external").await;
    assert_status!(
        submit_body(&plain.handle, b"@file:answer.txt").await,
        422,
        "invalid_file_ref"
    );
    assert_status!(
        submit_body(&plain.handle, &vec![b'y'; 1025]).await,
        413,
        "body_too_large"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn placement_failures_follow_check_policy() {
    let t = Team::start().await;
    // warn: the submit succeeds and the receipt says the projection was skipped.
    let warn_id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let w = claim_worker(&t, "work.external").await;
    std::fs::create_dir_all(area(t.d.root()).join("tasks")).unwrap();
    std::fs::write(
        area(t.d.root()).join("tasks").join(&warn_id),
        b"a file where the ctx-dir's parent goes",
    )
    .unwrap();
    let answer = body(&submit_body(&w.handle, b"result").await);
    assert_eq!(
        (
            answer["state"].clone(),
            answer["projection"]["status"].clone()
        ),
        (json!("succeeded"), json!("skipped")),
        "the submit answer says the projection was skipped: {answer}"
    );
    let r = body(
        &t.requester
            .get(&format!("/v1/tasks/{warn_id}/receipts"))
            .await
            .unwrap(),
    );
    let projection = &r["receipts"][0]["receipt"]["projection"];
    assert_eq!(projection["status"], json!("skipped"));
    assert!(
        projection["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("workspace/{NS}/tasks/{warn_id}")),
        "{projection}"
    );
    assert_eq!(
        body(
            &t.requester
                .get(&format!("/v1/tasks/{warn_id}/output"))
                .await
                .unwrap()
        )["out"],
        json!("result")
    );

    // strict: the attempt fails for good with a receipt that says why;
    // nothing half-done is left, and the result is still readable.
    let mut strict = spec("verb.solve_draft", json!({}));
    strict["check_policy"] = json!("strict");
    let strict_id = enqueue(&t.requester, &strict).await;
    let sw = claim_worker(&t, "work.external").await;
    assert_eq!(sw.id, strict_id);
    assert_status!(stage(&sw.handle, "x.md", b"x").await, 200);
    std::fs::write(area(t.d.root()).join("tasks").join(&strict_id), b"blocked").unwrap();
    let reply = submit_body(&sw.handle, b"result").await;
    assert_status!(reply, 201);
    let answer = body(&reply);
    let ctx = format!("workspace/{NS}/tasks/{strict_id}");
    assert_eq!(
        (
            answer["state"].clone(),
            answer["ok"].clone(),
            answer["projection"]["status"].clone(),
            answer["projection"]["path"].clone()
        ),
        (
            json!("failed"),
            json!(false),
            json!("failed"),
            json!(format!("{ctx}/ctx"))
        ),
        "{answer}"
    );
    assert_eq!(
        task(&t.requester, &strict_id).await["state"],
        json!("failed")
    );
    let r = body(
        &t.requester
            .get(&format!("/v1/tasks/{strict_id}/receipts"))
            .await
            .unwrap(),
    );
    let receipt = &r["receipts"][0]["receipt"];
    assert_eq!(
        receipt["projection"]["status"],
        json!("failed"),
        "{receipt}"
    );
    let failure = receipt["failure"].as_str().unwrap_or_default();
    assert!(
        failure.contains(&ctx) && failure.contains("check_policy: strict"),
        "the receipt says why the step failed: {receipt}"
    );
    assert!(
        listing(&t.d.root().join("tmp")).is_empty(),
        "no half-built ctx-dir is left behind"
    );
    assert_eq!(
        body(
            &t.requester
                .get(&format!("/v1/tasks/{strict_id}/output"))
                .await
                .unwrap()
        )["out"],
        json!("result")
    );
    std::fs::remove_file(area(t.d.root()).join("tasks").join(&strict_id)).unwrap();

    // A strict task whose placement cannot resolve is refused at enqueue.
    std::fs::write(area(t.d.root()).join("blocked"), b"not a directory").unwrap();
    let mut unresolvable = strict.clone();
    unresolvable["placement"] = json!("blocked/{task_id}/ctx");
    let r = t
        .requester
        .post_json("/v1/tasks", &unresolvable)
        .await
        .unwrap();
    assert_status!(r, 422, "placement_unresolvable");
    let mut bad = spec("verb.solve_draft", json!({}));
    bad["placement"] = json!("../{task_id}");
    assert_status!(
        t.requester.post_json("/v1/tasks", &bad).await.unwrap(),
        400,
        "invalid_field"
    );
    bad["placement"] = json!("runs/ctx");
    assert_status!(
        t.requester.post_json("/v1/tasks", &bad).await.unwrap(),
        400,
        "invalid_field"
    );
    let mut placed = spec("verb.solve_draft", json!({}));
    placed["placement"] = json!("runs/{task_id}");
    let placed_id = enqueue(&t.requester, &placed).await;
    let pw = claim_worker(&t, "work.external").await;
    assert_eq!(pw.id, placed_id);
    assert_status!(submit_body(&pw.handle, b"placed").await, 201);
    assert!(
        area(t.d.root())
            .join("runs")
            .join(&placed_id)
            .join("solve_draft.md")
            .exists()
    );
}

mod round_trip {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn any_submitted_body_reads_back_exactly_from_its_step_file(body in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..512),
            "(```[a-z]*\n|---\n|\n|[a-z ]{0,10}){0,12}".prop_map(String::into_bytes),
        ]) {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async {
                let t = Team::start().await;
                enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
                let w = claim_worker(&t, "work.external").await;
                assert_status!(submit_body(&w.handle, &body).await, 201);
                let md = std::fs::read(ctx_dir(t.d.root(), &w.id).join("solve_draft.md")).unwrap();
                let (h, back) = front_matter::decode(&md).expect("decodes");
                assert_eq!(back, body.as_slice());
                assert_eq!(h.size, body.len() as u64);
            });
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn steps_never_point_at_a_task_the_claimant_may_not_see() {
    let t = Team::start().await;
    let mut private = spec("verb.verify_gate", json!({}));
    private["visibility_scope"] = json!("private");
    let up = enqueue(&t.requester, &private).await;
    let c = body(
        &t.d.admin
            .post_json(&format!("/v1/tasks/{up}/claim"), &json!({}))
            .await
            .unwrap(),
    );
    let admin_handle = t.d.admin.with_bearer(c["handle"].as_str().unwrap());
    assert_status!(submit_body(&admin_handle, b"private result").await, 201);
    let mut down = spec("verb.solve_draft", json!({}));
    down["depends_on"] = json!([up]);
    enqueue(&t.requester, &down).await;
    let w = claim_worker(&t, "work.external").await;
    let p = body(&w.handle.get("/v1/worker/prompt").await.unwrap());
    assert_eq!(
        p["context"]["steps"],
        json!([]),
        "the worker's key may not see the private upstream"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn heartbeats_keep_the_handle_and_token_alive_past_the_first_expiry() {
    let t = Team::start().await;
    let mut s = spec("verb.solve_draft", json!({}));
    s["queue"] = json!("work.short");
    enqueue(&t.requester, &s).await;
    let w = claim_worker(&t, "work.short").await;
    let lease = w.claim["lease"]["id"].as_str().unwrap().to_string();
    for _ in 0..3 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let hb = t
            .worker
            .post_json(
                &format!("/v1/tasks/{}/heartbeat", w.id),
                &json!({"lease_id": lease}),
            )
            .await
            .unwrap();
        assert_status!(hb, 200);
    }
    // 1.5 s after a claim whose lease (and token) said 1 s.
    assert_status!(w.token.get("/v1/worker/prompt").await.unwrap(), 200);
    assert_status!(w.handle.get("/v1/worker/prompt").await.unwrap(), 200);
    assert_status!(submit_body(&w.token, b"done in time").await, 201);
}
