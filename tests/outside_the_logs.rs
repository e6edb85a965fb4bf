//! Regression: damage outside the two logs went unseen. A deleted noun ref
//! file (all its versions gone), a deleted key record (`auth/keys/<id>.json`:
//! the key silently stopped working; with no record left the start issued
//! a new admin key over `admin.key`) or a deleted `auth/token.secret`
//! (silently made again at start, so every live worker token died) all
//! started clean, and `tessera fsck` exited 0; `tessera recover` said
//! "clean" while a key record or the noun log blocked the start.
//!
//! Now fsck checks `auth/` against what the tasks, receipts and refs name
//! and reports the objects nothing names; the start refuses a key record
//! or a token secret that something durable proves existed, naming the
//! file and what to do; recover reports every blocker the start refuses
//! on, and `--accept-loss` accepts a loss explicitly. A fresh root, which
//! has no secret and no key until its first start, starts as before.

use crate::support;

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use support::{DaemonProcess, body, offline, refused_start, text};
use tessera::client::Client;

fn stop(d: DaemonProcess) {
    d.signal("TERM");
    let (status, log) = d.wait();
    assert_eq!(status.code(), Some(0), "{log}");
}

fn expect(out: &Output, code: i32, wants: &[&str]) {
    let said = text(out);
    assert_eq!(out.status.code(), Some(code), "{said}");
    for want in wants {
        assert!(said.contains(want), "{want:?} missing from:\n{said}");
    }
}

/// Provisions queue `q` and a key `worker` (enqueue, claim, submit in
/// namespace `ns`); returns its id and secret.
async fn worker_key(admin: &Client) -> (String, String) {
    let r = admin
        .post_json("/v1/queues", &json!({"name": "q"}))
        .await
        .unwrap();
    assert!(r.status == 201 || r.status == 200);
    let key = json!({"label": "worker", "grants": {"queues": ["q"], "kinds": ["verb.k"], "effect_classes": ["read"], "scopes": ["namespace:ns", "surface:s", "nouns:read", "cas:write", "verbs:enqueue", "verbs:claim", "verbs:submit"]}});
    let issued = body(&admin.post_json("/v1/keys", &key).await.unwrap());
    (
        issued["key_id"].as_str().unwrap().to_string(),
        issued["secret"].as_str().unwrap().to_string(),
    )
}

async fn enqueue(c: &Client) -> String {
    let spec = json!({"namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read", "producer_surface": "s", "brief": {}});
    let r = c.post_json("/v1/tasks", &spec).await.unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    body(&r)["task_id"].as_str().unwrap().to_string()
}

#[test]
fn a_deleted_key_record_a_task_names_refuses_the_start_until_restored_or_accepted() {
    if !support::embedded() {
        // On the shared database the keys and the token secret are rows
        // beside the tasks, not files under auth/ (tests/pg_shared_keys.rs).
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(root.path());
    let (id, secret) = rt.block_on(async {
        let (id, secret) = worker_key(&d.admin).await;
        enqueue(&d.admin.with_bearer(&secret)).await;
        (id, secret)
    });
    stop(d);
    let record = root.path().join(format!("auth/keys/{id}.json"));
    let saved = std::fs::read(&record).unwrap();
    std::fs::remove_file(&record).unwrap();
    let file = format!("auth/keys/{id}.json");

    expect(
        &offline(&["fsck"], root.path()),
        1,
        &[&file, "requester", "restore"],
    );
    let log = refused_start(root.path());
    for want in [file.as_str(), "requester", "restore", "--accept-loss"] {
        assert!(log.contains(want), "{want:?} missing from:\n{log}");
    }
    expect(
        &offline(&["recover"], root.path()),
        1,
        &[&file, "--accept-loss"],
    );

    // Restored from a backup: the key works again.
    std::fs::write(&record, &saved).unwrap();
    expect(&offline(&["recover"], root.path()), 0, &[]);
    let d = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        let r = d.admin.with_bearer(&secret).get("/v1/tasks").await.unwrap();
        assert_eq!(r.status, 200);
    });
    stop(d);

    // Or the loss accepted: the key is recorded as revoked, and its task
    // stays.
    std::fs::remove_file(&record).unwrap();
    expect(
        &offline(&["recover", "--accept-loss"], root.path()),
        0,
        &[&file, "revoked"],
    );
    let d = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        let r = d.admin.with_bearer(&secret).get("/v1/tasks").await.unwrap();
        assert_eq!(r.status, 401);
        let tasks = body(&d.admin.get("/v1/tasks").await.unwrap());
        assert_eq!(tasks["tasks"].as_array().unwrap().len(), 1);
    });
    stop(d);
    expect(&offline(&["fsck"], root.path()), 0, &["clean"]);
}

#[test]
fn a_deleted_admin_key_record_is_refused_not_replaced_by_a_new_admin_key() {
    if !support::embedded() {
        // On the shared database the keys and the token secret are rows
        // beside the tasks, not files under auth/ (tests/pg_shared_keys.rs).
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(root.path());
    stop(d);
    let admin_key = std::fs::read_to_string(root.path().join("auth/admin.key")).unwrap();
    let id = tessera::auth::keyring::key_id_of(admin_key.trim())
        .unwrap()
        .to_string();
    std::fs::remove_file(root.path().join(format!("auth/keys/{id}.json"))).unwrap();

    let log = refused_start(root.path());
    assert!(
        log.contains("auth/admin.key") && log.contains(&format!("auth/keys/{id}.json")),
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("auth/admin.key")).unwrap(),
        admin_key,
        "the refused start left admin.key as it was"
    );
    expect(
        &offline(&["fsck"], root.path()),
        1,
        &["auth/admin.key", "restore"],
    );
    expect(
        &offline(&["recover", "--accept-loss"], root.path()),
        0,
        &["revoked", "issued admin key"],
    );
    let new_key = std::fs::read_to_string(root.path().join("auth/admin.key")).unwrap();
    assert_ne!(new_key, admin_key);
    let d = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        let old = d.admin.with_bearer(admin_key.trim());
        assert_eq!(old.get("/v1/keys").await.unwrap().status, 401);
        assert_eq!(d.admin.get("/v1/keys").await.unwrap().status, 200);
    });
    stop(d);
    expect(&offline(&["fsck"], root.path()), 0, &["clean"]);
}

#[test]
fn a_deleted_token_secret_with_a_live_claim_refuses_the_start_and_one_without_is_made_again() {
    if !support::embedded() {
        // On the shared database the keys and the token secret are rows
        // beside the tasks, not files under auth/ (tests/pg_shared_keys.rs).
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(root.path());
    let claim: Value = rt.block_on(async {
        let (_, secret) = worker_key(&d.admin).await;
        let worker = d.admin.with_bearer(&secret);
        let id = enqueue(&worker).await;
        body(
            &worker
                .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
                .await
                .unwrap(),
        )
    });
    d.kill();
    let secret = root.path().join("auth/token.secret");
    let saved = std::fs::read(&secret).unwrap();
    std::fs::remove_file(&secret).unwrap();

    let log = refused_start(root.path());
    for want in [
        "auth/token.secret",
        "live claim",
        "restore",
        "--accept-loss",
    ] {
        assert!(log.contains(want), "{want:?} missing from:\n{log}");
    }
    assert!(!secret.exists(), "the refused start made no new secret");
    expect(
        &offline(&["fsck"], root.path()),
        1,
        &["auth/token.secret", "live claim"],
    );
    expect(
        &offline(&["recover"], root.path()),
        1,
        &["auth/token.secret"],
    );

    // Restored: the live claim's token still works.
    std::fs::write(&secret, &saved).unwrap();
    let d = DaemonProcess::spawn(root.path());
    let token = d.admin.with_bearer(claim["token"].as_str().unwrap());
    rt.block_on(async {
        assert_eq!(token.get("/v1/worker/prompt").await.unwrap().status, 200);
    });
    stop(d);

    // Accepted: a new secret; the token is dead, the handle lives.
    std::fs::remove_file(&secret).unwrap();
    expect(
        &offline(&["recover", "--accept-loss"], root.path()),
        0,
        &["auth/token.secret", "new token secret"],
    );
    let d = DaemonProcess::spawn(root.path());
    let token = d.admin.with_bearer(claim["token"].as_str().unwrap());
    let handle = d.admin.with_bearer(claim["handle"].as_str().unwrap());
    let lease = claim["lease"]["id"].clone();
    let id = claim["task"]["task_id"].as_str().unwrap().to_string();
    rt.block_on(async {
        assert_eq!(token.get("/v1/worker/prompt").await.unwrap().status, 401);
        assert_eq!(handle.get("/v1/worker/prompt").await.unwrap().status, 200);
        let release = json!({"lease_id": lease});
        let r = d
            .admin
            .post_json(&format!("/v1/tasks/{id}/release"), &release)
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    });
    stop(d);

    // With no live claim, nothing depends on the secret: it is made again.
    std::fs::remove_file(&secret).unwrap();
    expect(&offline(&["fsck"], root.path()), 0, &["clean"]);
    let d = DaemonProcess::spawn(root.path());
    stop(d);
    assert!(secret.exists());
}

/// What a worker's everyday calls leave: a part staged twice under one
/// name, parts an attempt staged before it was released, a strict
/// submit refused for its placement, parts beside a key-route submit.
/// Every object they wrote stays named (fsck must not take them for a
/// deleted ref's).
async fn everyday_worker_calls(admin: &Client, root: &Path) {
    worker_key(admin).await;
    let claim = |id: String| async move {
        body(
            &admin
                .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
                .await
                .unwrap(),
        )
    };
    let handle = |c: &Value| admin.with_bearer(c["handle"].as_str().unwrap());
    let stage = |c: &Value, name: &str, bytes: &[u8]| {
        let h = handle(c);
        let path = format!("/v1/worker/artifact?name={name}");
        let bytes = bytes.to_vec();
        async move { assert_eq!(h.post_bytes(&path, bytes).await.unwrap().status, 200) }
    };
    let id = enqueue(admin).await;
    let c = claim(id.clone()).await;
    stage(&c, "p.md", b"first draft").await;
    stage(&c, "p.md", b"second draft").await;
    let release = json!({"lease_id": c["lease"]["id"]});
    let r = admin
        .post_json(&format!("/v1/tasks/{id}/release"), &release)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let c = claim(id.clone()).await;
    stage(&c, "q.md", b"attempt two").await;
    let r = handle(&c)
        .post_bytes("/v1/worker/submit", b"done".to_vec())
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));

    let spec = json!({"namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read", "producer_surface": "s", "check_policy": "strict", "brief": {}});
    let r = admin.post_json("/v1/tasks", &spec).await.unwrap();
    let strict = body(&r)["task_id"].as_str().unwrap().to_string();
    let c = claim(strict.clone()).await;
    let blocker = root.join(format!("workspace/ns/tasks/{strict}"));
    std::fs::create_dir_all(blocker.parent().unwrap()).unwrap();
    std::fs::write(&blocker, b"in the way").unwrap();
    let r = handle(&c)
        .post_bytes("/v1/worker/submit", b"refused for its placement".to_vec())
        .await
        .unwrap();
    // The strict attempt fails with a receipt that names its body.
    let answer = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(r.status, 201, "{answer}");
    assert!(answer.contains(r#""state":"failed""#), "{answer}");
    std::fs::remove_file(&blocker).unwrap();

    let id = enqueue(admin).await;
    let c = claim(id.clone()).await;
    stage(&c, "r.md", b"beside a key-route submit").await;
    let submit = json!({"lease_id": c["lease"]["id"], "ok": true});
    let r = admin
        .post_json(&format!("/v1/tasks/{id}/submit"), &submit)
        .await
        .unwrap();
    assert_eq!(r.status, 201);
}

#[test]
fn a_deleted_ref_file_shows_up_as_its_objects_nothing_names() {
    if !support::nouns_on_root() {
        // Shared nouns have no object files or ref files under the root
        // (tests/shared_nouns.rs checks their bucket and rows).
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(root.path());
    let shas: Vec<String> = rt.block_on(async {
        everyday_worker_calls(&d.admin, root.path()).await;
        let mut shas = Vec::new();
        for (key, versions) in [("one", 1u64), ("three", 3)] {
            for v in 0..versions {
                let env = json!({"expected_version": v, "body": {"key": key, "v": v}});
                let r = d
                    .admin
                    .put_json(&format!("/v1/nouns/ns/st/{key}"), &env)
                    .await
                    .unwrap();
                assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
                shas.push(body(&r)["sha256"].as_str().unwrap().to_string());
            }
        }
        shas
    });
    stop(d);
    expect(&offline(&["fsck"], root.path()), 0, &["clean"]);
    let object = |sha: &str| format!("objects/sha256/{}/{}", &sha[..2], &sha[2..]);
    for (key, versions) in [("one", &shas[..1]), ("three", &shas[1..])] {
        let file = root.path().join(format!("nouns/ns/st/{key}.json"));
        let saved = std::fs::read(&file).unwrap();
        std::fs::remove_file(&file).unwrap();
        let fsck = offline(&["fsck"], root.path());
        expect(&fsck, 1, &["unreferenced", "restore"]);
        for sha in versions {
            expect(&fsck, 1, &[&object(sha)]);
        }
        let latest = versions.last().unwrap();
        if key == "three" {
            expect(
                &fsck,
                1,
                &["nouns/ns/st/three.json: missing", "at least 3 versions"],
            );
        }
        // A start does not drop them either.
        let d = DaemonProcess::spawn(root.path());
        stop(d);
        expect(&offline(&["fsck"], root.path()), 1, &[&object(latest)]);
        std::fs::write(&file, saved).unwrap();
        expect(&offline(&["fsck"], root.path()), 0, &["clean"]);
    }

    // The loss accepted: the objects are set aside, not deleted.
    std::fs::remove_file(root.path().join("nouns/ns/st/one.json")).unwrap();
    expect(
        &offline(&["recover", "--accept-loss"], root.path()),
        0,
        &["moved 1 unreferenced object"],
    );
    assert!(
        root.path()
            .join("objects/unreferenced")
            .join(&shas[0])
            .exists()
    );
    expect(&offline(&["fsck"], root.path()), 0, &["clean"]);
}

#[test]
fn a_pin_whose_ref_file_is_gone_is_reported_with_the_task_that_holds_it() {
    if !support::nouns_on_root() {
        // Shared nouns have no object files or ref files under the root
        // (tests/shared_nouns.rs checks their bucket and rows).
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(root.path());
    let id = rt.block_on(async {
        let (_, secret) = worker_key(&d.admin).await;
        let worker = d.admin.with_bearer(&secret);
        let env = json!({"expected_version": 0, "producer_surface": "s", "body": {"n": 1}});
        let r = worker
            .put_json("/v1/nouns/ns/inputs/in", &env)
            .await
            .unwrap();
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let pin = json!({"store": "inputs", "key": "in", "version": 1, "sha256": body(&r)["sha256"]});
        let spec = json!({"namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read", "producer_surface": "s", "brief": {"input_ref": pin}});
        let r = worker.post_json("/v1/tasks", &spec).await.unwrap();
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        body(&r)["task_id"].as_str().unwrap().to_string()
    });
    stop(d);
    std::fs::remove_file(root.path().join("nouns/ns/inputs/in.json")).unwrap();
    expect(
        &offline(&["fsck"], root.path()),
        1,
        &[
            "nouns/ns/inputs/in.json",
            &format!("task {id}'s brief.input_ref pins version 1"),
        ],
    );
}

#[test]
fn recover_reports_every_blocker_the_start_refuses_on() {
    if !support::embedded() {
        // On the shared database the keys and the token secret are rows
        // beside the tasks, not files under auth/ (tests/pg_shared_keys.rs).
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(root.path());
    let id = rt.block_on(async { worker_key(&d.admin).await.0 });
    stop(d);

    // A key record that does not parse refuses the start; recover says so.
    let record = root.path().join(format!("auth/keys/{id}.json"));
    let saved = std::fs::read(&record).unwrap();
    std::fs::write(&record, b"{\"key_id\": ").unwrap();
    refused_start(root.path());
    expect(
        &offline(&["recover"], root.path()),
        1,
        &[&format!("auth/keys/{id}.json"), "not a key record"],
    );
    std::fs::write(&record, &saved).unwrap();

    // So does a damaged noun log record with valid records after it.
    let d = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        for v in 0..3 {
            let env = json!({"expected_version": v, "body": {"v": v, "pad": "x".repeat(200)}});
            let r = d.admin.put_json("/v1/nouns/ns/st/k", &env).await.unwrap();
            assert_eq!(r.status, 201);
        }
    });
    d.kill();
    let seg = std::fs::read_dir(root.path().join("journal/nouns"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("a noun log segment");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[tessera::store::log::segment::HEADER + 3] ^= 0x20;
    std::fs::write(&seg, &bytes).unwrap();
    refused_start(root.path());
    let name = seg.file_name().unwrap().to_string_lossy().into_owned();
    expect(
        &offline(&["recover"], root.path()),
        1,
        &[&format!("journal/nouns/{name}"), "restore the segment"],
    );
    expect(
        &offline(&["recover", "--accept-loss"], root.path()),
        1,
        &[&format!("journal/nouns/{name}")],
    );
}
