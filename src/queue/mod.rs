//! The verb queue: tasks, their lifecycle, leases and fencing, receipts,
//! and the journal that makes every change durable before it is
//! acknowledged.
//!
//! | from | to | by |
//! | --- | --- | --- |
//! | (new) | `pending` / `queued` | enqueue (pending while a `depends_on` task has not ended) |
//! | `pending` | `queued` | the last upstream ending, in any terminal state |
//! | `queued` | `claimed` | claim: a new lease, `attempt + 1` (the fence) |
//! | `claimed` | `claimed` | heartbeat with the live lease |
//! | `claimed` | `queued` | release, or lease expiry (with backoff) |
//! | `claimed` | `failed` | release or expiry with attempts exhausted (`attempts_exhausted`) |
//! | `claimed` | `succeeded` / `failed` | submit: a receipt with `ok` |
//! | `claimed` | `queued` | a failed submit with attempts left, not final and no failed contract check (with backoff) |
//! | `claimed` | `parked` | park `{reason, needs}` |
//! | `parked` | `queued` | resume with a new `input_ref` pin |
//! | `claimed` | `waiting` | split: children under the parent's envelope |
//! | `waiting` | `queued` | the last child ending; the parent is reclaimed to combine |
//! | not terminal | `cancelled` | cancel, with every live descendant |
//! | `pending` | `cancelled` | an upstream failing or cancelled, when the task says `on_upstream_failure: cancel` |
//! | `failed` / `cancelled` | `queued` / `pending` | retry by the requester or admin (pending while an upstream is open again) |
//!
//! How far to trust a state: anything a caller was told is in the journal
//! (fsynced); reads wait until what they saw is durable too. Terminal
//! states change only by an explicit retry; `succeeded` never changes. A
//! lease is live until its `expires_at`, whether or not the sweeper has
//! yet returned the task to the queue.
//!
//! The interface: [`Queue`] is all the HTTP, worker, MCP, events and
//! metrics layers use, with owned inputs and answers; its state, tables
//! and indexes are this module's own. A second backend implements the
//! same calls with the same promises:
//!
//! | calls | answer | durable when it returns |
//! | --- | --- | --- |
//! | `provision`, `enqueue_many` (one or a batch; `dry_run` decides only) | created or existing, with the state | yes |
//! | `claim_next` (long poll), `claim` | a [`Claimed`] snapshot, its lease and handle; released unless its handover is delivered | yes |
//! | `heartbeat`, `release`, `park`, `resume`, `split`, `cancel`, `retry`, `stage`, `bulk` | the task's new state or expiry | yes |
//! | `submit`; `submit_unsynced` then `synced` | the receipt, fenced to the lease | yes; after `synced` |
//! | `task`, `page`, `queue_counts` (each queue's config and counts), `summary` (`query`) | owned snapshots for a `Viewer` | what they saw is |
//! | `checked`, `is_server`, `template_of`, `task_now`, `tasks_now`, `related`, `attempts_left`, `task_counts`, `handle` | facts that never change after enqueue, or figures to render (async, so that a backend may read them from its database) | not waited for |
//! | observers (`observe`) | each committed change as owned `Transition`s, each sync, each lock hold | told after the fact |
//!
//! `audit` walks every task once, at start, before the daemon serves;
//! `tessera fsck` and `tessera recover` replay the journal into the same
//! [`Walk`] ([`offline`]). Neither sees the in-memory state.

mod applies;
mod backend;
pub mod brief;
mod decide;
pub mod errors;
mod event;
mod fold;
pub mod held;
mod idempotency;
mod index;
mod lease;
mod lifecycle;
mod machine;
#[cfg(test)]
mod machine_props;
pub mod names;
mod observe;
pub mod offline;
pub mod pg;
mod pipeline;
pub mod placement;
pub mod provision;
pub mod query;
pub mod receipt;
mod records;
mod recover;
mod shelf;
mod snapshot;
pub mod spec;
mod table;
pub mod task;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use jiff::Timestamp;
use tokio::sync::Notify;

pub use backend::{ClaimAfter, Queue};
pub use brief::Brief;
pub use decide::{Enqueue, Submit};
pub use errors::{EnqueueError, JournalError, SplitError, SubmitError, TaskCallError};
pub use event::Event;
pub use fold::{FoldAfter, Folds};
use held::Held;
pub use held::Op;
pub use lease::Handover;
use machine::State;
pub use machine::{SplitLimits, Transition};
pub use observe::{Observer, Stream, Streamed};
pub use offline::Walk;
pub use provision::{Provisioned, QueuePatch};
pub use receipt::{Receipt, SubmitInput};
pub use recover::{Finding, OnFinding, Recovery};
pub use shelf::Sight;
pub use spec::{CheckPolicy, ChildSpec, QueueConfig, SpecRules, TaskSpec, Traits, UpstreamFailure};
pub use task::{Attempt, Lease, LeaseId, Park, Task, TaskId, TaskState};

use crate::store::envelope::Viewer;
use crate::store::{self, Name, Store};

/// What can fail opening and recovering the queue (each call has its
/// own error type: see [`errors`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The journal or snapshot cannot be read back.
    #[error("{path}: {message}")]
    CorruptJournal {
        /// Under the root.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The journal refused.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// A fold was given up because the daemon is stopping (nothing was
    /// changed: the folded segments and the old snapshot stay).
    #[error("the daemon is stopping")]
    Stopping,
}

/// Asked between steps of a long read or write that a stop may cut short
/// (a fold's); `&|| false` for one that always runs to its end.
pub type Stopping<'a> = &'a dyn Fn() -> bool;

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Store(store::io_err("reading the journal", e))
    }
}

/// What an enqueue did, with the task's state as the enqueue saw it
/// (durable once `enqueue_many` returns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueued {
    /// A new task.
    Created(TaskId, TaskState),
    /// The task with the same idempotency key and spec.
    Existing(TaskId, TaskState),
    /// Dry run: a new task would be created.
    WouldCreate,
}

/// A change that is journaled and applied but not yet known durable (see
/// [`Queue::submit_unsynced`]); nothing may be acknowledged before
/// [`Queue::synced`] returns for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "wait for it with Queue::synced before acknowledging"]
pub struct Unsynced(Option<u64>);

/// What a bulk call does to each task it selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BulkAction {
    /// Queue a failed or cancelled task again.
    Retry,
    /// Cancel a task that has not ended.
    Cancel,
}

impl BulkAction {
    /// Whether a task in `state` can take the action.
    pub fn takes(self, state: TaskState) -> bool {
        match self {
            BulkAction::Retry => state.is_retryable(),
            BulkAction::Cancel => !state.is_terminal(),
        }
    }
}

/// What a bulk retry or cancel did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bulk {
    /// The tasks selected before acting.
    pub matched: usize,
    /// The tasks acted on, with their state and attempts so far after it.
    pub done: Vec<(TaskId, TaskState, Attempt)>,
    /// Selected tasks the action can still take (past the limit, or all of
    /// them in a dry run).
    pub remaining: usize,
}

/// A claim made, owned: the task as its claimant sees it, its new lease,
/// and the handover that releases the lease if the claim's answer never
/// reaches the claimant (call `handover.delivered()` once it does).
#[derive(Debug)]
pub struct Claimed {
    /// The task, now claimed.
    pub task: query::TaskSnap,
    /// Its lease (with the worker handle minted for it).
    pub lease: Lease,
    /// Releases the lease when dropped undelivered.
    pub handover: Handover,
}

/// The embedded backend: the state in memory, every change in the
/// root's journal. Cheap to clone (an `Arc`). The state mutex is held
/// only to decide, append to the journal and apply; never across `.await`
/// or file I/O other than the in-memory journal append.
#[derive(Clone, Debug)]
struct Journal {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    committer: store::log::Committer,
    store: Store,
    /// Wakes long-poll claims when a task may have become claimable.
    ready: Notify,
    /// Set at shutdown: long-poll claims answer "none" at once.
    polls_ended: AtomicBool,
    /// Told of every committed change (the daemon's metrics and event
    /// stream).
    observers: OnceLock<Vec<Arc<dyn Observer>>>,
    /// Folds closed journal segments into the snapshot in the background.
    fold: fold::Folder,
}

impl Journal {
    /// Recovers the queue from the root's journal; new journal segments
    /// get `segment_bytes` of preallocated space, and closed segments are
    /// folded into the snapshot in the background once past `fold`.
    pub fn open(
        store: &Store,
        limits: SplitLimits,
        segment_bytes: u64,
        fold: FoldAfter,
    ) -> Result<(Journal, Recovery), Error> {
        let (state, committer, recovery) = recover::open(store, limits, segment_bytes)?;
        let inner = Arc::new(Inner {
            state: Mutex::new(state),
            committer,
            store: store.clone(),
            ready: Notify::new(),
            polls_ended: AtomicBool::new(false),
            observers: OnceLock::new(),
            fold: fold::Folder::new(),
        });
        inner.fold.start(Arc::downgrade(&inner), fold);
        Ok((Journal { inner }, recovery))
    }

    /// What the journal folds of this run did so far.
    pub fn folds(&self) -> Folds {
        self.inner.fold.folds()
    }

    /// The state, locked by `op` (see [`held`]).
    fn lock(&self, op: Op) -> Held<'_> {
        Held::lock(&self.inner, op)
    }

    /// Journals and applies one event; returns its sequence number. An
    /// event `apply` could not take, and one the journal has no room for
    /// (a full disk), is refused before it is journaled or applied.
    fn commit(&self, st: &mut State, ev: &Event) -> Result<u64, JournalError> {
        st.applies(ev).map_err(JournalError::Inapplicable)?;
        // Room for a submit's record, receipt included, without regrowing.
        let mut bytes = Vec::with_capacity(1024);
        serde_json::to_writer(&mut bytes, ev).expect("events serialize");
        let seq = self
            .inner
            .committer
            .append(&bytes)
            .map_err(JournalError::from_log)?;
        match self.inner.observers.get().filter(|o| !o.is_empty()) {
            None => st.apply(ev),
            Some(observers) => {
                let moved = st.apply_recorded(ev);
                for o in observers {
                    o.committed(seq, ev, &moved);
                }
            }
        }
        Ok(seq)
    }

    /// Has `observers` told of every change and journal sync from now on
    /// (set once, at start; a second call is ignored).
    pub fn observe(&self, observers: Vec<Arc<dyn Observer>>) {
        self.inner.committer.observe(
            observers
                .iter()
                .map(|o| o.clone() as Arc<dyn store::log::SyncObserver>)
                .collect(),
        );
        let _ = self.inner.observers.set(observers);
    }

    async fn durable(&self, seq: u64) -> Result<(), JournalError> {
        self.inner
            .committer
            .wait(seq)
            .await
            .map_err(JournalError::from_log)
    }

    /// Runs `f` on the state and returns once what it saw is durable.
    async fn read<T>(&self, f: impl FnOnce(&State) -> T) -> Result<T, JournalError> {
        let (out, seq) = {
            let st = self.lock(Op::Query);
            (f(&st), self.inner.committer.appended())
        };
        self.durable(seq).await?;
        Ok(out)
    }

    /// Runs `f` on the state as it is now, without waiting for durability:
    /// for authorization checks on facts that never change after enqueue.
    /// Whatever the caller then changes is journaled after what it saw.
    fn peek<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.lock(Op::Peek))
    }

    /// Decides and commits one event for `op`, then waits for it to be
    /// durable.
    async fn run<T, E: From<JournalError>>(
        &self,
        op: Op,
        f: impl FnOnce(&State) -> Result<(Event, T), E>,
    ) -> Result<T, E> {
        self.run_then(op, f, |_, out| out).await
    }

    /// Decides and commits one event for `op`, reads what `then` needs
    /// from the state right after it (under the same lock), then waits
    /// for it.
    async fn run_then<T, U, E: From<JournalError>>(
        &self,
        op: Op,
        f: impl FnOnce(&State) -> Result<(Event, T), E>,
        then: impl FnOnce(&State, T) -> U,
    ) -> Result<U, E> {
        let (seq, out) = {
            let mut st = self.lock(op);
            let (ev, out) = f(&st)?;
            let seq = self.commit(&mut st, &ev)?;
            (seq, then(&st, out))
        };
        self.inner.ready.notify_waiters();
        self.durable(seq).await?;
        Ok(out)
    }

    /// Provisions a queue, or changes the fields `patch` names of an
    /// existing one; the journal records the merged config.
    async fn provision(&self, patch: QueuePatch) -> Result<Provisioned, EnqueueError> {
        let unchanged = {
            let st = self.lock(Op::Queue);
            st.queues
                .get(&patch.name)
                .filter(|c| patch.over(Some(c)) == **c)
                .cloned()
        };
        if let Some(config) = unchanged {
            self.read(|_| ()).await?;
            return Ok(Provisioned {
                config,
                created: false,
            });
        }
        self.run(Op::Queue, |st| {
            let current = st.queues.get(&patch.name);
            let config = patch.over(current);
            let created = current.is_none();
            let event = st.decide_queue(config.clone())?;
            Ok((event, Provisioned { config, created }))
        })
        .await
    }

    /// Enqueues several specs (each passed `TaskSpec::check` on the way
    /// in) for the requester `viewer` under one lock and one durability
    /// wait, each with its own outcome; with `dry_run`, decides each and
    /// writes nothing. Tasks created record `source_pack`, the seed pack
    /// they come from.
    pub async fn enqueue_many(
        &self,
        specs: Vec<TaskSpec>,
        viewer: &Viewer,
        source_pack: Option<&Name>,
        dry_run: bool,
    ) -> Result<Vec<Result<Enqueued, EnqueueError>>, JournalError> {
        let at = Timestamp::now();
        let (seq, out) = {
            let mut st = self.lock(Op::Enqueue);
            let mut out = Vec::with_capacity(specs.len());
            for spec in specs {
                let draw = &mut task::random_id;
                let decided = st.decide_enqueue(spec, source_pack, at, viewer, draw);
                out.push(match decided {
                    Ok(Enqueue::Existing(id)) => Ok(Enqueued::Existing(id, st.tasks[&id].state)),
                    Ok(Enqueue::New(_, _)) if dry_run => Ok(Enqueued::WouldCreate),
                    Ok(Enqueue::New(ev, id)) => self
                        .commit(&mut st, &ev)
                        .map(|_| Enqueued::Created(id, st.tasks[&id].state))
                        .map_err(EnqueueError::from),
                    Err(e) => Err(e),
                });
            }
            (self.inner.committer.appended(), out)
        };
        if out.iter().any(|o| matches!(o, Ok(Enqueued::Created(..)))) {
            self.inner.ready.notify_waiters();
        }
        self.durable(seq).await?;
        Ok(out)
    }

    /// The (task, attempt) a worker handle stands for.
    pub async fn handle(&self, handle: &str) -> Option<(TaskId, Attempt)> {
        self.lock(Op::Peek).index.handles.get(handle).copied()
    }

    /// Ends long polls for good (shutdown): every waiting `claim_next`
    /// and every later one answers `None` at once.
    pub fn end_long_polls(&self) {
        self.inner.polls_ended.store(true, Ordering::SeqCst);
        self.inner.ready.notify_waiters();
    }

    fn long_polls_ended(&self) -> bool {
        self.inner.polls_ended.load(Ordering::SeqCst)
    }

    /// Ends long polls, stops folding (a fold under way gives up at its
    /// next snapshot chunk), flushes the journal and stops its thread
    /// (graceful shutdown).
    pub fn close(&self) {
        self.end_long_polls();
        self.inner.fold.stop();
        self.inner.committer.shutdown();
    }
}
