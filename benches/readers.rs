//! Readers under load: what a scoped key that only reads costs everyone
//! else. A daemon on a temporary root holds `--tasks` tasks of another
//! tenant; one-by-one enqueues and claim + submit cycles are timed alone,
//! then again while `--readers` connections of a key that may see none
//! of those tasks loop over `GET /v1/tasks?limit=1`, `/v1/status`,
//! `/v1/queues` and `/metrics`. It prints each phase, the readers' own
//! rate, and how much the readers raised the p50 and p99. Every write is
//! durable (fsync on).
//!
//! ```sh
//! cargo bench --bench readers
//! cargo bench --bench readers -- --tasks 1000000 --seconds 10
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use clap::Parser;
use serde_json::{Value, json};
use tessera::client::Client;

use support::{Phase, phase};

mod support;

#[derive(Parser, Debug)]
struct Args {
    /// Tasks of the other tenant held in the queue.
    #[arg(long, default_value_t = 100_000)]
    tasks: usize,
    /// Seconds per timed phase.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Reader connections.
    #[arg(long, default_value_t = 2)]
    readers: usize,
    /// Writers in each timed phase.
    #[arg(long, default_value_t = 16)]
    writers: usize,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

/// The queue the timed phases use.
const WORK: &str = "work";

/// The queue that holds the other tenant's tasks.
const HELD: &str = "held";

fn spec(queue: &str, i: usize) -> Value {
    json!({"namespace": "bench", "queue": queue, "kind": "verb.noop", "effect_class": "read", "producer_surface": "bench", "brief": {"i": i}})
}

/// Enqueues `n` tasks on `queue` in batches of 1000.
async fn fill(c: &Client, queue: &str, n: usize) {
    for first in (0..n).step_by(1000) {
        let items: Vec<Value> = (first..(first + 1000).min(n))
            .map(|i| spec(queue, i))
            .collect();
        let r = c
            .post_json("/v1/batch/tasks", &json!({ "items": items }))
            .await
            .expect("batch enqueue");
        assert_eq!(r.status, 200, "batch enqueue");
    }
}

/// One-by-one enqueues, then claim + submit cycles (each submit carries
/// the next claim), each for `seconds` with `writers` clients.
async fn timed(c: &Client, writers: usize, seconds: u64, label: &str) -> (Phase, Phase) {
    let cc = c.clone();
    let mut enqueue = phase(
        &format!("enqueue {label}"),
        writers,
        seconds,
        move |w, i| {
            let c = cc.clone();
            async move {
                c.post_json("/v1/tasks", &spec(WORK, w * 10_000_000 + i))
                    .await
                    .is_ok_and(|r| r.status == 201)
            }
        },
    )
    .await;
    enqueue.print();
    fill(c, WORK, 50_000).await;
    let claims: Arc<Vec<tokio::sync::Mutex<Option<Value>>>> =
        Arc::new((0..writers).map(|_| Default::default()).collect());
    let cc = c.clone();
    let mut cycles = phase(
        &format!("cycle {label}"),
        writers,
        seconds,
        move |w, _| {
            let (c, claims) = (cc.clone(), claims.clone());
            async move {
                let mut held = claims[w].lock().await;
                let claim = match held.take() {
                    Some(claim) => claim,
                    None => match c
                        .post_json(&format!("/v1/queues/{WORK}/claim"), &json!({}))
                        .await
                    {
                        Ok(r) if r.status == 200 => r.value(),
                        _ => return false,
                    },
                };
                let id = claim["task"]["task_id"].as_str().unwrap_or_default();
                let submit = json!({"lease_id": claim["lease"]["id"], "ok": true, "claim_next": {"queue": WORK}});
                match c
                    .post_json(&format!("/v1/tasks/{id}/submit"), &submit)
                    .await
                {
                    Ok(r) if r.status == 201 => {
                        let next = r.value()["next"].clone();
                        *held = (!next.is_null()).then_some(next);
                        true
                    }
                    _ => false,
                }
            }
        },
    )
    .await;
    cycles.print();
    (enqueue, cycles)
}

/// The p50 and p99 of a phase, in ms.
fn percentiles(p: &mut Phase) -> (f64, f64) {
    p.latencies.sort();
    let at = |q: f64| {
        let i = ((p.latencies.len() as f64 * q) as usize).min(p.latencies.len().saturating_sub(1));
        p.latencies
            .get(i)
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    };
    (at(0.50), at(0.99))
}

/// The p50, p99 and largest bucket of the lock's hold time for `op`, from
/// the scrape's `tessera_queue_lock_held_seconds` histogram.
fn held(scrape: &str, op: &str) -> String {
    let mut buckets: Vec<(f64, u64)> = scrape
        .lines()
        .filter(|l| {
            l.starts_with("tessera_queue_lock_held_seconds_bucket{")
                && l.contains(&format!("op=\"{op}\""))
        })
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let n = l.rsplit(' ').next()?.parse().ok()?;
            Some((le.parse().unwrap_or(f64::INFINITY), n))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last().map_or(0, |b| b.1);
    let at = |q: f64| {
        buckets
            .iter()
            .find(|(_, n)| *n as f64 >= q * total as f64)
            .map_or(f64::NAN, |(le, _)| le * 1e6)
    };
    let top = buckets
        .windows(2)
        .filter(|w| w[1].1 > w[0].1)
        .map(|w| w[1].0 * 1e6)
        .next_back()
        .unwrap_or(f64::NAN);
    format!(
        "{total} holds, p50 <= {:.0} us, p99 <= {:.0} us, longest <= {top:.0} us",
        at(0.5),
        at(0.99)
    )
}

fn main() {
    let args = Args::parse();
    println!(
        "tessera readers: {} tasks held, {} readers, {} writers, {} s per phase, nproc {}",
        args.tasks,
        args.readers,
        args.writers,
        args.seconds,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let daemon = support::start();
    let rt = tokio::runtime::Runtime::new().expect("client runtime");
    rt.block_on(async {
        let admin = &daemon.admin;
        for q in [WORK, HELD] {
            let r = admin
                .post_json("/v1/queues", &json!({"name": q, "lease_ttl_s": 60}))
                .await
                .expect("provision");
            assert_eq!(r.status, 201, "provisioning {q}");
        }
        fill(admin, HELD, args.tasks).await;
        let issued = admin
            .post_json(
                "/v1/keys",
                &json!({"label": "reader", "grants": {"scopes": ["metrics:read"], "queues": [HELD]}}),
            )
            .await
            .expect("issue the reader's key")
            .value();
        let secret = issued["secret"]
            .as_str()
            .unwrap_or_else(|| panic!("a key secret: {issued}"))
            .to_string();
        let reader = admin.with_bearer(&secret);

        let (mut e0, mut c0) = timed(admin, args.writers, args.seconds, "alone").await;
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicUsize::new(0));
        let loops: Vec<_> = (0..args.readers)
            .map(|_| {
                let (r, stop, reads) = (reader.clone(), stop.clone(), reads.clone());
                tokio::spawn(async move {
                    let paths = ["/v1/tasks?limit=1", "/v1/status", "/v1/queues", "/metrics"];
                    for path in paths.iter().cycle() {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let ok = r.get(path).await.is_ok_and(|r| r.status == 200);
                        assert!(ok, "{path} answers the reader");
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let started = std::time::Instant::now();
        let (mut e1, mut c1) = timed(admin, args.writers, args.seconds, "w/ readers").await;
        stop.store(true, Ordering::Relaxed);
        let read_s = started.elapsed().as_secs_f64();
        for l in loops {
            l.await.expect("reader");
        }
        println!(
            "readers          {:>9.0} reads/s over {} connections",
            reads.load(Ordering::Relaxed) as f64 / read_s,
            args.readers
        );
        let scrape = admin.get("/metrics").await.expect("metrics");
        for op in ["query", "peek", "enqueue", "claim", "submit"] {
            println!("lock held by {op:<8} {}", held(&String::from_utf8_lossy(&scrape.body), op));
        }
        for (name, alone, loaded) in [("enqueue", &mut e0, &mut e1), ("cycle", &mut c0, &mut c1)] {
            let ((a50, a99), (l50, l99)) = (percentiles(alone), percentiles(loaded));
            println!(
                "{name:<8} readers raise p50 {a50:.2} -> {l50:.2} ms ({:+.0}%), p99 {a99:.2} -> {l99:.2} ms ({:+.0}%)",
                (l50 / a50 - 1.0) * 100.0,
                (l99 / a99 - 1.0) * 100.0
            );
        }
    });
}
