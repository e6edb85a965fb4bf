//! The queue on PostgreSQL behind the same calls as the embedded one
//! ([`crate::queue::Queue`]): every change is decided by the embedded
//! queue's own rules on the rows it touches ([`super::transact`]), and
//! committed before it is answered; claims take rows with `SKIP LOCKED`
//! ([`super::lease`]); reads build a [`State`] of the rows they need.
//!
//! Several daemons share one database: long polls wake on this daemon's
//! own commits at once and on other daemons' at their next tick
//! ([`super::wake`]), and poll besides; lapsed leases are ended by
//! whichever daemon holds the maintenance lease ([`super::leader`]),
//! each expiry decided under the task's row lock, so two leaders at once
//! end a lease once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use tokio::sync::Notify;
use tokio_postgres::error::SqlState;

use super::batch::{self, Claimer, Completer};
use super::complete::{self, Completed, Decision};
use super::lease::{self, ClaimAsk};
use super::stream::Tailer;
use super::viewer::Grants;
use super::{claims, configs, events, leader, shelves, tasks, transact, wake};
use crate::auth::token::new_handle;
use crate::database::{Database, Error};
use crate::queue::decide::{Enqueue, Submit, check_queue};
use crate::queue::machine::{SplitLimits, State, Transition};
use crate::queue::query::{Filter, Page, TaskSnap, Totals, shows};
use crate::queue::shelf::ShelfView;
use crate::queue::shelf::Sight;
use crate::queue::{
    Attempt, Bulk, BulkAction, ClaimAfter, Claimed, EnqueueError, Enqueued, Event, Handover,
    JournalError, LeaseId, Observer, Op, Park, Provisioned, Queue, QueueConfig, QueuePatch,
    SplitError, Stream, SubmitError, SubmitInput, TaskCallError, TaskId, TaskSpec, TaskState, task,
};
use crate::store::envelope::{TaskFacts, Viewer};
use crate::store::{Name, Pin, Sha256, Store};

/// How often a long poll looks again without a wake-up (another
/// daemon's listener lost, a delayed retry coming due).
const POLL_EVERY: Duration = Duration::from_millis(500);

/// How often the maintenance leader looks for lapsed leases.
const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// How long the maintenance lease lasts unless renewed.
pub const LEADER_TTL: Duration = Duration::from_secs(5);

/// How long `/healthz` waits for the database before it answers 503.
const HEALTH_WITHIN: Duration = Duration::from_secs(3);

/// How often the maintenance leader deletes old event rows.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// How long event rows are kept: a reader resumes from another daemon's
/// event only while its row is there (and within the hub's window).
const EVENTS_KEPT: Duration = Duration::from_secs(3600);

/// The lapsed leases one sweep ends at most.
const SWEEP_BATCH: i64 = 256;

/// Times a change that lost a race (a concurrent enqueue with the same
/// idempotency key, a deadlock) is decided again before it gives up.
const RACES: usize = 3;

/// The shared backend's handle: cheap to clone.
#[derive(Clone, Debug)]
pub struct Shared {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    db: Database,
    store: Store,
    limits: SplitLimits,
    /// This daemon's own commits (long polls wake at once).
    ready: Notify,
    /// Other daemons' commits, heard at their next tick.
    heard: Option<Arc<Notify>>,
    ticker: wake::Ticker,
    polls_ended: AtomicBool,
    observers: OnceLock<Vec<Arc<dyn Observer>>>,
    /// Every daemon's events, read into this daemon's hub.
    tail: OnceLock<Tailer>,
    /// The sequence numbers observers are told (this daemon's commits).
    told: AtomicU64,
    /// This daemon's name in the leader row.
    holder: String,
    /// Every queue's config, as last read.
    configs: configs::Held,
    /// Submits' completions, coalesced.
    completer: Completer,
    /// Claims, coalesced.
    claimer: Claimer,
    /// The tasks this daemon's live claims took.
    claims: claims::Claims,
}

/// What a submit answers (its receipt, whether it was new, the task's
/// state), and what its claim took.
type Submitted = ((Sha256, bool, TaskState), Vec<lease::ClaimedRow>);

/// What a decision answered without a change to commit.
enum Settled<T, E> {
    /// An answer with nothing to write.
    Answer(T),
    /// A refusal.
    Refused(E),
}

impl Shared {
    /// Writes under `store`'s root the receipt objects it lacks (a
    /// receipt's durable copy is its row, and its object is written after
    /// the commit, so a daemon killed in between lacks it): what the
    /// journal's replay does for the embedded queue. Answers how many.
    pub async fn restore_receipts(db: &Database, store: &Store) -> Result<usize, Error> {
        let shas = Shared::receipt_shas(db).await?;
        let check = store.clone();
        let missing: Vec<Vec<u8>> = tokio::task::spawn_blocking(move || {
            shas.into_iter()
                .filter(|sha| !check.objects().has(sha))
                .map(|sha| sha.as_bytes().to_vec())
                .collect()
        })
        .await
        .expect("checking objects does not panic");
        let client = db.client().await?;
        if missing.is_empty() {
            return Ok(0);
        }
        let rows = client
            .query(
                "SELECT sha256, body FROM receipts WHERE sha256 = ANY($1)",
                &[&missing],
            )
            .await?;
        for r in &rows {
            let sha = crate::database::sha256(r.get(0))?;
            let body: Vec<u8> = r.get(1);
            if Sha256::of(&body) != sha {
                return Err(Error::Corrupt(format!(
                    "receipt {sha} does not hash to its name"
                )));
            }
            store.put_object_later(sha, body);
        }
        Ok(rows.len())
    }

    /// The hash of every receipt the database holds.
    pub async fn receipt_shas(db: &Database) -> Result<hashbrown::HashSet<Sha256>, Error> {
        let client = db.client().await?;
        client
            .query("SELECT sha256 FROM receipts", &[])
            .await?
            .iter()
            .map(|r| crate::database::sha256(r.get(0)))
            .collect()
    }

    /// Starts the backend on a migrated database: listens for other
    /// daemons' wake-ups (or only polls, when the listener cannot start)
    /// and ticks its own.
    pub async fn start(db: Database, store: Store, limits: SplitLimits) -> Shared {
        let heard = match wake::listen(&db, wake::EVENTS).await {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for other daemons' changes; long polls look every 500 ms");
                None
            }
        };
        let ticker = wake::Ticker::start(db.clone(), wake::EVENTS, wake::TICK);
        let (completer, claimer) = (batch::completer(db.clone()), batch::claimer(db.clone()));
        Shared {
            inner: Arc::new(Inner {
                db,
                store,
                limits,
                ready: Notify::new(),
                heard,
                ticker,
                polls_ended: AtomicBool::new(false),
                observers: OnceLock::new(),
                tail: OnceLock::new(),
                told: AtomicU64::new(0),
                holder: format!("{}-{}", std::process::id(), task::new_lease_id().0),
                configs: configs::Held::default(),
                completer,
                claimer,
                claims: claims::Claims::default(),
            }),
        }
    }

    /// Where the database is (without its password).
    pub fn at(&self) -> &str {
        self.inner.db.at()
    }

    /// Whether the database answers now, within [`HEALTH_WITHIN`].
    pub async fn health(&self) -> Result<(), JournalError> {
        let ask = async {
            let client = self.inner.db.client().await.map_err(unavailable)?;
            client
                .simple_query("SELECT 1")
                .await
                .map_err(|e| unavailable(e.into()))
        };
        match tokio::time::timeout(HEALTH_WITHIN, ask).await {
            Ok(answer) => answer.map(drop),
            Err(_) => Err(JournalError::Unavailable(format!(
                "the queue database at {} did not answer within {} s",
                self.at(),
                HEALTH_WITHIN.as_secs()
            ))),
        }
    }

    /// Has `observers` told of every change this daemon commits, and
    /// `stream` of every change any daemon commits from now on.
    pub fn observe(&self, observers: Vec<Arc<dyn Observer>>, stream: Arc<dyn Stream>) {
        let _ = self.inner.observers.set(observers);
        let (db, heard) = (self.inner.db.clone(), self.inner.heard.clone());
        let _ = self.inner.tail.set(Tailer::start(db, heard, stream));
    }

    /// Waits until this daemon's event stream holds the event readers
    /// know as `uid` (one another daemon sent them); false when no such
    /// event is kept or it is not reached in time.
    pub async fn reach(&self, uid: u128) -> Result<bool, JournalError> {
        match self.inner.tail.get() {
            Some(tail) => tail.reach(uid).await.map_err(unavailable),
            None => Ok(false),
        }
    }

    /// Ends long polls for good.
    pub fn end_long_polls(&self) {
        self.inner.polls_ended.store(true, Ordering::SeqCst);
        self.inner.ready.notify_waiters();
    }

    /// Tells the observers of a committed change (durable: the commit
    /// returned), wakes this daemon's long polls, and other daemons' at
    /// the next tick.
    fn told(&self, made: &[(Event, Vec<Transition>)]) {
        if let Some(observers) = self.inner.observers.get() {
            for (event, moved) in made {
                let seq = self.inner.told.fetch_add(1, Ordering::SeqCst) + 1;
                for o in observers {
                    o.committed(seq, event, moved);
                    o.synced(seq, 1, Duration::ZERO);
                }
            }
        }
        self.inner.ready.notify_waiters();
        self.inner.ticker.committed();
        if let Some(tail) = self.inner.tail.get() {
            tail.committed();
        }
    }

    /// Tells the observers how long `op`'s transaction (or statement)
    /// took since `since`: what the embedded queue reports as its lock
    /// hold.
    fn held(&self, op: Op, since: Instant) {
        let took = since.elapsed();
        for o in self.inner.observers.get().into_iter().flatten() {
            o.held(op, took);
        }
    }

    /// Decides one change on the family of `ids` and commits it, then
    /// reads what `then` needs from the state after it; an answer with
    /// nothing to change (`Settled`) commits nothing.
    async fn change<T, U, E>(
        &self,
        op: Op,
        ids: &[TaskId],
        decide: impl FnOnce(&State, Timestamp) -> Result<(Event, T), Settled<U, E>>,
        then: impl FnOnce(&State, T) -> U,
    ) -> Result<Result<U, E>, JournalError> {
        let changed = self.change_then(op, ids, None, decide, then).await?;
        Ok(changed.map(|(out, _)| out))
    }

    /// [`Shared::change`] with `claim`'s claim after the change in its
    /// transaction, when it commits one; answers what the claim took.
    async fn change_then<T, U, E>(
        &self,
        op: Op,
        ids: &[TaskId],
        claim: Option<ClaimAsk>,
        decide: impl FnOnce(&State, Timestamp) -> Result<(Event, T), Settled<U, E>>,
        then: impl FnOnce(&State, T) -> U,
    ) -> Result<Result<(U, Vec<lease::ClaimedRow>), E>, JournalError> {
        let limits = self.inner.limits;
        for id in ids {
            self.inner.claims.forget(*id);
        }
        let since = Instant::now();
        let decided = transact::decide(&self.inner.db, limits, ids, claim, decide, then).await;
        self.held(op, since);
        match decided {
            Ok(Ok(d)) => {
                self.told(&d.made);
                Ok(Ok((d.out, d.claimed)))
            }
            Ok(Err(Settled::Answer(out))) => Ok(Ok((out, Vec::new()))),
            Ok(Err(Settled::Refused(e))) => Ok(Err(e)),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// [`Shared::change`] for a call on one task whose refusals are its
    /// own error type.
    async fn on_task<T, U, E: From<JournalError>>(
        &self,
        op: Op,
        id: TaskId,
        decide: impl FnOnce(&State, Timestamp) -> Result<(Event, T), E>,
        then: impl FnOnce(&State, T) -> U,
    ) -> Result<U, E> {
        self.change(
            op,
            &[id],
            |st, now| decide(st, now).map_err(Settled::Refused),
            then,
        )
        .await?
    }

    /// Runs `f` on a state of the tasks `ids`, their parents, children
    /// and upstream tasks, and every queue, as they are now.
    pub async fn look<T>(
        &self,
        ids: &[TaskId],
        f: impl FnOnce(&State) -> T,
    ) -> Result<T, JournalError> {
        let since = Instant::now();
        let st = self.near(ids).await.map_err(unavailable)?;
        self.held(Op::Peek, since);
        Ok(f(&st))
    }

    /// Up to `limit` tasks `viewer` may see that `filter` selects, after
    /// `after`: the page's tasks and their families are all it reads.
    pub async fn page(
        &self,
        viewer: &Viewer,
        filter: &Filter,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<Page, JournalError> {
        let since = Instant::now();
        let read = async {
            let client = self.inner.db.client().await?;
            let keep = |v: ShelfView<'_>| filter.selects(viewer, v) && shows(viewer, v.sight);
            shelves::scan(&client, filter, after, limit, keep).await
        };
        let (ids, more) = read.await.map_err(unavailable)?;
        let st = self.near(&ids).await.map_err(unavailable)?;
        self.held(Op::Query, since);
        let tasks = ids
            .iter()
            .filter_map(|id| st.tasks.get(id))
            .map(|t| st.snapshot(t, viewer))
            .collect();
        Ok(Page { tasks, more })
    }

    /// Runs `f` on the queues and every shelf's totals (counts and
    /// summaries: one grouped statement, no task read).
    pub async fn totals<T>(
        &self,
        f: impl FnOnce(&State, &[Totals<'_>]) -> T,
    ) -> Result<T, JournalError> {
        let (st, found) = self.shelves().await?;
        let totals: Vec<Totals<'_>> = found.iter().map(shelves::Shelf::totals).collect();
        Ok(f(&st, &totals))
    }

    /// A state of the queues (and no task), and every shelf.
    async fn shelves(&self) -> Result<(State, Vec<shelves::Shelf>), JournalError> {
        let since = Instant::now();
        let read = async {
            let client = self.inner.db.client().await?;
            futures_util::try_join!(self.configs(), shelves::all(&client))
        };
        let (queues, found) = read.await.map_err(unavailable)?;
        self.held(Op::Query, since);
        let st = transact::state_of(&queues, Vec::new(), self.inner.limits, Timestamp::now());
        Ok((st, found))
    }

    /// Runs `f` on a state of every task and queue (the start's audits:
    /// they read every row).
    pub async fn all<T>(&self, f: impl FnOnce(&State) -> T) -> Result<T, JournalError> {
        let since = Instant::now();
        let st = self.everything().await.map_err(unavailable)?;
        self.held(Op::Query, since);
        Ok(f(&st))
    }

    /// A state of the tasks `ids`, their parents, children and upstream
    /// tasks, and every queue, as they are now.
    async fn near(&self, ids: &[TaskId]) -> Result<State, Error> {
        let found = match ids {
            [] => Vec::new(),
            ids => {
                let client = self.inner.db.client().await?;
                tasks::load(&client, ids, false).await?
            }
        };
        self.around(found).await
    }

    /// A state of `found`, their parents, children and upstream tasks
    /// (read when they have any), and every queue.
    async fn around(&self, found: Vec<crate::queue::Task>) -> Result<State, Error> {
        // A read's clock only files delayed tasks as such in its state;
        // every change decides on the database's clock.
        let now = Timestamp::now();
        let configs = self.configs().await?;
        let have: Vec<TaskId> = found.iter().map(|t| t.id).collect();
        let mut more: Vec<TaskId> = found
            .iter()
            .flat_map(|t| {
                t.parent
                    .into_iter()
                    .chain(t.children.iter().copied())
                    .chain(t.spec.depends_on.iter().copied())
            })
            .filter(|id| !have.contains(id))
            .collect();
        let mut found = found;
        if !more.is_empty() {
            more.sort_unstable();
            more.dedup();
            let client = self.inner.db.client().await?;
            found.extend(tasks::load(&client, &more, false).await?);
            // The state holds them in the order they were made.
            found.sort_by_key(|t| t.created_at);
        }
        Ok(transact::state_of(&configs, found, self.inner.limits, now))
    }

    /// Every queue's config, read at most [`configs::FRESH_FOR`] ago.
    async fn configs(&self) -> Result<configs::Configs, Error> {
        self.inner.configs.get(&self.inner.db).await
    }

    /// Whether `queue` is a server queue; `None` when it was never
    /// provisioned (read again before it is answered so).
    pub async fn is_server(&self, queue: &Name) -> Result<Option<bool>, JournalError> {
        let held = self.configs().await.map_err(unavailable)?;
        if let Some(q) = held.get(queue) {
            return Ok(Some(q.server));
        }
        let read = self.inner.configs.read(&self.inner.db).await;
        Ok(read.map_err(unavailable)?.get(queue).map(|q| q.server))
    }

    /// Runs `f` on a state of the tasks attempted and not ended, and
    /// every queue.
    pub async fn started<T>(&self, f: impl FnOnce(&State) -> T) -> Result<T, JournalError> {
        let st = self
            .every_where("attempt > 0 AND state NOT IN ('succeeded', 'failed', 'cancelled')")
            .await
            .map_err(unavailable)?;
        Ok(f(&st))
    }

    async fn everything(&self) -> Result<State, Error> {
        self.every_where("true").await
    }

    /// A state of every task `condition` (SQL, on `tasks`) selects.
    async fn every_where(&self, condition: &str) -> Result<State, Error> {
        let client = self.inner.db.client().await?;
        let now = db_now(&client).await?;
        let ids: Vec<TaskId> = client
            .query(&format!("SELECT id FROM tasks WHERE {condition}"), &[])
            .await?
            .iter()
            .map(|r| TaskId(r.get::<_, i64>(0) as u64))
            .collect();
        let found = tasks::load(&client, &ids, false).await?;
        let queues = self.configs().await?;
        Ok(transact::state_of(&queues, found, self.inner.limits, now))
    }

    /// Provisions a queue, or changes the fields `patch` names of an
    /// existing one, in one transaction on its locked row.
    pub async fn provision(&self, patch: QueuePatch) -> Result<Provisioned, EnqueueError> {
        let since = Instant::now();
        let merge = |current: Option<&QueueConfig>| {
            let config = patch.over(current);
            check_queue(&config).map(|()| config)
        };
        let written = transact::provision(&self.inner.db, &patch.name, merge).await;
        self.inner.configs.forget();
        self.held(Op::Queue, since);
        let written = written.map_err(unavailable)??;
        if written.changed {
            let event = Event::QueueSet {
                config: written.config.clone(),
            };
            self.told(&[(event, Vec::new())]);
        }
        Ok(Provisioned {
            config: written.config,
            created: written.created,
        })
    }

    /// Enqueues the specs in one transaction, with their upstream tasks
    /// and any task with one of their idempotency keys locked; each has
    /// its own outcome, as in the embedded queue.
    pub async fn enqueue_many(
        &self,
        specs: Vec<TaskSpec>,
        viewer: &Viewer,
        source_pack: Option<&Name>,
        dry_run: bool,
    ) -> Result<Vec<Result<Enqueued, EnqueueError>>, JournalError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut ids: Vec<TaskId> = specs
                .iter()
                .flat_map(|s| s.depends_on.iter().copied())
                .collect();
            ids.extend(self.keyed(&specs, &viewer.key).await?);
            ids.sort_unstable();
            ids.dedup();
            let specs = specs.clone();
            let since = Instant::now();
            let decided = transact::run(
                &self.inner.db,
                self.inner.limits,
                &ids,
                None,
                |step, now| {
                    let mut out = Vec::with_capacity(specs.len());
                    for spec in specs {
                        let draw = &mut task::random_id;
                        let st = step.state();
                        out.push(
                            match st.decide_enqueue(spec, source_pack, now, viewer, draw) {
                                Ok(Enqueue::Existing(id)) => {
                                    Ok(Enqueued::Existing(id, st.tasks[&id].state))
                                }
                                Ok(Enqueue::New(_, _)) if dry_run => Ok(Enqueued::WouldCreate),
                                Ok(Enqueue::New(ev, id)) => {
                                    step.apply(ev);
                                    let state = step.state().tasks.get(&id).map(|t| t.state);
                                    Ok(Enqueued::Created(id, state.unwrap_or(TaskState::Queued)))
                                }
                                Err(e) => Err(e),
                            },
                        );
                    }
                    Ok::<_, std::convert::Infallible>(out)
                },
            )
            .await;
            self.held(Op::Enqueue, since);
            match decided {
                Ok(Ok(d)) => {
                    self.told(&d.made);
                    return Ok(d.out);
                }
                Ok(Err(never)) => match never {},
                Err(e) if tries < RACES && lost_race(&e) => continue,
                Err(e) => return Err(unavailable(e)),
            }
        }
    }

    /// The tasks `key` enqueued with one of the idempotency keys of
    /// `specs` in their namespaces.
    async fn keyed(&self, specs: &[TaskSpec], key: &Name) -> Result<Vec<TaskId>, JournalError> {
        let (namespaces, keys): (Vec<&str>, Vec<&str>) = specs
            .iter()
            .filter_map(|s| Some((s.namespace.as_str(), s.idempotency_key.as_deref()?)))
            .unzip();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let client = self.inner.db.client().await.map_err(unavailable)?;
        let rows = client
            .query(
                "SELECT t.id FROM tasks t JOIN unnest($1::text[], $2::text[]) AS k(ns, key) \
                 ON t.namespace = k.ns AND t.idempotency_key = k.key WHERE t.requester = $3",
                &[&namespaces, &keys, &key.as_str()],
            )
            .await
            .map_err(|e| unavailable(e.into()))?;
        Ok(rows
            .iter()
            .map(|r| TaskId(r.get::<_, i64>(0) as u64))
            .collect())
    }

    /// The (task, attempt) a worker handle stands for.
    pub async fn handle(&self, handle: &str) -> Result<Option<(TaskId, Attempt)>, JournalError> {
        let client = self.inner.db.client().await.map_err(unavailable)?;
        let row = client
            .query_opt(
                "SELECT task_id, attempt FROM handles WHERE handle = $1",
                &[&handle],
            )
            .await
            .map_err(|e| unavailable(e.into()))?;
        Ok(row.map(|r| {
            (
                TaskId(r.get::<_, i64>(0) as u64),
                Attempt(r.get::<_, i32>(1) as u32),
            )
        }))
    }

    /// Claims the next task (see [`Queue::claim_next`]); `queue_handle`
    /// is the handle its handover releases through.
    pub async fn claim_next(
        &self,
        queue_handle: &Queue,
        queue: &Name,
        kinds: Option<&[Name]>,
        viewer: &Viewer,
        wait: Duration,
    ) -> Result<Option<Claimed>, TaskCallError> {
        let deadline = tokio::time::Instant::now() + wait;
        let grants = Arc::new(Grants::of(viewer));
        loop {
            let mine = self.inner.ready.notified();
            tokio::pin!(mine);
            mine.as_mut().enable();
            // Enabled before the claim, as `mine` is: a wake-up that comes
            // while the claim runs is kept, not lost to the next poll.
            let theirs = self.inner.heard.as_ref().map(|n| Box::pin(n.notified()));
            let mut theirs = theirs.map(|mut n| {
                n.as_mut().enable();
                n
            });
            if self.inner.polls_ended.load(Ordering::SeqCst) {
                return Ok(None);
            }
            let ask = ask(queue, grants.clone(), viewer, kinds);
            let since = Instant::now();
            let rows = self.inner.claimer.call(ask).await;
            self.held(Op::Claim, since);
            let rows = rows.map_err(|e| JournalError::Unavailable(e.to_string()))?;
            if let Some(row) = rows.into_iter().next() {
                return Ok(Some(self.claimed(queue_handle, row, viewer).await?));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let theirs = async {
                match theirs.as_mut() {
                    Some(n) => n.as_mut().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut mine => {}
                () = theirs => {}
                () = tokio::time::sleep_until(deadline.min(now + POLL_EVERY)) => {}
            }
        }
    }

    /// The answer of a claim the claim statement made (with the task as
    /// it left it: only its relatives are read, when it has any).
    async fn claimed(
        &self,
        queue_handle: &Queue,
        row: lease::ClaimedRow,
        viewer: &Viewer,
    ) -> Result<Claimed, JournalError> {
        let handover = Handover::new(queue_handle.clone(), row.id(), &row.lease().id);
        let id = row.id();
        let st = self
            .around(vec![row.into_task()])
            .await
            .map_err(unavailable)?;
        let t = st.tasks.get(&id).ok_or_else(|| {
            unavailable(Error::Corrupt(format!(
                "task {id} was claimed but cannot be read back"
            )))
        })?;
        let lease = t.lease.as_deref().cloned().ok_or_else(|| {
            unavailable(Error::Corrupt(format!(
                "task {id} was claimed but has no lease"
            )))
        })?;
        let event = Event::Claimed {
            id,
            lease: lease.clone(),
            at: Timestamp::now(),
        };
        let moved = [Transition {
            id,
            from: Some(TaskState::Queued),
            to: TaskState::Claimed,
            attempt: t.attempt,
            sight: Sight::of(t),
        }];
        self.told(&[(event, moved.to_vec())]);
        self.inner.claims.keep(t);
        Ok(Claimed {
            task: st.snapshot(t, viewer),
            lease,
            handover,
        })
    }

    /// Claims task `id` for `viewer`.
    pub async fn claim(
        &self,
        queue_handle: &Queue,
        id: TaskId,
        viewer: &Viewer,
    ) -> Result<Claimed, TaskCallError> {
        let fresh = (task::new_lease_id(), new_handle());
        self.on_task(
            Op::Claim,
            id,
            |st, now| Ok((st.decide_claim(id, &viewer.key, fresh.0, fresh.1, now)?, ())),
            |st, ()| {
                let t = &st.tasks[&id];
                let lease = t.lease.as_deref().cloned().expect("just claimed");
                Claimed {
                    handover: Handover::new(queue_handle.clone(), id, &lease.id),
                    task: st.snapshot(t, viewer),
                    lease,
                }
            },
        )
        .await
    }

    /// Releases a lease whose claim was never handed over, in the
    /// background (nobody waits for it).
    pub fn release_undelivered(&self, id: TaskId, lease: &LeaseId) {
        let (me, lease) = (self.clone(), lease.clone());
        tokio::spawn(async move {
            let released = me
                .on_task(
                    Op::Release,
                    id,
                    |st, now| {
                        Ok::<_, TaskCallError>((st.decide_release(id, &lease, None, now)?, ()))
                    },
                    |_, ()| (),
                )
                .await;
            match released {
                Ok(()) => {
                    tracing::info!(task = %id, "claim abandoned before its answer was handed over; lease released")
                }
                Err(e) => tracing::debug!(task = %id, error = %e, "abandoned claim not released"),
            }
        });
    }

    /// Extends a live lease held by `by`; returns the new expiry.
    pub async fn heartbeat(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
    ) -> Result<Timestamp, TaskCallError> {
        self.on_task(
            Op::Heartbeat,
            id,
            |st, now| {
                let ev = st.decide_heartbeat(id, lease_id, by, now)?;
                let Event::Heartbeat { expires_at, .. } = &ev else {
                    unreachable!("heartbeat")
                };
                let at = *expires_at;
                Ok((ev, at))
            },
            |_, at| at,
        )
        .await
    }

    /// Returns a claimed task to the queue.
    pub async fn release(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: Option<&Name>,
    ) -> Result<TaskState, TaskCallError> {
        self.on_task(
            Op::Release,
            id,
            |st, now| Ok((st.decide_release(id, lease_id, by, now)?, ())),
            |st, ()| st.tasks[&id].state,
        )
        .await
    }

    /// Submits a result under a live lease; durable when it returns. The
    /// receipt is a row, and an object under this daemon's root too.
    /// `seen` is the task as the caller's access check answered it (which
    /// may be as this daemon's claim left it, [`Shared::as_claimed`]): the
    /// submit is decided on it and recorded by the fenced completion
    /// ([`super::complete`]), coalesced with others; a refusal or a resend
    /// is told again on the task as it is now; one whose change reaches
    /// other tasks is decided on its family in a transaction. With
    /// `after`, the next task is claimed in the same transaction, when the
    /// submit changed anything and one is there to claim.
    pub async fn submit(
        &self,
        queue_handle: &Queue,
        seen: &crate::queue::Task,
        lease_id: &LeaseId,
        input: &SubmitInput,
        by: &Name,
        after: Option<ClaimAfter<'_>>,
    ) -> Result<((Sha256, bool, TaskState), Option<Claimed>), SubmitError> {
        let id = seen.id;
        let claim = after.map(|a| ask(a.queue, Arc::new(Grants::of(a.viewer)), a.viewer, a.kinds));
        let configs = self.configs().await.map_err(unavailable)?;
        let limits = self.inner.limits;
        let decide = |t: &crate::queue::Task| {
            complete::decide(t, &configs, limits, lease_id, input, by, Timestamp::now())
        };
        let decided = match decide(seen) {
            Ok(Decision::New(new)) => Ok(Decision::New(new)),
            Ok(Decision::Related) => Ok(Decision::Related),
            Ok(Decision::Existing(..)) | Err(_) => {
                match self.look(&[id], |st| st.tasks.get(&id).cloned()).await? {
                    Some(now) => decide(&now),
                    None => Err(TaskCallError::NotFound.into()),
                }
            }
        };
        self.inner.claims.forget(id);
        let recorded = match decided? {
            Decision::Existing(sha, state) => Some(((sha, false, state), Vec::new())),
            Decision::Related => None,
            Decision::New(new) => self.fenced(*new, claim.clone()).await?,
        };
        let (answer, claimed) = match recorded {
            Some(done) => done,
            None => self.in_family(id, lease_id, input, by, claim).await?,
        };
        let next = match (after, claimed.into_iter().next()) {
            (Some(a), Some(row)) => Some(self.claimed(queue_handle, row, a.viewer).await?),
            _ => None,
        };
        Ok((answer, next))
    }

    /// Task `id` as this daemon's live claim of it left it, and whether
    /// its queue is a server queue; `None` when this daemon keeps no such
    /// claim. Its facts never change; its lease's expiry and its staged
    /// parts may be older than the task's now.
    pub async fn as_claimed(
        &self,
        id: TaskId,
    ) -> Result<Option<(crate::queue::Task, bool)>, JournalError> {
        let Some(t) = self.inner.claims.get(id) else {
            return Ok(None);
        };
        let configs = self.configs().await.map_err(unavailable)?;
        let server = configs.get(&t.spec.queue).is_some_and(|q| q.server);
        Ok(Some((t, server)))
    }

    /// A new submission recorded by the fenced completion, with `claim`
    /// after it in its transaction; `None` when the statement left it to
    /// the task's family transaction.
    async fn fenced(
        &self,
        new: complete::Submission,
        claim: Option<ClaimAsk>,
    ) -> Result<Option<Submitted>, SubmitError> {
        let complete::Submission {
            completion,
            event: (event, moved),
            receipt,
        } = new;
        let state = completion.state;
        let since = Instant::now();
        let done = self.inner.completer.call((completion, claim)).await;
        self.held(Op::Submit, since);
        let (outcome, claimed) = done.map_err(|e| JournalError::Unavailable(e.to_string()))?;
        Ok(match outcome? {
            Completed::Accepted(sha) => {
                self.told(&[(event, moved)]);
                self.inner.store.put_object_later(sha, receipt);
                Some(((sha, true, state), claimed))
            }
            Completed::Existing(sha, state) => Some(((sha, false, state), claimed)),
            Completed::Related => None,
        })
    }

    /// A submit decided on task `id`'s family in one transaction, with
    /// `claim` after it.
    async fn in_family(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        input: &SubmitInput,
        by: &Name,
        claim: Option<ClaimAsk>,
    ) -> Result<Submitted, SubmitError> {
        let (decided, claimed) = self
            .change_then(
                Op::Submit,
                &[id],
                claim,
                |st, now| match st.decide_submit(id, lease_id, input, by, now) {
                    Err(e) => Err(Settled::Refused(e)),
                    Ok(Submit::Existing(id)) => {
                        let t = &st.tasks[&id];
                        let sha = t.submission.as_ref().expect("submitted").receipt;
                        Err(Settled::Answer((sha, false, t.state, None)))
                    }
                    Ok(Submit::New { event, receipt }) => {
                        let Event::Submitted { receipt_sha256, .. } = &event else {
                            unreachable!("submit")
                        };
                        let sha = *receipt_sha256;
                        Ok((event, (sha, receipt)))
                    }
                },
                |st, (sha, receipt)| (sha, true, st.tasks[&id].state, Some(receipt)),
            )
            .await??;
        let (sha, created, state, receipt) = decided;
        if let Some(receipt) = receipt {
            self.inner.store.put_object_later(sha, receipt);
        }
        Ok(((sha, created, state), claimed))
    }

    /// Parks a claimed task held by `by`.
    pub async fn park(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
        park: Park,
    ) -> Result<TaskState, TaskCallError> {
        self.on_task(
            Op::Park,
            id,
            |st, now| Ok((st.decide_park(id, lease_id, by, park, now)?, ())),
            |st, ()| st.tasks[&id].state,
        )
        .await
    }

    /// Resumes a parked task with a new input pin.
    pub async fn resume(
        &self,
        id: TaskId,
        input_ref: Pin,
        by: &Name,
    ) -> Result<TaskState, TaskCallError> {
        self.on_task(
            Op::Resume,
            id,
            |st, now| Ok((st.decide_resume(id, input_ref, by, now)?, ())),
            |st, ()| st.tasks[&id].state,
        )
        .await
    }

    /// Splits a claimed task into children; their upstream tasks are
    /// locked with it.
    pub async fn split(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
        children: Vec<TaskSpec>,
        within: &Viewer,
    ) -> Result<Vec<TaskId>, SplitError> {
        let mut ids: Vec<TaskId> = children
            .iter()
            .flat_map(|c| c.depends_on.iter().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.push(id);
        self.change(
            Op::Split,
            &ids,
            |st, now| {
                let draw = &mut task::random_id;
                let ev = st
                    .decide_split(id, lease_id, by, children, within, draw, now)
                    .map_err(Settled::Refused)?;
                let Event::Split { children, .. } = &ev else {
                    unreachable!("split")
                };
                let ids: Vec<TaskId> = children.iter().map(|c| c.id).collect();
                Ok((ev, ids))
            },
            |_, ids| ids,
        )
        .await?
    }

    /// Cancels a task and its live descendants (see [`Queue::cancel`]).
    pub async fn cancel(
        &self,
        id: TaskId,
        by: &Name,
        only: Option<&[TaskState]>,
    ) -> Result<TaskState, TaskCallError> {
        self.on_task(
            Op::Cancel,
            id,
            |st, now| Ok((st.decide_cancel_in(id, by, only, now)?, ())),
            |st, ()| st.tasks[&id].state,
        )
        .await
    }

    /// Queues a failed or cancelled task again.
    pub async fn retry(
        &self,
        id: TaskId,
        by: &Name,
    ) -> Result<(TaskState, Attempt), TaskCallError> {
        self.on_task(
            Op::Retry,
            id,
            |st, now| Ok((st.decide_retry(id, by, now)?, ())),
            |st, ()| (st.tasks[&id].state, st.tasks[&id].attempt),
        )
        .await
    }

    /// Retries or cancels what `filter` selects (see [`Queue::bulk`]):
    /// selected on a state of every task, each then changed in a
    /// transaction of its own (one that changed meanwhile is left).
    pub async fn bulk(
        &self,
        action: BulkAction,
        viewer: &Viewer,
        filter: &Filter,
        limit: usize,
        dry_run: bool,
    ) -> Result<Bulk, JournalError> {
        let takes = |st: &State, v: ShelfView<'_>| st.bulk_takes(action, viewer, filter, v);
        let count = |st: &State, totals: &[Totals<'_>]| {
            totals
                .iter()
                .filter(|t| takes(st, t.view))
                .map(|t| t.view.len)
                .sum::<usize>()
        };
        let (st, found) = self.shelves().await?;
        let matched = count(
            &st,
            &found.iter().map(shelves::Shelf::totals).collect::<Vec<_>>(),
        );
        let selected = if dry_run || limit == 0 {
            Vec::new()
        } else {
            let client = self.inner.db.client().await.map_err(unavailable)?;
            let keep = move |v: ShelfView<'_>| takes(&st, v);
            shelves::scan(&client, filter, None, limit, keep)
                .await
                .map_err(unavailable)?
                .0
        };
        let mut done = Vec::new();
        for id in selected {
            let changed = self
                .on_task(
                    Op::Bulk,
                    id,
                    |st, now| {
                        if !action.takes(st.task(id)?.state) {
                            return Err(TaskCallError::InvalidState {
                                state: st.tasks[&id].state,
                                action: "bulk",
                            });
                        }
                        Ok((st.decide_bulk(action, id, &viewer.key, now)?, ()))
                    },
                    |st, ()| {
                        let t = &st.tasks[&id];
                        (t.id, t.state, t.attempt)
                    },
                )
                .await;
            match changed {
                Ok(d) => done.push(d),
                Err(TaskCallError::Journal(e)) => return Err(e),
                Err(_) => {}
            }
        }
        let remaining = self.totals(count).await?;
        Ok(Bulk {
            matched,
            done,
            remaining,
        })
    }

    /// Records a staged part for the live attempt of `id`.
    pub async fn stage(
        &self,
        id: TaskId,
        attempt: Attempt,
        name: String,
        sha256: Sha256,
    ) -> Result<(), TaskCallError> {
        self.on_task(
            Op::Stage,
            id,
            |st, now| Ok((st.decide_stage(id, attempt, name, sha256, now)?, ())),
            |_, ()| (),
        )
        .await
    }

    /// Task `id` as `viewer` sees it, after `rule` allowed its facts.
    pub async fn task<E>(
        &self,
        id: TaskId,
        viewer: &Viewer,
        rule: impl FnOnce(&TaskFacts<'_>) -> Result<(), E>,
    ) -> Result<TaskSnap, E>
    where
        E: From<TaskCallError> + From<JournalError>,
    {
        self.look(&[id], |st| st.task_as(id, viewer, rule)).await?
    }

    /// Every queue's tasks per state, zeros included.
    pub async fn task_counts(&self) -> Result<Vec<(Name, Vec<(TaskState, u64)>)>, JournalError> {
        let rows = async {
            let client = self.inner.db.client().await?;
            let queues = self.configs().await?;
            let counts = client
                .query(
                    "SELECT queue, state, count(*) FROM tasks GROUP BY queue, state",
                    &[],
                )
                .await?;
            Ok::<_, Error>((queues, counts))
        };
        let (queues, counts) = rows.await.map_err(unavailable)?;
        Ok(queues
            .keys()
            .map(|q| {
                let per = TaskState::ALL
                    .iter()
                    .map(|s| {
                        let n = counts
                            .iter()
                            .find(|r| {
                                r.get::<_, &str>(0) == q.as_str()
                                    && r.get::<_, &str>(1) == s.as_str()
                            })
                            .map_or(0, |r| r.get::<_, i64>(2) as u64);
                        (*s, n)
                    })
                    .collect();
                (q.clone(), per)
            })
            .collect())
    }

    /// While this daemon holds the maintenance lease, ends lapsed leases
    /// every 250 ms and prunes old events every minute until `stop`
    /// resolves; then gives the lease up.
    pub async fn sweep_until(&self, stop: impl std::future::Future<Output = ()>) {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        let mut prune = tokio::time::interval(PRUNE_EVERY);
        prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut term = None;
        loop {
            tokio::select! {
                _ = tick.tick() => term = self.maintain(term).await,
                _ = prune.tick(), if term.is_some() => self.prune().await,
                () = &mut stop => break,
            }
        }
        if let Some(t) = term {
            let _ = leader::resign(&self.inner.db, "maintenance", &self.inner.holder, t).await;
        }
    }

    /// One round of maintenance: renews (or takes) the lease, and while
    /// it is held, ends lapsed leases. Answers the term held.
    async fn maintain(&self, held: Option<i64>) -> Option<i64> {
        let holder = &self.inner.holder;
        let term = match leader::acquire(&self.inner.db, "maintenance", holder, LEADER_TTL).await {
            Ok(Some(t)) => t,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot reach the queue database for maintenance; retrying");
                return None;
            }
        };
        if held != Some(term.term) {
            tracing::info!(
                term = term.term,
                "this daemon leads the queue's maintenance"
            );
        }
        if let Err(e) = self.expire().await {
            tracing::warn!(error = %e, "ending lapsed leases failed; retrying");
        }
        Some(term.term)
    }

    /// Deletes the event rows older than [`EVENTS_KEPT`].
    async fn prune(&self) {
        match events::prune(&self.inner.db, EVENTS_KEPT).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(rows = n, "pruned old events"),
            Err(e) => tracing::warn!(error = %e, "pruning old events failed; retrying"),
        }
    }

    /// Ends the leases that have lapsed on the database's clock, each
    /// decided again under its row lock (a renewed or ended lease is
    /// left alone).
    async fn expire(&self) -> Result<(), JournalError> {
        let lapsed: Vec<TaskId> = {
            let client = self.inner.db.client().await.map_err(unavailable)?;
            client
                .query(
                    "SELECT id FROM tasks WHERE state = 'claimed' AND lease_expires <= now() \
                     ORDER BY lease_expires LIMIT $1",
                    &[&SWEEP_BATCH],
                )
                .await
                .map_err(|e| unavailable(e.into()))?
                .iter()
                .map(|r| TaskId(r.get::<_, i64>(0) as u64))
                .collect()
        };
        for id in lapsed {
            let ended = self
                .change(
                    Op::Sweep,
                    &[id],
                    |st, now| {
                        let ev = st
                            .decide_expiries(now)
                            .into_iter()
                            .find(|ev| matches!(ev, Event::Released { id: e, .. } if *e == id));
                        match ev {
                            Some(ev) => Ok((ev, ())),
                            None => Err(Settled::<_, std::convert::Infallible>::Answer(None)),
                        }
                    },
                    |st, ()| Some(st.tasks[&id].attempt),
                )
                .await?;
            if let Ok(Some(attempt)) = ended {
                tracing::info!(task = %id, attempt = attempt.0, "lease expired");
            }
        }
        Ok(())
    }
}

/// One claimant's ask for one task of `queue`, with a fresh lease and
/// handle.
fn ask(queue: &Name, grants: Arc<Grants>, viewer: &Viewer, kinds: Option<&[Name]>) -> ClaimAsk {
    ClaimAsk {
        queue: queue.clone(),
        grants,
        holder: viewer.key.clone(),
        kinds: kinds.map(|ks| ks.iter().map(|k| k.as_str().to_string()).collect()),
        leases: vec![(task::new_lease_id(), new_handle())],
    }
}

async fn db_now(client: &impl deadpool_postgres::GenericClient) -> Result<Timestamp, Error> {
    let us: i64 = client
        .query_one(
            &client.prepare_cached("SELECT to_micros(now())").await?,
            &[],
        )
        .await?
        .get(0);
    crate::database::time(us)
}

/// Whether a change failed only because it lost a race it can win on
/// a second try: a concurrent insert of the same idempotency key, a
/// deadlock, a serialization failure.
fn lost_race(e: &Error) -> bool {
    let Error::Statement(e) = e else { return false };
    [
        SqlState::UNIQUE_VIOLATION,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::T_R_SERIALIZATION_FAILURE,
    ]
    .iter()
    .any(|c| e.code() == Some(c))
}

/// A database failure, as the queue's callers are told it.
fn unavailable(e: Error) -> JournalError {
    JournalError::Unavailable(e.to_string())
}
