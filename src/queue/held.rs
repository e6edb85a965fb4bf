//! How long each operation holds the queue's lock: every holder names
//! its [`Op`], and the guard ([`Held`]) tells the observers how long it
//! held the lock once it has let go of it (`/metrics` exports it as a
//! histogram per operation, so a reader that stalls writers shows).

use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use super::{Inner, State};

/// What holds the lock: a closed set, so each is one label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Provisioning or reading a queue's config.
    Queue,
    /// Enqueueing, one or a batch.
    Enqueue,
    /// A claim, next or by id.
    Claim,
    /// A heartbeat.
    Heartbeat,
    /// A release (also of a claim never handed over).
    Release,
    /// A submit.
    Submit,
    /// A park.
    Park,
    /// A resume.
    Resume,
    /// A split.
    Split,
    /// A cancel.
    Cancel,
    /// A retry.
    Retry,
    /// A bulk retry or cancel.
    Bulk,
    /// Staging a part.
    Stage,
    /// The sweeper's expiries and due retries.
    Sweep,
    /// A query: a task, a page, counts, the status summary.
    Query,
    /// A look at the state by a caller outside the queue.
    Peek,
    /// A fold taking its copy of the tasks.
    Fold,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 17] = [
        Op::Queue,
        Op::Enqueue,
        Op::Claim,
        Op::Heartbeat,
        Op::Release,
        Op::Submit,
        Op::Park,
        Op::Resume,
        Op::Split,
        Op::Cancel,
        Op::Retry,
        Op::Bulk,
        Op::Stage,
        Op::Sweep,
        Op::Query,
        Op::Peek,
        Op::Fold,
    ];

    /// Its label.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Queue => "queue",
            Op::Enqueue => "enqueue",
            Op::Claim => "claim",
            Op::Heartbeat => "heartbeat",
            Op::Release => "release",
            Op::Submit => "submit",
            Op::Park => "park",
            Op::Resume => "resume",
            Op::Split => "split",
            Op::Cancel => "cancel",
            Op::Retry => "retry",
            Op::Bulk => "bulk",
            Op::Stage => "stage",
            Op::Sweep => "sweep",
            Op::Query => "query",
            Op::Peek => "peek",
            Op::Fold => "fold",
        }
    }
}

/// The state, locked by `op`; dropping it unlocks, then reports the time
/// held.
pub struct Held<'a> {
    guard: Option<MutexGuard<'a, State>>,
    inner: &'a Inner,
    op: Op,
    since: Instant,
}

impl<'a> Held<'a> {
    /// Locks `inner`'s state for `op` (also after a panic elsewhere: every
    /// change is checked before it is journaled and applied, so a
    /// panicking holder leaves the state as the journal has it).
    pub(super) fn lock(inner: &'a Inner, op: Op) -> Held<'a> {
        let guard = inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Held {
            guard: Some(guard),
            inner,
            op,
            since: Instant::now(),
        }
    }
}

impl std::ops::Deref for Held<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let took: Duration = self.since.elapsed();
        for o in self.inner.observers.get().into_iter().flatten() {
            o.held(self.op, took);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Op;

    #[test]
    fn every_op_is_listed_at_its_own_index_with_its_own_label() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(*op as usize, i, "{op:?}");
        }
        let labels: std::collections::HashSet<_> = Op::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(labels.len(), Op::ALL.len());
    }
}
