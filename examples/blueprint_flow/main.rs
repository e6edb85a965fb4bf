//! A Blueprint flow end to end: `seeds/blueprint-flow` (design →
//! implement → review), each step run by its own worker key.
//!
//! ```sh
//! cargo run --example blueprint_flow
//! ```
//!
//! Starts the real daemon in this process on a temporary root and
//! `127.0.0.1:0`, imports the pack with `tessera import` (the CLI's own
//! code), then plays three workers that each hold only a `wh-` handle:
//! every prompt carries the step's `consumes` resolved against the
//! upstream's receipt (pointer, sha256, size, small content inline), and
//! the last part is pulled raw from `GET /v1/tasks/{id}/output?path=`.
//! Prints what happened and removes the root on exit, also on error and on
//! Ctrl-C. Nothing outside loopback is contacted; no model is called.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use tessera::client::{Client, Reply};
use tessera::config::Config;

/// The namespace and surface the pack writes into.
const NS: &str = "conformance-routing";
const SURFACE: &str = "team_example";

/// What each step's worker stages and submits.
struct Work {
    kind: &'static str,
    parts: &'static [(&'static str, &'static str)],
    out: &'static str,
}

const STEPS: [Work; 3] = [
    Work {
        kind: "verb.design",
        parts: &[(
            "plan.md",
            "# Plan\n1. Add `dry_run: bool` to ImportArgs.\n2. Skip writes when set.\n",
        )],
        out: "Plan staged as plan.md.",
    },
    Work {
        kind: "verb.implement",
        parts: &[(
            "patch.diff",
            "--- a/import.rs\n+++ b/import.rs\n+    pub dry_run: bool,\n",
        )],
        out: "Added the flag as the plan says.",
    },
    Work {
        kind: "verb.review",
        parts: &[],
        out: "approve: the patch follows the plan",
    },
];

fn ok(r: Reply, want: u16, what: &str) -> anyhow::Result<Value> {
    if r.status.as_u16() != want {
        bail!("{what}: {} {}", r.status, String::from_utf8_lossy(&r.body));
    }
    Ok(serde_json::from_slice(&r.body).unwrap_or(Value::Null))
}

/// Issues a key for the team with these kinds and scopes; its secret.
async fn issue(
    admin: &Client,
    label: &str,
    kinds: &[&str],
    scopes: &[&str],
) -> anyhow::Result<String> {
    let mut all = vec![
        format!("namespace:{NS}"),
        format!("surface:{SURFACE}"),
        "nouns:read".into(),
    ];
    all.extend(scopes.iter().map(|s| s.to_string()));
    let spec = json!({"label": label, "grants": {"queues": ["work.external"], "kinds": kinds,
        "effect_classes": ["write-internal"], "scopes": all}});
    let b = ok(
        admin.post_json("/v1/keys", &spec).await?,
        201,
        "issue a key",
    )?;
    Ok(b["secret"].as_str().unwrap_or_default().to_string())
}

/// `tessera import PACK` with the importer key, on its own thread (the CLI
/// runs its own runtime).
fn import(server: &str, key_file: &Path) -> anyhow::Result<()> {
    let pack = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/blueprint-flow");
    let argv = [
        "tessera".as_ref(),
        "import".as_ref(),
        pack.as_os_str(),
        "--server".as_ref(),
        server.as_ref(),
        "--key-file".as_ref(),
        key_file.as_os_str(),
    ];
    let cli = tessera::cli::Cli::try_parse_from(argv)?;
    let code = std::thread::spawn(move || tessera::cli::run(cli))
        .join()
        .map_err(|_| anyhow::anyhow!("the import thread panicked"))?;
    if code != ExitCode::SUCCESS {
        bail!("tessera import failed");
    }
    Ok(())
}

/// One step: claim with its own key, read the prompt, stage, submit.
async fn run_step(admin: &Client, work: &Work) -> anyhow::Result<String> {
    let secret = issue(
        admin,
        work.kind,
        &[work.kind],
        &["verbs:claim", "verbs:submit"],
    )
    .await?;
    let key = admin.with_bearer(&secret);
    let claim = ok(
        key.post_json("/v1/queues/work.external/claim", &json!({}))
            .await?,
        200,
        "claim",
    )?;
    let id = claim["task"]["task_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let agent = admin.with_bearer(claim["handle"].as_str().unwrap_or_default());
    let prompt = ok(agent.get("/v1/worker/prompt").await?, 200, "prompt")?;
    println!(
        "\nstep {} ({id}, key {}): {}",
        prompt["step"].as_str().unwrap_or("?"),
        work.kind,
        prompt["prompt"].as_str().unwrap_or("")
    );
    let consumes = prompt["consumes"].as_array().cloned().unwrap_or_default();
    if consumes.is_empty() {
        println!("  consumes: nothing");
    }
    for c in &consumes {
        let sha = c["sha256"].as_str().unwrap_or("");
        println!(
            "  consumes {} <- {} {}: {}, {} bytes, sha256 {}…, from {}",
            c["name"].as_str().unwrap_or("?"),
            c["step"].as_str().unwrap_or("?"),
            c["path"].as_str().unwrap_or("?"),
            c["status"].as_str().unwrap_or("?"),
            c["size"],
            sha.get(..12).unwrap_or(sha),
            c["task_id"].as_str().unwrap_or("?")
        );
        if c["status"] != "ready" {
            bail!("{id}: an input is missing: {c}");
        }
    }
    for (name, text) in work.parts {
        let path = format!("/v1/worker/artifact?name={name}");
        ok(
            agent.post_bytes(&path, text.as_bytes().to_vec()).await?,
            200,
            "stage",
        )?;
        println!("  staged {name} ({} bytes)", text.len());
    }
    let done = ok(
        agent
            .post_bytes("/v1/worker/submit", work.out.as_bytes().to_vec())
            .await?,
        201,
        "submit",
    )?;
    println!(
        "  submitted: {} ({})",
        work.out,
        done["state"].as_str().unwrap_or("?")
    );
    Ok(id)
}

async fn scenario(admin: &Client, keys: &Path) -> anyhow::Result<()> {
    let queue = json!({"name": "work.external", "lease_ttl_s": 60, "max_attempts": 1});
    ok(
        admin.post_json("/v1/queues", &queue).await?,
        201,
        "create the queue",
    )?;
    let kinds: Vec<&str> = STEPS.iter().map(|s| s.kind).collect();
    let importer = issue(admin, "importer", &kinds, &["cas:write", "verbs:enqueue"]).await?;
    let key_file = keys.join("importer.key");
    std::fs::write(&key_file, format!("{importer}\n")).context("writing the importer key")?;
    println!("\nimporting seeds/blueprint-flow:");
    import(admin.base(), &key_file)?;
    let mut ids = Vec::new();
    for work in &STEPS {
        ids.push(run_step(admin, work).await?);
    }
    let implement = &ids[1];
    let path = "%24.parts%5B%22patch.diff%22%5D";
    let r = admin
        .get(&format!("/v1/tasks/{implement}/output?path={path}"))
        .await?;
    if r.status.as_u16() != 200 {
        bail!("output: {}", r.status);
    }
    println!(
        "\nGET /v1/tasks/{implement}/output?path=$.parts[\"patch.diff\"]: {} bytes, x-tessera-sha256 {}",
        r.body.len(),
        r.header("x-tessera-sha256").unwrap_or("?")
    );
    let mut states = Vec::new();
    for id in &ids {
        let t = ok(admin.get(&format!("/v1/tasks/{id}")).await?, 200, "task")?;
        states.push(t["state"].as_str().unwrap_or("?").to_string());
    }
    let succeeded = states.iter().filter(|s| *s == "succeeded").count();
    println!("flow finished: {succeeded}/{} steps succeeded", ids.len());
    if succeeded != ids.len() {
        bail!("not every step succeeded: {states:?}");
    }
    Ok(())
}

fn main() -> ExitCode {
    let root = match tempfile::Builder::new()
        .prefix("tessera-blueprint-flow-")
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: cannot create a temporary root: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "temporary root: {} (removed at exit)",
        root.path().display()
    );
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let code = runtime.block_on(async {
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: cannot bind 127.0.0.1:0: {e}");
                return ExitCode::FAILURE;
            }
        };
        let addr = listener.local_addr().expect("a bound address");
        let data = root.path().join("root");
        let config = Config {
            root: data.clone(),
            ..Config::default()
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let daemon = tokio::spawn(tessera::daemon::run(config, listener, async {
            let _ = stopped.await;
        }));
        let key_file = data.join("auth/admin.key");
        while !key_file.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let key = std::fs::read_to_string(&key_file).unwrap_or_default();
        let admin = Client::new(&format!("http://{addr}")).with_bearer(key.trim());
        println!("daemon listening on http://{addr}");
        let code = tokio::select! {
            outcome = scenario(&admin, root.path()) => match outcome {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            },
            _ = tokio::signal::ctrl_c() => {
                eprintln!("interrupted; removing the temporary root");
                ExitCode::from(130)
            }
        };
        let _ = stop.send(());
        let _ = daemon.await;
        code
    });
    drop(runtime);
    if let Err(e) = root.close() {
        eprintln!("warning: could not remove the temporary root: {e}");
    }
    code
}
