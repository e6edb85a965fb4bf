//! `tessera export DIR` over real HTTP (the in-process daemon, the real
//! binary): the tree is deterministic (a second run on an unchanged
//! daemon changes no file, not even its mtime), a changed body changes
//! only its own files, a task's state shows in its file, files of records
//! that are gone are removed, and a folder holding other work is refused.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use serde_json::json;
use support::{NS, Team, body, claim, enqueue, files_under, put_noun, spec};

/// Every file under `dir` with its bytes and mtime.
fn tree(dir: &Path) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
    files_under(dir)
        .into_iter()
        .map(|f| {
            let p = dir.join(&f);
            let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
            (f, (std::fs::read(&p).unwrap(), mtime))
        })
        .collect()
}

/// Runs `tessera export DIR ARGS` with `key`; returns (exit code, stdout, stderr).
async fn export(t: &Team, key: &str, dir: &Path, args: &[&str]) -> (i32, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.arg("export")
        .arg(dir)
        .args(args)
        .args(["--server", t.d.admin.base()])
        .env("TESSERA_KEY", key)
        .env_remove("TESSERA_SERVER")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("tessera export finished in time")
        .expect("tessera export ran");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The names of the files that differ between two trees (content or mtime).
fn changed(
    a: &BTreeMap<String, (Vec<u8>, SystemTime)>,
    b: &BTreeMap<String, (Vec<u8>, SystemTime)>,
) -> Vec<String> {
    let names: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names
        .into_iter()
        .filter(|n| a.get(*n) != b.get(*n))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_is_deterministic_and_a_changed_body_changes_only_its_files() {
    let t = Team::start().await;
    let admin = t.d.admin_key.clone();
    put_noun(
        &t.requester,
        "work.inputs",
        "numbers",
        json!({"b": [1, 2], "a": "x"}),
    )
    .await;
    put_noun(&t.requester, "work.inputs", "other", json!({"z": 1})).await;
    let r = t
        .requester
        .put_json(
            &format!("/v1/nouns/{NS}/work.notes/readme"),
            &json!({"expected_version": 0, "body_base64": "IyBIZWxsbwo=", "media_type": "text/markdown"}),
        )
        .await
        .unwrap();
    assert_eq!(
        r.status.as_u16(),
        201,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let task = enqueue(
        &t.requester,
        &spec("verb.solve_draft", json!({"goal": "g"})),
    )
    .await;
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("review");

    let (code, stdout, stderr) = export(&t, &admin, &dir, &["--queue", "work.external"]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let first = tree(&dir);
    let names: Vec<&str> = first.keys().map(String::as_str).collect();
    let task_file = format!("{NS}/_tasks/work.external/{task}.json");
    let mut want = vec![
        ".tessera-export".to_string(),
        format!("{NS}/work.inputs/numbers.json"),
        format!("{NS}/work.inputs/numbers.meta"),
        format!("{NS}/work.inputs/other.json"),
        format!("{NS}/work.inputs/other.meta"),
        format!("{NS}/work.notes/readme.md"),
        format!("{NS}/work.notes/readme.meta"),
        task_file.clone(),
    ];
    want.sort();
    assert_eq!(names, want);
    let numbers = &first[&format!("{NS}/work.inputs/numbers.json")].0;
    assert_eq!(
        String::from_utf8_lossy(numbers),
        "{\n  \"a\": \"x\",\n  \"b\": [\n    1,\n    2\n  ]\n}\n"
    );
    assert_eq!(first[&format!("{NS}/work.notes/readme.md")].0, b"# Hello\n");
    let meta: serde_json::Value =
        serde_json::from_slice(&first[&format!("{NS}/work.inputs/numbers.meta")].0).unwrap();
    assert_eq!(meta["version"], 1);
    assert_eq!(meta["visibility"], "surface_only");
    let task_json: serde_json::Value = serde_json::from_slice(&first[&task_file].0).unwrap();
    assert_eq!(task_json["state"], "queued");
    assert_eq!(task_json["spec"]["brief"], json!({"goal": "g"}));

    tokio::time::sleep(Duration::from_millis(20)).await;
    let (code, stdout, _) = export(&t, &admin, &dir, &["--queue", "work.external"]).await;
    assert_eq!(code, 0);
    assert!(
        stdout.contains("0 files written, 0 removed, 7 unchanged"),
        "{stdout}"
    );
    assert_eq!(changed(&first, &tree(&dir)), Vec::<String>::new());

    put_noun(
        &t.requester,
        "work.inputs",
        "numbers",
        json!({"b": [1, 3], "a": "x"}),
    )
    .await;
    assert_eq!(
        export(&t, &admin, &dir, &["--queue", "work.external"])
            .await
            .0,
        0
    );
    let second = tree(&dir);
    assert_eq!(
        changed(&first, &second),
        [
            format!("{NS}/work.inputs/numbers.json"),
            format!("{NS}/work.inputs/numbers.meta")
        ]
    );
    let old = String::from_utf8(numbers.clone()).unwrap();
    let new =
        String::from_utf8(second[&format!("{NS}/work.inputs/numbers.json")].0.clone()).unwrap();
    let diff: Vec<(&str, &str)> = old
        .lines()
        .zip(new.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(diff, [("    2", "    3")], "a changed body is a line diff");

    claim(&t.worker, "work.external").await.unwrap();
    assert_eq!(export(&t, &admin, &dir, &[]).await.0, 0);
    let third = tree(&dir);
    assert!(
        !third.contains_key(&task_file),
        "tasks of queues not named are not exported"
    );
    assert_eq!(
        export(&t, &admin, &dir, &["--queue", "work.external"])
            .await
            .0,
        0
    );
    let claimed: serde_json::Value = serde_json::from_slice(&tree(&dir)[&task_file].0).unwrap();
    assert_eq!(claimed["state"], "claimed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_shows_only_what_the_key_may_read_and_refuses_a_folder_of_other_work() {
    let t = Team::start().await;
    put_noun(&t.requester, "work.inputs", "numbers", json!({"a": 1})).await;
    let out = tempfile::tempdir().unwrap();
    let outsider_key = {
        let r = t
            .d
            .admin
            .post_json(
                "/v1/keys",
                &json!({"label": "reader", "grants": {"scopes": ["namespace:elsewhere", "nouns:read"]}}),
            )
            .await
            .unwrap();
        body(&r)["secret"].as_str().unwrap().to_string()
    };
    let dir = out.path().join("outsider");
    let (code, stdout, stderr) = export(&t, &outsider_key, &dir, &[]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(files_under(&dir), [".tessera-export"]);

    let busy = out.path().join("busy");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("notes.txt"), "mine").unwrap();
    let (code, _, stderr) = export(&t, &t.d.admin_key, &busy, &[]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert_eq!(files_under(&busy), ["notes.txt"]);
}

/// Every field of a task's spec reaches the task view and the export. The
/// fields are the spec's own, read from its schema in the OpenAPI document:
/// a spec field added without a value here fails at once, and each value
/// below differs from the field's default so a field left out of the view
/// or the export cannot pass by chance. `depends_on` shows as `upstream`'s
/// ids; `max_attempts` as the spec's own (`max_attempts_override` in the
/// view, whose `max_attempts` is the claims allowed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spec_field_shows_in_the_task_view_and_the_export() {
    let t = Team::start().await;
    let upstream = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let sent = json!({
        "namespace": NS,
        "queue": "work.external",
        "kind": "verb.compute",
        "effect_class": "read",
        "producer_surface": support::SURFACE,
        "visibility_scope": "allowlist_surfaces",
        "allowed_surfaces": ["reviewers"],
        "target_cohorts": ["cohort-a", "cohort-b"],
        "tags": ["t1", "t2"],
        "idempotency_key": "every-field",
        "brief": {"goal": "show every field"},
        "depends_on": [upstream],
        "on_upstream_failure": "cancel",
        "priority": 7,
        "not_before": "2030-01-02T03:04:05Z",
        "max_attempts": 9,
        "lease_ttl_s": 77,
        "check_policy": "strict",
        "allow_file_submit": true,
        "placement": "fields/{task_id}",
    });
    let doc = body(&t.d.admin.get("/v1/openapi.json").await.unwrap());
    let fields: std::collections::BTreeSet<&String> =
        doc["components"]["schemas"]["TaskSpec"]["properties"]
            .as_object()
            .expect("the TaskSpec schema's properties")
            .keys()
            .collect();
    let given: std::collections::BTreeSet<&String> = sent.as_object().unwrap().keys().collect();
    assert_eq!(
        fields, given,
        "the spec's fields against the values given here"
    );
    let id = enqueue(&t.requester, &sent).await;

    let view = body(&t.requester.get(&format!("/v1/tasks/{id}")).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = export(
        &t,
        &t.d.admin_key,
        dir.path(),
        &["--queue", "work.external"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let file = dir
        .path()
        .join(NS)
        .join("_tasks")
        .join("work.external")
        .join(format!("{id}.json"));
    let exported: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    for field in fields {
        let want = &sent[field];
        let shown = match field.as_str() {
            "depends_on" => json!(
                view["upstream"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|u| u["task_id"].clone())
                    .collect::<Vec<_>>()
            ),
            "max_attempts" => view["max_attempts_override"].clone(),
            _ => view[field].clone(),
        };
        assert_eq!(&shown, want, "GET /v1/tasks/{id}: {field}");
        assert_eq!(
            &exported["spec"][field],
            want,
            "the export's {}: {field}",
            file.display()
        );
    }
    assert_eq!(view["max_attempts"], 9, "the claims allowed");
    assert_eq!(exported["max_attempts"], 9, "the claims allowed");
    let plain = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let view = body(
        &t.requester
            .get(&format!("/v1/tasks/{plain}"))
            .await
            .unwrap(),
    );
    assert_eq!(
        (&view["max_attempts"], &view["max_attempts_override"]),
        (&json!(3), &json!(null)),
        "a task without its own max_attempts shows its queue's"
    );
}
