//! What the benchmarks share: a daemon in this process, on a temporary
//! root and `127.0.0.1:0`, on its own runtime thread; timed phases of
//! concurrent clients and their one printout (ops/s, p50, p99); the noun
//! put/get phases; and a root filled with tasks, started as `tessera serve`
//! and timed. Each bench uses part of it.
#![allow(dead_code)]

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use serde_json::json;
use tessera::client::Client;

/// A running daemon: its admin client and its root (removed on drop).
pub struct Daemon {
    /// A client holding the admin key.
    pub admin: Client,
    /// The temporary root.
    pub root: tempfile::TempDir,
}

/// Starts a daemon on a fresh temporary root.
pub fn start() -> Daemon {
    start_with(|_| {})
}

/// Starts a daemon on a fresh temporary root with its config adjusted
/// by `adjust` (a queue database, a bucket for its objects).
pub fn start_with(adjust: impl FnOnce(&mut tessera::config::Config)) -> Daemon {
    let root = tempfile::tempdir().expect("temp root");
    let mut config = tessera::config::Config {
        root: root.path().to_path_buf(),
        ..Default::default()
    };
    adjust(&mut config);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("daemon runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(listener.local_addr().expect("addr"))
                .expect("send addr");
            tessera::daemon::run(config, listener, std::future::pending())
                .await
                .expect("daemon");
        });
    });
    let addr = rx.recv().expect("daemon address");
    let key_path = root.path().join("auth/admin.key");
    while !key_path.exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(50));
    let key = std::fs::read_to_string(key_path).expect("admin key");
    Daemon {
        admin: Client::new(&format!("http://{addr}")).with_bearer(key.trim()),
        root,
    }
}

/// One timed phase: the latency of every operation that succeeded.
pub struct Phase {
    /// What was measured.
    pub name: String,
    /// Wall time of the phase.
    pub elapsed: Duration,
    /// One entry per successful operation.
    pub latencies: Vec<Duration>,
    /// Operations that failed.
    pub errors: usize,
    /// Items one operation carries (a batch call's size), for items/s.
    pub per_op: usize,
}

impl Phase {
    /// Successful operations.
    pub fn ops(&self) -> usize {
        self.latencies.len()
    }

    /// Prints ops/s (and items/s for batches), p50 and p99: the one format
    /// of every bench's figures.
    pub fn print(&mut self) {
        self.latencies.sort();
        let pct = |p: f64| {
            let i = ((self.latencies.len() as f64 * p) as usize)
                .min(self.latencies.len().saturating_sub(1));
            self.latencies.get(i).copied().unwrap_or_default()
        };
        let secs = self.elapsed.as_secs_f64();
        let items = if self.per_op > 1 {
            format!(" = {:.0} items/s", (self.ops() * self.per_op) as f64 / secs)
        } else {
            String::new()
        };
        println!(
            "{:<16} {:>9.0} ops/s   p50 {:>8.2} ms   p99 {:>8.2} ms   ({} ops, {} errors, {:.1} s){items}",
            self.name,
            self.ops() as f64 / secs,
            pct(0.50).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
            self.ops(),
            self.errors,
            secs
        );
    }
}

/// Runs `op(client_index, op_index)` from `clients` tasks for `seconds`.
pub async fn phase<F, Fut>(name: &str, clients: usize, seconds: u64, op: F) -> Phase
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    let op = Arc::new(op);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let op = op.clone();
            tokio::spawn(async move {
                let (mut lat, mut errors, mut i) = (Vec::new(), 0, 0);
                while Instant::now() < deadline {
                    let t = Instant::now();
                    if op(c, i).await {
                        lat.push(t.elapsed());
                    } else {
                        errors += 1;
                    }
                    i += 1;
                }
                (lat, errors)
            })
        })
        .collect();
    let mut result = Phase {
        name: name.to_string(),
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
        errors: 0,
        per_op: 1,
    };
    for t in tasks {
        let (lat, errors) = t.await.expect("client task");
        result.latencies.extend(lat);
        result.errors += errors;
    }
    result.elapsed = start.elapsed();
    result
}

/// Noun puts (four versions per noun: mostly creates, some new versions),
/// then reads of version 1, from `clients` clients for `seconds` each.
pub async fn nouns(client: &Client, clients: usize, seconds: u64) {
    let c = client.clone();
    let mut put = phase("noun put", clients, seconds, move |client, i| {
        let c = c.clone();
        async move {
            let env = json!({"expected_version": i % 4, "body": {"client": client, "i": i, "pad": "x".repeat(200)}});
            c.put_json(&format!("/v1/nouns/bench/c{client}/k{}", i / 4), &env)
                .await
                .is_ok_and(|r| r.status == 201)
        }
    })
    .await;
    put.print();
    let c = client.clone();
    let mut get = phase("noun get", clients, seconds, move |client, i| {
        let c = c.clone();
        async move {
            c.get(&format!("/v1/nouns/bench/c{client}/k{}?version=1", i % 8))
                .await
                .is_ok_and(|r| r.status == 200)
        }
    })
    .await;
    get.print();
}

/// Claims and submits `n` tasks, 64 at a time.
async fn submit(queue: &tessera::queue::Queue, n: usize) {
    use tessera::queue::SubmitInput;
    use tessera::store::envelope::Viewer;
    use tessera::store::{Name, Sha256};
    let queue_name = Name::parse("queue", "bench.q").expect("name");
    let worker = Viewer::admin(Name::parse("key", "kworker").expect("name"));
    let left = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(n));
    let workers: Vec<_> = (0..64)
        .map(|_| {
            let (queue, queue_name, worker, left) = (
                queue.clone(),
                queue_name.clone(),
                worker.clone(),
                left.clone(),
            );
            tokio::spawn(async move {
                while left
                    .fetch_update(SeqCst, SeqCst, |l| l.checked_sub(1))
                    .is_ok()
                {
                    let claim = queue
                        .claim_next(&queue_name, None, &worker, Duration::ZERO)
                        .await
                        .expect("claim")
                        .expect("a ready task");
                    claim.handover.delivered();
                    let id = claim.task.task.id;
                    let input = SubmitInput {
                        note: Some(format!("bench result {id}")),
                        ..SubmitInput::bare(true, false, Sha256::of(id.to_string().as_bytes()))
                    };
                    queue
                        .submit(id, &claim.lease.id, &input, &worker.key)
                        .await
                        .expect("submit");
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("worker");
    }
}

/// Fills the journal of the root at `root` with `n` no-op tasks, through
/// the queue API in this process (no daemon), 10,000 per batch; the first
/// `submitted` of them are then claimed and submitted. The queue folds
/// its journal as a daemon's does; returns what the folds did.
pub fn fill(root: &Path, n: usize, submitted: usize) -> tessera::queue::Folds {
    use tessera::config::QueueLimits;
    use tessera::queue::{Queue, QueuePatch, TaskSpec};
    use tessera::store::{Access, Store};
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let store = Store::open(root, Access::Exclusive).expect("store");
        let limits = QueueLimits::default();
        let (queue, _) = Queue::open(&store, limits.split_limits(), limits.segment_bytes(), limits.fold_after()).expect("queue");
        let config: QueuePatch = serde_json::from_value(json!({"name": "bench.q"})).expect("config");
        queue.provision(config).await.expect("provision");
        // The admin key a first start makes: every task's requester must
        // be a key the root holds, or the daemon refuses to start.
        let (keyring, _) = tessera::auth::Keyring::open(&store).expect("keys");
        let requester = tessera::store::envelope::Viewer::admin(keyring.list().await.expect("keys").remove(0).key_id);
        let started = Instant::now();
        let mut done = 0;
        while done < n {
            let batch: Vec<TaskSpec> = (done..(done + 10_000).min(n))
                .map(|i| {
                    let spec = json!({
                        "namespace": "bench", "queue": "bench.q", "kind": "verb.noop", "effect_class": "read",
                        "producer_surface": "bench", "tags": ["category:verb.noop"],
                        "idempotency_key": format!("bench-{i}"),
                        "brief": {"contract": "tessera.work.example.v1", "item": i, "input_ref": {"store": "work.inputs", "key": format!("n{i}"), "version": 1, "sha256": "0".repeat(64)}},
                    });
                    serde_json::from_str(&spec.to_string()).expect("spec")
                })
                .collect();
            done += batch.len();
            for r in queue.enqueue_many(batch, &requester, None, false).await.expect("enqueue") {
                r.expect("enqueued");
            }
        }
        println!("filled {n} tasks in {:.1} s", started.elapsed().as_secs_f64());
        if submitted > 0 {
            let started = Instant::now();
            submit(&queue, submitted.min(n)).await;
            println!(
                "claimed and submitted {} tasks in {:.1} s",
                submitted.min(n),
                started.elapsed().as_secs_f64()
            );
        }
        queue.close();
        queue.folds()
    })
}

/// This process's resident memory and its peak (`VmRSS`, `VmHWM`).
pub fn memory() -> (String, String) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or("?")
            .trim()
            .to_string()
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Bytes in `<root>/journal/` (segments and snapshot).
pub fn journal_size(root: &Path) -> u64 {
    std::fs::read_dir(root.join("journal"))
        .expect("journal")
        .map(|e| e.expect("entry").metadata().expect("meta").len())
        .sum()
}

/// A `tessera serve` start, timed.
pub struct Served {
    /// From spawning the process to `/healthz` answering 200.
    pub elapsed: Duration,
    /// The daemon's resident memory then (`VmRSS`).
    pub rss: String,
}

/// Spawns `tessera serve` on `root` (logging by `rust_log`), waits for
/// `/healthz` to answer 200, reads its resident memory, and stops it
/// (SIGTERM).
pub fn serve(root: &Path, rust_log: &str) -> Served {
    serve_then(root, rust_log, |_, _| {})
}

/// [`serve`], running `then` before the stop, given the daemon's pid and
/// a client holding its admin key.
pub fn serve_then(root: &Path, rust_log: &str, then: impl FnOnce(u32, &Client)) -> Served {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(root)
        .env("RUST_LOG", rust_log)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn tessera");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("address line");
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the daemon did not start: {line:?}"))
        .to_string();
    let client = Client::new(&base);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    while !rt
        .block_on(client.get("/healthz"))
        .is_ok_and(|r| r.status == 200)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    let elapsed = started.elapsed();
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .unwrap_or("VmRSS: ?")
        .trim_start_matches("VmRSS:")
        .trim()
        .to_string();
    let key = std::fs::read_to_string(root.join("auth/admin.key")).expect("the admin key");
    // A client of its own: `client`'s connections belong to `rt`.
    let admin = Client::new(&base).with_bearer(key.trim());
    then(child.id(), &admin);
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let _ = child.wait();
    Served { elapsed, rss }
}
