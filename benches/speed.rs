//! Tessera's own figures in one command: enqueue (one by one, and batched),
//! claim + submit cycles, noun put/get, all over HTTP on loopback against a
//! daemon started on a temporary root, then restart time and memory of
//! `tessera serve` on a root holding N tasks. Every write is durable (fsync
//! on), exactly as in production.
//!
//! ```sh
//! cargo bench --bench speed
//! cargo bench --bench speed -- --seconds 3 --restart-tasks 20000
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};
use tessera::client::Client;

use support::{Phase, phase};

mod support;

#[derive(Parser, Debug)]
struct Args {
    /// Seconds per timed phase.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Enqueue requests in flight (one task each).
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// Tasks per batched enqueue call.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Batched enqueue calls in flight.
    #[arg(long, default_value_t = 4)]
    batch_in_flight: usize,
    /// Tasks queued before the cycles start (topped up after the enqueue phases).
    #[arg(long, default_value_t = 100_000)]
    cycle_tasks: usize,
    /// Concurrent workers in the claim + submit cycles.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// Concurrent clients in the noun phases.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Tasks in the root the restart is timed on.
    #[arg(long, default_value_t = 100_000)]
    restart_tasks: usize,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

/// The queue every task of the HTTP phases goes to.
const QUEUE: &str = "work";

/// A no-op task numbered `i`.
fn spec(i: usize) -> Value {
    json!({"namespace": "bench", "queue": QUEUE, "kind": "verb.noop", "effect_class": "read", "producer_surface": "bench", "brief": {"i": i}})
}

/// One batched enqueue call of `n` tasks numbered from `first`: true when
/// every item was created.
async fn enqueue_batch(c: &Client, first: usize, n: usize) -> bool {
    let items: Vec<Value> = (first..first + n).map(spec).collect();
    match c
        .post_json("/v1/batch/tasks", &json!({ "items": items }))
        .await
    {
        Ok(r) if r.status == 200 => r.value()["items"]
            .as_array()
            .is_some_and(|items| items.iter().all(|i| i["status"] == 201)),
        _ => false,
    }
}

/// Enqueue one by one with `in_flight` requests at once, then batched;
/// returns how many tasks are queued.
async fn enqueue(client: &Client, args: &Args) -> usize {
    let c = client.clone();
    let mut single = phase(
        &format!("enqueue x{}", args.in_flight),
        args.in_flight,
        args.seconds,
        move |client, i| {
            let c = c.clone();
            async move {
                c.post_json("/v1/tasks", &spec(client * 1_000_000 + i))
                    .await
                    .is_ok_and(|r| r.status == 201)
            }
        },
    )
    .await;
    single.print();
    let c = client.clone();
    let n = args.batch;
    let mut batched = phase(
        &format!("enqueue {n}/call"),
        args.batch_in_flight,
        args.seconds,
        move |client, i| {
            let c = c.clone();
            async move { enqueue_batch(&c, (client * 1_000_000 + i) * n, n).await }
        },
    )
    .await;
    batched.per_op = n;
    batched.print();
    single.ops() + batched.ops() * n
}

/// Claim + submit cycles: each worker claims once, then submits with
/// `claim_next`, whose answer carries its next claim, until the deadline
/// or an empty queue. One latency per submit (with its next claim).
async fn cycles(client: &Client, workers: usize, seconds: u64) -> Phase {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move {
                let (mut lat, mut errors) = (Vec::new(), 0);
                let path = format!("/v1/queues/{QUEUE}/claim");
                let mut claim = match c.post_json(&path, &json!({"wait_ms": 1000})).await {
                    Ok(r) if r.status == 200 => r.value(),
                    _ => return (lat, 1),
                };
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let id = claim["task"]["task_id"].as_str().unwrap_or_default();
                    let submit = json!({"lease_id": claim["lease"]["id"], "ok": true, "claim_next": {"queue": QUEUE, "wait_ms": 0}});
                    match c.post_json(&format!("/v1/tasks/{id}/submit"), &submit).await {
                        Ok(r) if r.status == 201 => {
                            lat.push(t.elapsed());
                            claim = r.value()["next"].clone();
                            if claim.is_null() {
                                break;
                            }
                        }
                        _ => {
                            errors += 1;
                            break;
                        }
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let mut result = Phase {
        name: format!("cycle x{workers}"),
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
        errors: 0,
        per_op: 1,
    };
    for t in tasks {
        let (lat, errors) = t.await.expect("worker task");
        result.latencies.extend(lat);
        result.errors += errors;
    }
    result.elapsed = started.elapsed();
    result
}

/// Times `tessera serve` twice on a root holding `tasks` tasks: the first
/// start replays the journal (compacting it when it is long enough), the
/// second starts from what the first left.
fn restart(tasks: usize) {
    let root = tempfile::tempdir().expect("temp root");
    support::fill(root.path(), tasks, 0);
    for n in 1..=2 {
        let served = support::serve(root.path(), "warn");
        println!(
            "{:<16} {:>9.2} s to /healthz   resident {}   ({tasks} tasks, journal+snapshot {} MiB)",
            format!("restart #{n}"),
            served.elapsed.as_secs_f64(),
            served.rss,
            support::journal_size(root.path()) >> 20
        );
    }
}

fn main() {
    let args = Args::parse();
    println!(
        "tessera speed: {} s per phase, nproc {}",
        args.seconds,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let daemon = support::start();
    let rt = tokio::runtime::Runtime::new().expect("client runtime");
    rt.block_on(async {
        let client = &daemon.admin;
        let queue = json!({"name": QUEUE, "lease_ttl_s": 60, "max_attempts": 3});
        let r = client
            .post_json("/v1/queues", &queue)
            .await
            .expect("provision");
        assert_eq!(r.status, 201, "provisioning the queue");
        let mut queued = enqueue(client, &args).await;
        while queued < args.cycle_tasks {
            let n = args.batch.min(args.cycle_tasks - queued);
            assert!(
                enqueue_batch(client, queued, n).await,
                "topping up the queue"
            );
            queued += n;
        }
        cycles(client, args.workers, args.seconds).await.print();
        support::nouns(client, args.clients, args.seconds).await;
    });
    drop(daemon);
    restart(args.restart_tasks);
}
