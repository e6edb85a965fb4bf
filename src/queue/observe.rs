//! Watching the queue from outside it: an [`Observer`] (the daemon's
//! metrics) is told of every committed change and every journal sync,
//! after the fact and without a say in either. Replay at start tells it
//! nothing: it sees this run's changes only.

use super::event::Event;
use super::machine::{State, Transition};
use crate::store::log::SyncObserver;

/// Told of what the queue does; calls come under the queue's lock (or on
/// the journal thread, as a [`SyncObserver`]), so they must be quick.
pub trait Observer: SyncObserver {
    /// `ev` was committed as journal record `seq` and applied, changing
    /// task states as `moved` says; `st` is the state after. It is not
    /// durable until [`Observer::synced`] reports `seq`.
    fn committed(&self, seq: u64, ev: &Event, moved: &[Transition], st: &State);
}
