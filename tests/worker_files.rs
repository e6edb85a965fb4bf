//! Files belong to the daemon. What an attacker found, over real HTTP:
//! - a caller-chosen `work_dir` (such as `"tasks"`) let `@file:` read other
//!   tasks' projected outputs, in any namespace;
//! - a placement template `tasks/{task_id}5/ctx` made task t1 project over
//!   t15's ctx-dir and delete it;
//! - 560 `@file:` reads of a FIFO froze every tenant's store (each held a
//!   blocking thread forever).
//!
//! Now each namespace has its own area `workspace/<ns>/`, a task's work dir
//! is `workspace/<ns>/tasks/<id>/work/` (made by the daemon), `{task_id}`
//! is a whole segment of a template, a projection never replaces or nests
//! inside another task's directory, and `@file:` reads only a regular file
//! with one link inside the task's own work dir, without ever blocking.

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use tessera::client::{Client, Reply};

/// Another namespace, used through the admin key.
const OTHER_NS: &str = "other-tenant";

/// A worker session: its handle as a client, and its task's work dir.
struct Worker {
    handle: Client,
    work: PathBuf,
}

/// Claims task `id` with `c` and fetches its prompt (which makes the work dir).
async fn start_work(c: &Client, id: &str) -> Worker {
    let r = c
        .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
        .await
        .unwrap();
    assert_status!(r, 200);
    let handle = c.with_bearer(body(&r)["handle"].as_str().unwrap());
    let p = handle.get("/v1/worker/prompt").await.unwrap();
    assert_status!(p, 200);
    let work = PathBuf::from(body(&p)["context"]["work_dir"].as_str().unwrap());
    assert!(work.is_dir(), "the prompt fetch made {}", work.display());
    Worker { handle, work }
}

async fn stage(c: &Client, name: &str, body: &[u8]) -> Reply {
    c.post_bytes(&format!("/v1/worker/artifact?name={name}"), body.to_vec())
        .await
        .unwrap()
}

async fn submit_body(c: &Client, body: &[u8]) -> Reply {
    c.post_bytes("/v1/worker/submit", body.to_vec())
        .await
        .unwrap()
}

fn at_file(p: &Path) -> Vec<u8> {
    format!("@file:{}", p.display()).into_bytes()
}

/// `workspace/<ns>` under the (canonical) root.
fn area(root: &Path, ns: &str) -> PathBuf {
    root.canonicalize().unwrap().join("workspace").join(ns)
}

/// A spec in the team namespace that allows `@file:` bodies.
fn file_spec() -> Value {
    let mut s = spec("verb.solve_draft", json!({}));
    s["allow_file_submit"] = json!(true);
    s
}

/// Every file under `dir` with its bytes, for "left as it was" checks.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    files_under(dir)
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(dir.join(&f)).unwrap();
            (f, bytes)
        })
        .collect()
}

/// The projection record of a task's last receipt.
async fn projection(c: &Client, id: &str) -> Value {
    let r = body(&c.get(&format!("/v1/tasks/{id}/receipts")).await.unwrap());
    let receipts = r["receipts"].as_array().unwrap();
    receipts.last().unwrap()["receipt"]["projection"].clone()
}

/// Opens a FIFO's write end while a failing test unwinds, so a reader
/// blocked in `open` (the bug this file guards against) wakes up and the
/// runtime can shut down: a regression fails the test instead of hanging it.
struct Unblock(PathBuf);

impl Drop for Unblock {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for _ in 0..40 {
            let flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::NONBLOCK;
            let _ = rustix::fs::open(&self.0, flags, rustix::fs::Mode::empty());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn at_file_never_reaches_another_tasks_ctx_dir_or_work_dir() {
    let t = Team::start().await;
    let root = t.d.root().to_path_buf();
    let ns = area(&root, NS);
    let other_ns = area(&root, OTHER_NS);

    // A victim task in the team namespace and a foreign one in another
    // namespace each leave a secret in their work dir and in their ctx-dir.
    let victim = enqueue(&t.requester, &file_spec()).await;
    let wv = start_work(&t.worker, &victim).await;
    std::fs::write(wv.work.join("secret.md"), b"victim work secret").unwrap();
    assert_status!(stage(&wv.handle, "x.md", b"victim ctx secret").await, 200);
    assert_status!(submit_body(&wv.handle, b"victim done").await, 201);
    let mut other = file_spec();
    other["namespace"] = json!(OTHER_NS);
    let foreign = enqueue(&t.d.admin, &other).await;
    let wf = start_work(&t.d.admin, &foreign).await;
    std::fs::write(wf.work.join("secret.md"), b"foreign work secret").unwrap();
    assert_status!(stage(&wf.handle, "x.md", b"foreign ctx secret").await, 200);
    assert_status!(submit_body(&wf.handle, b"foreign done").await, 201);
    assert_eq!(wv.work, ns.join("tasks").join(&victim).join("work"));
    assert_eq!(wf.work, other_ns.join("tasks").join(&foreign).join("work"));
    assert!(ns.join("tasks").join(&victim).join("ctx/x.md").is_file());
    assert!(
        other_ns
            .join("tasks")
            .join(&foreign)
            .join("ctx/x.md")
            .is_file()
    );

    let reader = enqueue(&t.requester, &file_spec()).await;
    let wr = start_work(&t.worker, &reader).await;
    std::os::unix::fs::symlink(format!("../../{victim}/ctx/x.md"), wr.work.join("up")).unwrap();
    std::os::unix::fs::symlink(
        ns.join("tasks").join(&victim).join("work/secret.md"),
        wr.work.join("abs"),
    )
    .unwrap();
    let victim_ctx = ns.join("tasks").join(&victim).join("ctx/x.md");
    let victim_work = ns.join("tasks").join(&victim).join("work/secret.md");
    let foreign_ctx = other_ns.join("tasks").join(&foreign).join("ctx/x.md");
    let foreign_work = other_ns.join("tasks").join(&foreign).join("work/secret.md");
    let refused: Vec<Vec<u8>> = vec![
        format!("@file:../../{victim}/ctx/x.md").into_bytes(),
        format!("@file:../../{victim}/work/secret.md").into_bytes(),
        format!("@file:../../../../{OTHER_NS}/tasks/{foreign}/ctx/x.md").into_bytes(),
        format!("@file:../../../../{OTHER_NS}/tasks/{foreign}/work/secret.md").into_bytes(),
        at_file(&victim_ctx),
        at_file(&victim_work),
        at_file(&foreign_ctx),
        at_file(&foreign_work),
        at_file(&wr.work.join(format!("../../{victim}/ctx/x.md"))),
        at_file(
            &wr.work
                .join("../../../..")
                .join(OTHER_NS)
                .join("tasks")
                .join(&foreign)
                .join("work/secret.md"),
        ),
        b"@file:up".to_vec(),
        b"@file:abs".to_vec(),
        at_file(&wr.work.join("up")),
    ];
    for b in &refused {
        let shown = String::from_utf8_lossy(b).into_owned();
        for r in [
            stage(&wr.handle, "p.md", b).await,
            submit_body(&wr.handle, b).await,
        ] {
            assert_eq!(
                (r.status.as_u16(), r.error_code().as_deref()),
                (422, Some("invalid_file_ref")),
                "{shown}: {}",
                String::from_utf8_lossy(&r.body)
            );
            let text = String::from_utf8_lossy(&r.body);
            assert!(
                !text.contains("work secret") && !text.contains("ctx secret"),
                "{text}"
            );
        }
    }
    assert_eq!(task(&t.requester, &reader).await["staged"], json!({}));

    std::fs::write(wr.work.join("own.md"), b"mine").unwrap();
    assert_status!(submit_body(&wr.handle, b"@file:own.md").await, 201);
    let fold = body(
        &t.requester
            .get(&format!("/v1/tasks/{reader}/output"))
            .await
            .unwrap(),
    );
    assert_eq!(fold["out"], json!("mine"));
}

#[tokio::test(flavor = "multi_thread")]
async fn task_id_must_be_a_whole_segment_of_every_template() {
    let t = Team::start().await;
    for template in [
        "tasks/{task_id}5/ctx",
        "x{task_id}",
        "runs/{task_id}/{task_id}",
        "runs/{task_id}x",
        "tasks/{task_id}/work",
        "tasks/t5/{task_id}",
    ] {
        let mut s = spec("verb.solve_draft", json!({}));
        s["placement"] = json!(template);
        let r = t.requester.post_json("/v1/tasks", &s).await.unwrap();
        assert_status!(r, 400, "invalid_field");
        assert_eq!(
            body(&r)["error"]["details"]["field"],
            json!("placement"),
            "{template}"
        );
        let q = json!({"name": "work.placed", "placement": template});
        let r = t.d.admin.post_json("/v1/queues", &q).await.unwrap();
        assert_status!(r, 400, "invalid_field");
    }
    let q = json!({"name": "work.placed", "placement": "runs/{task_id}"});
    assert_status!(t.d.admin.post_json("/v1/queues", &q).await.unwrap(), 201);

    // The work dir is the daemon's: a spec naming one is refused.
    let mut old = spec("verb.solve_draft", json!({}));
    old["work_dir"] = json!("tasks");
    let r = t.requester.post_json("/v1/tasks", &old).await.unwrap();
    assert_status!(r, 400, "unknown_field");
    assert_eq!(body(&r)["error"]["details"]["field"], json!("work_dir"));
}

#[tokio::test(flavor = "multi_thread")]
async fn nesting_placements_are_refused_and_never_touch_another_tasks_directory() {
    let t = Team::start().await;
    // The team's queue now places ctx-dirs at runs/{task_id}.
    let q = json!({"name": "work.external", "lease_ttl_s": 30, "max_attempts": 3, "placement": "runs/{task_id}"});
    assert_status!(t.d.admin.post_json("/v1/queues", &q).await.unwrap(), 200);
    let runs = area(t.d.root(), NS).join("runs");
    let nested = |under: &str, policy: &str| {
        let mut s = spec("verb.solve_draft", json!({}));
        s["placement"] = json!(format!("runs/{under}/{{task_id}}"));
        s["check_policy"] = json!(policy);
        s
    };
    let refused = |r: &Reply| {
        assert_status!(r, 400, "invalid_field");
        assert_eq!(body(r)["error"]["details"]["field"], json!("placement"));
    };

    // The outer task projects first; one nested inside it is refused.
    let outer = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let w = start_work(&t.worker, &outer).await;
    assert_status!(stage(&w.handle, "keep.md", b"outer part").await, 200);
    assert_status!(submit_body(&w.handle, b"outer").await, 201);
    let before = snapshot(&runs.join(&outer));
    assert_eq!(
        before.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(),
        [".tessera-owner", "keep.md", "solve_draft.md"]
    );
    for policy in ["warn", "strict"] {
        refused(
            &t.requester
                .post_json("/v1/tasks", &nested(&outer, policy))
                .await
                .unwrap(),
        );
    }
    assert_eq!(
        snapshot(&runs.join(&outer)),
        before,
        "the outer ctx-dir is untouched"
    );

    // Aimed at any task id, one not made yet too, it is refused: a task
    // made later projects. (Ids are random, so a later task's id cannot
    // be known beforehand; the rule refuses every id-shaped segment.)
    for policy in ["warn", "strict"] {
        refused(
            &t.requester
                .post_json("/v1/tasks", &nested("t1234567890123456", policy))
                .await
                .unwrap(),
        );
    }
    let late_outer = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let w = start_work(&t.worker, &late_outer).await;
    assert_status!(submit_body(&w.handle, b"outer").await, 201);
    assert_eq!(
        projection(&t.requester, &late_outer).await["status"],
        json!("written")
    );

    // Two templates that would resolve to one directory, same/t<y>/t<x>,
    // for tasks x and y: x's, whose fixed segment is shaped like a task
    // id, is refused; y's t<x> lies inside y's own directory.
    let x = "t1234567890123456";
    let mut xs = spec("verb.solve_draft", json!({}));
    xs["placement"] = json!("same/t6543210987654321/{task_id}");
    refused(&t.requester.post_json("/v1/tasks", &xs).await.unwrap());
    let mut ys = spec("verb.solve_draft", json!({}));
    ys["placement"] = json!(format!("same/{{task_id}}/{x}"));
    ys["check_policy"] = json!("strict");
    let y = enqueue(&t.requester, &ys).await;
    let wy = start_work(&t.worker, &y).await;
    assert_status!(submit_body(&wy.handle, b"y").await, 201);
    assert_eq!(
        projection(&t.requester, &y).await["path"],
        json!(format!("workspace/{NS}/same/{y}/{x}"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ctx_dirs_land_in_their_namespace_area() {
    let t = Team::start().await;
    let id = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let w = start_work(&t.worker, &id).await;
    assert_status!(submit_body(&w.handle, b"team").await, 201);
    let mut other = spec("verb.solve_draft", json!({}));
    other["namespace"] = json!(OTHER_NS);
    other["placement"] = json!("runs/{task_id}");
    let oid = enqueue(&t.d.admin, &other).await;
    let ow = start_work(&t.d.admin, &oid).await;
    assert_status!(submit_body(&ow.handle, b"other").await, 201);

    let ws = t.d.root().join("workspace");
    let mut tops = files_under(&ws);
    tops.retain(|f| f.ends_with(".md"));
    assert_eq!(
        tops,
        [
            format!("{NS}/tasks/{id}/ctx/solve_draft.md"),
            format!("{OTHER_NS}/runs/{oid}/solve_draft.md"),
        ]
    );
    assert_eq!(
        projection(&t.requester, &id).await["path"],
        json!(format!("workspace/{NS}/tasks/{id}/ctx"))
    );
    assert_eq!(
        projection(&t.d.admin, &oid).await["path"],
        json!(format!("workspace/{OTHER_NS}/runs/{oid}"))
    );
    assert!(ow.work.starts_with(area(t.d.root(), OTHER_NS)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_is_refused_at_once_and_concurrent_tries_leave_the_store_answering() {
    let t = Team::start().await;
    put_noun(&t.requester, "docs", "readme", json!({"hello": "world"})).await;
    let id = enqueue(&t.requester, &file_spec()).await;
    let w = start_work(&t.worker, &id).await;
    mkfifo(&w.work.join("pipe"));
    let _unblock = Unblock(w.work.join("pipe"));
    let once = tokio::time::timeout(
        Duration::from_secs(5),
        stage(&w.handle, "p.md", b"@file:pipe"),
    )
    .await
    .expect("a FIFO is refused at once, not waited on");
    assert_status!(once, 422, "invalid_file_ref");

    let mut tries = tokio::task::JoinSet::new();
    for i in 0..64 {
        let h = w.handle.clone();
        let body: &[u8] = if i % 2 == 0 {
            b"@file:pipe"
        } else {
            b"@file:pipe\n"
        };
        tries.spawn(async move { (stage(&h, "p.md", body).await, submit_body(&h, body).await) });
    }
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        t.requester.get(&format!("/v1/nouns/{NS}/docs/readme")),
    )
    .await
    .expect("noun reads answer while the tries run")
    .unwrap();
    assert_status!(read, 200);
    let all = tokio::time::timeout(Duration::from_secs(20), tries.join_all())
        .await
        .expect("every try answers");
    for (staged, submitted) in all {
        assert_status!(staged, 422, "invalid_file_ref");
        assert_status!(submitted, 422, "invalid_file_ref");
    }
    assert_eq!(task(&t.requester, &id).await["state"], json!("claimed"));
}

#[tokio::test(flavor = "multi_thread")]
async fn hard_links_and_symlinks_to_a_fifo_are_refused() {
    let t = Team::start().await;
    let id = enqueue(&t.requester, &file_spec()).await;
    let w = start_work(&t.worker, &id).await;
    std::fs::write(w.work.join("a.md"), b"linked").unwrap();
    std::fs::hard_link(w.work.join("a.md"), w.work.join("b.md")).unwrap();
    mkfifo(&w.work.join("pipe"));
    let _unblock = Unblock(w.work.join("pipe"));
    std::os::unix::fs::symlink("pipe", w.work.join("to-pipe")).unwrap();
    std::fs::create_dir(w.work.join("dir")).unwrap();
    for b in [
        &b"@file:a.md"[..],
        b"@file:b.md",
        b"@file:to-pipe",
        b"@file:dir",
        b"@file:.",
    ] {
        let r = tokio::time::timeout(Duration::from_secs(5), submit_body(&w.handle, b))
            .await
            .expect("answers at once");
        assert_status!(r, 422, "invalid_file_ref");
    }
    assert_status!(
        submit_body(&w.handle, b"@file:missing.md").await,
        404,
        "file_not_found"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_regular_file_and_a_symlink_inside_the_work_dir_are_read() {
    let t = Team::start().await;
    let id = enqueue(&t.requester, &file_spec()).await;
    let w = start_work(&t.worker, &id).await;
    std::fs::create_dir(w.work.join("notes")).unwrap();
    std::fs::write(w.work.join("notes/answer.md"), b"the answer").unwrap();
    std::fs::write(w.work.join("plan.md"), b"the plan").unwrap();
    std::os::unix::fs::symlink("notes/answer.md", w.work.join("latest")).unwrap();
    std::os::unix::fs::symlink("../plan.md", w.work.join("notes/plan")).unwrap();
    assert_status!(stage(&w.handle, "plan.md", b"@file:notes/plan").await, 200);
    assert_status!(
        submit_body(&w.handle, &at_file(&w.work.join("latest"))).await,
        201
    );
    let fold = body(
        &t.requester
            .get(&format!("/v1/tasks/{id}/output"))
            .await
            .unwrap(),
    );
    assert_eq!(
        fold,
        json!({"out": "the answer", "parts": {"plan.md": "the plan"}})
    );
}

/// A body whose content starts with `@file:` itself goes inline escaped
/// as `@@file:`, on a task that allows file bodies and on one that does
/// not; an unescaped one on a task that does not is refused with a
/// message that names the escape.
#[tokio::test(flavor = "multi_thread")]
async fn an_escaped_at_file_body_is_taken_literally() {
    let t = Team::start().await;
    let output = |id: String| {
        let c = &t.requester;
        async move { body(&c.get(&format!("/v1/tasks/{id}/output")).await.unwrap())["out"].clone() }
    };

    let plain = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let w = start_work(&t.worker, &plain).await;
    let refused = submit_body(&w.handle, b"@file:notes.md").await;
    assert_status!(refused, 422, "invalid_file_ref");
    assert!(
        String::from_utf8_lossy(&refused.body).contains("@@file:"),
        "the refusal names the escape: {}",
        String::from_utf8_lossy(&refused.body)
    );
    assert_status!(submit_body(&w.handle, b"@@file:notes.md").await, 201);
    assert_eq!(output(plain).await, json!("@file:notes.md"));

    let files = enqueue(&t.requester, &file_spec()).await;
    let w = start_work(&t.worker, &files).await;
    std::fs::write(w.work.join("own.md"), b"the file's bytes").unwrap();
    assert_status!(submit_body(&w.handle, b"@@@file:own.md").await, 201);
    assert_eq!(output(files).await, json!("@@file:own.md"));
}
