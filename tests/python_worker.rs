//! `examples/python_worker.py` against a live daemon: with a key it claims
//! every queued task, stages its parts and submits until no work is left;
//! with a handle it finishes the one attempt it was given. CI installs
//! python3; without it these tests fail, they never skip.

use crate::support;

use serde_json::{Value, json};
use support::{NS, SURFACE, Team, body, claim, enqueue, put_noun, spec, task};

/// Runs the example with `args`; returns its stdout, failing with its
/// output when it exits non-zero.
async fn run_example(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/python_worker.py");
    let out = tokio::process::Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!("python3 is needed to run examples/python_worker.py ({e}); install it (CI does: apt-get install python3)")
        });
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the Python worker failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A key that may claim and submit the team's work, as its secret.
async fn worker_secret(t: &Team) -> String {
    let grants = json!({
        "queues": ["work.external"],
        "kinds": ["verb.solve_draft"],
        "effect_classes": ["write-internal"],
        "scopes": [format!("namespace:{NS}"), format!("surface:{SURFACE}"), "nouns:read", "verbs:claim", "verbs:submit"],
    });
    let r =
        t.d.admin
            .post_json(
                "/v1/keys",
                &json!({"label": "python worker", "grants": grants}),
            )
            .await
            .unwrap();
    assert_status!(r, 201);
    body(&r)["secret"].as_str().unwrap().to_string()
}

/// The task's final pull.
async fn output(t: &Team, id: &str) -> Value {
    let r = t
        .requester
        .get(&format!("/v1/tasks/{id}/output"))
        .await
        .unwrap();
    assert_status!(r, 200);
    body(&r)
}

#[tokio::test]
async fn with_a_key_it_works_the_queue_until_no_work_is_left() {
    let t = Team::start().await;
    let mut ids = Vec::new();
    for n in 0..2 {
        let brief = json!({"directive": format!("Write note {n}."), "step": "solve_draft"});
        ids.push(enqueue(&t.requester, &spec("verb.solve_draft", brief)).await);
    }
    let key = worker_secret(&t).await;
    let url = t.d.admin.base().to_string();
    let stdout = run_example(&[
        "--url",
        &url,
        "--key",
        &key,
        "--queue",
        "work.external",
        "--wait-ms",
        "0",
    ])
    .await;
    assert!(
        stdout.contains("no work left on work.external after 2 task(s)"),
        "{stdout}"
    );
    for id in &ids {
        let v = task(&t.requester, id).await;
        assert_eq!(v["state"], "succeeded", "{id}: {v}");
        let out = output(&t, id).await;
        assert_eq!(out["out"]["task_id"], id.as_str(), "{out}");
        let note = out["parts"]["notes.md"].as_str().unwrap_or_default();
        assert!(note.contains("Notes for"), "{id}: the staged part: {out}");
    }
}

#[tokio::test]
async fn with_a_handle_it_finishes_that_attempt() {
    let t = Team::start().await;
    let brief = json!({"directive": "Write one note.", "step": "solve_draft"});
    let id = enqueue(&t.requester, &spec("verb.solve_draft", brief)).await;
    let claimed = claim(&t.worker, "work.external").await.expect("a claim");
    let handle = claimed["handle"].as_str().unwrap();
    let url = t.d.admin.base().to_string();
    let stdout = run_example(&["--url", &url, "--handle", handle]).await;
    assert!(
        stdout.contains(&format!("{id}: submitted: succeeded")),
        "{stdout}"
    );
    let out = output(&t, &id).await;
    assert!(
        out["parts"]["notes.md"]
            .as_str()
            .is_some_and(|n| n.contains("Write one note.")),
        "the note carries the directive: {out}"
    );
    let again = tokio::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/python_worker.py"
        ))
        .args(["--url", &url, "--handle", handle])
        .output()
        .await
        .unwrap();
    assert_eq!(again.status.code(), Some(1), "a spent handle is refused");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("tessera answered"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// On a task whose contract its stand-in work does not satisfy (the seed
/// pack's `tessera.work.example.v1`), the example says why each attempt
/// failed: the field, the rule and what it found, as the submit answered;
/// `tessera task receipts` says the same.
#[tokio::test]
async fn a_failed_check_is_explained_by_the_worker_and_the_cli() {
    let t = Team::start().await;
    let contract = json!({
        "contract": "tessera.work.example.v1",
        "operation": {"name": "sum_of_squares"},
        "input_schema": {"type": "object", "required": ["numbers"]},
        "output_schema": {
            "type": "object",
            "properties": {"sum_of_squares": {"type": "integer"}},
            "required": ["sum_of_squares"],
            "additionalProperties": false
        },
        "checks": [{"name": "output_matches_schema"}],
        "shims": "none",
        "execution": {"worker": "external", "server_fallback": false},
    });
    let contract_ref = put_noun(&t.requester, "work.contracts", "c", contract).await;
    let input_ref = put_noun(&t.requester, "work.inputs", "n", json!({"numbers": [3, 4]})).await;
    let brief =
        json!({"contract_ref": contract_ref, "input_ref": input_ref, "step": "solve_draft"});
    let id = enqueue(&t.requester, &spec("verb.solve_draft", brief)).await;
    let key = worker_secret(&t).await;
    let url = t.d.admin.base().to_string();
    let stdout = run_example(&[
        "--url",
        &url,
        "--key",
        &key,
        "--queue",
        "work.external",
        "--wait-ms",
        "0",
        "--once",
    ])
    .await;
    for want in [
        format!("{id}: submitted: failed"),
        format!(
            "{id}: check output_matches_schema failed (output 0): /sum_of_squares breaks `required`, found nothing"
        ),
        format!(
            "{id}: check output_matches_schema failed (output 0): /summary breaks `additionalProperties`, found a string"
        ),
        format!("{id}: 0 attempt(s) left"),
    ] {
        assert!(stdout.contains(&want), "{want:?} not in:\n{stdout}");
    }
    let cli = tokio::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["task", "receipts", &id])
        .env("TESSERA_SERVER", &url)
        .env("TESSERA_KEY", &t.d.admin_key)
        .output()
        .await
        .unwrap();
    let table = String::from_utf8_lossy(&cli.stdout);
    assert!(cli.status.success(), "{table}");
    for want in [
        "output_matches_schema: output 0: ",
        "/sum_of_squares: is required (`required`), found nothing",
        "/summary: is not a field the schema allows (`additionalProperties`), found a string",
    ] {
        assert!(table.contains(want), "{want:?} not in:\n{table}");
    }
}
