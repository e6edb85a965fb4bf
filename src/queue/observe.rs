//! Watching the queue from outside it: an [`Observer`] (the daemon's
//! metrics) is told of every committed change and every journal sync,
//! after the fact and without a say in either. Replay at start tells it
//! nothing: it sees this run's changes only.

use std::time::Duration;

use super::event::Event;
use super::held::Op;
use super::machine::Transition;
use crate::store::log::SyncObserver;
use crate::store::{NounPath, VersionEntry};

/// Told of what the queue does, with owned data only (never the state):
/// `committed` comes under the queue's lock, so it must be quick; `held`
/// after the lock is let go; `synced` on the journal thread.
pub trait Observer: SyncObserver {
    /// `ev` was committed as journal record `seq` and applied, changing
    /// task states as `moved` says. It is not durable until
    /// [`SyncObserver::synced`] reports `seq`.
    fn committed(&self, seq: u64, ev: &Event, moved: &[Transition]);

    /// `op` held the queue's lock for `took`.
    fn held(&self, op: Op, took: Duration) {
        let _ = (op, took);
    }
}

/// The source of the event stream (`GET /v1/events`): told of committed
/// changes as an [`Observer`] by a queue that is this daemon's alone,
/// and of every daemon's changes by [`Stream::streamed`] on a queue that
/// several share, never both.
pub trait Stream: Observer {
    /// A durable change on a shared queue, in the database's order (the
    /// same on every daemon), with the id readers resume by on any of
    /// them.
    fn streamed(&self, id: u128, change: Streamed);
}

/// One change as the shared event stream carries it.
#[derive(Clone, Debug)]
pub enum Streamed {
    /// A task moved.
    Task(Transition),
    /// A shared noun's latest version was written or re-flagged (nouns
    /// in the database, `--objects-url`).
    Noun {
        /// The noun.
        path: NounPath,
        /// Its latest version, as the change left it.
        entry: Box<VersionEntry>,
    },
}
