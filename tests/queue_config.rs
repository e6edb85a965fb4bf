//! Re-posting a queue (issue 32): a re-post that named only the queue
//! reset its settings to the defaults (lease TTL 120 back to 300). Now the
//! body is a patch over the existing config: fields left out keep their
//! values, fields given change, and the answer says the queue existed
//! (`200`, `"created": false`) with its whole config. Checked on the
//! embedded queue (its journal records the merged config, so a restart
//! replays the same) and on PostgreSQL (the `queues` row), each across a
//! restart, and through `tessera queue create`.

use crate::support;

use std::process::Command;

use serde_json::{Value, json};
use support::*;
use tessera::client::Client;

/// The full config first posted.
fn full() -> Value {
    json!({
        "name": "work.cfg",
        "lease_ttl_s": 120,
        "max_attempts": 5,
        "backoff": {"base_ms": 200, "cap_ms": 4000},
        "server": false,
        "placement": "runs/{task_id}",
        "required_stages": ["verb.solve_draft"]
    })
}

/// Posts `body` to `POST /v1/queues`; answers the status and the body.
async fn post(admin: &Client, body: &Value) -> (u16, Value) {
    let r = admin.post_json("/v1/queues", body).await.unwrap();
    (r.status.as_u16(), body_of(&r))
}

fn body_of(r: &tessera::client::Reply) -> Value {
    serde_json::from_slice(&r.body).unwrap_or(Value::Null)
}

/// The queue's config as `GET /v1/queues` lists it (without its counts).
async fn listed(admin: &Client, name: &str) -> Value {
    let r = admin.get("/v1/queues").await.unwrap();
    assert_status!(r, 200);
    let mut q = body_of(&r)["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == json!(name))
        .cloned()
        .unwrap_or_else(|| panic!("{name} is not listed"));
    q.as_object_mut().unwrap().remove("counts");
    q
}

/// `config` with `created` added, as `POST /v1/queues` answers it.
fn answered(config: &Value, created: bool) -> Value {
    let mut a = config.clone();
    a["created"] = json!(created);
    a
}

/// Posts the full config, re-posts the name only and one field, and
/// checks each answer and the listing; answers the config expected after.
async fn patch_semantics(admin: &Client) -> Value {
    let (status, got) = post(admin, &full()).await;
    assert_eq!((status, got), (201, answered(&full(), true)));

    let (status, got) = post(admin, &json!({"name": "work.cfg"})).await;
    assert_eq!((status, got), (200, answered(&full(), false)));
    assert_eq!(listed(admin, "work.cfg").await, full());

    let mut want = full();
    want["max_attempts"] = json!(9);
    let (status, got) = post(admin, &json!({"name": "work.cfg", "max_attempts": 9})).await;
    assert_eq!((status, got), (200, answered(&want, false)));

    want.as_object_mut().unwrap().remove("placement");
    let (status, got) = post(admin, &json!({"name": "work.cfg", "placement": null})).await;
    assert_eq!((status, got), (200, answered(&want, false)));

    // A refused patch changes nothing.
    let r = admin
        .post_json("/v1/queues", &json!({"name": "work.cfg", "lease_ttl_s": 0}))
        .await
        .unwrap();
    assert_status!(r, 400, "invalid_field");
    assert_eq!(listed(admin, "work.cfg").await, want);
    want
}

/// On the suite's backend: the journal, unless `TESSERA_TEST_BACKEND`
/// names PostgreSQL.
#[tokio::test(flavor = "multi_thread")]
async fn a_re_post_changes_only_the_fields_it_names_across_a_restart() {
    let mut d = TestDaemon::start().await;
    let want = patch_semantics(&d.admin).await;
    d.restart().await;
    assert_eq!(listed(&d.admin, "work.cfg").await, want);
    let (status, got) = post(&d.admin, &json!({"name": "work.cfg"})).await;
    assert_eq!((status, got), (200, answered(&want, false)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_re_post_changes_only_the_fields_it_names_on_postgresql_across_daemons() {
    let url = pg::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let a = DaemonProcess::spawn_shared(&dir.path().join("a"), &url);
    let want = patch_semantics(&a.admin).await;

    // Another daemon on the database reads the same, and patches over it.
    let b = DaemonProcess::spawn_shared_beside(&dir.path().join("b"), &url, &a);
    assert_eq!(listed(&b.admin, "work.cfg").await, want);
    let mut after = want.clone();
    after["lease_ttl_s"] = json!(60);
    let (status, got) = post(&b.admin, &json!({"name": "work.cfg", "lease_ttl_s": 60})).await;
    assert_eq!((status, got), (200, answered(&after, false)));
    b.kill();

    a.kill();
    let a = DaemonProcess::spawn_shared(&dir.path().join("a"), &url);
    assert_eq!(listed(&a.admin, "work.cfg").await, after);
    let (status, got) = post(&a.admin, &json!({"name": "work.cfg"})).await;
    assert_eq!((status, got), (200, answered(&after, false)));
}

/// `tessera queue create` with `args`, against `d`; answers stdout.
fn cli(d: &TestDaemon, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["queue", "create"])
        .args(args)
        .args(["--server", d.admin.base()])
        .env("TESSERA_KEY", &d.admin_key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn queue_create_says_whether_it_created_or_updated() {
    let d = TestDaemon::start().await;
    let made = cli(&d, &["work.cli", "--lease-ttl-s", "120"]);
    assert!(made.contains("created"), "{made}");
    let kept = cli(&d, &["work.cli"]);
    assert!(
        kept.contains("queue work.cli exists; settings kept"),
        "{kept}"
    );
    let updated = cli(&d, &["work.cli", "--max-attempts", "4"]);
    assert!(
        updated.contains("queue work.cli exists; updated max_attempts (others kept)"),
        "{updated}"
    );
    let q = listed(&d.admin, "work.cli").await;
    assert_eq!(
        (q["lease_ttl_s"].clone(), q["max_attempts"].clone()),
        (json!(120), json!(4))
    );
}

/// `--server-queue NAME` read NAME as the flag's value and exited 2; a
/// value is now taken only after `=`. `--required-stage ''` clears the
/// stages, as `--placement ''` removes the template.
#[tokio::test(flavor = "multi_thread")]
async fn queue_create_reads_the_name_after_server_queue_and_clears_stages_with_an_empty_one() {
    let d = TestDaemon::start().await;
    let made = cli(
        &d,
        &[
            "--server-queue",
            "work.srv",
            "--required-stage",
            "verb.review",
        ],
    );
    assert!(made.contains("created"), "{made}");
    let q = listed(&d.admin, "work.srv").await;
    assert_eq!(
        (q["server"].clone(), q["required_stages"].clone()),
        (json!(true), json!(["verb.review"]))
    );

    let updated = cli(
        &d,
        &["work.srv", "--server-queue=false", "--required-stage", ""],
    );
    let outcome = updated
        .lines()
        .find(|l| l.contains("queue work.srv exists; updated"))
        .unwrap_or_else(|| panic!("no outcome: {updated}"));
    assert!(
        outcome.contains("required_stages") && outcome.contains("server"),
        "{updated}"
    );
    // An empty list (the default pair) is left out of the listing.
    let q = listed(&d.admin, "work.srv").await;
    assert_eq!(
        (q["server"].clone(), q.get("required_stages")),
        (json!(false), None),
        "{q}"
    );

    let replaced = cli(
        &d,
        &[
            "work.srv",
            "--required-stage",
            "",
            "--required-stage",
            "verb.qa",
        ],
    );
    assert!(replaced.contains("updated required_stages"), "{replaced}");
    assert_eq!(
        listed(&d.admin, "work.srv").await["required_stages"],
        json!(["verb.qa"])
    );
}
