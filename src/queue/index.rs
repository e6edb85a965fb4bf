//! In-memory indexes over the tasks, derived from them and kept in step by
//! `machine` (never journaled; rebuilt by replay, or all at once from a
//! snapshot's tasks by `State::restore`):
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
use std::collections::{BTreeMap, BTreeSet};

use hashbrown::HashMap;
use jiff::Timestamp;

use super::idempotency::Idempotency;
use super::machine::{SplitLimits, State};
use super::names::Names;
use super::shelf::Shelves;
use super::spec::QueueConfig;
use super::table::TaskTable;
use super::task::{Attempt, Task, TaskId, TaskState};
use crate::store::Name;

/// Claim order inside one ready set: higher priority first, then older
/// (the task's position in creation order, `TaskTable::position`, which
/// also finds the task: `TaskTable::at`).
pub type ReadyKey = (Reverse<i32>, u32);

/// When queued task `t` becomes ready, if that is after `now`.
pub(super) fn delayed_until(t: &Task, now: Timestamp) -> Option<Timestamp> {
    t.not_before.filter(|nb| *nb > now)
}

/// Where task `t` (at `pos` in creation order) stands in its ready set.
pub(super) fn ready_key(t: &Task, pos: u32) -> ReadyKey {
    (Reverse(t.spec.traits.priority), pos)
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
    /// Files queued task `t` (at `pos` in creation order) as ready, or as delayed
    /// when its `not_before` is after `now`.
    pub fn file_queued(&mut self, t: &Task, pos: u32, now: Timestamp) {
        match delayed_until(t, now) {
            Some(nb) => {
                self.delayed.insert((nb, t.id));
            }
            None => self.make_ready(t, pos),
        }
    }

    /// Files queued task `t` (at `pos` in creation order) as ready now.
    pub fn make_ready(&mut self, t: &Task, pos: u32) {
        self.shelves.ready(t, ready_key(t, pos));
    }

    /// Takes task `t` (at `pos` in creation order) out of the ready and delayed
    /// sets.
    pub fn unfile_queued(&mut self, t: &Task, pos: u32) {
        self.shelves.unready(t, ready_key(t, pos));
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

impl State {
    /// Rebuilds a state from a snapshot's parts, deriving every index;
    /// `names` holds the names the tasks share (see [`Names`]).
    pub fn restore(
        queues: BTreeMap<Name, QueueConfig>,
        tasks: TaskTable,
        names: Names,
        limits: SplitLimits,
        now: Timestamp,
    ) -> State {
        let mut index = Index::default();
        for t in tasks.values() {
            let (id, s) = (&t.id, &t.spec);
            match t.state {
                TaskState::Queued => {
                    if let Some(nb) = delayed_until(t, now) {
                        index.delayed.insert((nb, *id));
                    }
                }
                TaskState::Claimed => {
                    if let Some(l) = &t.lease {
                        index.leases.insert((l.expires_at, *id));
                    }
                }
                TaskState::Pending => {
                    let open: Vec<TaskId> = s
                        .depends_on
                        .iter()
                        .filter(|u| tasks.get(u).is_some_and(|u| !u.state.is_terminal()))
                        .copied()
                        .collect();
                    for u in &open {
                        index.dependents.entry(*u).or_default().push(*id);
                    }
                    index.blocked.insert(*id, open.len());
                }
                _ => {}
            }
            for (i, h) in t.handles.iter().enumerate() {
                index
                    .handles
                    .insert(h.clone(), (*id, Attempt(i as u32 + 1)));
            }
            index.idempotency.insert(&tasks, *id);
        }
        index.shelves = Shelves::build(tasks.values().map(|t| {
            let pos = tasks.position(&t.id).expect("known");
            let ready = (t.state == TaskState::Queued && delayed_until(t, now).is_none())
                .then(|| ready_key(t, pos));
            (t, pos, ready)
        }));
        State {
            queues,
            tasks,
            index,
            limits,
            transitions: None,
            names,
        }
    }
}
