//! The blueprint flow's cast, for tests that work it: its queue, keys for
//! each step, and a worker's calls through its handle.

use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};
use tessera::client::Client;

use super::{NS, SURFACE, body, claim, claimed_id};
use crate::assert_status;

/// The blueprint flow's step kinds.
pub const KINDS: [&str; 3] = ["verb.design", "verb.implement", "verb.review"];

/// Provisions the flow's queue, `work.external`.
pub async fn provision(admin: &Client) {
    let q = json!({"name": "work.external", "lease_ttl_s": 30, "max_attempts": 1});
    assert_status!(admin.post_json("/v1/queues", &q).await.unwrap(), 201);
}

/// Issues a key for the team's namespace and surface with these kinds and
/// scopes; returns its secret.
/// Issues a key for the team's namespace and surface with `kinds` and `scopes`: its secret.
pub async fn issue(admin: &Client, label: &str, kinds: &[&str], scopes: &[&str]) -> String {
    let mut all = vec![
        format!("namespace:{NS}"),
        format!("surface:{SURFACE}"),
        "nouns:read".to_string(),
    ];
    all.extend(scopes.iter().map(|s| s.to_string()));
    let spec = json!({"label": label, "grants": {
        "queues": ["work.external"], "kinds": kinds,
        "effect_classes": ["write-internal"], "scopes": all}});
    let r = admin.post_json("/v1/keys", &spec).await.unwrap();
    assert_status!(r, 201);
    body(&r)["secret"].as_str().unwrap().to_string()
}

/// A worker key allowed exactly one kind.
/// A worker key for `kind`.
pub async fn worker(admin: &Client, kind: &str) -> Client {
    let secret = issue(admin, kind, &[kind], &["verbs:claim", "verbs:submit"]).await;
    admin.with_bearer(&secret)
}

/// Claims the next task for `key` and returns (task id, an agent holding
/// only the handle).
/// Claims a task with `key`: its id, and a client holding its handle.
pub async fn claim_as_agent(key: &Client) -> (String, Client) {
    let c = claim(key, "work.external").await.expect("a task to claim");
    (
        claimed_id(&c),
        key.with_bearer(c["handle"].as_str().expect("a handle")),
    )
}

/// The prompt the handle's worker fetches.
pub async fn prompt(agent: &Client) -> Value {
    let r = agent.get("/v1/worker/prompt").await.unwrap();
    assert_status!(r, 200);
    body(&r)
}

/// Stages a part and returns its sha256.
/// Stages a part through the handle: its sha256.
pub async fn stage(agent: &Client, name: &str, bytes: &[u8]) -> String {
    let r = agent
        .post_bytes(&format!("/v1/worker/artifact?name={name}"), bytes.to_vec())
        .await
        .unwrap();
    assert_status!(r, 200);
    body(&r)["sha256"].as_str().unwrap().to_string()
}

/// Submits `out` through the handle.
pub async fn finish(agent: &Client, query: &str, out: &str) {
    let r = agent
        .post_bytes(
            &format!("/v1/worker/submit{query}"),
            out.as_bytes().to_vec(),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
}

/// The entry of `prompt.consumes` named `name`.
/// The `consumes` entry `name` of a prompt.
pub fn consumed<'a>(prompt: &'a Value, name: &str) -> &'a Value {
    prompt["consumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no consumes entry {name}: {prompt:#}"))
}

/// Runs `tessera import PACK ARGS` with a key holding `secret`; checks it
/// exits with `code` and returns its stdout.
/// Runs `tessera import` of `pack` against `admin`'s daemon with `secret`, expecting exit `code`: its output.
pub async fn import(admin: &Client, pack: &Path, args: &[&str], code: i32, secret: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("importer.key");
    std::fs::write(&key_file, format!("{secret}\n")).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("import")
        .arg(pack)
        .args(args)
        .args(["--server", admin.base(), "--key-file"])
        .arg(&key_file)
        .env_remove("TESSERA_KEY")
        .env_remove("TESSERA_SERVER")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "import exited otherwise:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
