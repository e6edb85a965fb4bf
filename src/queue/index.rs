//! In-memory indexes over the tasks, derived from them and kept in step by
//! `machine` (never journaled; rebuilt by replay):
//! ready sets per sight in claim order (on the shelves), delayed tasks by due time,
//! live leases by expiry, idempotency keys (`idempotency`), dependents,
//! handles, and the shelves every listing and count reads (`shelf`).
//!
//! Invariants:
//! 1. A task is in exactly one of `ready` or `delayed` iff it is `queued`.
//! 2. A task is in `leases` iff it is `claimed`, at its lease's expiry.
//! 3. `blocked[t]` counts t's upstream tasks that are not terminal; it
//!    exists only while t is `pending`.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use hashbrown::HashMap;
use jiff::Timestamp;

use super::idempotency::Idempotency;
use super::shelf::Shelves;
use super::task::{Attempt, Task, TaskId, TaskState};
use crate::store::Name;

/// Claim order inside one ready set: higher priority first, then older
/// (the task's creation order, `TaskTable::order`).
pub type ReadyKey = (Reverse<i32>, u64, TaskId);

/// When queued task `t` becomes ready, if that is after `now`.
pub(super) fn delayed_until(t: &Task, now: Timestamp) -> Option<Timestamp> {
    t.not_before.filter(|nb| *nb > now)
}

/// Where task `t` (created `order`-th) stands in its ready set.
pub(super) fn ready_key(t: &Task, order: u64) -> ReadyKey {
    (Reverse(t.spec.priority), order, t.id)
}

/// The indexes.
#[derive(Debug, Default)]
pub struct Index {
    /// Queued but not before the instant.
    pub(super) delayed: BTreeSet<(Timestamp, TaskId)>,
    /// Claimed, by lease expiry.
    pub(super) leases: BTreeSet<(Timestamp, TaskId)>,
    /// (namespace, requester key, idempotency key) → task.
    pub(super) idempotency: Idempotency,
    /// Upstream → the pending tasks waiting on it.
    pub(super) dependents: HashMap<TaskId, Vec<TaskId>>,
    /// Pending task → upstream tasks not yet terminal.
    pub(super) blocked: HashMap<TaskId, usize>,
    /// Worker handle → (task, attempt).
    pub(super) handles: HashMap<String, (TaskId, Attempt)>,
    /// Every task, by what decides who sees it and by state.
    pub(super) shelves: Shelves,
}

impl Index {
    /// Files queued task `t` (created `order`-th) as ready, or as delayed
    /// when its `not_before` is after `now`.
    pub fn file_queued(&mut self, t: &Task, order: u64, now: Timestamp) {
        match delayed_until(t, now) {
            Some(nb) => {
                self.delayed.insert((nb, t.id));
            }
            None => self.make_ready(t, order),
        }
    }

    /// Files queued task `t` (created `order`-th) as ready now.
    pub fn make_ready(&mut self, t: &Task, order: u64) {
        self.shelves.ready(t, ready_key(t, order));
    }

    /// Takes task `t` (created `order`-th) out of the ready and delayed
    /// sets.
    pub fn unfile_queued(&mut self, t: &Task, order: u64) {
        self.shelves.unready(t, ready_key(t, order));
        if let Some(nb) = t.not_before {
            self.delayed.remove(&(nb, t.id));
        }
    }

    /// Delayed tasks due at `now`, removed from the delayed set.
    pub fn take_due(&mut self, now: Timestamp) -> Vec<TaskId> {
        let mut due = Vec::new();
        while let Some(&(t, id)) = self.delayed.first() {
            if t > now {
                break;
            }
            self.delayed.pop_first();
            due.push(id);
        }
        due
    }

    /// The tasks on `queue` per state, as (state, count) pairs (every
    /// state, zeros included), summed over its shelves.
    pub fn counts_of(&self, queue: &Name) -> Vec<(TaskState, u64)> {
        let mut counts: Vec<(TaskState, u64)> = TaskState::ALL.iter().map(|s| (*s, 0)).collect();
        for v in self.shelves.all().filter(|v| v.sight.queue == *queue) {
            if let Some(c) = counts.iter_mut().find(|(s, _)| *s == v.state) {
                c.1 += v.len as u64;
            }
        }
        counts
    }
}
