//! The state machine: `State::apply` moves tasks between states for one
//! event, with no I/O, no clock and no randomness, so the live path and
//! replay reach the same state. Derived transitions happen here too: a
//! pending task is queued when its last upstream ends (in any terminal
//! state, unless it says `on_upstream_failure: cancel` and that upstream
//! failed or was cancelled: then it is cancelled), and a waiting parent is
//! queued when its last child ends.
//!
//! `apply` assumes its event was produced by `decide` (or read back from
//! the journal, where `decide` produced it): it does not re-check rules.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::event::{Event, NewTask};
use super::index::Index;
use super::names::Names;
use super::shelf::Sight;
use super::spec::{QueueConfig, UpstreamFailure};
use super::table::TaskTable;
use super::task::{Attempt, Task, TaskId, TaskState};
use crate::store::Name;

/// Reason recorded when expiries or releases use up a task's attempts.
pub const ATTEMPTS_EXHAUSTED: &str = "attempts_exhausted";

/// The reason of a task cancelled because an upstream ended badly
/// (`on_upstream_failure: cancel`).
fn upstream_ended(upstream: TaskId, how: TaskState) -> String {
    format!("upstream {upstream} {}", how.as_str())
}

/// Bounds on splits.
#[derive(Clone, Copy, Debug)]
pub struct SplitLimits {
    /// Deepest child level (top-level tasks are depth 0).
    pub max_depth: u32,
    /// Most children one task may have.
    pub max_children: usize,
}

/// Everything the queue knows: queues, tasks, indexes.
#[derive(Debug)]
pub struct State {
    /// Provisioned queues.
    pub(super) queues: BTreeMap<Name, QueueConfig>,
    /// Every task, in creation order, by id.
    pub(super) tasks: TaskTable,
    /// Derived indexes.
    pub(super) index: Index,
    /// Split bounds.
    pub(super) limits: SplitLimits,
    /// The transitions of the change being applied, when recorded (see
    /// [`State::apply_recorded`]).
    pub(super) transitions: Option<Vec<Transition>>,
    /// The names tasks share.
    pub(super) names: Names,
}

/// One task's change of state, owned: what an observer needs of the task
/// comes with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The task.
    pub id: TaskId,
    /// Its state before (`None`: it is new).
    pub from: Option<TaskState>,
    /// Its state now.
    pub to: TaskState,
    /// Its attempt now.
    pub attempt: Attempt,
    /// Its queue, kind, namespace and envelope.
    pub sight: Sight,
}

impl State {
    /// An empty state.
    pub fn new(limits: SplitLimits) -> State {
        State {
            queues: BTreeMap::new(),
            tasks: TaskTable::default(),
            index: Index::default(),
            limits,
            transitions: None,
            names: Names::default(),
        }
    }

    /// [`State::apply`], and every task state change it made (the task
    /// the event names, and any it moved along: dependents released or
    /// cancelled, a parent whose children ended, new tasks).
    pub fn apply_recorded(&mut self, ev: &Event) -> Vec<Transition> {
        self.transitions = Some(Vec::new());
        self.apply(ev);
        self.transitions.take().unwrap_or_default()
    }

    /// Every task, in creation order (offline tools and start-time audits).
    pub fn all_tasks(&self) -> impl Iterator<Item = &Task> {
        self.tasks.values()
    }

    /// How many tasks.
    pub fn task_count(&self) -> usize {
        self.tasks.len()
    }

    /// Applies one event.
    pub fn apply(&mut self, ev: &Event) {
        match ev {
            Event::QueueSet { config } => {
                self.queues.insert(config.name.clone(), config.clone());
            }
            Event::Enqueued { task, at } => self.insert((**task).clone(), None, *at),
            Event::Claimed { id, lease, at } => {
                self.leave(*id);
                let mut held = Box::new(lease.clone());
                self.names.share(&mut held.holder);
                let t = self.task_mut(*id);
                t.attempt = lease.attempt;
                t.lease = Some(held);
                for sha in std::mem::take(&mut t.staged).into_values() {
                    if !t.dropped.contains(&sha) {
                        t.dropped.push(sha);
                    }
                }
                t.handles.push(lease.handle.clone());
                t.park = None;
                t.updated_at = *at;
                self.index.leases.insert((lease.expires_at, *id));
                self.index
                    .handles
                    .insert(lease.handle.clone(), (*id, lease.attempt));
                self.enter(*id, TaskState::Claimed, *at);
            }
            Event::Heartbeat { id, expires_at } => {
                let t = self.task_mut(*id);
                let lease = t.lease.as_mut().expect("heartbeat on a claimed task");
                let old = std::mem::replace(&mut lease.expires_at, *expires_at);
                self.index.leases.remove(&(old, *id));
                self.index.leases.insert((*expires_at, *id));
            }
            Event::Released {
                id,
                attempt,
                expired,
                at,
            } => {
                self.leave(*id);
                match self.next_attempt(&self.tasks[id], *attempt, *at) {
                    None => {
                        self.task_mut(*id).reason = Some(ATTEMPTS_EXHAUSTED.into());
                        self.enter(*id, TaskState::Failed, *at);
                    }
                    Some(after_backoff) => {
                        let t = self.task_mut(*id);
                        t.not_before = expired.then_some(after_backoff);
                        self.enter(*id, TaskState::Queued, *at);
                    }
                }
            }
            Event::Submitted {
                id,
                lease_id,
                request,
                receipt,
                receipt_sha256,
                ok,
                retry_at,
                at,
            } => {
                self.leave(*id);
                let t = self.task_mut(*id);
                t.receipts.push(*receipt_sha256);
                if let Some(failure) = &receipt.failure {
                    t.reason = Some(failure.clone());
                }
                t.submission = Some(Box::new(super::task::Submission {
                    attempt: t.attempt,
                    lease_id: lease_id.clone(),
                    request: *request,
                    receipt: *receipt_sha256,
                }));
                let state = match (ok, retry_at) {
                    (true, _) => TaskState::Succeeded,
                    (false, Some(nb)) => {
                        t.not_before = Some(*nb);
                        TaskState::Queued
                    }
                    (false, None) => TaskState::Failed,
                };
                self.enter(*id, state, *at);
            }
            Event::Retried { id, at, .. } => {
                self.leave(*id);
                let t = self.task_mut(*id);
                t.reason = None;
                t.not_before = None;
                self.reopen(*id);
                let open = self.block(*id);
                let state = if open {
                    TaskState::Pending
                } else {
                    TaskState::Queued
                };
                self.enter(*id, state, *at);
            }
            Event::Parked { id, park, at } => {
                self.leave(*id);
                self.task_mut(*id).park = Some(Box::new(park.clone()));
                self.enter(*id, TaskState::Parked, *at);
            }
            Event::Resumed {
                id, input_ref, at, ..
            } => {
                self.leave(*id);
                let t = self.task_mut(*id);
                if let Ok(brief) = super::brief::with_input(&t.spec.brief, input_ref) {
                    std::sync::Arc::make_mut(&mut t.spec).brief = brief;
                }
                t.park = None;
                t.not_before = None;
                self.enter(*id, TaskState::Queued, *at);
            }
            Event::Split { id, children, at } => self.split(*id, children.clone(), *at),
            Event::Cancelled { id, by, at } => {
                let mut doomed = Vec::new();
                self.collect_live_descendants(*id, &mut doomed);
                for t in &doomed {
                    self.leave(*t);
                    self.task_mut(*t).reason = Some(format!("cancelled by {by}"));
                }
                for t in doomed {
                    self.enter(t, TaskState::Cancelled, *at);
                }
            }
            Event::Staged {
                id, name, sha256, ..
            } => {
                let t = self.task_mut(*id);
                if let Some(old) = t.staged.insert(name.clone(), *sha256)
                    && old != *sha256
                    && !t.dropped.contains(&old)
                {
                    t.dropped.push(old);
                }
            }
        }
    }

    /// Applies one event, taking it apart (replay): new tasks keep the
    /// event's own allocations rather than copies of them.
    pub fn apply_owned(&mut self, ev: Event) {
        match ev {
            Event::Enqueued { task, at } => self.insert(*task, None, at),
            Event::Split { id, children, at } => self.split(id, children, at),
            ev => self.apply(&ev),
        }
    }

    fn split(&mut self, id: TaskId, children: Vec<NewTask>, at: Timestamp) {
        self.leave(id);
        for child in children {
            self.insert(child, Some(id), at);
        }
        self.enter(id, TaskState::Waiting, at);
    }

    /// A task's position in creation order, its place on a shelf.
    fn position(&self, id: TaskId) -> u32 {
        self.tasks
            .position(&id)
            .expect("events name existing tasks")
    }

    fn task_mut(&mut self, id: TaskId) -> &mut Task {
        self.tasks.get_mut(&id).expect("events name existing tasks")
    }

    fn insert(&mut self, new: NewTask, parent: Option<TaskId>, at: Timestamp) {
        let NewTask {
            id,
            spec,
            requester,
            fingerprint,
            source_pack,
        } = new;
        let depth = parent.map_or(0, |p| self.tasks[&p].depth + 1);
        if let Some(p) = parent {
            self.task_mut(p).children.push(id);
        }
        let not_before = spec.not_before;
        let mut task = Task {
            id,
            spec: spec.into(),
            requester,
            source_pack,
            parent,
            depth,
            children: Vec::new(),
            state: TaskState::Pending,
            attempt: Attempt(0),
            lease: None,
            not_before,
            receipts: Vec::new(),
            staged: Default::default(),
            dropped: Vec::new(),
            handles: Vec::new(),
            fingerprint,
            submission: None,
            park: None,
            reason: None,
            created_at: at,
            updated_at: at,
        };
        self.names.share_task(&mut task);
        self.tasks.push(task);
        self.index.idempotency.insert(&self.tasks, id);
        let new = &self.tasks[&id];
        let ended_badly = self.first_ended_badly(id);
        let cancel = new.spec.traits.on_upstream_failure == UpstreamFailure::Cancel;
        let state = match ended_badly {
            Some((u, how)) if cancel => {
                self.task_mut(id).reason = Some(upstream_ended(u, how));
                TaskState::Cancelled
            }
            _ if self.block(id) => TaskState::Pending,
            _ => TaskState::Queued,
        };
        self.enter(id, state, at);
        if let Some(last) = self.transitions.as_mut().and_then(|r| r.last_mut()) {
            last.from = None;
        }
    }

    /// Files a task under each of its upstream tasks that has not ended;
    /// true when there is one (the task is then pending).
    fn block(&mut self, id: TaskId) -> bool {
        let t = &self.tasks[&id];
        let open = t
            .spec
            .depends_on
            .iter()
            .filter(|u| self.tasks.get(u).is_some_and(|u| !u.state.is_terminal()))
            .copied()
            .collect::<Vec<_>>();
        for u in &open {
            self.index.dependents.entry(*u).or_default().push(id);
        }
        if !open.is_empty() {
            self.index.blocked.insert(id, open.len());
        }
        !open.is_empty()
    }

    /// A task that ended is open again (retried): the pending tasks that
    /// depend on it wait for it again, as a rebuild would count them.
    /// Dependents that already went on are not called back.
    fn reopen(&mut self, id: TaskId) {
        let mut waiting: Vec<TaskId> = self
            .index
            .blocked
            .keys()
            .filter(|d| self.tasks[d].spec.depends_on.contains(&id))
            .copied()
            .collect();
        waiting.sort();
        for d in &waiting {
            *self.index.blocked.get_mut(d).expect("pending") += 1;
        }
        if !waiting.is_empty() {
            self.index.dependents.entry(id).or_default().extend(waiting);
        }
    }

    /// Takes a task out of the indexes of its current state.
    fn leave(&mut self, id: TaskId) {
        let t = &self.tasks[&id];
        let state = t.state;
        match state {
            TaskState::Queued => self
                .index
                .unfile_queued(t, self.tasks.position(&id).expect("known")),
            TaskState::Pending => {
                self.index.blocked.remove(&id);
                for u in &t.spec.depends_on {
                    if let Some(ds) = self.index.dependents.get_mut(u) {
                        ds.retain(|d| *d != id);
                    }
                }
            }
            TaskState::Claimed => {
                if let Some(l) = &t.lease {
                    self.index.leases.remove(&(l.expires_at, id));
                }
            }
            _ => {}
        }
        let pos = self.position(id);
        self.index.shelves.take(t, pos);
        let t = self.task_mut(id);
        if state == TaskState::Claimed {
            t.lease = None;
        }
    }

    /// Puts a task into `state` and its indexes, then runs what follows
    /// from it: a terminal task releases its dependents and maybe its parent.
    fn enter(&mut self, id: TaskId, state: TaskState, at: Timestamp) {
        if let Some(record) = &mut self.transitions {
            let t = &self.tasks[&id];
            record.push(Transition {
                id,
                from: Some(t.state),
                to: state,
                attempt: t.attempt,
                sight: Sight::of(t),
            });
        }
        let t = self.task_mut(id);
        t.state = state;
        t.updated_at = at;
        let pos = self.position(id);
        let t = &self.tasks[&id];
        self.index.shelves.put(t, pos);
        if state == TaskState::Queued {
            self.index.file_queued(t, pos, at);
        }
        if !state.is_terminal() {
            return;
        }
        let badly = matches!(state, TaskState::Failed | TaskState::Cancelled);
        for d in self.index.dependents.remove(&id).unwrap_or_default() {
            let dependent = &self.tasks[&d];
            if badly
                && dependent.state == TaskState::Pending
                && dependent.spec.traits.on_upstream_failure == UpstreamFailure::Cancel
            {
                self.leave(d);
                // Named by its own upstreams' order, not by the order the
                // cascade reached it in (which differs with how a state
                // was loaded): the first that ended badly, `id` at worst.
                let (u, how) = self.first_ended_badly(d).unwrap_or((id, state));
                self.task_mut(d).reason = Some(upstream_ended(u, how));
                self.enter(d, TaskState::Cancelled, at);
                continue;
            }
            let left = self.index.blocked.get_mut(&d).map(|n| {
                *n -= 1;
                *n
            });
            if left == Some(0) {
                self.index.blocked.remove(&d);
                if self.tasks[&d].state == TaskState::Pending {
                    let pos = self.position(d);
                    self.index.shelves.take(&self.tasks[&d], pos);
                    self.enter(d, TaskState::Queued, at);
                }
            }
        }
        if let Some(p) = self.tasks[&id].parent {
            let parent = &self.tasks[&p];
            let done = parent
                .children
                .iter()
                .all(|c| self.tasks[c].state.is_terminal());
            if parent.state == TaskState::Waiting && done {
                self.leave(p);
                self.task_mut(p).not_before = None;
                self.enter(p, TaskState::Queued, at);
            }
        }
    }

    /// The first of `id`'s upstreams, in its `depends_on` order, that
    /// failed or was cancelled, and how it ended.
    fn first_ended_badly(&self, id: TaskId) -> Option<(TaskId, TaskState)> {
        self.tasks[&id].spec.depends_on.iter().find_map(|u| {
            let u = self.tasks.get(u)?;
            matches!(u.state, TaskState::Failed | TaskState::Cancelled).then_some((u.id, u.state))
        })
    }

    fn collect_live_descendants(&self, id: TaskId, out: &mut Vec<TaskId>) {
        let t = &self.tasks[&id];
        if !t.state.is_terminal() {
            out.push(id);
        }
        for c in &t.children {
            self.collect_live_descendants(*c, out);
        }
    }

    /// Files delayed tasks that are due at `now` as ready; true if any.
    pub fn promote_due(&mut self, now: Timestamp) -> bool {
        let due = self.index.take_due(now);
        for id in &due {
            let t = &self.tasks[id];
            if t.state == TaskState::Queued {
                let pos = self.tasks.position(id).expect("known");
                self.index.make_ready(t, pos);
            }
        }
        !due.is_empty()
    }

    /// Task counts per state on `queue`.
    pub fn index_counts(&self, queue: &Name) -> Vec<(TaskState, u64)> {
        self.index.counts_of(queue)
    }

    /// Whether a queued task is claimable at `now`.
    pub fn is_ready(&self, t: &Task, now: Timestamp) -> bool {
        t.state == TaskState::Queued && t.not_before.is_none_or(|nb| nb <= now)
    }
}
