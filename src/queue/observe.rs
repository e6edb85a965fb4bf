//! Watching the queue from outside it: an [`Observer`] (the daemon's
//! metrics) is told of every committed change and every journal sync,
//! after the fact and without a say in either. Replay at start tells it
//! nothing: it sees this run's changes only.

use std::time::Duration;

use super::event::Event;
use super::machine::State;
use super::task::{TaskId, TaskState};

/// Told of what the queue does; calls come under the queue's lock (or on
/// the journal thread), so they must be quick.
pub trait Observer: Send + Sync + std::fmt::Debug {
    /// `ev` was committed as journal record `seq` and applied; `before` is
    /// the state its task had before it (`None` for a new task or an
    /// event about no one task), `st` the state after. It is not durable
    /// until [`Observer::synced`] reports `seq`.
    fn committed(&self, seq: u64, ev: &Event, before: Option<TaskState>, st: &State);
    /// The journal thread wrote and synced `records` records in `took`;
    /// every record up to `durable` is now on disk. Called before anyone
    /// waiting for them is told, so what an observer publishes precedes
    /// the acknowledgements.
    fn synced(&self, durable: u64, records: u64, took: Duration);
}

impl Event {
    /// The one existing task this event changes, if it is about one.
    pub fn task_id(&self) -> Option<TaskId> {
        match self {
            Event::QueueSet { .. } | Event::Enqueued { .. } => None,
            Event::Claimed { id, .. }
            | Event::Heartbeat { id, .. }
            | Event::Released { id, .. }
            | Event::Submitted { id, .. }
            | Event::Parked { id, .. }
            | Event::Resumed { id, .. }
            | Event::Split { id, .. }
            | Event::Cancelled { id, .. }
            | Event::Staged { id, .. } => Some(*id),
        }
    }
}
