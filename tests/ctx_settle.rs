//! Regression: every restart, a graceful one included, deleted a recorded
//! ctx-dir when the task's last receipt came from the key route (attempt 1
//! through `POST /v1/worker/submit?ok=false`, attempt 2 through
//! `POST /v1/tasks/{id}/submit`), logging "removed a result the journal
//! does not have". The settle at start looked only at the last receipt;
//! a receipt that projected nothing (key route, or a projection skipped
//! under `check_policy: warn`) made it take the recorded result for an
//! interrupted submit's.
//!
//! The rule: the ctx-dir at a path holds the result of the latest receipt
//! that wrote there, or nothing when none did. The table runs every way a
//! task's attempts can end (worker route and key route, ok true and false,
//! final failures and retries, park and resume, split and combine,
//! release, a skipped projection, the queue's placement changed between
//! attempts, a submit killed between its projection and its record), each
//! case as its own task, across a graceful restart and across SIGKILL.

use crate::support;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use support::{DaemonProcess, body, offline};
use tessera::client::Client;
use tessera::worker::front_matter;

/// One step of a case, on the case's task.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Claim, stage part `p<attempt>`, submit through the worker route.
    Worker(Outcome),
    /// Claim, submit through the key route.
    Key(Outcome),
    /// Claim; the ctx-dir's parent holds another task's mark while the
    /// worker route submits (`ok: false`), so its projection is skipped;
    /// the mark is then taken away.
    Skipped,
    /// Claim and park.
    Park,
    /// Resume the parked task, by another key.
    Resume,
    /// Claim and split into one child, which the key route completes, so
    /// the parent is queued again to combine.
    Split,
    /// Claim and release.
    Release,
    /// Claim and hold the lease across the restart.
    Claim,
    /// Retry the failed task.
    Retry,
    /// Change the case queue's placement (`runs<n>/{task_id}`).
    Replace,
}

#[derive(Clone, Copy, Debug)]
enum Outcome {
    Ok,
    /// `ok: false`, retried.
    Fail,
    /// `ok: false`, final.
    Final,
}

use Outcome::*;
use Step::*;

/// A case: its steps, and whether the restart finds a result the journal
/// does not have (the held attempt's submit projected, then the daemon
/// died before its record).
struct Case {
    steps: &'static [Step],
    unrecorded: bool,
}

const fn case(steps: &'static [Step]) -> Case {
    Case {
        steps,
        unrecorded: false,
    }
}

const fn killed_mid_submit(steps: &'static [Step]) -> Case {
    Case {
        steps,
        unrecorded: true,
    }
}

const CASES: &[Case] = &[
    case(&[Worker(Fail), Key(Fail)]),
    case(&[Worker(Fail), Key(Ok)]),
    case(&[Worker(Fail), Key(Final)]),
    case(&[Worker(Fail), Key(Final), Retry]),
    case(&[Worker(Fail), Key(Fail), Key(Fail)]),
    case(&[Worker(Fail), Key(Fail), Claim]),
    case(&[Worker(Fail), Worker(Fail)]),
    case(&[Worker(Fail), Key(Fail), Worker(Fail)]),
    case(&[Worker(Fail), Key(Fail), Worker(Ok)]),
    case(&[Worker(Ok)]),
    case(&[Worker(Final), Retry, Key(Fail)]),
    case(&[Key(Fail), Worker(Fail), Key(Fail)]),
    case(&[Worker(Fail), Skipped]),
    case(&[Worker(Fail), Skipped, Key(Fail)]),
    case(&[Worker(Fail), Park]),
    case(&[Worker(Fail), Park, Resume]),
    case(&[Worker(Fail), Park, Resume, Key(Fail)]),
    case(&[Worker(Fail), Split]),
    case(&[Worker(Fail), Split, Key(Fail)]),
    case(&[Worker(Fail), Split, Worker(Fail)]),
    case(&[Worker(Fail), Release]),
    case(&[Worker(Fail), Replace, Key(Fail)]),
    case(&[Worker(Fail), Replace, Worker(Fail), Replace]),
    killed_mid_submit(&[Claim]),
    killed_mid_submit(&[Key(Fail), Claim]),
    killed_mid_submit(&[Worker(Fail), Claim]),
    killed_mid_submit(&[Worker(Fail), Key(Fail), Claim]),
    killed_mid_submit(&[Worker(Fail), Skipped, Claim]),
    killed_mid_submit(&[Worker(Fail), Park, Resume, Claim]),
    killed_mid_submit(&[Worker(Fail), Split, Claim]),
    killed_mid_submit(&[Worker(Fail), Replace, Claim]),
];

/// Where a case's task projects: the default template, or the one its
/// queue was last given.
fn rel(placement: Option<usize>, id: &str) -> String {
    match placement {
        None => format!("tasks/{id}/ctx"),
        Some(n) => format!("runs{n}/{id}"),
    }
}

/// A case's task as the model sees it after its steps.
struct Ran {
    id: String,
    /// The attempt the held claim is on.
    attempt: u32,
    /// The current placement.
    placement: Option<usize>,
    /// Each path a projection wrote, with the attempt that last wrote it.
    written: Vec<(String, Option<u32>)>,
}

fn area(root: &Path) -> PathBuf {
    root.join("workspace/ns")
}

fn result_of(attempt: u32) -> Vec<u8> {
    format!("the result of attempt {attempt}").into_bytes()
}

async fn ok(r: tessera::client::Reply, status: u16) -> Value {
    assert_eq!(
        r.status.as_u16(),
        status,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    if r.body.is_empty() {
        Value::Null
    } else {
        body(&r)
    }
}

/// Claims `id` by id, waiting out its backoff.
async fn claim(admin: &Client, id: &str) -> Value {
    for _ in 0..500 {
        let r = admin
            .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
            .await
            .unwrap();
        if r.status == 200 {
            return body(&r);
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("{id} could not be claimed");
}

async fn key_submit(admin: &Client, id: &str, lease: &Value, outcome: Outcome) {
    let submit = match outcome {
        Ok => json!({"lease_id": lease, "ok": true}),
        Fail => json!({"lease_id": lease, "ok": false}),
        Final => json!({"lease_id": lease, "ok": false, "final": true}),
    };
    let r = admin
        .post_json(&format!("/v1/tasks/{id}/submit"), &submit)
        .await
        .unwrap();
    ok(r, 201).await;
}

async fn run(
    admin: &Client,
    resumer: &Client,
    root: &Path,
    n: usize,
    c: &Case,
) -> (Ran, Option<Value>) {
    let queue = format!("q{n}");
    let q = json!({"name": queue, "max_attempts": 20, "backoff": {"base_ms": 1, "cap_ms": 1}});
    ok(admin.post_json("/v1/queues", &q).await.unwrap(), 201).await;
    let spec = json!({"namespace": "ns", "queue": queue, "kind": "verb.k", "effect_class": "read", "producer_surface": "s", "brief": {"case": n}});
    let id = ok(admin.post_json("/v1/tasks", &spec).await.unwrap(), 201).await["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut ran = Ran {
        id: id.clone(),
        attempt: 0,
        placement: None,
        written: vec![(rel(None, &id), None)],
    };
    let mut held = None;
    for step in c.steps {
        match *step {
            Worker(outcome) | Key(outcome) => {
                let claimed = claim(admin, &id).await;
                ran.attempt = claimed["lease"]["fence"].as_u64().unwrap() as u32;
                if let Key(_) = step {
                    key_submit(admin, &id, &claimed["lease"]["id"], outcome).await;
                    continue;
                }
                let handle = admin.with_bearer(claimed["handle"].as_str().unwrap());
                let part = format!("/v1/worker/artifact?name=p{}", ran.attempt);
                ok(
                    handle.post_bytes(&part, b"part".to_vec()).await.unwrap(),
                    200,
                )
                .await;
                let route = match outcome {
                    Ok => "/v1/worker/submit",
                    Fail => "/v1/worker/submit?ok=false",
                    Final => "/v1/worker/submit?ok=false&final=true",
                };
                let r = handle
                    .post_bytes(route, result_of(ran.attempt))
                    .await
                    .unwrap();
                ok(r, 201).await;
                let at = rel(ran.placement, &id);
                ran.written.retain(|(p, _)| *p != at);
                ran.written.push((at, Some(ran.attempt)));
            }
            Skipped => {
                let claimed = claim(admin, &id).await;
                ran.attempt = claimed["lease"]["fence"].as_u64().unwrap() as u32;
                let parent = area(root).join(rel(ran.placement, &id));
                let mark = parent.parent().unwrap().join(".tessera-owner");
                std::fs::write(&mark, "t1 work\n").unwrap();
                let handle = admin.with_bearer(claimed["handle"].as_str().unwrap());
                let r = handle
                    .post_bytes("/v1/worker/submit?ok=false", result_of(ran.attempt))
                    .await
                    .unwrap();
                let done = ok(r, 201).await;
                std::fs::remove_file(&mark).unwrap();
                let receipts = ok(
                    admin
                        .get(&format!("/v1/tasks/{id}/receipts"))
                        .await
                        .unwrap(),
                    200,
                )
                .await;
                let last = receipts["receipts"].as_array().unwrap().last().unwrap();
                assert_eq!(
                    last["receipt"]["projection"]["status"],
                    json!("skipped"),
                    "{done}"
                );
            }
            Park => {
                let claimed = claim(admin, &id).await;
                ran.attempt = claimed["lease"]["fence"].as_u64().unwrap() as u32;
                let park =
                    json!({"lease_id": claimed["lease"]["id"], "reason": "input", "needs": {}});
                let r = admin
                    .post_json(&format!("/v1/tasks/{id}/park"), &park)
                    .await
                    .unwrap();
                ok(r, 200).await;
            }
            Resume => {
                let put =
                    json!({"expected_version": 0, "producer_surface": "s", "body": {"case": n}});
                let r = admin
                    .put_json(&format!("/v1/nouns/ns/s/input{n}"), &put)
                    .await
                    .unwrap();
                let sha = ok(r, 201).await["sha256"].clone();
                let pin =
                    json!({"store": "s", "key": format!("input{n}"), "version": 1, "sha256": sha});
                let r = resumer
                    .post_json(
                        &format!("/v1/tasks/{id}/resume"),
                        &json!({"input_ref": pin}),
                    )
                    .await
                    .unwrap();
                ok(r, 200).await;
            }
            Split => {
                let claimed = claim(admin, &id).await;
                ran.attempt = claimed["lease"]["fence"].as_u64().unwrap() as u32;
                let child = json!({"queue": queue, "kind": "verb.k", "effect_class": "read", "brief": {"child_of": n}});
                let split = json!({"lease_id": claimed["lease"]["id"], "children": [child]});
                let r = admin
                    .post_json(&format!("/v1/tasks/{id}/split"), &split)
                    .await
                    .unwrap();
                let kid = ok(r, 200).await["children"][0]
                    .as_str()
                    .unwrap()
                    .to_string();
                let kc = claim(admin, &kid).await;
                key_submit(admin, &kid, &kc["lease"]["id"], Ok).await;
            }
            Release => {
                let claimed = claim(admin, &id).await;
                ran.attempt = claimed["lease"]["fence"].as_u64().unwrap() as u32;
                let release = json!({"lease_id": claimed["lease"]["id"]});
                let r = admin
                    .post_json(&format!("/v1/tasks/{id}/release"), &release)
                    .await
                    .unwrap();
                ok(r, 200).await;
            }
            Claim => {
                let claimed = claim(admin, &id).await;
                ran.attempt = claimed["lease"]["fence"].as_u64().unwrap() as u32;
                held = Some(claimed);
            }
            Retry => {
                let r = admin
                    .post_json(&format!("/v1/tasks/{id}/retry"), &json!({}))
                    .await
                    .unwrap();
                ok(r, 200).await;
            }
            Replace => {
                let placed = ran.written.len();
                let q = json!({"name": queue, "max_attempts": 20, "backoff": {"base_ms": 1, "cap_ms": 1}, "placement": format!("runs{placed}/{{task_id}}")});
                ok(admin.post_json("/v1/queues", &q).await.unwrap(), 200).await;
                ran.placement = Some(placed);
                ran.written.push((rel(ran.placement, &id), None));
            }
        }
    }
    (ran, held)
}

/// What a submit of the held attempt leaves when the daemon dies between
/// its projection and its record: its marked ctx-dir with its files.
fn project_unrecorded(root: &Path, ran: &Ran) {
    let dir = area(root).join(rel(ran.placement, &ran.id));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".tessera-owner"), format!("{} ctx\n", ran.id)).unwrap();
    let body = b"never recorded";
    let header = front_matter::Header {
        task_id: ran.id.clone(),
        step: "k".into(),
        attempt: ran.attempt,
        ok: true,
        sha256: tessera::store::Sha256::of(body).hex(),
        size: body.len() as u64,
    };
    std::fs::write(dir.join("k.md"), front_matter::encode(&header, body)).unwrap();
    std::fs::write(dir.join(format!("p{}", ran.attempt)), b"unrecorded part").unwrap();
}

/// What the directory at `rel` holds: the attempt of its step file, and
/// its files besides the owner mark.
fn holds(root: &Path, rel: &str) -> Option<(u32, Vec<u8>, Vec<String>)> {
    let dir = area(root).join(rel);
    let bytes = std::fs::read(dir.join("k.md")).ok()?;
    let (header, body) = front_matter::decode(&bytes).expect("front matter");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".tessera-owner" && n != "k.md")
        .collect();
    files.sort();
    Some((header.attempt, body.to_vec(), files))
}

fn every_recorded_ctx_dir_survives(kill: bool) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(root.path());
    let ran: Vec<Ran> = rt.block_on(async {
        let key = json!({"label": "resumer", "grants": {"queues": (0..CASES.len()).map(|n| format!("q{n}")).collect::<Vec<_>>(), "kinds": ["verb.k"], "effect_classes": ["read"], "scopes": ["namespace:ns", "surface:s", "nouns:read", "verbs:enqueue"]}});
        let issued = ok(d.admin.post_json("/v1/keys", &key).await.unwrap(), 201).await;
        let resumer = d.admin.with_bearer(issued["secret"].as_str().unwrap());
        let mut ran = Vec::new();
        for (n, c) in CASES.iter().enumerate() {
            ran.push(run(&d.admin, &resumer, root.path(), n, c).await.0);
        }
        ran
    });
    if kill {
        d.kill();
    } else {
        d.signal("TERM");
        let (status, log) = d.wait();
        assert_eq!(status.code(), Some(0), "{log}");
    }
    for (c, r) in CASES.iter().zip(&ran) {
        if kill && c.unrecorded {
            project_unrecorded(root.path(), r);
        }
    }
    let d = DaemonProcess::spawn(root.path());
    d.signal("TERM");
    let (status, log) = d.wait();
    assert_eq!(status.code(), Some(0), "{log}");
    let mut wrong = Vec::new();
    for (c, r) in CASES.iter().zip(&ran) {
        for (at, attempt) in &r.written {
            let want = attempt.map(|a| (a, result_of(a), vec![format!("p{a}")]));
            let got = holds(root.path(), at);
            if got != want {
                wrong.push(format!(
                    "{:?}{}: {at} holds {:?}, the receipts record {:?}",
                    c.steps,
                    if kill && c.unrecorded {
                        " then killed mid-submit"
                    } else {
                        ""
                    },
                    got.map(|(a, b, f)| (a, String::from_utf8_lossy(&b).into_owned(), f)),
                    attempt
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}\n\nlog:\n{log}", wrong.join("\n"));
    let fsck = offline(&["fsck"], root.path());
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stdout)
    );
    // fsck holds each ctx-dir to the latest receipt that wrote it, also
    // when a receipt that projected nothing came after it.
    let (at, _) = &ran[0].written[0];
    std::fs::remove_file(area(root.path()).join(at).join("p1")).unwrap();
    let fsck = offline(&["fsck"], root.path());
    let out = String::from_utf8_lossy(&fsck.stdout);
    assert_eq!(fsck.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("workspace/ns/{at}: part p1")),
        "{out}"
    );
}

#[test]
fn a_graceful_restart_keeps_every_ctx_dir_a_receipt_records() {
    every_recorded_ctx_dir_survives(false);
}

#[test]
fn a_sigkill_restart_keeps_every_ctx_dir_a_receipt_records_and_removes_only_unrecorded_results() {
    every_recorded_ctx_dir_survives(true);
}
