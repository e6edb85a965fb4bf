//! The PostgreSQL queue database's cycle, below the daemon: `--workers`
//! claimants each loop over claim one task, then complete it, against a
//! throwaway cluster (or `TESSERA_TEST_PG`) with `fsync` and
//! `synchronous_commit` on and every change's event rows written. Two
//! phases: each claim and each completion its own statement, then claims
//! and completions coalesced (`pg::batch`). Prints cycles/s with p50 and p99, and per cycle the
//! commits and WAL fsyncs the database counted (`pg_stat_database`,
//! `pg_stat_wal`, read after the phase's connections have closed so each
//! backend's counts are in).
//!
//! ```sh
//! cargo bench --bench pg_cycle
//! cargo bench --bench pg_cycle -- --workers 16 --seconds 5
//! ```

use std::time::Duration;

use clap::Parser;
use tessera::auth::token::new_handle;
use tessera::database::{Database, schema};
use tessera::queue::TaskState;
use tessera::queue::pg::batch;
use tessera::queue::pg::complete::{self, Completed, Completion};
use tessera::queue::pg::lease::{self, ClaimAsk};
use tessera::queue::pg::viewer::Grants;
use tessera::queue::task::new_lease_id;
use tessera::store::envelope::{EffectClass, Viewer};
use tessera::store::{Name, Sha256};

#[path = "../tests/support/pg.rs"]
mod pg;
mod support;

#[derive(Parser, Debug)]
struct Args {
    /// Queued tasks at the start (each cycle uses one).
    #[arg(long, default_value_t = 150_000)]
    tasks: i64,
    /// Concurrent claimants.
    #[arg(long, default_value_t = 64)]
    workers: usize,
    /// Seconds per phase.
    #[arg(long, default_value_t = 8)]
    seconds: u64,
    /// Ignored (cargo bench passes it).
    #[arg(long)]
    bench: bool,
}

fn name(s: &str) -> Name {
    Name::parse("name", s).expect("a valid name")
}

fn worker() -> Viewer {
    let mut v = Viewer::admin(name("w"));
    v.admin = false;
    v.namespaces = [name("ns1")].into();
    v.queues = [name("q1")].into();
    v.kinds = [name("k1")].into();
    v.effect_classes = [EffectClass::Read].into();
    v
}

/// Commits and WAL fsyncs so far.
async fn counters(url: &str) -> (i64, i64) {
    let c = pg::connect(url).await;
    let commits: i64 = c
        .query_one(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .await
        .expect("pg_stat_database")
        .get(0);
    let syncs: i64 = c
        .query_one("SELECT wal_sync FROM pg_stat_wal", &[])
        .await
        .expect("pg_stat_wal")
        .get(0);
    (commits, syncs)
}

async fn run_phase(url: &str, args: &Args, coalesced: bool) {
    let db = Database::connect(url).await.expect("connecting");
    let batchers = coalesced.then(|| (batch::claimer(db.clone()), batch::completer(db.clone())));
    let before = counters(url).await;
    let grants = std::sync::Arc::new(Grants::of(&worker()));
    let label = if coalesced {
        "cycle coalesced"
    } else {
        "cycle single"
    };
    let db2 = db.clone();
    let mut phase = support::phase(label, args.workers, args.seconds, move |_, _| {
        let (db, grants, batchers) = (db2.clone(), grants.clone(), batchers.clone());
        async move {
            let who = name("w");
            let ask = ClaimAsk {
                queue: name("q1"),
                grants: grants.clone(),
                holder: who.clone(),
                kinds: None,
                leases: vec![(new_lease_id(), new_handle())],
            };
            let got = match &batchers {
                Some((claimer, _)) => claimer.call(ask).await.map_err(|e| e.to_string()),
                None => lease::claim_many(&db, vec![ask])
                    .await
                    .map(|mut v| v.pop().unwrap_or_default())
                    .map_err(|e| e.to_string()),
            };
            let Ok(mut got) = got else {
                return false;
            };
            let Some(c) = got.pop() else {
                return false;
            };
            let receipt = format!("{{\"task\":\"{}\",\"ok\":true}}", c.id());
            let done = Completion {
                id: c.id(),
                lease: c.lease().id.clone(),
                attempt: c.attempt(),
                by: who.clone(),
                state: TaskState::Succeeded,
                request: Sha256::of(c.id().to_string().as_bytes()),
                receipt: receipt.into_bytes(),
                reason: None,
                not_before: None,
                at: jiff::Timestamp::now(),
            };
            let done = match &batchers {
                Some((_, completer)) => completer
                    .call((done, None))
                    .await
                    .map(|(outcome, _)| outcome)
                    .map_err(|e| e.to_string()),
                None => complete::complete(&db, done)
                    .await
                    .map_err(|e| e.to_string()),
            };
            matches!(done, Ok(Ok(Completed::Accepted(_))))
        }
    })
    .await;
    drop(db);
    // Each backend reports its counts when its connection closes.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = counters(url).await;
    let cycles = phase.ops().max(1) as f64;
    phase.print();
    println!(
        "{:<16} {:.3} commits and {:.3} WAL fsyncs per cycle",
        "",
        (after.0 - before.0) as f64 / cycles,
        (after.1 - before.1) as f64 / cycles
    );
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let url = pg::fresh_database().await;
    let db = Database::connect(&url).await.expect("connecting");
    schema::migrate(&db).await.expect("migrating");
    let client = pg::connect(&url).await;
    client
        .batch_execute("INSERT INTO queues (name, server, config) VALUES ('q1', false, '{}')")
        .await
        .expect("a queue");
    client
        .execute(
            &format!(
                "INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, requester, state, spec) \
                 SELECT i, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'queued', {} \
                 FROM generate_series(1, $1::bigint) i",
                pg::spec_sql("repeat('x', 400)")
            ),
            &[&args.tasks],
        )
        .await
        .expect("tasks");
    client
        .batch_execute("VACUUM ANALYZE tasks")
        .await
        .expect("vacuum");
    drop(db);
    println!(
        "PostgreSQL queue cycle: {} workers, {} tasks queued, {} s per phase, pool of {}",
        args.workers,
        args.tasks,
        args.seconds,
        tessera::database::POOL_SIZE
    );
    run_phase(&url, &args, false).await;
    run_phase(&url, &args, true).await;
}
