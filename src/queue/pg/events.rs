//! The event table read as a stream that every daemon sees whole and in
//! one order: rows are written by the transaction that makes the change,
//! and read by `(xid, id)` only below the oldest transaction still
//! running (`pg_snapshot_xmin`).
//!
//! Why not by `id` alone: a `bigserial` is drawn when a row is inserted,
//! not when it commits, so a reader that has seen id 7 can later find id
//! 5 committed (the groundwork's tailer by id missed 7–11% of events).
//! Every transaction whose xid is below the horizon has ended, and every
//! later one gets a larger xid, so a cursor `(xid, id)` that only moves
//! past what is below the horizon never skips a row. The cost: one
//! long-running writing transaction anywhere holds the stream back.

use std::fmt;
use std::str::FromStr;

use super::tasks::{SIGHT, sight};
use crate::database::{Database, Error};
use crate::queue::Sight;

/// A position in the stream: the last event read, the same on every
/// daemon and across restarts; as text, `<xid>.<id>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cursor {
    /// The writing transaction's id (`xid8`).
    pub xid: u64,
    /// The row's id within the table.
    pub id: i64,
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.xid, self.id)
    }
}

/// A string that is not a stream position.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not an event position (two numbers joined by a dot)")]
pub struct BadCursor(pub String);

impl FromStr for Cursor {
    type Err = BadCursor;

    fn from_str(s: &str) -> Result<Cursor, BadCursor> {
        let bad = || BadCursor(s.chars().take(40).collect());
        let (xid, id) = s.split_once('.').ok_or_else(bad)?;
        let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
        if !digits(xid) || !digits(id) {
            return Err(bad());
        }
        Ok(Cursor {
            xid: xid.parse().map_err(|_| bad())?,
            id: id.parse().map_err(|_| bad())?,
        })
    }
}

/// One event as the table holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRow {
    /// Where it is in the stream (readers know it by its enciphered
    /// [`EventIds::id`](super::event_ids::EventIds::id)).
    pub cursor: Cursor,
    /// The task it is about, if any.
    pub task_id: Option<i64>,
    /// The state it left.
    pub from_state: Option<String>,
    /// The state it entered.
    pub to_state: Option<String>,
    /// The task's attempt when it was made.
    pub attempt: Option<i32>,
    /// What readers may see of the task (its queue, kind, namespace and
    /// envelope, which never change), when the task is still there.
    pub sight: Option<Sight>,
    /// A noun event's facts (`{"noun": {namespace, store, key}, "entry":
    /// …}`, JSON), on a row about no task.
    pub facts: Option<String>,
}

/// Where a reader that starts now begins: before every transaction that
/// has not ended, remembering which of the later ones had already ended
/// (`pg_current_snapshot`), so that it reads every change that commits
/// from now on and none from before, even while an older transaction
/// anywhere on the cluster holds the horizon back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    /// The position to read after.
    pub cursor: Cursor,
    /// The snapshot whose visible transactions are "before".
    snapshot: String,
}

/// The start of a reader from now ([`Start`]).
pub async fn now(db: &Database) -> Result<Start, Error> {
    let client = db.client().await?;
    let row = client
        .query_one(
            "SELECT pg_snapshot_xmin(s)::text::bigint, s::text \
             FROM (SELECT pg_current_snapshot() AS s) x",
            &[],
        )
        .await?;
    let xmin: i64 = row.get(0);
    Ok(Start {
        cursor: Cursor {
            xid: (xmin as u64).saturating_sub(1),
            id: i64::MAX,
        },
        snapshot: row.get(1),
    })
}

/// Up to `limit` events after `after`, in stream order, from
/// transactions that have all ended; an empty answer means nothing new
/// is readable yet (ask again after a wake-up or a short poll). With
/// `start`, events its snapshot already saw are left out.
pub async fn after(
    db: &Database,
    after: Cursor,
    start: Option<&Start>,
    limit: i64,
) -> Result<Vec<EventRow>, Error> {
    let client = db.client().await?;
    let xid = after.xid as i64;
    let snapshot = start.map(|s| s.snapshot.as_str());
    let rows = client
        .query(
            &client
                .prepare_cached(&format!(
                    "SELECT e.xid::text::bigint, e.id, e.task_id, e.from_state, e.to_state, e.attempt, e.facts::text, {SIGHT} \
                         FROM events e LEFT JOIN tasks t ON t.id = e.task_id \
                         WHERE (e.xid, e.id) > ($1::bigint::text::xid8, $2) \
                           AND e.xid < pg_snapshot_xmin(pg_current_snapshot()) \
                           AND ($4::text IS NULL \
                                OR NOT pg_visible_in_snapshot(e.xid, $4::text::pg_snapshot)) \
                         ORDER BY e.xid, e.id LIMIT $3"
                ))
                .await?,
            &[&xid, &after.id, &limit, &snapshot],
        )
        .await?;
    rows.iter().map(event_row).collect()
}

/// Whether the event at `at` is still in the table.
pub async fn kept(db: &Database, at: Cursor) -> Result<bool, Error> {
    let client = db.client().await?;
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM events WHERE xid = $1::bigint::text::xid8 AND id = $2)",
            &[&(at.xid as i64), &at.id],
        )
        .await?;
    Ok(row.get(0))
}

/// Deletes the events older than `keep`: readers resume only within
/// their hub's window, so older rows are read by no one. Safe from two
/// leaders at once. Answers how many.
pub async fn prune(db: &Database, keep: std::time::Duration) -> Result<u64, Error> {
    let client = db.client().await?;
    let statement = client.prepare_cached(PRUNE).await?;
    let keep = keep.as_secs_f64();
    let mut pruned = 0;
    loop {
        let n = client.execute(&statement, &[&keep, &PRUNE_BATCH]).await?;
        pruned += n;
        if n < PRUNE_BATCH as u64 {
            return Ok(pruned);
        }
    }
}

/// Rows one pruning statement deletes at most.
const PRUNE_BATCH: i64 = 10_000;

/// Deletes, of the oldest rows along the primary key, those older than
/// `$1` seconds (no index on their time: rows are written in transaction
/// order, so the old ones come first).
const PRUNE: &str = "\
DELETE FROM events e USING (SELECT xid, id FROM events ORDER BY xid, id LIMIT $2) old \
WHERE e.xid = old.xid AND e.id = old.id AND e.at < now() - make_interval(secs => $1)";

fn event_row(r: &tokio_postgres::Row) -> Result<EventRow, Error> {
    let sight = match r.get::<_, Option<&str>>(7) {
        Some(_) => Some(sight(r, 7)?),
        None => None,
    };
    Ok(EventRow {
        cursor: Cursor {
            xid: r.get::<_, i64>(0) as u64,
            id: r.get(1),
        },
        task_id: r.get(2),
        from_state: r.get(3),
        to_state: r.get(4),
        attempt: r.get(5),
        facts: r.get(6),
        sight,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_writes_and_refuses_anything_else() {
        let c = Cursor {
            xid: 7_000_000_001,
            id: 42,
        };
        assert_eq!(c.to_string().parse::<Cursor>().unwrap(), c);
        for bad in [
            "",
            "1",
            "1.",
            ".1",
            "1.2.3",
            "-1.2",
            "1.x",
            "99999999999999999999.1",
        ] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad:?}");
        }
    }
}
