//! The tailer against a real server: a reader resuming from an event
//! this daemon has not read yet waits for it, within a bound.

use std::time::Instant;

use super::*;
use crate::database::schema;
use crate::queue::pg::cluster;
use crate::queue::{Event, Observer, Op};
use crate::store::log::SyncObserver;

/// A stream that takes everything and keeps nothing.
#[derive(Debug)]
struct Nowhere;

impl SyncObserver for Nowhere {
    fn synced(&self, _: u64, _: u64, _: Duration) {}
}

impl Observer for Nowhere {
    fn committed(&self, _: u64, _: &Event, _: &[Transition]) {}
    fn held(&self, _: Op, _: Duration) {}
}

impl Stream for Nowhere {
    fn streamed(&self, _: u128, _: Streamed) {}
}

/// An event row written now; the id readers know it by.
async fn write(client: &tokio_postgres::Client, ids: &EventIds) -> u128 {
    let row = client
        .query_one(
            "INSERT INTO events (to_state) VALUES ('queued') RETURNING xid::text::bigint, id",
            &[],
        )
        .await
        .unwrap();
    ids.id(Cursor {
        xid: row.get::<_, i64>(0) as u64,
        id: row.get(1),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_waits_for_the_tail_to_reach_an_event_it_has_not_read() {
    let url = cluster::fresh_database().await;
    let db = Database::connect(&url).await.unwrap();
    schema::migrate(&db).await.unwrap();
    let tail = Tailer::start(db.clone(), None, Arc::new(Nowhere));
    let mut read = tail.read.clone();
    read.wait_for(Option::is_some).await.unwrap();
    let writer = cluster::connect(&url).await;
    let ids = EventIds::load(&db).await.unwrap();

    // A transaction that began before the event holds the stream back.
    let holder = cluster::connect(&url).await;
    holder
        .batch_execute("BEGIN; SELECT pg_current_xact_id()")
        .await
        .unwrap();
    let uid = write(&writer, &ids).await;
    let waiting = tokio::spawn({
        let tail = tail.clone();
        async move { tail.reach(uid).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!waiting.is_finished(), "the tail has not read it yet");
    holder.batch_execute("COMMIT").await.unwrap();
    assert!(
        waiting.await.unwrap(),
        "reached once the stream moved past it"
    );
    assert!(tail.reach(uid).await.unwrap(), "and at once from then on");

    // An event the tail does not reach in time, and one never written.
    holder
        .batch_execute("BEGIN; SELECT pg_current_xact_id()")
        .await
        .unwrap();
    let late = write(&writer, &ids).await;
    let began = Instant::now();
    assert!(!tail.reach(late).await.unwrap());
    assert!(began.elapsed() >= REACH_WITHIN);
    holder.batch_execute("COMMIT").await.unwrap();
    assert!(!tail.reach(u128::MAX).await.unwrap(), "no such event");
}
