//! Watching the queue from outside it: an [`Observer`] (the daemon's
//! metrics) is told of every committed change and every journal sync,
//! after the fact and without a say in either. Replay at start tells it
//! nothing: it sees this run's changes only.

use std::time::Duration;

use super::event::Event;
use super::machine::{State, Transition};

/// Told of what the queue does; calls come under the queue's lock (or on
/// the journal thread), so they must be quick.
pub trait Observer: Send + Sync + std::fmt::Debug {
    /// `ev` was committed as journal record `seq` and applied, changing
    /// task states as `moved` says; `st` is the state after. It is not
    /// durable until [`Observer::synced`] reports `seq`.
    fn committed(&self, seq: u64, ev: &Event, moved: &[Transition], st: &State);
    /// The journal thread wrote and synced `records` records in `took`;
    /// every record up to `durable` is now on disk. Called before anyone
    /// waiting for them is told, so what an observer publishes precedes
    /// the acknowledgements.
    fn synced(&self, durable: u64, records: u64, took: Duration);
}
