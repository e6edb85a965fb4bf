//! Restart benchmark: fills a root's journal with N tasks (default
//! 1,000,000) through the queue API, then starts `tessera serve` on it twice
//! and prints how long each start took to serve and the daemon's resident
//! memory. The first start replays the journal (and compacts it into a
//! snapshot); the second loads the snapshot.
//!
//! With `--submitted N` the first N tasks are also claimed and submitted,
//! so the journal holds their receipts and the start re-packs them and
//! indexes the packs.
//!
//! ```sh
//! cargo bench --bench restart                 # 1,000,000 tasks
//! cargo bench --bench restart -- --tasks 100000 --submitted 100000
//! ```

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use clap::Parser;
use tessera::config::QueueLimits;
use tessera::queue::{Queue, QueueConfig, SubmitInput, TaskSpec};
use tessera::store::{Access, Name, Sha256, Store};

#[derive(Parser, Debug)]
struct Args {
    /// Tasks to put in the journal.
    #[arg(long, default_value_t = 1_000_000)]
    tasks: usize,
    /// Use (and keep) this root instead of a temporary one.
    #[arg(long)]
    root: Option<std::path::PathBuf>,
    /// Tasks to claim and submit after the fill (receipts in the journal).
    #[arg(long, default_value_t = 0)]
    submitted: usize,
    /// Only fill the root (give `--root`), to copy it and time starts
    /// by hand or under a profiler.
    #[arg(long, requires = "root")]
    fill_only: bool,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

/// Claims and submits `n` tasks, 64 at a time.
async fn submit(queue: &Queue, n: usize) {
    let queue_name = Name::parse("queue", "bench.q").expect("name");
    let worker = Name::parse("key", "kworker").expect("name");
    let left = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(n));
    let workers: Vec<_> = (0..64)
        .map(|w| {
            let (queue, queue_name, worker, left) = (
                queue.clone(),
                queue_name.clone(),
                worker.clone(),
                left.clone(),
            );
            tokio::spawn(async move {
                let mut i = 0u64;
                while left
                    .fetch_update(SeqCst, SeqCst, |l| l.checked_sub(1))
                    .is_ok()
                {
                    i += 1;
                    let handle = move || format!("wh-bench-{w}-{i}");
                    let claim = queue
                        .claim_next(
                            &queue_name,
                            None,
                            &worker,
                            &handle,
                            &|_| true,
                            Duration::ZERO,
                            |_, c| c.clone(),
                        )
                        .await
                        .expect("claim")
                        .expect("a ready task");
                    let input = SubmitInput {
                        ok: true,
                        outputs: Vec::new(),
                        evidence: Vec::new(),
                        note: Some(format!("bench result {}", claim.id)),
                        worker: None,
                        checks: None,
                        failure: None,
                        request: Sha256::of(claim.id.to_string().as_bytes()),
                    };
                    queue
                        .submit(claim.id, &claim.lease.id, &input, &worker)
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

fn fill(root: &std::path::Path, n: usize, submitted: usize) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let store = Store::open(root, Access::Exclusive).expect("store");
        let limits = QueueLimits::default();
        let (queue, _) = Queue::open(&store, limits.split_limits(), limits.segment_bytes()).expect("queue");
        let config: QueueConfig = serde_json::from_value(serde_json::json!({"name": "bench.q"})).expect("config");
        queue.provision(config).await.expect("provision");
        let requester = Name::parse("key", "kbench").expect("name");
        let started = Instant::now();
        let mut done = 0;
        while done < n {
            let batch: Vec<TaskSpec> = (done..(done + 10_000).min(n))
                .map(|i| {
                    let spec = serde_json::json!({
                        "namespace": "bench", "queue": "bench.q", "kind": "verb.noop", "effect_class": "read",
                        "producer_surface": "bench", "tags": ["category:verb.noop"],
                        "idempotency_key": format!("bench-{i}"),
                        "brief": {"contract": "tessera.work.example.v1", "item": i, "input_ref": {"store": "work.inputs", "key": format!("n{i}"), "version": 1, "sha256": "0".repeat(64)}},
                    });
                    serde_json::from_str(&spec.to_string()).expect("spec")
                })
                .collect();
            done += batch.len();
            for r in queue.enqueue_many(batch, &requester, &|_| true, false).await.expect("enqueue") {
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
    });
}

fn journal_size(root: &std::path::Path) -> u64 {
    std::fs::read_dir(root.join("journal"))
        .expect("journal")
        .map(|e| e.expect("entry").metadata().expect("meta").len())
        .sum()
}

fn start(root: &std::path::Path, label: &str) {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(root)
        .env("RUST_LOG", "tessera::daemon=info,warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn tessera");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("address line");
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
    println!(
        "{label:<28} serving after {:>6.2} s   resident {rss}   journal+snapshot {} MiB",
        elapsed.as_secs_f64(),
        journal_size(root) >> 20
    );
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let _ = child.wait();
}

fn main() {
    let args = Args::parse();
    let temp = tempfile::tempdir().expect("temp root");
    let root = args
        .root
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    println!(
        "tessera restart benchmark: {} tasks, nproc {}",
        args.tasks,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    fill(&root, args.tasks, args.submitted);
    println!("journal {} MiB", journal_size(&root) >> 20);
    if args.fill_only {
        return;
    }
    start(&root, "first start (replay)");
    start(&root, "second start (snapshot)");
}
