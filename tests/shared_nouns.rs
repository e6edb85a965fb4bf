//! Daemons that share their nouns (`serve --queue-url … --objects-url
//! s3://BUCKET`): objects in an S3 server's bucket, version lists in
//! PostgreSQL. Any daemon serves any noun and any task's output; a key's
//! compare-and-swap has one winner across daemons; a SIGKILL loses no
//! acknowledged put; an object damaged in the bucket is refused, never
//! served; `tessera fsck --objects-url` checks every version's object.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use support::relay::Relay;
use support::sse::Stream;
use support::{DaemonProcess, body, flow, s3};
use tessera::client::{Client, Reply};

/// Daemons on roots `a`, `b`, … under `dir`, sharing a fresh database and
/// a fresh bucket: the first one's admin key works on all of them.
async fn daemons(dir: &Path, n: usize) -> (Vec<DaemonProcess>, String, String) {
    let url = support::pg::fresh_database().await;
    let bucket = tokio::task::spawn_blocking(s3::fresh_bucket).await.unwrap();
    let first = DaemonProcess::spawn_sharing(&dir.join("d0"), &url, &bucket, None);
    let mut all = vec![];
    for i in 1..n {
        let root = dir.join(format!("d{i}"));
        all.push(DaemonProcess::spawn_sharing(
            &root,
            &url,
            &bucket,
            Some(&first),
        ));
    }
    all.insert(0, first);
    (all, url, bucket)
}

async fn put(c: &Client, key: &str, expected: u64, value: Value) -> Reply {
    c.put_json(
        &format!("/v1/nouns/ns/st/{key}"),
        &json!({"expected_version": expected, "body": value}),
    )
    .await
    .unwrap()
}

/// A task on a new queue `q`, with `extra` fields in its spec, claimed
/// through `c`: its id, and a client holding its worker handle.
async fn claimed(c: &Client, extra: Value) -> (String, Client) {
    assert_status!(
        c.post_json("/v1/queues", &json!({"name": "q"}))
            .await
            .unwrap(),
        201
    );
    let mut spec = json!({
        "namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read",
        "producer_surface": "s", "brief": {}
    });
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let r = c.post_json("/v1/tasks", &spec).await.unwrap();
    assert_status!(r, 201);
    let id = body(&r)["task_id"].as_str().unwrap().to_string();
    let claim = support::claim(c, "q").await.expect("claimed");
    (id, c.with_bearer(claim["handle"].as_str().unwrap()))
}

async fn versions(c: &Client, key: &str) -> Vec<Value> {
    let r = c
        .get(&format!("/v1/nouns/ns/st/{key}/versions"))
        .await
        .unwrap();
    assert_status!(r, 200);
    body(&r)["versions"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_noun_written_through_one_daemon_is_read_listed_and_changed_through_another() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _, bucket) = daemons(dir.path(), 2).await;
    let (a, b) = (&d[0].admin, &d[1].admin);
    let r = put(a, "k", 0, json!({"n": 1})).await;
    assert_status!(r, 201);
    let sha = body(&r)["sha256"].as_str().unwrap().to_string();
    let key = format!("objects/sha256/{}/{}", &sha[..2], &sha[2..]);
    let keys = tokio::task::spawn_blocking(move || s3::object_keys(&bucket))
        .await
        .unwrap();
    assert!(keys.contains(&key), "the object is in the bucket: {keys:?}");
    let read = b.get("/v1/nouns/ns/st/k").await.unwrap();
    assert_status!(read, 200);
    assert_eq!(body(&read), json!({"n": 1}));
    let listed = body(&b.get("/v1/nouns?namespace=ns").await.unwrap());
    assert_eq!(listed["nouns"][0]["key"], "k", "{listed}");
    assert_status!(put(b, "k", 1, json!({"n": 2})).await, 201);
    assert_status!(
        put(a, "k", 1, json!({"n": 3})).await,
        409,
        "version_conflict"
    );
    let r = b
        .post_json("/v1/nouns/ns/st/k/quarantine", &json!({}))
        .await
        .unwrap();
    assert_status!(r, 200);
    let seen = versions(a, "k").await;
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter().all(|v| v["quarantined"] == json!(true)),
        "a quarantine through b flags every version read through a: {seen:?}"
    );
    for daemon in d {
        daemon.kill();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sixteen_writers_with_one_expected_version_on_three_daemons_make_one_version() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _, _) = daemons(dir.path(), 3).await;
    let clients: Vec<Client> = d.iter().map(|p| p.admin.clone()).collect();
    for round in 0..5 {
        let key = format!("race{round}");
        assert_status!(put(&clients[0], &key, 0, json!({"v": 0})).await, 201);
        let mut racers = tokio::task::JoinSet::new();
        for w in 0..16 {
            let c = clients[w % 3].clone();
            let key = key.clone();
            racers.spawn(async move { put(&c, &key, 1, json!({"writer": w})).await });
        }
        let mut won = 0;
        while let Some(r) = racers.join_next().await {
            let r = r.unwrap();
            match r.status.as_u16() {
                201 => won += 1,
                409 => assert_eq!(r.error_code().as_deref(), Some("version_conflict")),
                s => panic!("a racer got {s}: {}", String::from_utf8_lossy(&r.body)),
            }
        }
        assert_eq!(won, 1, "round {round}: one writer wins");
        for c in &clients {
            assert_eq!(versions(c, &key).await.len(), 2, "round {round}");
        }
    }
    for daemon in d {
        daemon.kill();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sixteen_clients_putting_lose_nothing_acknowledged_to_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let (mut d, _, _) = daemons(dir.path(), 2).await;
    let survivor = d.pop().unwrap();
    let victim = d.pop().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..16 {
        let (c, stop) = (victim.admin.clone(), stop.clone());
        writers.spawn(async move {
            let mut acked = Vec::new();
            for i in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let key = format!("w{w}-{i}");
                match c
                    .put_json(
                        &format!("/v1/nouns/ns/st/{key}"),
                        &json!({"expected_version": 0, "body": {"w": w, "i": i}}),
                    )
                    .await
                {
                    Ok(r) if r.status.as_u16() == 201 => {
                        acked.push((key, body(&r)["sha256"].clone()));
                    }
                    // Cut off by the kill: not acknowledged.
                    _ => break,
                }
            }
            acked
        });
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    victim.kill();
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    while let Some(a) = writers.join_next().await {
        acked.extend(a.unwrap());
    }
    assert!(acked.len() > 16, "the writers got going: {}", acked.len());
    for (key, sha) in &acked {
        let r = survivor
            .admin
            .get(&format!("/v1/nouns/ns/st/{key}"))
            .await
            .unwrap();
        assert_status!(r, 200);
        let list = versions(&survivor.admin, key).await;
        assert_eq!(list.len(), 1, "{key}");
        assert_eq!(&list[0]["sha256"], sha, "{key}");
    }
    survivor.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_object_damaged_in_the_bucket_is_refused_and_fsck_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let (d, url, bucket) = daemons(dir.path(), 2).await;
    let r = put(&d[0].admin, "k", 0, json!({"secret": "original"})).await;
    assert_status!(r, 201);
    let sha = body(&r)["sha256"].as_str().unwrap().to_string();
    let key = format!("objects/sha256/{}/{}", &sha[..2], &sha[2..]);
    let (b2, k2) = (bucket.clone(), key.clone());
    tokio::task::spawn_blocking(move || s3::put_raw(&b2, &k2, b"{\"secret\": \"forged!!\"}"))
        .await
        .unwrap();
    for daemon in &d {
        let r = daemon.admin.get("/v1/nouns/ns/st/k").await.unwrap();
        assert_status!(r, 500, "corrupt_object");
        assert!(
            !String::from_utf8_lossy(&r.body).contains("forged"),
            "damaged bytes are never served"
        );
        let pinned = daemon
            .admin
            .get(&format!("/v1/nouns/ns/st/k?version=1&sha256={sha}"))
            .await
            .unwrap();
        assert_status!(pinned, 500, "corrupt_object");
    }
    let root = dir.path().join("d1");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["fsck", "--root"])
        .arg(&root)
        .envs(s3::env(&bucket))
        .env("TESSERA_QUEUE_URL", &url)
        .output()
        .unwrap();
    let text = support::text(&out);
    assert!(!out.status.success(), "fsck finds the damage: {text}");
    assert!(
        text.contains("noun ns/st/k (database)") && text.contains("corrupt"),
        "fsck names the noun and the damage: {text}"
    );
    for daemon in d {
        daemon.kill();
    }
}

/// A version is written only once its object is in the bucket: while the
/// bucket cannot be reached, a put answers 503 `store_unavailable` and
/// names nothing (neither a new version of a noun nor a new noun), a put
/// refused on its own terms answers that refusal, and the same puts
/// succeed once the bucket is back.
#[tokio::test(flavor = "multi_thread")]
async fn a_put_whose_object_cannot_go_up_writes_no_version() {
    let dir = tempfile::tempdir().unwrap();
    let url = support::pg::fresh_database().await;
    let bucket = tokio::task::spawn_blocking(s3::fresh_bucket).await.unwrap();
    let relay = Relay::start("127.0.0.1:0", s3::endpoint()).await;
    let config = format!(
        "[objects]\nendpoint = \"{}\"\n",
        relay.url(s3::endpoint(), "127.0.0.1")
    );
    let d = DaemonProcess::spawn_sharing_with(&dir.path().join("d"), &config, &url, &bucket, None);
    assert_status!(put(&d.admin, "k", 0, json!({"n": 1})).await, 201);
    relay.cut();
    let refused = put(&d.admin, "k", 1, json!({"n": 2})).await;
    assert_status!(refused, 503, "store_unavailable");
    assert_status!(
        put(&d.admin, "new", 0, json!({"n": 1})).await,
        503,
        "store_unavailable"
    );
    assert_status!(
        put(&d.admin, "k", 5, json!({"n": 3})).await,
        409,
        "version_conflict"
    );
    relay.restore();
    assert_eq!(
        versions(&d.admin, "k").await.len(),
        1,
        "no version named a missing object"
    );
    assert_status!(d.admin.get("/v1/nouns/ns/st/new").await.unwrap(), 404);
    assert_status!(put(&d.admin, "k", 1, json!({"n": 2})).await, 201);
    assert_status!(put(&d.admin, "new", 0, json!({"n": 1})).await, 201);
    let r = d.admin.get("/v1/nouns/ns/st/k").await.unwrap();
    assert_status!(r, 200);
    assert_eq!(body(&r), json!({"n": 2}));
    d.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_past_the_part_size_goes_up_in_parts_and_reads_back_whole_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let url = support::pg::fresh_database().await;
    let bucket = tokio::task::spawn_blocking(s3::fresh_bucket).await.unwrap();
    let config = "[limits]\nmax_body_bytes = 33554432\n";
    let a = DaemonProcess::spawn_sharing_with(&dir.path().join("a"), config, &url, &bucket, None);
    let b = DaemonProcess::spawn_sharing(&dir.path().join("b"), &url, &bucket, Some(&a));
    let big: String = (0..12 * 1024 * 1024)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let r = put(&a.admin, "big", 0, json!({"text": big})).await;
    assert_status!(r, 201);
    let read = b.admin.get("/v1/nouns/ns/st/big").await.unwrap();
    assert_status!(read, 200);
    assert_eq!(body(&read)["text"].as_str().map(str::len), Some(big.len()));
    assert_eq!(body(&read)["text"].as_str(), Some(big.as_str()));
    a.kill();
    b.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_worked_through_one_daemon_has_its_output_served_by_another() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _, _) = daemons(dir.path(), 2).await;
    let (a, b) = (&d[0].admin, &d[1].admin);
    let (id, handle) = claimed(a, json!({"brief": {"do": "it"}})).await;
    let r = handle
        .send(
            http::Method::POST,
            "/v1/worker/submit",
            Some(bytes::Bytes::from_static(b"{\"answer\": 42}")),
            &[("content-type", "application/json")],
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    let out = b.get(&format!("/v1/tasks/{id}/output")).await.unwrap();
    assert_status!(out, 200);
    assert_eq!(body(&out)["out"], json!({"answer": 42}), "{}", body(&out));
    for daemon in d {
        daemon.kill();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_blueprint_flow_runs_with_each_step_on_a_different_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _, _) = daemons(dir.path(), 3).await;
    let on = |i: usize, secret: &str| d[i].admin.with_bearer(secret);
    flow::provision(&d[0].admin).await;
    let importer = flow::issue(
        &d[0].admin,
        "importer",
        &flow::KINDS,
        &["cas:write", "verbs:enqueue"],
    )
    .await;
    let pack = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/blueprint-flow");
    flow::import(&d[0].admin, &pack, &[], 0, &importer).await;
    let mut workers = Vec::new();
    for kind in flow::KINDS {
        let secret =
            flow::issue(&d[0].admin, kind, &[kind], &["verbs:claim", "verbs:submit"]).await;
        workers.push(secret);
    }
    // design through daemon 0
    let (_, agent) = flow::claim_as_agent(&on(0, &workers[0])).await;
    let plan = b"# Plan\n1. add the flag\n2. test it\n";
    let plan_sha = flow::stage(&agent, "plan.md", plan).await;
    flow::finish(&agent, "", "design done").await;
    // implement through daemon 1: the design's ctx-dir is projected there
    let (implement_id, agent) = flow::claim_as_agent(&on(1, &workers[1])).await;
    let p = flow::prompt(&agent).await;
    let entry = flow::consumed(&p, "plan");
    assert_eq!(entry["status"], "ready", "{entry:#}");
    assert_eq!(entry["sha256"], plan_sha);
    let file = entry["file_path"].as_str().unwrap();
    assert!(
        file.starts_with(dir.path().join("d1").to_str().unwrap()),
        "the pointer is under daemon 1's root: {file}"
    );
    assert_eq!(std::fs::read(file).unwrap(), plan, "{file}");
    let patch = b"--- a/import.rs\n+++ b/import.rs\n+    dry_run: bool,\n";
    flow::stage(&agent, "patch.diff", patch).await;
    flow::finish(&agent, "", "Added the flag as planned.").await;
    // review through daemon 2
    let reviewer = on(2, &workers[2]);
    let (review_id, agent) = flow::claim_as_agent(&reviewer).await;
    let p = flow::prompt(&agent).await;
    let notes = flow::consumed(&p, "notes");
    assert_eq!(notes["body"], "Added the flag as planned.");
    let notes_file = notes["file_path"].as_str().unwrap();
    assert!(notes_file.starts_with(dir.path().join("d2").to_str().unwrap()));
    assert!(
        std::fs::read_to_string(notes_file)
            .unwrap()
            .contains("Added the flag as planned."),
        "{notes_file}"
    );
    flow::finish(&agent, "", "approve").await;
    assert_eq!(
        support::task(&reviewer, &review_id).await["state"],
        "succeeded"
    );
    let r = on(0, &workers[2])
        .get(&format!(
            "/v1/tasks/{implement_id}/output?path=%24.parts%5B%22patch.diff%22%5D"
        ))
        .await
        .unwrap();
    assert_status!(r, 200);
    assert_eq!(r.body.as_ref(), patch);
    for daemon in d {
        daemon.kill();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_daemon_streams_every_noun_change_once_in_one_order() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _, _) = daemons(dir.path(), 2).await;
    let key = d[0].admin_key().to_string();
    let mut on_a = Stream::open(&d[0].base, &key, None).await;
    let mut on_b = Stream::open(&d[1].base, &key, None).await;
    assert_status!(put(&d[0].admin, "k", 0, json!({"n": 1})).await, 201);
    assert_status!(put(&d[1].admin, "k", 1, json!({"n": 2})).await, 201);
    let r = d[0]
        .admin
        .post_json("/v1/nouns/ns/st/k/quarantine", &json!({}))
        .await
        .unwrap();
    assert_status!(r, 200);
    let last = |e: &support::sse::Sse| e.event == "noun" && e.data["quarantined"] == json!(true);
    let (a, b) = (on_a.until(last).await, on_b.until(last).await);
    let nouns = |seen: Vec<support::sse::Sse>| -> Vec<(Option<String>, Value, Value)> {
        seen.into_iter()
            .filter(|e| e.event == "noun")
            .map(|e| {
                (
                    e.id,
                    e.data["version"].clone(),
                    e.data["quarantined"].clone(),
                )
            })
            .collect()
    };
    let (a, b) = (nouns(a), nouns(b));
    assert_eq!(
        a.iter()
            .map(|(_, v, q)| (v.clone(), q.clone()))
            .collect::<Vec<_>>(),
        [
            (json!(1), json!(false)),
            (json!(2), json!(false)),
            (json!(2), json!(true))
        ],
        "each change once, in order: {a:?}"
    );
    assert_eq!(a, b, "the same events with the same ids on both daemons");
    for daemon in d {
        daemon.kill();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_body_is_read_only_by_the_daemon_whose_host_has_it_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _, _) = daemons(dir.path(), 2).await;
    let (a, b) = (&d[0].admin, &d[1].admin);
    let (_, agent) = claimed(a, json!({"allow_file_submit": true})).await;
    let handle = agent.bearer().unwrap();
    let prompt = flow::prompt(&agent).await;
    let work_dir = prompt["context"]["work_dir"].as_str().unwrap();
    std::fs::write(Path::new(work_dir).join("result.md"), "done on a").unwrap();
    let submit = |c: &Client| {
        let c = c.with_bearer(handle);
        async move {
            c.post_bytes("/v1/worker/submit", b"@file:result.md".to_vec())
                .await
                .unwrap()
        }
    };
    let elsewhere = submit(b).await;
    assert_status!(elsewhere, 404, "file_not_found");
    assert!(
        String::from_utf8_lossy(&elsewhere.body)
            .contains("reads the disk of the daemon that answers"),
        "{}",
        String::from_utf8_lossy(&elsewhere.body)
    );
    assert_status!(submit(a).await, 201);
    for daemon in d {
        daemon.kill();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_export_through_any_daemon_is_the_same_tree_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (d, _, _) = daemons(dir.path(), 2).await;
    flow::provision(&d[0].admin).await;
    let pack = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/blueprint-flow");
    let key = d[0].admin_key().to_string();
    flow::import(&d[0].admin, &pack, &[], 0, &key).await;
    let (_, agent) = flow::claim_as_agent(&d[1].admin).await;
    flow::stage(&agent, "plan.md", b"# Plan\n").await;
    flow::finish(&agent, "", "design done").await;
    let mut trees = Vec::new();
    for (i, daemon) in d.iter().enumerate() {
        let out_dir = dir.path().join(format!("export{i}"));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .arg("export")
            .arg(&out_dir)
            .args(["--server", &daemon.base, "--queue", "work.external"])
            .env("TESSERA_KEY", &key)
            .env_remove("TESSERA_SERVER")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", support::text(&out));
        let files: Vec<(String, Vec<u8>)> = support::files_under(&out_dir)
            .into_iter()
            .map(|f| {
                let bytes = std::fs::read(out_dir.join(&f)).unwrap();
                (f, bytes)
            })
            .collect();
        trees.push(files);
    }
    assert!(
        trees[0]
            .iter()
            .any(|(f, b)| f.contains("tasks/") && String::from_utf8_lossy(b).contains("succeeded")),
        "the export holds the worked task's files: {:?}",
        trees[0].iter().map(|(f, _)| f).collect::<Vec<_>>()
    );
    assert_eq!(trees[0], trees[1], "the same tree through either daemon");
    for daemon in d {
        daemon.kill();
    }
}

/// The keys of `bucket`'s objects (`objects/sha256/…`).
async fn objects_in(bucket: &str) -> Vec<String> {
    let bucket = bucket.to_string();
    tokio::task::spawn_blocking(move || s3::object_keys(&bucket))
        .await
        .unwrap()
}

fn object_key(sha: &str) -> String {
    format!("objects/sha256/{}/{}", &sha[..2], &sha[2..])
}

#[tokio::test(flavor = "multi_thread")]
async fn the_collector_deletes_only_objects_nothing_names_past_their_grace() {
    let dir = tempfile::tempdir().unwrap();
    let url = support::pg::fresh_database().await;
    let bucket = tokio::task::spawn_blocking(s3::fresh_bucket).await.unwrap();
    let config = "[objects]\ngarbage_grace_s = 4\n";
    let a = DaemonProcess::spawn_sharing_with(&dir.path().join("a"), config, &url, &bucket, None);
    let b =
        DaemonProcess::spawn_sharing_with(&dir.path().join("b"), config, &url, &bucket, Some(&a));
    let r = put(&a.admin, "k", 0, json!({"kept": true})).await;
    assert_status!(r, 201);
    let kept = body(&r)["sha256"].as_str().unwrap().to_string();
    // A refused put's object went up first: nothing names it.
    let orphan = json!({"refused": "first"});
    let r = put(&b.admin, "k", 0, orphan.clone()).await;
    assert_status!(r, 409, "version_conflict");
    let orphan_sha = tessera::store::Sha256::of(&tessera::store::canonical_json(&orphan)).hex();
    assert!(objects_in(&bucket).await.contains(&object_key(&orphan_sha)));
    // A task's result, named by its receipt.
    let (_, agent) = claimed(&a.admin, json!({})).await;
    let r = agent
        .post_bytes("/v1/worker/submit", b"the result".to_vec())
        .await
        .unwrap();
    assert_status!(r, 201);
    let result_sha = tessera::store::Sha256::of(b"the result").hex();
    tokio::time::sleep(Duration::from_millis(4500)).await;
    // A younger refused put's object, still within its grace.
    let young = json!({"refused": "later"});
    assert_status!(
        put(&b.admin, "k", 0, young.clone()).await,
        409,
        "version_conflict"
    );
    let young_sha = tessera::store::Sha256::of(&tessera::store::canonical_json(&young)).hex();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let keys = loop {
        let keys = objects_in(&bucket).await;
        if !keys.contains(&object_key(&orphan_sha)) {
            break keys;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the old orphan is never collected"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (what, sha) in [
        ("the noun's version", &kept),
        ("the task's result", &result_sha),
        ("the young orphan", &young_sha),
    ] {
        assert!(keys.contains(&object_key(sha)), "{what} is kept: {keys:?}");
    }
    // A put of the collected bytes writes them anew.
    assert_status!(put(&a.admin, "k", 1, orphan.clone()).await, 201);
    let read = b.admin.get("/v1/nouns/ns/st/k").await.unwrap();
    assert_status!(read, 200);
    assert_eq!(body(&read), orphan);
    a.kill();
    b.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unchanged_import_through_another_daemon_writes_no_object_again() {
    let dir = tempfile::tempdir().unwrap();
    let (d, url, _) = daemons(dir.path(), 2).await;
    flow::provision(&d[0].admin).await;
    let pack = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/blueprint-flow");
    let key = d[0].admin_key().to_string();
    flow::import(&d[0].admin, &pack, &[], 0, &key).await;
    let db = support::pg::connect(&url).await;
    let counted = "SELECT count(*), max(touched)::text FROM objects";
    let before = db.query_one(counted, &[]).await.unwrap();
    let (n, at): (i64, Option<String>) = (before.get(0), before.get(1));
    assert!(n > 0, "the import's nouns went up");
    flow::import(&d[1].admin, &pack, &[], 0, &key).await;
    let after = db.query_one(counted, &[]).await.unwrap();
    assert_eq!(
        (after.get::<_, i64>(0), after.get::<_, Option<String>>(1)),
        (n, at),
        "bytes a version already names are not written or counted again"
    );
    for daemon in d {
        daemon.kill();
    }
}
