//! Restart benchmark: fills a root's journal with N tasks (default
//! 1,000,000) through the queue API, then starts `tessera serve` on it twice
//! and prints how long each start took to serve and the daemon's resident
//! memory. The first start replays the journal (and compacts it into a
//! snapshot); the second loads the snapshot.
//!
//! ```sh
//! cargo bench --bench restart                 # 1,000,000 tasks
//! cargo bench --bench restart -- --tasks 100000
//! ```

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Parser;
use tessera::config::QueueLimits;
use tessera::queue::{Queue, QueueConfig, TaskSpec};
use tessera::store::{Access, Name, Store};

#[derive(Parser, Debug)]
struct Args {
    /// Tasks to put in the journal.
    #[arg(long, default_value_t = 1_000_000)]
    tasks: usize,
    /// Use (and keep) this root instead of a temporary one.
    #[arg(long)]
    root: Option<std::path::PathBuf>,
    /// Only fill the root (give `--root`), to copy it and time starts
    /// by hand or under a profiler.
    #[arg(long, requires = "root")]
    fill_only: bool,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

fn fill(root: &std::path::Path, n: usize) {
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
        queue.close();
        println!("filled {n} tasks in {:.1} s", started.elapsed().as_secs_f64());
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
    fill(&root, args.tasks);
    println!("journal {} MiB", journal_size(&root) >> 20);
    if args.fill_only {
        return;
    }
    start(&root, "first start (replay)");
    start(&root, "second start (snapshot)");
}
