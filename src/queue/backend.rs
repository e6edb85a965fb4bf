//! The queue handle every layer above uses, over one of two backends
//! with the same calls and the same promises (the table in the module
//! doc): the embedded journal under the root ([`Journal`]), or a
//! PostgreSQL database that several daemons share ([`pg::Shared`]).
//! Each call says once which backend answers it; the rules that decide
//! every change are the same code on both (`decide`).

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use super::query::{self, Filter, Page, QueueCounts, Summary, TaskSnap};
use super::{
    Attempt, Bulk, BulkAction, Claimed, EnqueueError, Enqueued, Error, FoldAfter, Folds, Journal,
    JournalError, LeaseId, Observer, Park, Recovery, SplitError, SplitLimits, Stream, SubmitError,
    SubmitInput, Task, TaskCallError, TaskId, TaskSpec, TaskState, Unsynced, Walk, pg,
};
use crate::store::envelope::{TaskFacts, Viewer};
use crate::store::{Name, Pin, Sha256, Store};

/// The queue handle: cheap to clone.
#[derive(Clone, Debug)]
pub struct Queue {
    backend: Backend,
}

#[derive(Clone, Debug)]
enum Backend {
    Journal(Journal),
    Postgres(pg::Shared),
}

impl From<Journal> for Queue {
    fn from(j: Journal) -> Queue {
        Queue {
            backend: Backend::Journal(j),
        }
    }
}

/// What a submit's `claim_next` asks to claim after it.
#[derive(Clone, Copy, Debug)]
pub struct ClaimAfter<'a> {
    /// The queue to claim from.
    pub queue: &'a Name,
    /// Only tasks of these kinds (any when `None`).
    pub kinds: Option<&'a [Name]>,
    /// The claimant (checked by the caller: it may claim from `queue`).
    pub viewer: &'a Viewer,
}

impl Queue {
    /// Recovers the embedded queue from the root's journal; new journal
    /// segments get `segment_bytes` of preallocated space, and closed
    /// segments are folded into the snapshot in the background once past
    /// `fold`.
    pub fn open(
        store: &Store,
        limits: SplitLimits,
        segment_bytes: u64,
        fold: FoldAfter,
    ) -> Result<(Queue, Recovery), Error> {
        let (journal, recovery) = Journal::open(store, limits, segment_bytes, fold)?;
        Ok((journal.into(), recovery))
    }

    /// The queue in the PostgreSQL database `db` (migrated), shared with
    /// every daemon given the same database; receipts are also written
    /// as objects under `store`'s root, as the embedded queue writes them.
    pub async fn shared(
        db: crate::database::Database,
        store: &Store,
        limits: SplitLimits,
    ) -> Queue {
        Queue {
            backend: Backend::Postgres(pg::Shared::start(db, store.clone(), limits).await),
        }
    }

    /// Which backend holds the queue, for the start's log line.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Journal(_) => "the root's journal".to_string(),
            Backend::Postgres(p) => format!("PostgreSQL at {}", p.at()),
        }
    }

    /// Whether the backend can serve now (`/healthz`): the embedded one
    /// always can; the shared one while its database answers.
    pub async fn health(&self) -> Result<(), JournalError> {
        match &self.backend {
            Backend::Journal(_) => Ok(()),
            Backend::Postgres(p) => p.health().await,
        }
    }

    /// What the journal folds of this run did so far (none on PostgreSQL).
    pub fn folds(&self) -> Folds {
        match &self.backend {
            Backend::Journal(j) => j.folds(),
            Backend::Postgres(_) => Folds::default(),
        }
    }

    /// Has `observers` told of every change (and journal sync) this
    /// daemon makes from now on, and `stream` of every change the queue
    /// sees: this daemon's, and on a shared queue every daemon's (set
    /// once, at start; a second call is ignored).
    pub fn observe(&self, mut observers: Vec<Arc<dyn Observer>>, stream: Arc<dyn Stream>) {
        match &self.backend {
            Backend::Journal(j) => {
                observers.push(stream);
                j.observe(observers)
            }
            Backend::Postgres(p) => p.observe(observers, stream),
        }
    }

    /// Waits until the event stream holds the event readers know as `id`
    /// when another daemon sent it them (on a shared queue); false when
    /// no daemon did, or it is not reached in time.
    pub async fn reach_event(&self, id: u128) -> Result<bool, JournalError> {
        match &self.backend {
            Backend::Journal(_) => Ok(false),
            Backend::Postgres(p) => p.reach(id).await,
        }
    }

    /// Provisions a queue, or changes the fields `patch` names of an
    /// existing one (those it leaves out keep their values).
    pub async fn provision(
        &self,
        patch: super::QueuePatch,
    ) -> Result<super::Provisioned, EnqueueError> {
        match &self.backend {
            Backend::Journal(j) => j.provision(patch).await,
            Backend::Postgres(p) => p.provision(patch).await,
        }
    }

    /// Enqueues several specs (each passed `TaskSpec::check` on the way
    /// in) for the requester `viewer`, each with its own outcome, all
    /// durable when it returns; with `dry_run`, decides each and writes
    /// nothing. Tasks created record `source_pack`.
    pub async fn enqueue_many(
        &self,
        specs: Vec<TaskSpec>,
        viewer: &Viewer,
        source_pack: Option<&Name>,
        dry_run: bool,
    ) -> Result<Vec<Result<Enqueued, EnqueueError>>, JournalError> {
        match &self.backend {
            Backend::Journal(j) => j.enqueue_many(specs, viewer, source_pack, dry_run).await,
            Backend::Postgres(p) => p.enqueue_many(specs, viewer, source_pack, dry_run).await,
        }
    }

    /// The (task, attempt) a worker handle stands for.
    pub async fn handle(&self, handle: &str) -> Result<Option<(TaskId, Attempt)>, JournalError> {
        match &self.backend {
            Backend::Journal(j) => Ok(j.handle(handle).await),
            Backend::Postgres(p) => p.handle(handle).await,
        }
    }

    /// Ends long polls for good (shutdown): every waiting `claim_next`
    /// and every later one answers `None` at once.
    pub fn end_long_polls(&self) {
        match &self.backend {
            Backend::Journal(j) => j.end_long_polls(),
            Backend::Postgres(p) => p.end_long_polls(),
        }
    }

    /// Ends long polls and stops the backend's background work (the
    /// journal flushes and stops its thread; graceful shutdown).
    pub fn close(&self) {
        match &self.backend {
            Backend::Journal(j) => j.close(),
            Backend::Postgres(p) => p.end_long_polls(),
        }
    }

    /// Claims the next task on `queue` that `viewer` may claim (of one of
    /// `kinds`, any when `None`), waiting up to `wait` for one; `None`
    /// when none did, or once long polls have ended. Durable when it
    /// returns; released unless its handover is delivered.
    pub async fn claim_next(
        &self,
        queue: &Name,
        kinds: Option<&[Name]>,
        viewer: &Viewer,
        wait: Duration,
    ) -> Result<Option<Claimed>, TaskCallError> {
        match &self.backend {
            Backend::Journal(j) => j.claim_next(queue, kinds, viewer, wait).await,
            Backend::Postgres(p) => p.claim_next(self, queue, kinds, viewer, wait).await,
        }
    }

    /// Claims task `id` for `viewer` (the caller has checked it may).
    pub async fn claim(&self, id: TaskId, viewer: &Viewer) -> Result<Claimed, TaskCallError> {
        match &self.backend {
            Backend::Journal(j) => j.claim(id, viewer).await,
            Backend::Postgres(p) => p.claim(self, id, viewer).await,
        }
    }

    /// Releases a lease whose claim's answer never reached its claimant
    /// (a dropped [`super::Handover`]); nobody waits for it.
    pub(super) fn release_undelivered(&self, id: TaskId, lease: &LeaseId) {
        match &self.backend {
            Backend::Journal(j) => j.release_undelivered(id, lease),
            Backend::Postgres(p) => p.release_undelivered(id, lease),
        }
    }

    /// Extends a live lease held by `by`; returns the new expiry.
    pub async fn heartbeat(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
    ) -> Result<Timestamp, TaskCallError> {
        match &self.backend {
            Backend::Journal(j) => j.heartbeat(id, lease_id, by).await,
            Backend::Postgres(p) => p.heartbeat(id, lease_id, by).await,
        }
    }

    /// Returns a claimed task to the queue: a claim held by `by`, or any
    /// claim for `None` (an admin).
    pub async fn release(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: Option<&Name>,
    ) -> Result<TaskState, TaskCallError> {
        match &self.backend {
            Backend::Journal(j) => j.release(id, lease_id, by).await,
            Backend::Postgres(p) => p.release(id, lease_id, by).await,
        }
    }

    /// Submits a result under a live lease: records the receipt and ends
    /// the task; a resend of the accepted submission returns the same
    /// receipt. Durable when it returns.
    pub async fn submit(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        input: &SubmitInput,
        by: &Name,
    ) -> Result<(Sha256, bool, TaskState), SubmitError> {
        let (out, unsynced) = self.submit_unsynced(id, lease_id, input, by).await?;
        self.synced(unsynced).await?;
        Ok(out)
    }

    /// [`Queue::submit`], durable once [`Queue::synced`] returns for the
    /// token: a caller with more to write (a claim of the next task)
    /// waits once for both. (The shared backend's submit is durable
    /// when this returns.)
    pub async fn submit_unsynced(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        input: &SubmitInput,
        by: &Name,
    ) -> Result<((Sha256, bool, TaskState), Unsynced), SubmitError> {
        let seen = match &self.backend {
            Backend::Journal(j) => {
                return j.submit_unsynced(id, lease_id, input, by);
            }
            Backend::Postgres(p) => p.look(&[id], |st| st.tasks.get(&id).cloned()).await?,
        };
        let seen = seen.ok_or(TaskCallError::NotFound)?;
        let (out, unsynced, _) = self.submit_then(&seen, lease_id, input, by, None).await?;
        Ok((out, unsynced))
    }

    /// [`Queue::submit_unsynced`] of `seen`, the task as the caller read
    /// it for its access check (a shared queue decides on it, fenced),
    /// and with `after`, on a shared queue, the next task claimed in the
    /// submit's transaction (one commit for both). `None` when nothing
    /// was claimed: the embedded queue's caller claims afterwards, as it
    /// does when no task was there.
    pub async fn submit_then(
        &self,
        seen: &Task,
        lease_id: &LeaseId,
        input: &SubmitInput,
        by: &Name,
        after: Option<ClaimAfter<'_>>,
    ) -> Result<((Sha256, bool, TaskState), Unsynced, Option<Claimed>), SubmitError> {
        match &self.backend {
            Backend::Journal(j) => {
                let (out, unsynced) = j.submit_unsynced(seen.id, lease_id, input, by)?;
                Ok((out, unsynced, None))
            }
            Backend::Postgres(p) => {
                let (out, next) = p.submit(self, seen, lease_id, input, by, after).await?;
                Ok((out, Unsynced(None), next))
            }
        }
    }

    /// Waits until the change behind `unsynced` is durable.
    pub async fn synced(&self, unsynced: Unsynced) -> Result<(), JournalError> {
        match (&self.backend, unsynced.0) {
            (Backend::Journal(j), Some(seq)) => j.durable(seq).await,
            _ => Ok(()),
        }
    }

    /// Parks a claimed task held by `by`.
    pub async fn park(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
        park: Park,
    ) -> Result<TaskState, TaskCallError> {
        match &self.backend {
            Backend::Journal(j) => j.park(id, lease_id, by, park).await,
            Backend::Postgres(p) => p.park(id, lease_id, by, park).await,
        }
    }

    /// Resumes a parked task with a new input pin.
    pub async fn resume(
        &self,
        id: TaskId,
        input_ref: Pin,
        by: &Name,
    ) -> Result<TaskState, TaskCallError> {
        match &self.backend {
            Backend::Journal(j) => j.resume(id, input_ref, by).await,
            Backend::Postgres(p) => p.resume(id, input_ref, by).await,
        }
    }

    /// Splits a claimed task held by `by` into children, whose upstream
    /// tasks `within` (the split's authority) must see; returns their ids.
    pub async fn split(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
        children: Vec<TaskSpec>,
        within: &Viewer,
    ) -> Result<Vec<TaskId>, SplitError> {
        match &self.backend {
            Backend::Journal(j) => j.split(id, lease_id, by, children, within).await,
            Backend::Postgres(p) => p.split(id, lease_id, by, children, within).await,
        }
    }

    /// Cancels a task and its live descendants; with `only`, only while
    /// the task is in one of those states when the cancel is decided.
    pub async fn cancel(
        &self,
        id: TaskId,
        by: &Name,
        only: Option<&[TaskState]>,
    ) -> Result<TaskState, TaskCallError> {
        match &self.backend {
            Backend::Journal(j) => j.cancel(id, by, only).await,
            Backend::Postgres(p) => p.cancel(id, by, only).await,
        }
    }

    /// Queues a failed or cancelled task again as a new attempt; returns
    /// its state and attempts so far.
    pub async fn retry(
        &self,
        id: TaskId,
        by: &Name,
    ) -> Result<(TaskState, Attempt), TaskCallError> {
        match &self.backend {
            Backend::Journal(j) => j.retry(id, by).await,
            Backend::Postgres(p) => p.retry(id, by).await,
        }
    }

    /// Retries or cancels, as `action` says, up to `limit` of the tasks
    /// `filter` selects that `viewer` may end, oldest first; with
    /// `dry_run`, only counts them.
    pub async fn bulk(
        &self,
        action: BulkAction,
        viewer: &Viewer,
        filter: &Filter,
        limit: usize,
        dry_run: bool,
    ) -> Result<Bulk, JournalError> {
        match &self.backend {
            Backend::Journal(j) => j.bulk(action, viewer, filter, limit, dry_run).await,
            Backend::Postgres(p) => p.bulk(action, viewer, filter, limit, dry_run).await,
        }
    }

    /// Records a staged part for the live attempt of `id`.
    pub async fn stage(
        &self,
        id: TaskId,
        attempt: Attempt,
        name: String,
        sha256: Sha256,
    ) -> Result<(), TaskCallError> {
        match &self.backend {
            Backend::Journal(j) => j.stage(id, attempt, name, sha256).await,
            Backend::Postgres(p) => p.stage(id, attempt, name, sha256).await,
        }
    }

    /// Ends lapsed leases and makes delayed retries ready until `stop`
    /// resolves (on the shared backend, while this daemon leads).
    pub async fn sweep_until(&self, stop: impl std::future::Future<Output = ()>) {
        match &self.backend {
            Backend::Journal(j) => j.sweep_until(stop).await,
            Backend::Postgres(p) => p.sweep_until(stop).await,
        }
    }

    /// Task `id` as `viewer` sees it once durable, after `rule` allowed
    /// its facts.
    pub async fn task<E>(
        &self,
        id: TaskId,
        viewer: &Viewer,
        rule: impl FnOnce(&TaskFacts<'_>) -> Result<(), E>,
    ) -> Result<TaskSnap, E>
    where
        E: From<TaskCallError> + From<JournalError>,
    {
        match &self.backend {
            Backend::Journal(j) => j.task(id, viewer, rule).await,
            Backend::Postgres(p) => p.task(id, viewer, rule).await,
        }
    }

    /// Up to `limit` tasks `viewer` may see that `filter` selects, after
    /// `after`.
    pub async fn page(
        &self,
        viewer: &Viewer,
        filter: &Filter,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<Page, JournalError> {
        match &self.backend {
            Backend::Journal(j) => j.page(viewer, filter, after, limit).await,
            Backend::Postgres(p) => p.page(viewer, filter, after, limit).await,
        }
    }

    /// Each queue `viewer` may see, with its config and counts.
    pub async fn queue_counts(&self, viewer: &Viewer) -> Result<Vec<QueueCounts>, JournalError> {
        match &self.backend {
            Backend::Journal(j) => j.queue_counts(viewer).await,
            Backend::Postgres(p) => {
                p.totals(|st, totals| query::queue_counts(&st.queues, totals, viewer))
                    .await
            }
        }
    }

    /// The status summary at `now`.
    pub async fn summary(
        &self,
        viewer: &Viewer,
        now: Timestamp,
    ) -> Result<Vec<Summary>, JournalError> {
        match &self.backend {
            Backend::Journal(j) => j.summary(viewer, now).await,
            Backend::Postgres(p) => {
                p.totals(|st, totals| query::summary(&st.queues, totals, viewer))
                    .await
            }
        }
    }

    /// Every queue's tasks per state (every state, zeros included), for
    /// a scrape.
    pub async fn task_counts(&self) -> Result<Vec<(Name, Vec<(TaskState, u64)>)>, JournalError> {
        match &self.backend {
            Backend::Journal(j) => Ok(j.task_counts().await),
            Backend::Postgres(p) => p.task_counts().await,
        }
    }

    /// Whether `queue` is a server queue; `None` when it was never
    /// provisioned.
    pub async fn is_server(&self, queue: &Name) -> Result<Option<bool>, JournalError> {
        match &self.backend {
            Backend::Journal(j) => Ok(j.is_server(queue).await),
            Backend::Postgres(p) => p.is_server(queue).await,
        }
    }

    /// The ctx-dir template of a task with this spec.
    pub async fn template_of(&self, spec: &TaskSpec) -> Result<String, JournalError> {
        match &self.backend {
            Backend::Journal(j) => Ok(j.template_of(spec).await),
            Backend::Postgres(p) => p.look(&[], |st| st.template_of(spec)).await,
        }
    }

    /// Runs `rule` on task `id`'s facts and answers the task it allowed,
    /// without waiting for durability (the facts never change after
    /// enqueue). On a shared queue, when this daemon answered the task's
    /// live claim, it is the task as that claim left it, with no read:
    /// its lease's expiry and its staged parts may be older than now (a
    /// submit decided on it allows for the first, [`Queue::submit_then`];
    /// a task whose contract reads the second at submit is not kept).
    pub async fn checked<E: From<TaskCallError> + From<JournalError>>(
        &self,
        id: TaskId,
        rule: impl FnOnce(&TaskFacts<'_>) -> Result<(), E>,
    ) -> Result<Task, E> {
        match &self.backend {
            Backend::Journal(j) => j.checked(id, rule).await,
            Backend::Postgres(p) => match p.as_claimed(id).await? {
                Some((t, server)) => {
                    rule(&t.facts(server))?;
                    Ok(t)
                }
                None => p.look(&[id], |st| st.task_if(id, rule)).await?,
            },
        }
    }

    /// Task `id` as it is now, and whether its queue is a server queue.
    pub async fn task_now(&self, id: TaskId) -> Result<Option<(Task, bool)>, JournalError> {
        match &self.backend {
            Backend::Journal(j) => Ok(j.task_now(id).await),
            Backend::Postgres(p) => p.look(&[id], |st| st.task_and_server(id)).await,
        }
    }

    /// Each of `ids` as it is now (`None`: no such task), and the stage
    /// kinds their queues require.
    pub async fn tasks_now(
        &self,
        ids: &[TaskId],
    ) -> Result<(Vec<(TaskId, Option<Task>)>, Vec<Name>), JournalError> {
        match &self.backend {
            Backend::Journal(j) => Ok(j.tasks_now(ids).await),
            Backend::Postgres(p) => p.look(ids, |st| st.now_of(ids)).await,
        }
    }

    /// A worker prompt's effective attempt limit, and the task's upstream
    /// tasks then children that `viewer` may see.
    pub async fn related(
        &self,
        task: &Task,
        viewer: &Viewer,
    ) -> Result<(u32, Vec<Task>), JournalError> {
        match &self.backend {
            Backend::Journal(j) => Ok(j.related(task, viewer).await),
            Backend::Postgres(p) => p.look(&[task.id], |st| st.related(task, viewer)).await,
        }
    }

    /// The attempts task `id` has left: none once it ended.
    pub async fn attempts_left(&self, id: TaskId) -> Result<u32, JournalError> {
        match &self.backend {
            Backend::Journal(j) => Ok(j.attempts_left(id).await),
            Backend::Postgres(p) => p.look(&[id], |st| st.attempts_left(id)).await,
        }
    }

    /// Runs `f` on a walk over every task before the daemon serves (the
    /// start's audits).
    pub async fn audit<T>(&self, f: impl FnOnce(Walk<'_>) -> T) -> Result<T, JournalError> {
        match &self.backend {
            Backend::Journal(j) => Ok(j.audit(f)),
            Backend::Postgres(p) => p.all(|st| f(Walk::of(st))).await,
        }
    }

    /// Runs `f` on a walk over at least the tasks that have started and
    /// not ended (attempted, not terminal) before the daemon serves (the
    /// start's settling of ctx-dirs): on PostgreSQL only those are read,
    /// so a start does not read the queue's history.
    pub async fn audit_started<T>(&self, f: impl FnOnce(Walk<'_>) -> T) -> Result<T, JournalError> {
        match &self.backend {
            Backend::Journal(j) => Ok(j.audit(f)),
            Backend::Postgres(p) => p.started(|st| f(Walk::of(st))).await,
        }
    }
}
