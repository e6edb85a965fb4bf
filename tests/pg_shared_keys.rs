//! Keys and the worker-token secret in the database several daemons
//! share: a key issued on one daemon works on every other at once, a
//! revocation on any is refused by all within a second (and ends what the
//! key holds open), the last-admin rule holds when two daemons revoke at
//! once, a worker token minted on one verifies on another, and a root
//! moving to the shared database brings its keys.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{DaemonProcess, body};
use tessera::client::Client;

/// How old a look at the keys a request may trust (`keyring::FRESH`).
const FRESH: Duration = Duration::from_secs(1);

async fn issue(on: &Client, grants: Value) -> (String, String) {
    let r = on
        .post_json("/v1/keys", &json!({"label": "k", "grants": grants}))
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let b = body(&r);
    (
        b["key_id"].as_str().unwrap().to_string(),
        b["secret"].as_str().unwrap().to_string(),
    )
}

fn worker_grants() -> Value {
    json!({"queues": ["q"], "kinds": ["verb.k"], "effect_classes": ["read"],
           "scopes": ["namespace:ns", "surface:s", "verbs:claim", "verbs:submit", "verbs:enqueue"]})
}

/// A task on `q` that [`worker_grants`] may enqueue and claim.
fn task() -> Value {
    json!({"namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read",
           "producer_surface": "s", "brief": {}})
}

/// The status of a worker's prompt fetch on `d` with `token`.
async fn prompt(d: &DaemonProcess, token: &str) -> u16 {
    let r = d
        .admin
        .with_bearer(token)
        .get("/v1/worker/prompt")
        .await
        .unwrap();
    r.status.as_u16()
}

/// The files under a root's `auth/` but the marker naming its database.
fn key_files(root: &Path) -> Vec<String> {
    let auth = root.join("auth");
    if auth.exists() {
        let mut files = support::files_under(&auth);
        files.retain(|f| f != "queue-database");
        files
    } else {
        Vec::new()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_issued_on_one_daemon_works_on_all_and_a_revocation_on_any_is_refused_by_all() {
    let url = support::pg::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let a = DaemonProcess::spawn_shared(&dir.path().join("a"), &url);
    let b = DaemonProcess::spawn_shared_beside(&dir.path().join("b"), &url, &a);
    let c = DaemonProcess::spawn_shared_beside(&dir.path().join("c"), &url, &a);
    for (name, d) in [("b", &b), ("c", &c)] {
        assert!(
            key_files(&dir.path().join(name)).is_empty(),
            "{name} keeps no keys of its own: {:?}",
            key_files(&dir.path().join(name))
        );
        let r = d.admin.get("/v1/keys").await.unwrap();
        assert_eq!(r.status, 200, "a's admin key works on {name}");
    }
    let r = a
        .admin
        .post_json("/v1/queues", &json!({"name": "q"}))
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));

    // Issued on b, used on c and a at once (no wait for a look).
    let (id, secret) = issue(&b.admin, worker_grants()).await;
    for d in [&c, &a] {
        let r = d.admin.with_bearer(&secret).get("/v1/tasks").await.unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    let listed = body(&a.admin.get("/v1/keys").await.unwrap());
    assert!(
        listed["keys"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["key_id"] == id.as_str()),
        "a lists the key b issued: {listed}"
    );

    // A worker token minted on a verifies on b.
    support::enqueue(&a.admin.with_bearer(&secret), &task()).await;
    let claim = support::claim(&a.admin.with_bearer(&secret), "q")
        .await
        .expect("a task to claim");
    let token = claim["token"].as_str().expect("a worker token").to_string();
    assert_eq!(prompt(&b, &token).await, 200);

    // A long claim the key holds open on a; revoked on c.
    let waiting = tokio::spawn({
        let on_a = a.admin.with_bearer(&secret);
        async move {
            let started = Instant::now();
            let r = on_a
                .post_json("/v1/queues/q/claim", &json!({"wait_ms": 20_000}))
                .await
                .unwrap();
            (r.status.as_u16(), started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = c.admin.delete(&format!("/v1/keys/{id}")).await.unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let revoked_at = Instant::now();
    // Refused on c at once; on every daemon once a look could have missed
    // it no longer counts.
    let r = c.admin.with_bearer(&secret).get("/v1/tasks").await.unwrap();
    assert_eq!(r.status, 401, "refused where it was revoked");
    tokio::time::sleep(FRESH.saturating_sub(revoked_at.elapsed())).await;
    for d in [&a, &b, &c] {
        let r = d.admin.with_bearer(&secret).get("/v1/tasks").await.unwrap();
        assert_eq!(r.status, 401, "{}", String::from_utf8_lossy(&r.body));
        assert!(
            body(&r)["error"]["message"]
                .as_str()
                .unwrap()
                .contains("revoked"),
            "{}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let (status, waited) = waiting.await.unwrap();
    assert_eq!(status, 401, "the long claim ends with the key");
    assert!(
        waited < Duration::from_secs(10),
        "it ended with the revocation, not at its 20 s wait ({waited:?})"
    );
    // The worker token of the revoked key's claim dies with it.
    assert_eq!(prompt(&b, &token).await, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_revoking_the_last_two_admin_keys_at_once_leave_one() {
    let url = support::pg::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let a = DaemonProcess::spawn_shared(&dir.path().join("a"), &url);
    let b = DaemonProcess::spawn_shared_beside(&dir.path().join("b"), &url, &a);
    let mut admin = (
        body(&a.admin.get("/v1/keys").await.unwrap())["keys"][0]["key_id"]
            .as_str()
            .unwrap()
            .to_string(),
        a.admin_key().to_string(),
    );
    for round in 0..5 {
        let other = issue(&a.admin.with_bearer(&admin.1), json!({"scopes": ["admin"]})).await;
        // a revokes the older admin key with the newer; b the newer with
        // the older.
        let (on_a, on_b) = (a.admin.with_bearer(&other.1), b.admin.with_bearer(&admin.1));
        let (older, newer) = (
            format!("/v1/keys/{}", admin.0),
            format!("/v1/keys/{}", other.0),
        );
        let (x, y) = tokio::join!(on_a.delete(&older), on_b.delete(&newer));
        let (x, y) = (x.unwrap().status.as_u16(), y.unwrap().status.as_u16());
        let mut statuses = [x, y];
        statuses.sort_unstable();
        assert!(
            statuses == [200, 409] || statuses == [200, 401],
            "round {round}: exactly one revocation lands (the other is refused as the last admin key, or its own key was revoked first): {statuses:?}"
        );
        let survivor = if x == 200 { other } else { admin };
        let keys = body(
            &b.admin
                .with_bearer(&survivor.1)
                .get("/v1/keys")
                .await
                .unwrap(),
        );
        let usable: Vec<&str> = keys["keys"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| k["revoked_at"].is_null())
            .map(|k| k["key_id"].as_str().unwrap())
            .collect();
        assert_eq!(usable, [survivor.0.as_str()], "round {round}: {keys}");
        admin = survivor;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_moving_to_the_shared_database_brings_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("a");
    let embedded = DaemonProcess::spawn(&root);
    let (_, secret) = issue(&embedded.admin, worker_grants()).await;
    let admin_key = embedded.admin_key().to_string();
    embedded.kill();
    let url = support::pg::fresh_database().await;
    let a = DaemonProcess::spawn_shared(&root, &url);
    assert_eq!(a.admin_key(), admin_key, "the root's admin key is kept");
    let b = DaemonProcess::spawn_shared_beside(&dir.path().join("b"), &url, &a);
    for d in [&a, &b] {
        for key in [&admin_key, &secret] {
            let r = d.admin.with_bearer(key).get("/v1/tasks").await.unwrap();
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_on_the_shared_database_is_refused_without_its_url() {
    let url = support::pg::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("a");
    let d = DaemonProcess::spawn_shared(&root, &url);
    let admin_key = std::fs::read_to_string(root.join("auth/admin.key")).unwrap();
    d.kill();
    // Without the URL a start would make a new queue and a new admin key
    // over admin.key; it is refused, and so are fsck and recover.
    for args in [
        &["serve", "--listen", "127.0.0.1:0", "--root"][..],
        &["fsck", "--root"],
        &["recover", "--root"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(args)
            .arg(&root)
            .env_remove("TESSERA_QUEUE_URL")
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{args:?} ran: {said}");
        assert!(
            said.contains("--queue-url") && said.contains("shared database"),
            "{args:?}: {said}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(root.join("auth/admin.key")).unwrap(),
        admin_key
    );
    let again = DaemonProcess::spawn_shared(&root, &url);
    assert_eq!(again.admin.get("/v1/keys").await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_checks_the_keys_and_the_secret_in_the_shared_database() {
    let url = support::pg::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("a");
    let d = DaemonProcess::spawn_shared(&root, &url);
    let r = d
        .admin
        .post_json("/v1/queues", &json!({"name": "q"}))
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let (id, secret) = issue(&d.admin, worker_grants()).await;
    support::enqueue(&d.admin.with_bearer(&secret), &task()).await;
    d.kill();
    let fsck = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["fsck", "--queue-url", &url, "--root"])
            .arg(&root)
            .output()
            .unwrap()
    };
    let clean = fsck();
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );
    // Rows changed by hand: the key the task names deleted, the secrets
    // (the token's and the event ids' key) cut.
    let db = support::pg::connect(&url).await;
    db.execute("DELETE FROM keys WHERE key_id = $1", &[&id])
        .await
        .unwrap();
    db.execute(
        "UPDATE secrets SET value = substring(value FROM 1 FOR 20) WHERE name = 'worker_token'",
        &[],
    )
    .await
    .unwrap();
    db.execute(
        "INSERT INTO secrets (name, value) VALUES ('event_ids', '\\x0102030405') \
         ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
        &[],
    )
    .await
    .unwrap();
    let dirty = fsck();
    let report = String::from_utf8_lossy(&dirty.stdout);
    assert_eq!(dirty.status.code(), Some(1), "{report}");
    assert!(
        report.contains(&format!("keys row {id}: missing, but task")),
        "{report}"
    );
    assert!(report.contains("secrets row worker_token"), "{report}");
    assert!(
        report.contains("secrets row event_ids holds 5 bytes, not 16"),
        "{report}"
    );
}
