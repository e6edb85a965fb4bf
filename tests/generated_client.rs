//! A client generated from the daemon's OpenAPI document runs a whole
//! cycle without a hand edit: `openapi-python-client` (pinned, installed
//! into `target/client-venv` by `scripts/client-venv`, which `.ci/run`
//! runs) generates a Python package from `GET /v1/openapi.json`, and
//! `generated_client/cycle.py` writes and reads back a noun that is not
//! JSON, enqueues, claims, fetches the prompt and beats the heart with the
//! handle, submits, and reads the task and its receipts, each through a
//! generated function whose generated parser checks the answer.

use crate::support;

use std::path::Path;
use std::process::Command;

use support::{NS, SURFACE, Team};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_python_client_runs_a_cycle_without_hand_edits() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = here.join("target/client-venv/bin");
    assert!(
        venv.join("openapi-python-client").exists(),
        "no client generator at {}: run scripts/client-venv first (it installs the pinned \
         openapi-python-client; .ci/run does)",
        venv.display()
    );
    let t = Team::start().await;
    let doc = t.d.admin.anonymous().get("/v1/openapi.json").await.unwrap();
    assert_status!(doc, 200);
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("openapi.json"), &doc.body).unwrap();
    let generated = Command::new(venv.join("openapi-python-client"))
        .args(["generate", "--path", "openapi.json", "--meta", "none"])
        .args(["--output-path", "tessera_client"])
        .current_dir(work.path())
        .output()
        .expect("running openapi-python-client");
    let said = String::from_utf8_lossy(&generated.stdout).into_owned()
        + &String::from_utf8_lossy(&generated.stderr);
    assert!(generated.status.success(), "generating the client: {said}");

    let (requester, worker) = (
        t.requester.bearer().unwrap().to_string(),
        t.worker.bearer().unwrap().to_string(),
    );
    let ran = tokio::task::spawn_blocking({
        let work = work.path().to_path_buf();
        let base = t.d.admin.base().to_string();
        move || {
            Command::new(venv.join("python"))
                .arg(here.join("tests/generated_client/cycle.py"))
                .env("PYTHONPATH", &work)
                .env("TESSERA_URL", base)
                .env("REQUESTER_KEY", requester)
                .env("WORKER_KEY", worker)
                .env("NAMESPACE", NS)
                .env("SURFACE", SURFACE)
                .output()
                .expect("running the cycle")
        }
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success() && out.starts_with("cycle ok t"),
        "the generated client's cycle: {out}{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let id = out.trim().rsplit(' ').next().unwrap();
    let view = support::body(&t.requester.get(&format!("/v1/tasks/{id}")).await.unwrap());
    assert_eq!(view["state"], "succeeded");
}
