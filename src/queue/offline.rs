//! The journal queue read whole, outside serving: what `tessera fsck`,
//! `tessera recover` and the start's audits see of every task. They get
//! a [`Walk`] over the tasks, never the queue's in-memory state.

use super::Error;
use super::machine::{SplitLimits, State};
use super::recover::{self, Finding, OnFinding, Recovery};
use super::snapshot::Image;
use super::{Task, TaskSpec};
use crate::store::Store;

/// Every task as the journal has it, read once, in creation order.
#[derive(Clone, Copy)]
pub struct Walk<'a> {
    state: &'a State,
}

impl<'a> Walk<'a> {
    pub(super) fn of(state: &'a State) -> Walk<'a> {
        Walk { state }
    }

    /// Every task, in creation order.
    pub fn tasks(self) -> impl Iterator<Item = &'a Task> {
        self.state.all_tasks()
    }

    /// How many tasks.
    pub fn count(self) -> usize {
        self.state.task_count()
    }

    /// The ctx-dir template of a task with this spec.
    pub fn template_of(self, spec: &TaskSpec) -> String {
        self.state.template_of(spec)
    }
}

/// The journal replayed without a daemon: the tasks it holds, what the
/// replay did, and the finding that stopped it when `on` did not refuse.
pub struct Replayed {
    state: State,
    next: u64,
    /// What the replay read and repaired.
    pub recovery: Recovery,
    /// The damage that stopped the replay, if any.
    pub finding: Option<Finding>,
}

/// Replays the journal under `store` ([`OnFinding`] says what damage does).
pub fn replay(store: &Store, limits: SplitLimits, on: OnFinding) -> Result<Replayed, Error> {
    let (state, next, recovery, finding) = recover::replay(store, limits, on)?;
    Ok(Replayed {
        state,
        next,
        recovery,
        finding,
    })
}

impl Replayed {
    /// The tasks it holds.
    pub fn walk(&self) -> Walk<'_> {
        Walk::of(&self.state)
    }

    /// Writes a snapshot of what the replay kept and deletes the segments
    /// it covers (`tessera recover --salvage`): how many it deleted.
    pub fn compact(&self, store: &Store) -> Result<usize, Error> {
        recover::compact(store, &Image::of(&self.state), self.next, &|| false)
    }
}
