//! Every daemon's events, read from the shared table into this daemon's
//! event hub ([`Stream`]): `GET /v1/events` on any daemon sees every
//! change in one order, and a reader's `Last-Event-ID` from one daemon
//! resumes on another (the id is the row's place, enciphered:
//! [`EventIds`]).
//!
//! The tailer reads after its cursor ([`events::after`]) when this daemon
//! commits, when another daemon's tick is heard, and every
//! [`LOOK_EVERY`] besides; never more often than once per
//! [`wake::TICK`], so a busy daemon reads its events in batches.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{Notify, OnceCell, watch};

use super::event_ids::EventIds;
use super::events::{self, Cursor, EventRow};
use super::wake;
use crate::database::{Database, Error};
use crate::queue::machine::Transition;
use crate::queue::{Attempt, Stream, Streamed, TaskId, TaskState};
use crate::store::{NounPath, VersionEntry};

/// How often the tailer reads without a wake-up.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// Events read per statement.
const BATCH: i64 = 512;

/// How long a reader resuming from another daemon's event waits for this
/// daemon's tailer to reach it.
const REACH_WITHIN: Duration = Duration::from_secs(3);

/// A running tailer: cheap to clone; it stops when every clone is gone.
#[derive(Clone, Debug)]
pub struct Tailer {
    db: Database,
    ids: Ids,
    wake: Arc<Notify>,
    read: watch::Receiver<Option<Cursor>>,
}

impl Tailer {
    /// Streams to `stream` every event committed from now on (by any
    /// daemon), waking on this daemon's commits ([`Tailer::committed`])
    /// and on `heard` (other daemons' ticks).
    pub fn start(db: Database, heard: Option<Arc<Notify>>, stream: Arc<dyn Stream>) -> Tailer {
        let wake = Arc::new(Notify::new());
        let (at, read) = watch::channel(None);
        let ids = Ids::default();
        let tail = (db.clone(), ids.clone());
        tokio::spawn(run(tail, Arc::downgrade(&wake), heard, stream, at));
        Tailer {
            db,
            ids,
            wake,
            read,
        }
    }

    /// This daemon committed a change: read it now.
    pub fn committed(&self) {
        self.wake.notify_one();
    }

    /// Waits until the stream has been read past the event readers know
    /// as `id` (one another daemon sent); answers false when no such
    /// event is in the table or the tailer does not reach it in time.
    pub async fn reach(&self, id: u128) -> Result<bool, Error> {
        let at = key(&self.ids, &self.db).await?.place(id);
        if !events::kept(&self.db, at).await? {
            return Ok(false);
        }
        self.wake.notify_one();
        let mut read = self.read.clone();
        let reached = read.wait_for(|c| c.is_some_and(|c| c >= at));
        Ok(matches!(
            tokio::time::timeout(REACH_WITHIN, reached).await,
            Ok(Ok(_))
        ))
    }
}

/// The shared key of event ids, read once it is first needed (and again
/// after a failed read).
type Ids = Arc<OnceCell<EventIds>>;

async fn key<'a>(ids: &'a Ids, db: &Database) -> Result<&'a EventIds, Error> {
    ids.get_or_try_init(|| EventIds::load(db)).await
}

async fn run(
    (db, ids): (Database, Ids),
    wake: Weak<Notify>,
    heard: Option<Arc<Notify>>,
    stream: Arc<dyn Stream>,
    at: watch::Sender<Option<Cursor>>,
) {
    let mut start = None;
    let mut failing = false;
    loop {
        let Some(mine) = wake.upgrade() else { return };
        let theirs = heard.as_ref().map(|n| Box::pin(n.notified()));
        let mut theirs = theirs.map(|mut n| {
            n.as_mut().enable();
            n
        });
        match read(&db, &ids, &mut start, &*stream).await {
            Ok(cursor) => {
                if failing {
                    tracing::info!("reading the shared event stream again");
                    failing = false;
                }
                at.send_replace(Some(cursor));
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "cannot read the shared event stream; retrying");
                    failing = true;
                }
            }
        }
        tokio::time::sleep(wake::TICK).await;
        let theirs = async {
            match theirs.as_mut() {
                Some(n) => n.as_mut().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = mine.notified() => {}
            () = theirs => {}
            () = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

/// Reads everything readable after the cursor into `stream`; answers
/// the cursor after it. The first read starts at now.
async fn read(
    db: &Database,
    ids: &Ids,
    start: &mut Option<events::Start>,
    stream: &dyn Stream,
) -> Result<Cursor, Error> {
    let ids = key(ids, db).await?;
    let begun = match start {
        Some(s) => s,
        None => start.insert(events::now(db).await?),
    };
    loop {
        let rows = events::after(db, begun.cursor, Some(begun), BATCH).await?;
        let Some(last) = rows.last().map(|r| r.cursor) else {
            return Ok(begun.cursor);
        };
        let full = rows.len() as i64 == BATCH;
        for row in rows {
            let id = ids.id(row.cursor);
            if let Some(change) = change(row) {
                stream.streamed(id, change);
            }
        }
        begun.cursor = last;
        if !full {
            return Ok(last);
        }
    }
}

/// An event row as the hub takes it: a task's move, or a shared noun's
/// change; `None` for a row about no task still in the table.
fn change(row: EventRow) -> Option<Streamed> {
    if row.task_id.is_none()
        && let Some(facts) = &row.facts
    {
        return match serde_json::from_str::<NounFacts>(facts) {
            Ok(f) => Some(Streamed::Noun {
                path: f.noun,
                entry: Box::new(f.entry),
            }),
            Err(e) => {
                tracing::warn!(error = %e, "a noun event row cannot be read; not streamed");
                None
            }
        };
    }
    let id = TaskId(row.task_id? as u64);
    let to: TaskState = match row.to_state?.parse() {
        Ok(s) => s,
        Err(_) => {
            tracing::warn!(task = %id, "an event row names an unknown state; not streamed");
            return None;
        }
    };
    let t = Transition {
        id,
        from: row.from_state.and_then(|f| f.parse().ok()),
        to,
        attempt: Attempt(row.attempt.unwrap_or(0) as u32),
        sight: row.sight?,
    };
    Some(Streamed::Task(t))
}

/// A noun event row's facts, as `database::nouns` writes them.
#[derive(serde::Deserialize)]
struct NounFacts {
    noun: NounPath,
    entry: VersionEntry,
}

#[cfg(test)]
mod tests;
