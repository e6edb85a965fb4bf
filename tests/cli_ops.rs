//! The operator CLI against a real daemon: `tessera queue`, `tessera task`
//! and `tessera status`, their tables and `-o json`, their exit codes
//! (0 done, 1 refused, 2 usage, 3 unreachable), and the new-user traps of
//! issue 13 (a key issued into an existing secret file; a relative root
//! in a config file).

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use support::{TestDaemon, body, claim, claimed_id, eventually, lease, submit};

/// Runs `tessera ARGS` against `d` with `key`.
fn tessera(d: &TestDaemon, key: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .env("TESSERA_SERVER", d.admin.base())
        .env("TESSERA_KEY", key)
        .output()
        .expect("run tessera")
}

/// Runs as admin.
fn admin(d: &TestDaemon, args: &[&str]) -> Output {
    tessera(d, &d.admin_key, args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Stdout of a run that must succeed.
fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "tessera failed ({:?}):\n{}\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Stdout of a run that must succeed, parsed as JSON.
fn json_of(out: &Output) -> Value {
    let s = ok(out);
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("-o json is not JSON ({e}): {s}"))
}

/// Asserts the exit code and that stderr holds each of `needles`.
fn fails(out: &Output, code: i32, needles: &[&str]) {
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {err}",
        text(&out.stdout)
    );
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
}

/// The first line (the header) of a table, split into its columns.
fn header(table: &str) -> Vec<String> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The row of a table whose first column is `first`.
fn row<'a>(table: &'a str, first: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row {first} in:\n{table}"))
}

/// Enqueues with flags as admin in namespace `ns` and returns the id.
fn enqueue(d: &TestDaemon, ns: &str, queue: &str, kind: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "task",
        "enqueue",
        "--namespace",
        ns,
        "--queue",
        queue,
        "--kind",
        kind,
        "--effect-class",
        "write-internal",
        "--producer-surface",
        "ops",
    ];
    args.extend(extra);
    let out = ok(&admin(d, &args));
    out.split_whitespace().next().unwrap().to_string()
}

fn create_queue(d: &TestDaemon, name: &str) {
    ok(&admin(d, &["queue", "create", name, "--lease-ttl-s", "60"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn queue_create_list_and_show_print_tables_and_json() {
    let d = TestDaemon::start().await;
    let created = ok(&admin(
        &d,
        &[
            "queue",
            "create",
            "work.ops",
            "--lease-ttl-s",
            "60",
            "--max-attempts",
            "5",
        ],
    ));
    assert_eq!(header(&created), ["FIELD", "VALUE"]);
    assert_eq!(row(&created, "outcome"), ["outcome", "created"]);
    assert_eq!(row(&created, "lease_ttl_s"), ["lease_ttl_s", "60"]);
    let again = ok(&admin(
        &d,
        &[
            "queue",
            "create",
            "work.ops",
            "--lease-ttl-s",
            "60",
            "--max-attempts",
            "5",
        ],
    ));
    assert!(
        again.contains("queue work.ops exists; updated lease_ttl_s, max_attempts (others kept)"),
        "{again}"
    );
    enqueue(&d, "team", "work.ops", "verb.compute", &[]);

    let list = ok(&admin(&d, &["queue", "list"]));
    assert_eq!(
        header(&list),
        [
            "QUEUE",
            "SERVER",
            "LEASE_TTL_S",
            "MAX_ATTEMPTS",
            "PENDING",
            "QUEUED",
            "CLAIMED",
            "WAITING",
            "PARKED",
            "SUCCEEDED",
            "FAILED",
            "CANCELLED"
        ]
    );
    assert_eq!(
        row(&list, "work.ops"),
        [
            "work.ops", "no", "60", "5", "0", "1", "0", "0", "0", "0", "0", "0"
        ]
    );
    let j = json_of(&admin(&d, &["queue", "list", "-o", "json"]));
    assert_eq!(j["queues"][0]["name"], "work.ops");
    assert_eq!(j["queues"][0]["counts"]["queued"], 1);

    let show = ok(&admin(&d, &["queue", "show", "work.ops"]));
    assert_eq!(header(&show), ["FIELD", "VALUE"]);
    assert_eq!(row(&show, "queued"), ["queued", "1"]);
    assert_eq!(row(&show, "live_leases"), ["live_leases", "0"]);
    let j = json_of(&admin(&d, &["queue", "show", "work.ops", "-o", "json"]));
    assert_eq!(
        (j["name"].as_str(), j["live_leases"].as_u64()),
        (Some("work.ops"), Some(0))
    );
    fails(
        &admin(&d, &["queue", "show", "nope"]),
        1,
        &["unknown_queue", "next: create the queue"],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn task_enqueue_from_a_yaml_file_a_json_file_and_flags() {
    let d = TestDaemon::start().await;
    create_queue(&d, "work.ops");
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("solve.yaml");
    std::fs::write(
        &yaml,
        "namespace: team\nqueue: work.ops\nkind: verb.solve_draft\neffect_class: write-internal\n\
         producer_surface: surface:ops\nvisibility_scope: surface_only\ntags: [nightly]\n\
         idempotency_key: solve-1\nbrief:\n  directive: Sum the squares.\n",
    )
    .unwrap();
    let y = yaml.to_str().unwrap();
    let first = ok(&admin(&d, &["task", "enqueue", y, "--priority", "5"]));
    let id = first.split_whitespace().next().unwrap().to_string();
    assert!(first.ends_with("queued (created)\n"), "{first}");
    let again = ok(&admin(&d, &["task", "enqueue", y, "--priority", "5"]));
    assert!(
        again.starts_with(&format!("{id} queued (unchanged")),
        "{again}"
    );
    let shown = json_of(&admin(&d, &["task", "show", &id, "-o", "json"]));
    assert_eq!(
        (
            &shown["priority"],
            &shown["tags"],
            &shown["brief"]["directive"]
        ),
        (&json!(5), &json!(["nightly"]), &json!("Sum the squares.")),
        "the flag wins over the file, the rest is the file's"
    );

    let file = dir.path().join("verify.json");
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({
            "namespace": "team", "queue": "work.ops", "kind": "verb.verify_gate",
            "effect_class": "read", "producer_surface": "ops", "brief": {"check": "schema"},
            "depends_on": [id]
        }))
        .unwrap(),
    )
    .unwrap();
    let out = ok(&admin(
        &d,
        &["task", "enqueue", file.to_str().unwrap(), "-o", "json"],
    ));
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (&j["state"], &j["created"]),
        (&json!("pending"), &json!(true))
    );

    let flags = enqueue(
        &d,
        "team",
        "work.ops",
        "verb.compute",
        &["--brief", r#"{"n": 3}"#],
    );
    let shown = json_of(&admin(&d, &["task", "show", &flags, "-o", "json"]));
    assert_eq!(shown["brief"], json!({"n": 3}));
    let dry = ok(&admin(
        &d,
        &[
            "task",
            "enqueue",
            "--dry-run",
            "--namespace",
            "team",
            "--queue",
            "work.ops",
            "--kind",
            "verb.compute",
            "--effect-class",
            "read",
            "--producer-surface",
            "ops",
        ],
    ));
    assert_eq!(dry, "dry run: create; nothing enqueued\n");
    fails(
        &admin(
            &d,
            &[
                "task",
                "enqueue",
                "--namespace",
                "team",
                "--queue",
                "work.ops",
            ],
        ),
        1,
        &["400", "missing field `kind`", "next: fix the request"],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn task_list_filters_and_show_receipts_and_output() {
    let d = TestDaemon::start().await;
    create_queue(&d, "work.a");
    create_queue(&d, "work.b");
    let a1 = enqueue(&d, "team", "work.a", "verb.compute", &[]);
    let a2 = enqueue(&d, "team", "work.a", "verb.review", &[]);
    let b1 = enqueue(&d, "other", "work.b", "verb.compute", &[]);

    let all = ok(&admin(&d, &["task", "list"]));
    assert_eq!(
        header(&all),
        [
            "TASK",
            "STATE",
            "QUEUE",
            "KIND",
            "NAMESPACE",
            "ATTEMPT",
            "PRIORITY",
            "UPDATED"
        ]
    );
    assert_eq!(all.lines().count(), 4, "{all}");
    let ids = |args: &[&str]| -> Vec<String> {
        let mut full = vec!["task", "list", "-o", "json"];
        full.extend(args);
        json_of(&admin(&d, &full))
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["task_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&["--queue", "work.a"]), [a1.as_str(), a2.as_str()]);
    assert_eq!(ids(&["--kind", "verb.compute"]), [a1.as_str(), b1.as_str()]);
    assert_eq!(ids(&["--namespace", "other"]), [b1.as_str()]);
    assert_eq!(ids(&["--limit", "1"]), [a1.as_str()]);

    let c = claim(&d.admin, "work.a").await.unwrap();
    assert_eq!(claimed_id(&c), a1);
    assert_eq!(ids(&["--state", "claimed"]), [a1.as_str()]);
    assert_eq!(
        ids(&["--state", "queued", "--queue", "work.a"]),
        [a2.as_str()]
    );
    let r = submit(&d.admin, &a1, &lease(&c), true, json!([])).await;
    assert!(r.status.is_success(), "{}", text(&r.body));

    let show = ok(&admin(&d, &["task", "show", &a1]));
    assert_eq!(header(&show), ["FIELD", "VALUE"]);
    assert_eq!(row(&show, "state"), ["state", "succeeded"]);
    assert_eq!(row(&show, "receipts"), ["receipts", "1"]);
    let receipts = ok(&admin(&d, &["task", "receipts", &a1]));
    assert_eq!(
        header(&receipts),
        [
            "ATTEMPT", "STATE", "OK", "BY_KEY", "AT", "OUTPUTS", "EVIDENCE", "SHA256", "WHY"
        ]
    );
    let cells = row(&receipts, "1");
    assert_eq!(&cells[..3], ["1", "succeeded", "true"]);
    let j = json_of(&admin(&d, &["task", "receipts", &a1, "-o", "json"]));
    assert_eq!(j["receipts"][0]["sha256"].as_str(), Some(cells[7]));
    let output = ok(&admin(&d, &["task", "output", &a1]));
    assert_eq!(header(&output), ["PART", "TYPE", "BYTES", "VALUE"]);
    let j = json_of(&admin(&d, &["task", "output", &a1, "-o", "json"]));
    assert!(j.get("out").is_some() && j.get("parts").is_some(), "{j}");
    fails(
        &admin(&d, &["task", "output", &a1, "--part", "plan.md"]),
        1,
        &["has no part \"plan.md\""],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn task_release_and_cancel_move_the_task_and_refusals_say_what_next() {
    let d = TestDaemon::start().await;
    create_queue(&d, "work.ops");
    let id = enqueue(&d, "team", "work.ops", "verb.compute", &[]);
    fails(
        &admin(&d, &["task", "release", &id]),
        1,
        &["is queued, not claimed"],
    );
    let c = claim(&d.admin, "work.ops").await.unwrap();
    assert_eq!(claimed_id(&c), id);
    let released = ok(&admin(&d, &["task", "release", &id]));
    assert_eq!(released, format!("{id} queued (lease released)\n"));
    let c = claim(&d.admin, "work.ops").await.unwrap();
    let j = json_of(&admin(
        &d,
        &[
            "task",
            "release",
            &id,
            "--lease-id",
            &lease(&c),
            "-o",
            "json",
        ],
    ));
    assert_eq!(j, json!({"task_id": id, "state": "queued"}));

    let cancelled = ok(&admin(&d, &["task", "cancel", &id]));
    assert_eq!(cancelled, format!("{id} cancelled\n"));
    fails(
        &admin(&d, &["task", "cancel", &id]),
        1,
        &[
            "409",
            "invalid_state",
            "next: the task's state does not allow this",
        ],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn status_counts_queues_and_leases_and_shows_storage_to_admin_only() {
    let d = TestDaemon::start().await;
    create_queue(&d, "work.a");
    create_queue(&d, "work.b");
    let first = enqueue(&d, "team", "work.a", "verb.compute", &[]);
    enqueue(&d, "team", "work.a", "verb.compute", &[]);
    enqueue(&d, "team", "work.b", "verb.compute", &[]);
    let c = claim(&d.admin, "work.a").await.unwrap();
    assert_eq!(claimed_id(&c), first);

    let table = ok(&admin(&d, &["status"]));
    let h = header(&table);
    assert_eq!(
        (h.first().map(String::as_str), &h[h.len() - 2..]),
        (
            Some("QUEUE"),
            &["OLDEST_QUEUED".to_string(), "LIVE_LEASES".to_string()][..]
        )
    );
    let a = row(&table, "work.a");
    assert_eq!(
        (a[2], a[3], a[10]),
        ("1", "1", "1"),
        "queued, claimed, live leases: {table}"
    );
    assert!(a[9].ends_with('s'), "an age: {table}");
    assert_eq!(row(&table, "health"), ["health", "ok"]);
    assert_eq!(row(&table, "journal")[0], "journal");

    let j = json_of(&admin(&d, &["status", "-o", "json"]));
    let qa = &j["queues"][0];
    assert_eq!(
        (&qa["name"], &qa["counts"]["queued"], &qa["live_leases"]),
        (&json!("work.a"), &json!(1), &json!(1))
    );
    assert!(qa["oldest_queued_since"].is_string());
    // The queue's records are in the root's journal only on the embedded
    // backend.
    assert_eq!(
        j["storage"]["journal_bytes"].as_u64().unwrap() > 0,
        support::embedded()
    );
    assert!(j["storage"]["disk_free_bytes"].as_u64().unwrap() > 0);
    let folds = &j["storage"]["folds"];
    assert_eq!(
        (&folds["done"], &folds["failed"], &folds["due"]),
        (&json!(0), &json!(0), &json!(false)),
        "a new root has nothing to fold: {j}"
    );
    assert_eq!(j["health"]["status"], "ok");

    let issued = d
        .admin
        .post_json(
            "/v1/keys",
            &json!({"label": "b reader", "grants": {"queues": ["work.b"], "scopes": ["namespace:team", "surface:ops"]}}),
        )
        .await
        .unwrap();
    let secret = body(&issued)["secret"].as_str().unwrap().to_string();
    let j = json_of(&tessera(&d, &secret, &["status", "-o", "json"]));
    let names: Vec<&str> = j["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["work.b"], "only the queues the key was issued");
    assert!(j.get("storage").is_none(), "storage is admin only: {j}");
    let table = ok(&tessera(&d, &secret, &["status"]));
    assert!(table.contains("shown to admin keys only"), "{table}");
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_tell_a_refusal_from_usage_and_an_unreachable_daemon() {
    let d = TestDaemon::start().await;
    fails(
        &admin(&d, &["task", "show", "t999"]),
        1,
        &["404", "not_found", "next: check the id"],
    );
    fails(
        &tessera(&d, "not-a-key", &["status"]),
        1,
        &["401", "unauthenticated"],
    );
    fails(
        &admin(&d, &["task", "list", "--state", "bogus"]),
        2,
        &["bogus"],
    );
    fails(
        &admin(&d, &["task", "enqueue", "/nonexistent/spec.json"]),
        2,
        &["cannot read the spec file"],
    );
    let no_key = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["status", "--server", d.admin.base()])
        .env_remove("TESSERA_KEY")
        .output()
        .unwrap();
    fails(&no_key, 2, &["no key"]);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let unreachable = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["status", "--server", &format!("http://{addr}")])
        .env("TESSERA_KEY", &d.admin_key)
        .output()
        .unwrap();
    fails(&unreachable, 3, &["cannot reach the daemon"]);
    let help = ok(&admin(&d, &["task", "--help"]));
    assert!(help.contains("3 the daemon cannot be reached"), "{help}");
}

#[tokio::test(flavor = "multi_thread")]
async fn key_issue_into_an_existing_secret_file_is_refused_and_issues_no_key() {
    let d = TestDaemon::start().await;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("worker.key");
    std::fs::write(&secret, "precious\n").unwrap();
    let keys = || async {
        body(&d.admin.get("/v1/keys").await.unwrap())["keys"]
            .as_array()
            .unwrap()
            .len()
    };
    let before = keys().await;
    fails(
        &admin(
            &d,
            &[
                "key",
                "issue",
                "--label",
                "w",
                "--scope",
                "nouns:read",
                "--secret-file",
                secret.to_str().unwrap(),
            ],
        ),
        2,
        &["does not exist yet", "no key was issued"],
    );
    assert_eq!(keys().await, before, "no key is live without its secret");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "precious\n");

    let refused = dir.path().join("refused.key");
    fails(
        &tessera(
            &d,
            "not-a-key",
            &[
                "key",
                "issue",
                "--label",
                "w",
                "--secret-file",
                refused.to_str().unwrap(),
            ],
        ),
        1,
        &["401"],
    );
    assert!(
        !refused.exists(),
        "a refused issue leaves no empty secret file"
    );
}

#[test]
fn a_relative_root_in_a_config_file_is_relative_to_the_files_folder() {
    let etc = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let config = etc.path().join("tessera.toml");
    std::fs::write(&config, "root = \"data\"\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .current_dir(elsewhere.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let started = line.starts_with("listening on ");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(started, "{line:?}");
    assert!(etc.path().join("data/auth/admin.key").is_file());
    assert!(!Path::new(elsewhere.path()).join("data").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn cli_task_retry_requeues_a_failed_task() {
    let d = TestDaemon::start().await;
    create_queue(&d, "work.ops");
    let id = enqueue(
        &d,
        "team",
        "work.ops",
        "verb.compute",
        &["--max-attempts", "1"],
    );
    let c = claim(&d.admin, "work.ops").await.unwrap();
    let r = submit(&d.admin, &id, &lease(&c), false, json!([])).await;
    assert!(r.status.is_success(), "{}", text(&r.body));
    eventually(5, || async {
        support::task(&d.admin, &id).await["state"] == "failed"
    })
    .await;
    let said = ok(&admin(&d, &["task", "retry", &id]));
    assert!(
        said.starts_with(&format!("{id} queued (attempt ")),
        "{said}"
    );
    assert_eq!(support::task(&d.admin, &id).await["state"], "queued");
    fails(
        &admin(&d, &["task", "retry", &id]),
        1,
        &["409", "not_retryable"],
    );
}
