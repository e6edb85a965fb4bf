//! A full disk is a state, not an outage. A fault campaign found that one
//! failed journal write (disk full) made every task call, reads included,
//! answer 503 until a restart, even after space was freed, while
//! `/healthz` said 200. Here the root lives on a 16 MiB tmpfs that a
//! ballast file fills: writes answer 507, reads 200, `/healthz` says out
//! of space; freeing the ballast lets writes through again without a
//! restart, and after SIGKILL every acknowledged write is there.

use crate::support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use support::{DaemonProcess, body};
use tessera::client::{Client, Reply};

/// A tmpfs mounted for one test, unmounted (lazily) on drop.
struct Tmpfs {
    /// Holds the mount point and the files beside it.
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` at `<tempdir>/root`, or says why it cannot.
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        std::fs::create_dir(dir.path().join("root")).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path().join("root"))
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs { dir })
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path().join("root"))
            .status();
    }
}

/// Appends to `path` until the filesystem is full.
fn fill(path: &Path) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let chunk = vec![0xa5u8; 64 * 1024];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    // The last bytes of space, below a whole chunk.
    while f.write(&[0xa5]).is_ok_and(|n| n == 1) {}
}

fn code(r: &Reply) -> String {
    r.error_code().unwrap_or_default()
}

async fn put(c: &Client, key: &str, expected: u64, n: u64) -> Reply {
    let env = json!({"expected_version": expected, "body": {"n": n, "pad": "y".repeat(8192)}});
    c.put_json(&format!("/v1/nouns/ns/disk/{key}"), &env)
        .await
        .unwrap()
}

async fn enqueue(c: &Client, i: usize) -> Reply {
    let spec = json!({"namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read", "producer_surface": "s", "brief": {"i": i, "pad": "z".repeat(32 * 1024)}});
    c.post_json("/v1/tasks", &spec).await.unwrap()
}

async fn health(c: &Client) -> (u16, Value) {
    let r = c.get("/healthz").await.unwrap();
    (r.status.as_u16(), body(&r))
}

/// The ids of every task on queue `q`, in id order.
async fn task_ids(c: &Client) -> Vec<String> {
    let r = c.get("/v1/tasks?queue=q&limit=1000").await.unwrap();
    assert_status!(r, 200);
    body(&r)["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_full_disk_refuses_writes_with_507_keeps_reads_and_recovers_without_restart() {
    let fs = match Tmpfs::mount("16m") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipping: cannot mount a tmpfs here ({why})");
            return;
        }
    };
    let root = fs.root();
    let config = "[queue]\njournal_segment_mib = 1\n";
    let ballast = root.join("ballast");
    let rt = tokio::runtime::Runtime::new().unwrap();

    let d = DaemonProcess::spawn_with_config(&root, config);
    let admin = d.admin.clone();
    // (key, version, sha256) of every acknowledged noun write, and the
    // ids of every acknowledged enqueue.
    let (nouns, tasks) = rt.block_on(async {
        let r = admin
            .post_json("/v1/queues", &json!({"name": "q"}))
            .await
            .unwrap();
        assert_status!(r, 201);
        let mut nouns = Vec::new();
        let mut tasks = Vec::new();
        let r = put(&admin, "a", 0, 1).await;
        assert_status!(r, 201);
        nouns.push((
            "a".to_string(),
            1,
            body(&r)["sha256"].as_str().unwrap().to_string(),
        ));
        let r = enqueue(&admin, 0).await;
        assert_status!(r, 201);
        tasks.push(body(&r)["task_id"].as_str().unwrap().to_string());

        fill(&ballast);

        // Noun writes: 507, nothing written, and they stay refused.
        for (key, expected) in [("a", 1), ("b", 0), ("a", 1)] {
            let r = put(&admin, key, expected, 2).await;
            assert_status!(r, 507, "insufficient_storage");
            assert!(
                body(&r)["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("free space")
            );
        }
        let (status, h) = health(&admin).await;
        assert_eq!(
            (status, h["status"].as_str()),
            (200, Some("out_of_space")),
            "{h}"
        );
        assert_eq!(h["storage"]["writer"], "files", "{h}");

        // Enqueues go into the journal's preallocated segment until it is
        // full; then they are refused before anything is applied.
        let mut refused = 0;
        for i in 1..200 {
            let r = enqueue(&admin, i).await;
            match r.status.as_u16() {
                201 if refused == 0 => {
                    tasks.push(body(&r)["task_id"].as_str().unwrap().to_string())
                }
                507 => {
                    assert_eq!(code(&r), "insufficient_storage");
                    refused += 1;
                    if refused == 3 {
                        break;
                    }
                }
                s => panic!(
                    "enqueue {i} answered {s}: {}",
                    String::from_utf8_lossy(&r.body)
                ),
            }
        }
        assert_eq!(refused, 3, "the journal's segment never filled up");

        // Reads keep working, and show exactly what was acknowledged.
        let r = admin.get("/v1/nouns/ns/disk/a").await.unwrap();
        assert_status!(r, 200);
        assert_eq!(r.header("x-tessera-version"), Some("1"));
        assert_status!(
            admin.get("/v1/nouns/ns/disk/a/versions").await.unwrap(),
            200
        );
        assert_status!(
            admin.get("/v1/nouns/ns/disk/b").await.unwrap(),
            404,
            "not_found"
        );
        for id in [&tasks[0], tasks.last().unwrap()] {
            let r = admin.get(&format!("/v1/tasks/{id}")).await.unwrap();
            assert_status!(r, 200);
        }
        assert_eq!(
            task_ids(&admin).await,
            tasks,
            "a refused enqueue left no task behind"
        );
        assert_status!(admin.get("/v1/queues").await.unwrap(), 200);
        let (status, h) = health(&admin).await;
        assert_eq!(
            (status, h["status"].as_str()),
            (200, Some("out_of_space")),
            "{h}"
        );

        // Space is freed: writes succeed again, no restart.
        std::fs::remove_file(&ballast).unwrap();
        let r = put(&admin, "a", 1, 2).await;
        assert_status!(r, 201);
        nouns.push((
            "a".to_string(),
            2,
            body(&r)["sha256"].as_str().unwrap().to_string(),
        ));
        let r = put(&admin, "b", 0, 1).await;
        assert_status!(r, 201);
        nouns.push((
            "b".to_string(),
            1,
            body(&r)["sha256"].as_str().unwrap().to_string(),
        ));
        for i in 200..203 {
            let r = enqueue(&admin, i).await;
            assert_status!(r, 201);
            tasks.push(body(&r)["task_id"].as_str().unwrap().to_string());
        }
        let (status, h) = health(&admin).await;
        assert_eq!((status, h["status"].as_str()), (200, Some("ok")), "{h}");
        (nouns, tasks)
    });
    d.kill();

    let d = DaemonProcess::spawn_with_config(&root, config);
    let admin = d.admin.clone();
    rt.block_on(async {
        for (key, version, sha) in &nouns {
            let r = admin
                .get(&format!("/v1/nouns/ns/disk/{key}?version={version}"))
                .await
                .unwrap();
            assert_status!(r, 200);
            assert_eq!(
                r.header("x-tessera-sha256"),
                Some(sha.as_str()),
                "{key} v{version}"
            );
        }
        assert_eq!(task_ids(&admin).await, tasks);
    });
    d.signal("TERM");
    let (status, log) = d.wait();
    assert_eq!(status.code(), Some(0), "{log}");
    let fsck = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["fsck", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "fsck: {}",
        String::from_utf8_lossy(&fsck.stdout)
    );
}

/// Sends a JSON-RPC message to `/mcp` (streamable HTTP, JSON answer).
async fn mcp(c: &Client, message: Value) -> Value {
    let r = c
        .send(
            http::Method::POST,
            "/mcp",
            Some(serde_json::to_vec(&message).unwrap().into()),
            &[
                ("accept", "application/json, text/event-stream"),
                ("mcp-protocol-version", "2025-11-25"),
            ],
        )
        .await
        .unwrap();
    assert!(
        r.status.is_success(),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    if r.body.is_empty() {
        return Value::Null;
    }
    let text = String::from_utf8_lossy(&r.body).into_owned();
    let data = text
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|d| !d.is_empty())
        .map(str::to_string)
        .unwrap_or(text);
    serde_json::from_str(&data).unwrap()
}

/// Regression: on a full disk `GET /v1/worker/prompt` answered 500 (the
/// work dir's owner mark could not be written, and the error became a
/// string), and a `check_policy: warn` submit skipped its projection as
/// if the placement were in the way. Every route that writes answers
/// `507 insufficient_storage` with the API's error body, or succeeds into
/// space the journal had reserved; never 500. The same through `/mcp`.
#[test]
fn every_route_that_writes_answers_507_on_a_full_disk_never_500() {
    let fs = match Tmpfs::mount("16m") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipping: cannot mount a tmpfs here ({why})");
            return;
        }
    };
    let root = fs.root();
    let d = DaemonProcess::spawn_with_config(&root, "[queue]\njournal_segment_mib = 1\n");
    let admin = d.admin.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let r = admin
            .post_json("/v1/queues", &json!({"name": "q"}))
            .await
            .unwrap();
        assert_status!(r, 201);
        let mut claims = Vec::new();
        for i in 0..6 {
            let r = enqueue(&admin, i).await;
            assert_status!(r, 201);
            let id = body(&r)["task_id"].as_str().unwrap().to_string();
            let r = admin
                .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
                .await
                .unwrap();
            assert_status!(r, 200);
            claims.push(body(&r));
        }
        let handle = |n: usize| admin.with_bearer(claims[n]["handle"].as_str().unwrap());
        let id = |n: usize| claims[n]["task"]["task_id"].as_str().unwrap().to_string();
        let lease = |n: usize| claims[n]["lease"]["id"].clone();
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        mcp(&handle(5), init).await;
        mcp(
            &handle(5),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;

        fill(&root.join("ballast"));

        let key = json!({"label": "k", "grants": {"scopes": ["nouns:read"]}});
        let part = b"a part".to_vec();
        let cases: Vec<(&str, Reply)> = vec![
            ("prompt", handle(0).get("/v1/worker/prompt").await.unwrap()),
            (
                "artifact",
                handle(1)
                    .post_bytes("/v1/worker/artifact?name=p.md", part.clone())
                    .await
                    .unwrap(),
            ),
            (
                "worker submit (warn)",
                handle(2)
                    .post_bytes("/v1/worker/submit", b"the result".to_vec())
                    .await
                    .unwrap(),
            ),
            ("noun put", put(&admin, "full", 0, 1).await),
            (
                "key issue",
                admin.post_json("/v1/keys", &key).await.unwrap(),
            ),
            (
                "batch nouns",
                admin
                    .post_json(
                        "/v1/batch/nouns",
                        &json!({"items": [{"namespace": "ns", "store": "disk", "key": "b1", "envelope": {"expected_version": 0, "body": {"pad": "q".repeat(8192)}}}]}),
                    )
                    .await
                    .unwrap(),
            ),
            ("enqueue", enqueue(&admin, 100).await),
            (
                "heartbeat",
                admin
                    .post_json(
                        &format!("/v1/tasks/{}/heartbeat", id(3)),
                        &json!({"lease_id": lease(3)}),
                    )
                    .await
                    .unwrap(),
            ),
            (
                "key submit",
                admin
                    .post_json(
                        &format!("/v1/tasks/{}/submit", id(4)),
                        &json!({"lease_id": lease(4), "ok": true}),
                    )
                    .await
                    .unwrap(),
            ),
        ];
        for (what, r) in &cases {
            let s = r.status.as_u16();
            assert!(
                r.status.is_success() || (s, code(r).as_str()) == (507, "insufficient_storage"),
                "{what} answered {s}: {}",
                String::from_utf8_lossy(&r.body)
            );
            if s == 507 {
                let b = body(r);
                assert!(b["error"]["message"].is_string(), "{what}: {b}");
            }
        }
        for item in body(&cases[5].1)["items"].as_array().into_iter().flatten() {
            let s = item["status"].as_u64().unwrap_or(0);
            assert!(s < 300 || s == 507, "batch item {item}");
        }
        let must_refuse = ["prompt", "artifact", "worker submit (warn)", "noun put", "key issue"];
        for (what, r) in &cases {
            if must_refuse.contains(what) {
                assert_status!(r, 507, "insufficient_storage");
            }
        }
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "get_prompt", "arguments": {}}});
        let answer = mcp(&handle(5), call).await;
        let result = &answer["result"];
        assert_eq!(result["isError"], json!(true), "{answer}");
        assert_eq!(
            (
                result["structuredContent"]["status"].as_u64(),
                result["structuredContent"]["error"]["code"].as_str()
            ),
            (Some(507), Some("insufficient_storage")),
            "{answer}"
        );

        // Space back: the same calls go through.
        std::fs::remove_file(root.join("ballast")).unwrap();
        assert_status!(handle(0).get("/v1/worker/prompt").await.unwrap(), 200);
        assert_status!(
            handle(2)
                .post_bytes("/v1/worker/submit", b"the result".to_vec())
                .await
                .unwrap(),
            201
        );
    });
    d.kill();
}

/// Fills the filesystem of `path` until `free` bytes are left.
fn leave_free(path: &Path, free: u64) {
    let dir = std::fs::File::open(path.parent().unwrap()).unwrap();
    let fs = rustix::fs::fstatvfs(&dir).unwrap();
    let avail = fs.f_bavail * fs.f_frsize;
    let f = std::fs::File::create(path).unwrap();
    rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, avail - free).unwrap();
}

/// Regression: `/healthz` kept showing an out-of-space cause after space
/// came back, until the writer that reported it happened to write again
/// (and another writer's success could hide an episode that then outlived
/// itself, `store::health`'s unit test). A periodic check of the free
/// space ends it; while it lasts, `/healthz` says what the refused write
/// needed and what is free.
#[test]
fn healthz_clears_the_out_of_space_cause_once_space_is_back_without_a_write() {
    let fs = match Tmpfs::mount("16m") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipping: cannot mount a tmpfs here ({why})");
            return;
        }
    };
    let root = fs.root();
    let d = DaemonProcess::spawn_with_config(&root, "[queue]\njournal_segment_mib = 1\n");
    let admin = d.admin.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        fill(&root.join("ballast"));
        assert_status!(put(&admin, "a", 0, 1).await, 507, "insufficient_storage");
        let (status, h) = health(&admin).await;
        assert_eq!(
            (status, h["status"].as_str()),
            (200, Some("out_of_space")),
            "{h}"
        );
        assert!(h["storage"]["needed_bytes"].as_u64().unwrap() > 8192, "{h}");
        assert!(h["storage"]["free_bytes"].as_u64().unwrap() < 8192, "{h}");
        std::fs::remove_file(root.join("ballast")).unwrap();
        let (status, h) = health(&admin).await;
        assert_eq!((status, h["status"].as_str()), (200, Some("ok")), "{h}");
        assert!(h.get("storage").is_none(), "{h}");
    });
    d.kill();
}

/// Regression: with the default 64 MiB segments, a start with less than
/// 128 MiB free (a journal segment and a noun log segment) refused every
/// task change and noun put as "disk full", even with 35 MiB free: a
/// change needs room for its record, not a whole segment. Segments are
/// made as large as still fits; when not even the record fits, the
/// refusal says what the change needed and what is free.
#[test]
fn a_task_change_needs_room_for_its_record_not_a_whole_segment() {
    let fs = match Tmpfs::mount("100m") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipping: cannot mount a tmpfs here ({why})");
            return;
        }
    };
    let root = fs.root();
    leave_free(&root.join("ballast"), 35 << 20);
    let d = DaemonProcess::spawn_with_config(&root, "");
    let admin = d.admin.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let r = admin
            .post_json("/v1/queues", &json!({"name": "q"}))
            .await
            .unwrap();
        assert_status!(r, 201);
        assert_status!(enqueue(&admin, 0).await, 201);
        assert_status!(put(&admin, "a", 0, 1).await, 201);
        let (_, h) = health(&admin).await;
        assert_eq!(h["status"], json!("ok"), "{h}");

        std::fs::remove_file(root.join("ballast")).unwrap();
        fill(&root.join("ballast"));
        let mut refused = None;
        for i in 1..10_000 {
            let r = enqueue(&admin, i).await;
            match r.status.as_u16() {
                201 => {}
                507 => {
                    refused = Some(r);
                    break;
                }
                s => panic!("enqueue answered {s}: {}", String::from_utf8_lossy(&r.body)),
            }
        }
        let r = refused.expect("the journal's space ran out");
        let message = body(&r)["error"]["message"].as_str().unwrap().to_string();
        assert!(
            message.contains("the least this change needs") && message.contains("bytes are free"),
            "{message}"
        );
        let (_, h) = health(&admin).await;
        assert_eq!(
            (h["status"].as_str(), h["storage"]["writer"].as_str()),
            (Some("out_of_space"), Some("journal")),
            "{h}"
        );
        let needed = h["storage"]["needed_bytes"].as_u64().unwrap();
        assert!(needed < 64 << 10, "a record's worth, not a segment: {h}");
    });
    d.kill();
}
