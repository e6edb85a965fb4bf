//! What several daemons coordinate through on the queue database, against
//! a real server: the event stream read by `(xid, id)` below the oldest
//! running transaction (16 writers whose transactions overlap; a reader
//! misses nothing and never reads a row twice), and the maintenance
//! leader's lease row on the database clock (one holder at a time, a
//! takeover once it lapses, the old holder fenced off, a resignation),
//! and wake-ups: one `NOTIFY` per tick for any number of commits, none
//! when nothing was committed, heard by another daemon's listener.

use crate::support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::pg;
use tessera::database::{Database, schema};
use tessera::queue::pg::{events, leader, wake};

/// At least `n` events after `cursor` (fewer only if they have not come
/// within 20 s): the stream holds back while any transaction on the
/// cluster that began before them runs, such as another test's.
async fn read_until(
    db: &Database,
    start: &events::Start,
    mut cursor: events::Cursor,
    n: usize,
) -> Vec<events::EventRow> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut rows = Vec::new();
    while rows.len() < n && Instant::now() < deadline {
        let got = events::after(db, cursor, Some(start), 500).await.unwrap();
        if let Some(last) = got.last() {
            cursor = last.cursor;
        }
        rows.extend(got);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    rows
}

async fn migrated() -> (String, Database) {
    let url = pg::fresh_database().await;
    let db = Database::connect(&url).await.unwrap();
    schema::migrate(&db).await.unwrap();
    (url, db)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_sees_every_event_of_overlapping_writers_once_in_one_order() {
    let (url, db) = migrated().await;
    let start = events::now(&db).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..16i64 {
        let url = url.clone();
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut client = pg::connect(&url).await;
            let mut written = Vec::new();
            let mut n = 0i64;
            while !stop.load(Ordering::SeqCst) {
                let tx = client.transaction().await.unwrap();
                // The xid is drawn first, the row's id later: transactions
                // that overlap commit in another order than their ids.
                tx.execute("SELECT pg_current_xact_id()", &[])
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_micros(((w * 7 + n) % 3) as u64 * 700)).await;
                tx.execute(
                    "INSERT INTO events (task_id, to_state) VALUES ($1, $2)",
                    &[&w, &n.to_string()],
                )
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_micros(((w + n) % 3) as u64 * 700)).await;
                tx.commit().await.unwrap();
                written.push((w, n));
                n += 1;
            }
            written
        }));
    }
    let mut cursor = start.cursor;
    let mut rows = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let got = events::after(&db, cursor, Some(&start), 500).await.unwrap();
        if let Some(last) = got.last() {
            cursor = last.cursor;
        }
        rows.extend(got);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut written = HashSet::new();
    for w in writers {
        written.extend(w.await.unwrap());
    }
    // What is still below another transaction's horizon (any database's,
    // on this cluster) comes once that transaction ends.
    rows.extend(read_until(&db, &start, cursor, written.len() - rows.len()).await);
    let mut ids_out_of_order = 0;
    let mut max_id = 0i64;
    let mut previous = start.cursor;
    let mut read = Vec::new();
    for r in &rows {
        assert!(r.cursor > previous, "the stream only moves forward");
        previous = r.cursor;
        if r.cursor.id < max_id {
            ids_out_of_order += 1;
        }
        max_id = max_id.max(r.cursor.id);
        read.push((
            r.task_id.unwrap(),
            r.to_state.clone().unwrap().parse::<i64>().unwrap(),
        ));
    }
    let distinct: HashSet<_> = read.iter().copied().collect();
    assert_eq!(distinct.len(), read.len(), "no event is read twice");
    let missed = written.difference(&distinct).count();
    assert_eq!(missed, 0, "missed {missed} of {} events", written.len());
    assert_eq!(distinct, written);
    assert!(
        written.len() > 500,
        "the writers wrote {} events",
        written.len()
    );
    assert!(
        ids_out_of_order > 0,
        "the writers' ids committed out of order (a reader by id alone would have skipped some)"
    );
}

#[tokio::test]
async fn a_reader_that_starts_now_sees_nothing_from_before() {
    let (url, db) = migrated().await;
    let client = pg::connect(&url).await;
    client
        .execute(
            "INSERT INTO events (task_id, to_state) VALUES (1, 'before')",
            &[],
        )
        .await
        .unwrap();
    let start = events::now(&db).await.unwrap();
    client
        .execute(
            "INSERT INTO events (task_id, to_state) VALUES (2, 'after')",
            &[],
        )
        .await
        .unwrap();
    let rows = read_until(&db, &start, start.cursor, 1).await;
    let states: Vec<_> = rows
        .iter()
        .map(|r| r.to_state.as_deref().unwrap())
        .collect();
    assert_eq!(states, ["after"]);
    let resumed = events::after(&db, rows[0].cursor.to_string().parse().unwrap(), None, 10)
        .await
        .unwrap();
    assert!(
        resumed.is_empty(),
        "resuming at the last event read gives nothing again"
    );
}

#[tokio::test]
async fn pruning_deletes_the_old_events_and_keeps_the_rest() {
    let (url, db) = migrated().await;
    let client = pg::connect(&url).await;
    // 25,000 events from two hours ago (more than one pruning statement
    // takes), then 30 from now, each in a transaction of its own.
    client
        .batch_execute(
            "INSERT INTO events (task_id, to_state, at) \
             SELECT i, 'old', now() - interval '2 hours' FROM generate_series(1, 25000) i",
        )
        .await
        .unwrap();
    for i in 0..30i64 {
        client
            .execute(
                "INSERT INTO events (task_id, to_state) VALUES ($1, 'new')",
                &[&i],
            )
            .await
            .unwrap();
    }
    let pruned = events::prune(&db, Duration::from_secs(3600)).await.unwrap();
    assert_eq!(pruned, 25_000);
    let left: Vec<(String, i64)> = client
        .query(
            "SELECT to_state, count(*) FROM events GROUP BY to_state",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(left, [("new".to_string(), 30)]);
    assert_eq!(
        events::prune(&db, Duration::from_secs(3600)).await.unwrap(),
        0
    );
}

#[tokio::test]
async fn an_open_transaction_holds_the_stream_back_until_it_ends() {
    let (url, db) = migrated().await;
    let start = events::now(&db).await.unwrap();
    let mut slow = pg::connect(&url).await;
    let tx = slow.transaction().await.unwrap();
    tx.execute(
        "INSERT INTO events (task_id, to_state) VALUES (1, 'slow')",
        &[],
    )
    .await
    .unwrap();
    pg::connect(&url)
        .await
        .execute(
            "INSERT INTO events (task_id, to_state) VALUES (2, 'quick')",
            &[],
        )
        .await
        .unwrap();
    assert!(
        events::after(&db, start.cursor, Some(&start), 10)
            .await
            .unwrap()
            .is_empty(),
        "nothing after the open transaction's xid is readable while it runs"
    );
    tx.commit().await.unwrap();
    let rows = read_until(&db, &start, start.cursor, 2).await;
    let states: Vec<_> = rows
        .iter()
        .map(|r| r.to_state.as_deref().unwrap())
        .collect();
    assert_eq!(
        states,
        ["slow", "quick"],
        "in the order the transactions began"
    );
}

#[tokio::test]
async fn one_leader_at_a_time_and_a_takeover_once_its_lease_lapses() {
    let (_, db) = migrated().await;
    let ttl = Duration::from_millis(1500);
    let a = leader::acquire(&db, "maintenance", "daemon-a", ttl)
        .await
        .unwrap()
        .expect("the first daemon leads");
    assert_eq!(a.term, 1);
    assert!(
        a.trusted_until < Instant::now() + ttl,
        "trusted for less than the TTL"
    );
    assert_eq!(
        leader::acquire(&db, "maintenance", "daemon-b", ttl)
            .await
            .unwrap(),
        None,
        "a live lease keeps others out"
    );
    let renewed = leader::acquire(&db, "maintenance", "daemon-a", ttl)
        .await
        .unwrap()
        .expect("the leader renews");
    assert_eq!(renewed.term, 1, "a renewal keeps the term");

    // daemon-a stops renewing (killed, or cut off).
    let lapsed = Instant::now() + ttl;
    let b = loop {
        if let Some(b) = leader::acquire(&db, "maintenance", "daemon-b", ttl)
            .await
            .unwrap()
        {
            break b;
        }
        assert!(
            Instant::now() < lapsed + Duration::from_secs(1),
            "no takeover within the TTL + 1 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        Instant::now() + Duration::from_millis(100) >= lapsed,
        "not before the lease lapsed"
    );
    assert_eq!(b.term, 2);
    assert_eq!(
        leader::acquire(&db, "maintenance", "daemon-a", ttl)
            .await
            .unwrap(),
        None,
        "the old leader's late renewal is refused"
    );
    assert!(
        !leader::resign(&db, "maintenance", "daemon-a", 1)
            .await
            .unwrap()
    );
    assert!(
        leader::resign(&db, "maintenance", "daemon-b", 2)
            .await
            .unwrap()
    );
    let a = leader::acquire(&db, "maintenance", "daemon-a", ttl)
        .await
        .unwrap()
        .expect("a resignation hands over at the next try");
    assert_eq!(a.term, 1, "a fresh row after a resignation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_racing_for_a_lapsed_lease_get_one_leader() {
    let (_, db) = migrated().await;
    let short = Duration::from_millis(200);
    leader::acquire(&db, "maintenance", "gone", short)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for round in 0..5 {
        let contenders: Vec<_> = (0..8)
            .map(|i| {
                let db = db.clone();
                tokio::spawn(async move {
                    let holder = format!("daemon-{round}-{i}");
                    leader::acquire(&db, "maintenance", &holder, short)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut won = 0;
        for c in contenders {
            won += c.await.unwrap().is_some() as usize;
        }
        assert_eq!(won, 1, "round {round}: exactly one contender leads");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_wake_other_daemons_once_per_tick_and_idleness_wakes_no_one() {
    let (url, db) = migrated().await;
    // The listener is another daemon's: a pool and a connection of its own.
    let listener_db = Database::connect(&url).await.unwrap();
    let woken = wake::listen(&listener_db, wake::EVENTS).await.unwrap();
    let heard = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = {
        let (woken, heard) = (woken.clone(), heard.clone());
        tokio::spawn(async move {
            loop {
                woken.notified().await;
                heard.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let ticker = wake::Ticker::start(db.clone(), wake::EVENTS, wake::TICK);

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        heard.load(Ordering::SeqCst),
        0,
        "nothing committed, no one woken"
    );

    // 400 commits over about a second: one wake-up per tick at most.
    let start = Instant::now();
    for _ in 0..400 {
        ticker.committed();
        tokio::time::sleep(Duration::from_micros(2500)).await;
    }
    let elapsed = start.elapsed();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let n = heard.load(Ordering::SeqCst);
    let ticks = (elapsed.as_millis() / wake::TICK.as_millis()) as usize + 2;
    assert!(n >= 10, "the listener heard {n} wake-ups for 400 commits");
    assert!(
        n <= ticks,
        "{n} wake-ups in {ticks} ticks: more than one per tick"
    );

    // One more commit is heard within a few ticks.
    let before = heard.load(Ordering::SeqCst);
    let t = Instant::now();
    ticker.committed();
    while heard.load(Ordering::SeqCst) == before {
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "a commit's wake-up never came"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    counter.abort();
}
