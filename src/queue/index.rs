//! In-memory indexes over the tasks, derived from them and kept in step by
//! `machine` (never journaled; rebuilt by replay):
//! ready sets per (queue, kind) in claim order, delayed tasks by due time,
//! live leases by expiry, idempotency keys (`idempotency`), dependents,
//! handles, and counts.
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
use super::task::{Attempt, TaskId, TaskState};
use crate::store::Name;

/// Claim order inside one ready set: higher priority first, then older
/// (the task's creation order, `TaskTable::order`).
pub type ReadyKey = (Reverse<i32>, u64, TaskId);

/// The indexes.
#[derive(Debug, Default)]
pub struct Index {
    /// Claimable now, per (queue, kind).
    pub ready: HashMap<(Name, Name), BTreeSet<ReadyKey>>,
    /// Queued but not before the instant.
    pub delayed: BTreeSet<(Timestamp, TaskId)>,
    /// Claimed, by lease expiry.
    pub leases: BTreeSet<(Timestamp, TaskId)>,
    /// (namespace, requester key, idempotency key) → task.
    pub idempotency: Idempotency,
    /// Upstream → the pending tasks waiting on it.
    pub dependents: HashMap<TaskId, Vec<TaskId>>,
    /// Pending task → upstream tasks not yet terminal.
    pub blocked: HashMap<TaskId, usize>,
    /// Worker handle → (task, attempt).
    pub handles: HashMap<String, (TaskId, Attempt)>,
    /// Tasks per (queue, state).
    pub counts: HashMap<Name, [u64; 8]>,
}

fn state_slot(s: TaskState) -> usize {
    TaskState::ALL
        .iter()
        .position(|x| *x == s)
        .expect("every state is listed")
}

impl Index {
    /// Counts a task entering `state` on `queue`.
    pub fn count_in(&mut self, queue: &Name, state: TaskState) {
        self.counts.entry(queue.clone()).or_default()[state_slot(state)] += 1;
    }

    /// Counts a task leaving `state` on `queue`.
    pub fn count_out(&mut self, queue: &Name, state: TaskState) {
        if let Some(c) = self.counts.get_mut(queue) {
            let slot = &mut c[state_slot(state)];
            *slot = slot.saturating_sub(1);
        }
    }

    /// Files a queued task (created `order`-th) as ready or delayed.
    pub fn file_queued(
        &mut self,
        queue: &Name,
        kind: &Name,
        priority: i32,
        (order, id): (u64, TaskId),
        not_before: Option<Timestamp>,
        now: Timestamp,
    ) {
        match not_before {
            Some(t) if t > now => {
                self.delayed.insert((t, id));
            }
            _ => {
                self.ready
                    .entry((queue.clone(), kind.clone()))
                    .or_default()
                    .insert((Reverse(priority), order, id));
            }
        }
    }

    /// Removes a task (created `order`-th) from the ready and delayed sets.
    pub fn unfile_queued(
        &mut self,
        queue: &Name,
        kind: &Name,
        priority: i32,
        (order, id): (u64, TaskId),
        not_before: Option<Timestamp>,
    ) {
        if let Some(set) = self.ready.get_mut(&(queue.clone(), kind.clone())) {
            set.remove(&(Reverse(priority), order, id));
        }
        if let Some(t) = not_before {
            self.delayed.remove(&(t, id));
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

    /// The states counted per queue, as (state, count) pairs.
    pub fn counts_of(&self, queue: &Name) -> Vec<(TaskState, u64)> {
        let c = self.counts.get(queue).copied().unwrap_or_default();
        TaskState::ALL.iter().copied().zip(c).collect()
    }
}
