//! Load benchmark: drives a daemon over HTTP on loopback with N concurrent
//! clients and prints throughput and latency percentiles per operation.
//!
//! ```sh
//! cargo bench --bench load                       # starts its own daemon on a temp root
//! cargo bench --bench load -- --clients 64 --seconds 5
//! cargo bench --bench load -- --server http://127.0.0.1:7700 --key-file tessera-root/auth/admin.key
//! ```
//! Every write is durable (fsync on), exactly as in production.

use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use serde_json::json;
use tessera::client::Client;

use support::{Phase, phase};

#[derive(Parser, Debug)]
struct Args {
    /// A running daemon; without it the benchmark starts one on a temp root.
    #[arg(long)]
    server: Option<String>,
    /// The key file for --server.
    #[arg(long)]
    key_file: Option<std::path::PathBuf>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Seconds per phase.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Which phases: nouns, queue, worker, or all.
    #[arg(long, default_value = "all")]
    only: String,
    /// Worker counts for the claim + submit cycle phases.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    workers: Vec<usize>,
    /// Run as a scoped (non-admin) key, so every grant and visibility check runs.
    #[arg(long)]
    scoped: bool,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

/// Enqueue throughput, then complete cycles (claim + submit of a no-op
/// task, both durable) at each worker count, with claim latency.
async fn queue(client: &Client, args: &Args) {
    let provision = json!({"name": "bench.q", "lease_ttl_s": 60, "max_attempts": 3});
    let r = client
        .post_json("/v1/queues", &provision)
        .await
        .expect("provision");
    assert!(
        r.status.is_success() || r.status == 403,
        "provisioning failed: {}",
        r.status
    );
    let spec = json!({"namespace": "bench", "queue": "bench.q", "kind": "verb.noop", "effect_class": "read", "producer_surface": "bench", "brief": {}});
    let c = client.clone();
    let mut enq = phase("enqueue", args.clients, args.seconds, move |_, _| {
        let c = c.clone();
        let spec = spec.clone();
        async move {
            c.post_json("/v1/tasks", &spec)
                .await
                .is_ok_and(|r| r.status == 201)
        }
    })
    .await;
    enq.print();
    let mut queued = enq.ops();
    for &workers in &args.workers {
        // Top the queue up so the phase never runs dry.
        let want = (workers * 12_000 * args.seconds as usize / 4).max(20_000);
        if queued < want {
            let c = client.clone();
            let spec = json!({"namespace": "bench", "queue": "bench.q", "kind": "verb.noop", "effect_class": "read", "producer_surface": "bench", "brief": {}});
            let need = want - queued;
            let tasks: Vec<_> = (0..32)
                .map(|_| {
                    let c = c.clone();
                    let spec = spec.clone();
                    tokio::spawn(async move {
                        for _ in 0..need.div_ceil(32) {
                            c.post_json("/v1/tasks", &spec).await.expect("enqueue");
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("filler");
            }
            queued += need.div_ceil(32) * 32;
        }
        let claims = Arc::new(std::sync::Mutex::new(Vec::new()));
        let c = client.clone();
        let lat = claims.clone();
        let name = format!("cycle x{workers}");
        let mut cyc = phase(&name, workers, args.seconds, move |_, _| {
            let c = c.clone();
            let lat = lat.clone();
            async move {
                let t = Instant::now();
                let Ok(r) = c.post_json("/v1/queues/bench.q/claim", &json!({})).await else {
                    return false;
                };
                if r.status != 200 {
                    return false;
                }
                lat.lock().expect("latencies").push(t.elapsed());
                let v = r.value();
                let path = format!(
                    "/v1/tasks/{}/submit",
                    v["task"]["task_id"].as_str().unwrap_or_default()
                );
                c.post_json(&path, &json!({"lease_id": v["lease"]["id"], "ok": true}))
                    .await
                    .is_ok_and(|r| r.status == 201)
            }
        })
        .await;
        queued = queued.saturating_sub(cyc.ops());
        cyc.print();
        let mut claim = Phase {
            name: "  claim".into(),
            elapsed: cyc.elapsed,
            latencies: std::mem::take(&mut *claims.lock().expect("latencies")),
            errors: 0,
            per_op: 1,
        };
        claim.print();
    }
}

/// Worker I/O at `--clients` concurrent workers: prompt fetches by
/// handle, then full attempts (claim, two staged parts, final submit with
/// its projection into ctx-dir files).
async fn worker(client: &Client, args: &Args) {
    let provision = json!({"name": "bench.w", "lease_ttl_s": 600, "max_attempts": 3});
    client
        .post_json("/v1/queues", &provision)
        .await
        .expect("provision");
    let spec = json!({"namespace": "bench", "queue": "bench.w", "kind": "verb.solve_draft", "effect_class": "read", "producer_surface": "bench", "brief": {"directive": "Sum the squares of the numbers.", "numbers": [3, 4, 12]}});
    let mut handles = Vec::new();
    for _ in 0..args.clients {
        client.post_json("/v1/tasks", &spec).await.expect("enqueue");
        let c = client
            .post_json("/v1/queues/bench.w/claim", &json!({}))
            .await
            .expect("claim")
            .value();
        handles.push(client.with_bearer(c["handle"].as_str().expect("handle")));
    }
    let handles = Arc::new(handles);
    let mut prompt = phase("prompt", args.clients, args.seconds, move |c, _| {
        let h = handles[c].clone();
        async move {
            h.get("/v1/worker/prompt")
                .await
                .is_ok_and(|r| r.status == 200)
        }
    })
    .await;
    prompt.print();
    let c = client.clone();
    let mut full = phase(
        "attempt+2 parts",
        args.clients,
        args.seconds,
        move |_, i| {
            let c = c.clone();
            let spec = spec.clone();
            async move {
                c.post_json("/v1/tasks", &spec).await.expect("enqueue");
                let Ok(claim) = c.post_json("/v1/queues/bench.w/claim", &json!({})).await else {
                    return false;
                };
                let h = c.with_bearer(claim.value()["handle"].as_str().unwrap_or_default());
                let plan = h
                    .post_bytes(
                        "/v1/worker/artifact?name=plan.md",
                        format!("# Plan {i}\n1. square\n2. sum\n"),
                    )
                    .await;
                let data = h
                    .post_bytes(
                        "/v1/worker/artifact?name=data.json",
                        format!("{{\"i\": {i}}}"),
                    )
                    .await;
                let done = h
                    .post_bytes("/v1/worker/submit", "The sum of squares is 169.")
                    .await;
                plan.is_ok() && data.is_ok() && done.is_ok_and(|r| r.status == 201)
            }
        },
    )
    .await;
    full.print();
    println!(
        "  (each attempt: enqueue, claim, 2 parts, submit: 5 requests, 4 fsynced writes + projection)"
    );
}

async fn grant_check_cost() {
    use tessera::auth::{Grants, IssueRequest, Keyring, Scope, access};
    use tessera::store::{Access, Name, Sha256, Store, VersionEntry, Visibility};
    let root = tempfile::tempdir().expect("temp root");
    let store = Store::open(root.path(), Access::Exclusive).expect("store");
    let (keyring, _) = Keyring::open(&store).expect("keyring");
    let ns = Name::parse("ns", "bench").expect("name");
    let surface = Name::parse("surface", "bench").expect("name");
    let scopes = [
        "namespace:bench",
        "surface:bench",
        "nouns:read",
        "cas:write",
    ];
    let (record, secret) = keyring
        .issue(IssueRequest {
            label: "bench".into(),
            account_id: None,
            owner: None,
            grants: Grants {
                scopes: scopes
                    .iter()
                    .map(|s| s.parse::<Scope>().expect("scope"))
                    .collect(),
                ..Grants::default()
            },
            expires_at: None,
        })
        .await
        .expect("issue");
    let entry = VersionEntry {
        version: 1,
        sha256: Sha256::of(b""),
        size: 0,
        media_type: "application/json".into(),
        noun_type: None,
        created_at: jiff::Timestamp::now(),
        created_by: record.key_id.to_string(),
        producer_surface: Some(surface),
        visibility: Visibility::SurfaceOnly,
        allowed_surfaces: Vec::new(),
        owner: Some(record.key_id.to_string()),
        quarantined: false,
        source_pack: None,
    };
    let n = 1_000_000;
    let start = Instant::now();
    for _ in 0..n {
        let p = keyring
            .authenticate(Some(std::hint::black_box(&secret)))
            .await
            .expect("auth");
        access::may_read_nouns(&p, &ns).expect("read");
        access::read_noun(&p, std::hint::black_box(&entry)).expect("visible");
    }
    println!(
        "grant check  {:>9.0} ns per request (authenticate a scoped key + noun read decision, in memory)",
        start.elapsed().as_nanos() as f64 / n as f64
    );
}

mod support;

fn main() {
    let args = Args::parse();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(grant_check_cost());
    let (client, _root) = match &args.server {
        Some(url) => {
            let key =
                std::fs::read_to_string(args.key_file.as_ref().expect("--key-file with --server"))
                    .expect("key file");
            (Client::new(url).with_bearer(key.trim()), None)
        }
        None => {
            let d = support::start();
            println!("daemon on a temporary root: {}", d.root.path().display());
            (d.admin.clone(), Some(d))
        }
    };
    let rt = tokio::runtime::Runtime::new().expect("client runtime");
    println!(
        "tessera load benchmark: {} clients, {} s per phase, nproc {}",
        args.clients,
        args.seconds,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    rt.block_on(async {
        let client = if args.scoped {
            let spec = json!({"label": "bench", "grants": {"queues": ["bench.q"], "kinds": ["verb.noop"], "effect_classes": ["read"], "scopes": ["namespace:bench", "surface:bench", "nouns:read", "cas:write", "verbs:enqueue", "verbs:claim", "verbs:submit"]}});
            let q = json!({"name": "bench.q", "lease_ttl_s": 60, "max_attempts": 3});
            client.post_json("/v1/queues", &q).await.expect("provision");
            let issued = client.post_json("/v1/keys", &spec).await.expect("issue").value();
            println!("as a scoped key (namespace:bench, surface:bench, nouns:read, cas:write)");
            client.with_bearer(issued["secret"].as_str().expect("secret"))
        } else {
            println!("as the admin key");
            client
        };
        if args.only == "all" || args.only == "nouns" {
            support::nouns(&client, args.clients, args.seconds).await;
        }
        if args.only == "all" || args.only == "queue" {
            queue(&client, &args).await;
        }
        if args.only == "all" || args.only == "worker" {
            worker(&client, &args).await;
        }
    });
}
