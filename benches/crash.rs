//! The SIGKILL campaign: `cargo bench --bench crash -- [--kills N] [--clients C]`.
//!
//! Starts the release daemon on a temporary root, runs a mixed load (noun
//! puts, enqueues, claims, worker stages and submits with projection,
//! key-route submits), kills it with SIGKILL at a random moment, restarts
//! it, and checks that everything acknowledged before the kill is there:
//! every noun version with its hash, every task, every receipt, and that
//! fsck is clean. Prints kills, acknowledged operations and violations
//! (each violation is listed); exits 1 when any was found.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tessera::client::Client;

const BIN: &str = env!("CARGO_BIN_EXE_tessera");

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn spawn(root: &Path) -> (Child, Client) {
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(root)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tessera");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the address line");
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the daemon did not start: {line:?}"))
        .to_string();
    let key = std::fs::read_to_string(root.join("auth/admin.key")).expect("admin key");
    (child, Client::new(&base).with_bearer(key.trim()))
}

fn body(r: &tessera::client::Reply) -> Value {
    serde_json::from_slice(&r.body).unwrap_or(Value::Null)
}

/// What the load was told; it must all be there after any kill.
#[derive(Default)]
struct Acked {
    versions: Vec<(String, u64, String)>,
    tasks: Vec<String>,
    receipts: Vec<(String, String)>,
    ops: u64,
}

async fn client_loop(c: Client, w: u64, round: u64, stop: Arc<AtomicBool>) -> Acked {
    let mut acked = Acked::default();
    let url = format!("/v1/nouns/load/c{w}/r{round}");
    let mut version = 0;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let env = json!({"expected_version": version, "body": {"w": w, "v": version + 1}});
        let Ok(r) = c.put_json(&url, &env).await else {
            break;
        };
        if r.status != 201 {
            break;
        }
        version += 1;
        let sha = body(&r)["sha256"].as_str().unwrap_or_default().to_string();
        acked.versions.push((url.clone(), version, sha));
        acked.ops += 1;
        let spec = json!({"namespace": "load", "queue": "q", "kind": "verb.compute", "effect_class": "write-internal", "producer_surface": "load", "brief": {"w": w, "i": i, "round": round}});
        let Ok(r) = c.post_json("/v1/tasks", &spec).await else {
            break;
        };
        if r.status != 201 {
            break;
        }
        acked
            .tasks
            .push(body(&r)["task_id"].as_str().unwrap_or_default().to_string());
        acked.ops += 1;
        let Ok(claim) = c.post_json("/v1/queues/q/claim", &json!({})).await else {
            break;
        };
        if claim.status != 200 {
            continue;
        }
        let claim = body(&claim);
        let id = claim["task"]["task_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        acked.ops += 1;
        let submitted = if i.is_multiple_of(2) {
            let worker = c.with_bearer(claim["handle"].as_str().unwrap_or_default());
            let _ = worker
                .post_bytes("/v1/worker/artifact?name=part.md", b"part".to_vec())
                .await;
            worker
                .post_bytes("/v1/worker/submit", format!("result {i}").into_bytes())
                .await
        } else {
            c.post_json(
                &format!("/v1/tasks/{id}/submit"),
                &json!({"lease_id": claim["lease"]["id"], "ok": true}),
            )
            .await
        };
        match submitted {
            Ok(r) if r.status == 201 => {
                let sha = body(&r)["receipt_sha256"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                acked.receipts.push((id, sha));
                acked.ops += 1;
            }
            _ => break,
        }
    }
    acked
}

async fn violations(c: &Client, acked: &Acked) -> Vec<String> {
    let mut out = Vec::new();
    for (url, version, sha) in &acked.versions {
        match c
            .get(&format!("{url}?version={version}&sha256={sha}"))
            .await
        {
            Ok(r) if r.status == 200 => {}
            Ok(r) => out.push(format!("{url} v{version}: {}", r.status)),
            Err(e) => out.push(format!("{url} v{version}: {e}")),
        }
    }
    for id in &acked.tasks {
        match c.get(&format!("/v1/tasks/{id}")).await {
            Ok(r) if r.status == 200 => {}
            Ok(r) => out.push(format!("task {id}: {}", r.status)),
            Err(e) => out.push(format!("task {id}: {e}")),
        }
    }
    for (id, sha) in &acked.receipts {
        match c.get(&format!("/v1/tasks/{id}/receipts")).await {
            Ok(r) if body(&r)["receipts"][0]["sha256"] == json!(sha) => {}
            Ok(r) => out.push(format!(
                "receipt of {id}: {}",
                String::from_utf8_lossy(&r.body)
            )),
            Err(e) => out.push(format!("receipt of {id}: {e}")),
        }
    }
    out
}

fn main() {
    let kills = arg("--kills", 100);
    let clients = arg("--clients", 8);
    let root = tempfile::tempdir().expect("a temporary root");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let started = Instant::now();
    let mut acked = Acked::default();
    let mut found: Vec<String> = Vec::new();
    let mut seed = started.elapsed().as_nanos() as u64 | 1;
    let mut below = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    {
        let (mut child, c) = spawn(root.path());
        rt.block_on(async {
            let q = json!({"name": "q", "lease_ttl_s": 2, "max_attempts": 1000, "backoff": {"base_ms": 10, "cap_ms": 50}});
            let r = c.post_json("/v1/queues", &q).await.expect("provision");
            assert_eq!(r.status, 201);
        });
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
    }
    for round in 0..kills {
        let (mut child, c) = spawn(root.path());
        found.extend(rt.block_on(violations(&c, &acked)));
        let stop = Arc::new(AtomicBool::new(false));
        let load: Vec<_> = (0..clients)
            .map(|w| rt.spawn(client_loop(c.clone(), w, round, stop.clone())))
            .collect();
        std::thread::sleep(Duration::from_millis(30 + below(250)));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        stop.store(true, Ordering::Relaxed);
        for l in load {
            let a = rt.block_on(l).expect("a load task");
            acked.versions.extend(a.versions);
            acked.tasks.extend(a.tasks);
            acked.receipts.extend(a.receipts);
            acked.ops += a.ops;
        }
    }
    let (mut child, c) = spawn(root.path());
    found.extend(rt.block_on(violations(&c, &acked)));
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let fsck = Command::new(BIN)
        .args(["fsck", "--root"])
        .arg(root.path())
        .output()
        .expect("fsck");
    if !fsck.status.success() {
        found.push(format!("fsck: {}", String::from_utf8_lossy(&fsck.stdout)));
    }
    for v in &found {
        println!("violation: {v}");
    }
    println!(
        "crash campaign: {kills} SIGKILLs, {clients} clients, {} acknowledged operations ({} noun versions, {} tasks, {} receipts), {} violations, {:.1} s (nproc {})",
        acked.ops,
        acked.versions.len(),
        acked.tasks.len(),
        acked.receipts.len(),
        found.len(),
        started.elapsed().as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if !found.is_empty() {
        std::process::exit(1);
    }
}
