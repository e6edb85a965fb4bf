//! The queue's answers to questions: one task as a viewer sees it, a page
//! of tasks, counts, the status summary, a queue's config and what follows
//! from it for a task (attempt limit, backoff, lease length, ctx-dir
//! template). Each is read
//! under the lock from the shelves and indexes (`shelf`, `index`), never
//! by walking the table, and returned as an owned snapshot, so the caller
//! renders it after the lock is gone. The work under the lock follows the
//! answer's size and the number of shelves, not the number of tasks.
//!
//! What a viewer may see is decided by its [`Viewer`] on each shelf's
//! [`Sight`], the same rule `auth::access` applies to one task.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::shelf::{ShelfView, Sight};
use super::task::{Attempt, Task, TaskId, TaskState};
use super::{Journal, JournalError, QueueConfig, State, TaskCallError};
use crate::store::envelope::{TaskFacts, Viewer};
use crate::store::{Name, Sha256};

/// The filters of a task listing (`GET /v1/tasks`, the bulk routes).
/// They select; they grant nothing.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only this queue.
    pub queue: Option<Name>,
    /// Only this kind.
    pub kind: Option<Name>,
    /// Only this state.
    pub state: Option<TaskState>,
    /// Only this namespace.
    pub namespace: Option<Name>,
    /// Only tasks the import of this seed pack enqueued.
    pub source_pack: Option<Name>,
}

impl Filter {
    /// Whether a shelf passes every filter given, as `viewer` sees it: a
    /// queue it may not see named selects nothing, as a queue never
    /// provisioned does.
    pub fn selects(&self, viewer: &Viewer, v: ShelfView<'_>) -> bool {
        let s = v.sight;
        self.queue
            .as_ref()
            .is_none_or(|q| s.queue == *q && viewer.shows_queue(q))
            && self.kind.as_ref().is_none_or(|k| s.kind == *k)
            && self.state.is_none_or(|st| v.state == st)
            && self.namespace.as_ref().is_none_or(|n| s.namespace == *n)
            && self
                .source_pack
                .as_ref()
                .is_none_or(|p| s.source_pack.as_ref() == Some(p))
    }
}

/// A task related to another (parent, child, upstream) as a viewer who
/// may see it sees it.
#[derive(Clone, Debug)]
pub struct Related {
    /// Its id.
    pub id: TaskId,
    /// Its state.
    pub state: TaskState,
    /// Whether it succeeded (terminal tasks only).
    pub ok: Option<bool>,
    /// Its last receipt.
    pub receipt: Option<Sha256>,
}

/// One task as a viewer sees it, owned: the task, its effective attempt
/// limit, and the related tasks the viewer may see (the others left out,
/// so their ids never show).
#[derive(Clone, Debug)]
pub struct TaskSnap {
    /// The task.
    pub task: Task,
    /// Its effective attempt limit.
    pub max_attempts: u32,
    /// Its parent, when the viewer may see it.
    pub parent: Option<TaskId>,
    /// Its children the viewer may see.
    pub children: Vec<Related>,
    /// Its upstream tasks the viewer may see.
    pub upstream: Vec<Related>,
}

/// A page of tasks in creation order.
#[derive(Clone, Debug)]
pub struct Page {
    /// The tasks.
    pub tasks: Vec<TaskSnap>,
    /// Whether more tasks follow the last one.
    pub more: bool,
}

/// A queue's tasks per state, as a viewer may count them.
#[derive(Clone, Debug)]
pub struct QueueCounts {
    /// The queue.
    pub config: QueueConfig,
    /// Tasks per state (every state, zeros included).
    pub counts: Vec<(TaskState, u64)>,
}

/// A queue's summary for `GET /v1/status`.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The queue.
    pub name: Name,
    /// Tasks per state (every state, zeros included).
    pub counts: Vec<(TaskState, u64)>,
    /// When the longest-waiting queued task became queued.
    pub oldest_queued_since: Option<Timestamp>,
    /// Claimed tasks whose lease has not lapsed.
    pub live_leases: u64,
}

impl State {
    /// The effective attempt limit of a task.
    pub fn max_attempts(&self, t: &Task) -> u32 {
        t.spec
            .max_attempts
            .or_else(|| self.queues.get(&t.spec.queue).map(|q| q.max_attempts))
            .unwrap_or(1)
    }

    /// When the attempt after `ended` (which ended at `at`) may start,
    /// after the queue's backoff; `None` when `ended` used up the task's
    /// attempts, so it fails. The one retry-or-fail rule (a failed
    /// submit, a release, an expiry).
    pub fn next_attempt(&self, t: &Task, ended: Attempt, at: Timestamp) -> Option<Timestamp> {
        (ended.0 < self.max_attempts(t)).then(|| at + self.backoff(t, ended))
    }

    /// The delay before the attempt after `ended`: the queue's backoff.
    pub fn backoff(&self, t: &Task, ended: Attempt) -> SignedDuration {
        let ms = self
            .queues
            .get(&t.spec.queue)
            .map_or(0, |q| q.backoff.delay_ms(ended.0 + 1));
        SignedDuration::from_millis(i64::try_from(ms).unwrap_or(i64::MAX))
    }

    /// The ctx-dir template of a task with this spec: its own placement,
    /// else its queue's, else the default.
    pub fn template_of(&self, spec: &super::TaskSpec) -> String {
        let queue = || self.queues.get(&spec.queue)?.placement.as_deref();
        spec.placement
            .as_deref()
            .or_else(queue)
            .unwrap_or(super::placement::DEFAULT_PLACEMENT)
            .to_string()
    }

    /// The effective lease length of a task.
    pub fn lease_ttl(&self, t: &Task) -> SignedDuration {
        let s = t
            .spec
            .traits
            .lease_ttl_s
            .or_else(|| self.queues.get(&t.spec.queue).map(|q| q.lease_ttl_s))
            .unwrap_or(300);
        SignedDuration::from_secs(i64::from(s))
    }

    /// What the access rules need to know about a task.
    pub fn facts<'a>(&self, t: &'a Task) -> TaskFacts<'a> {
        t.facts(self.is_server(&t.spec.queue))
    }

    /// A task as `viewer` (who may see it) sees it.
    pub fn snapshot(&self, t: &Task, viewer: &Viewer) -> TaskSnap {
        let related = |ids: &[TaskId]| {
            self.seen(ids, viewer)
                .map(|r| Related {
                    id: r.id,
                    state: r.state,
                    ok: r.ok(),
                    receipt: r.receipts.last().copied(),
                })
                .collect()
        };
        TaskSnap {
            task: t.clone(),
            max_attempts: self.max_attempts(t),
            parent: t
                .parent
                .filter(|p| self.seen(&[*p], viewer).next().is_some()),
            children: related(&t.children),
            upstream: related(&t.spec.depends_on),
        }
    }

    /// The tasks of `ids` that exist and `viewer` may see, in order: a
    /// task's related tasks as the viewer may be shown them.
    fn seen<'a>(&'a self, ids: &'a [TaskId], viewer: &'a Viewer) -> impl Iterator<Item = &'a Task> {
        ids.iter()
            .filter_map(|id| self.tasks.get(id))
            .filter(|r| viewer.sees_task(&self.facts(r)))
    }

    /// Up to `limit` tasks `viewer` may see that `filter` selects, created
    /// after `after` (from the first when `None`; none after a task that
    /// does not exist).
    pub fn page(
        &self,
        viewer: &Viewer,
        filter: &Filter,
        after: Option<TaskId>,
        limit: usize,
    ) -> Page {
        let from = match after {
            None => None,
            Some(c) => match self.tasks.position(&c) {
                Some(pos) => Some(pos),
                None => {
                    return Page {
                        tasks: Vec::new(),
                        more: false,
                    };
                }
            },
        };
        let keep = |v: ShelfView<'_>| filter.selects(viewer, v) && shows(viewer, v.sight);
        let mut positions = self.index.shelves.positions(keep, from);
        let tasks: Vec<TaskSnap> = positions
            .by_ref()
            .take(limit)
            .map(|pos| self.snapshot(self.tasks.at(pos).expect("shelved"), viewer))
            .collect();
        let more = positions.next().is_some();
        Page { tasks, more }
    }

    /// How many tasks are on the shelves `keep` selects.
    pub fn count_where(&self, keep: impl Fn(ShelfView<'_>) -> bool) -> usize {
        self.index
            .shelves
            .all()
            .filter(|v| keep(*v))
            .map(|v| v.len)
            .sum()
    }

    /// Up to `limit` tasks on the shelves `keep` selects, created after
    /// position `after`, in creation order: (position, id).
    pub fn ids_where(
        &self,
        keep: impl Fn(ShelfView<'_>) -> bool,
        after: Option<u32>,
        limit: usize,
    ) -> Vec<(u32, TaskId)> {
        self.index
            .shelves
            .positions(keep, after)
            .take(limit)
            .map(|pos| (pos, self.tasks.at(pos).expect("shelved").id))
            .collect()
    }

    /// Whether `queue` is a server queue.
    pub fn is_server(&self, queue: &Name) -> bool {
        self.queues.get(queue).is_some_and(|q| q.server)
    }

    /// Every shelf with its totals: when its oldest task was queued, and
    /// with `now`, its leases live then. A lease that lapsed and is not
    /// yet swept is looked at one by one; there are only as many as the
    /// sweeper is behind.
    pub fn totals(&self, now: Option<Timestamp>) -> Vec<Totals<'_>> {
        let mut lapsed: Vec<Sight> = match now {
            Some(now) => self
                .index
                .leases
                .iter()
                .take_while(|(expires, _)| !super::task::live_until(*expires, now))
                .filter_map(|(_, id)| self.tasks.get(id).map(Sight::of))
                .collect(),
            None => Vec::new(),
        };
        self.index
            .shelves
            .all_since()
            .map(|(view, oldest_queued)| {
                let mut live_leases = 0;
                if view.state == TaskState::Claimed && now.is_some() {
                    let before = lapsed.len();
                    lapsed.retain(|s| s != view.sight);
                    live_leases = (view.len - (before - lapsed.len())) as u64;
                }
                Totals {
                    view,
                    oldest_queued,
                    live_leases,
                }
            })
            .collect()
    }

    /// The queues `viewer` may see, with the counts of their tasks it may
    /// see.
    pub fn queue_counts(&self, viewer: &Viewer) -> Vec<QueueCounts> {
        queue_counts(&self.queues, &self.totals(None), viewer)
    }

    /// Per queue `viewer` may see, over the tasks it may see: counts per
    /// state, the oldest wait, the live leases at `now`.
    pub fn summary(&self, viewer: &Viewer, now: Timestamp) -> Vec<Summary> {
        summary(&self.queues, &self.totals(Some(now)), viewer)
    }
}

/// One shelf as counts and summaries read it: its view, when its oldest
/// task was queued (a queued shelf), and how many of its leases are live
/// at the time asked (a claimed shelf). The embedded queue reads them
/// from its shelves and lease index ([`State::totals`]), PostgreSQL from
/// one grouped statement, and both answer with [`queue_counts`] and
/// [`summary`].
#[derive(Clone, Copy, Debug)]
pub struct Totals<'a> {
    /// The shelf.
    pub view: ShelfView<'a>,
    /// When its oldest task was queued.
    pub oldest_queued: Option<Timestamp>,
    /// Its leases live at the time asked.
    pub live_leases: u64,
}

/// Whether `viewer` may see a task with this sight.
pub fn shows(viewer: &Viewer, sight: &Sight) -> bool {
    viewer.sees_task(&sight.facts(false))
}

/// The shelves of `queue` that `viewer` may see.
fn seen_on<'a, 'b>(
    totals: &'b [Totals<'a>],
    viewer: &'b Viewer,
    queue: &'b Name,
) -> impl Iterator<Item = &'b Totals<'a>> {
    totals
        .iter()
        .filter(move |t| t.view.sight.queue == *queue && shows(viewer, t.view.sight))
}

/// The tasks on `queue` per state that `viewer` may see.
fn counts_for(totals: &[Totals<'_>], viewer: &Viewer, queue: &Name) -> Vec<(TaskState, u64)> {
    let mut counts: Vec<(TaskState, u64)> = TaskState::ALL.iter().map(|s| (*s, 0)).collect();
    for t in seen_on(totals, viewer, queue) {
        if let Some(c) = counts.iter_mut().find(|(s, _)| *s == t.view.state) {
            c.1 += t.view.len as u64;
        }
    }
    counts
}

/// The queues `viewer` may see, with the counts of their tasks it may
/// see, from the shelves' totals.
pub fn queue_counts(
    queues: &BTreeMap<Name, QueueConfig>,
    totals: &[Totals<'_>],
    viewer: &Viewer,
) -> Vec<QueueCounts> {
    queues
        .values()
        .filter(|q| viewer.shows_queue(&q.name))
        .map(|q| QueueCounts {
            config: q.clone(),
            counts: counts_for(totals, viewer, &q.name),
        })
        .collect()
}

/// Per queue `viewer` may see, over the tasks it may see: counts per
/// state, the oldest wait and the live leases, from the shelves' totals.
pub fn summary(
    queues: &BTreeMap<Name, QueueConfig>,
    totals: &[Totals<'_>],
    viewer: &Viewer,
) -> Vec<Summary> {
    queues
        .keys()
        .filter(|q| viewer.shows_queue(q))
        .map(|q| Summary {
            name: q.clone(),
            counts: counts_for(totals, viewer, q),
            oldest_queued_since: seen_on(totals, viewer, q)
                .filter_map(|t| t.oldest_queued)
                .min(),
            live_leases: seen_on(totals, viewer, q).map(|t| t.live_leases).sum(),
        })
        .collect()
}

impl State {
    /// Task `id` as `viewer` sees it, after `rule` allowed its facts (a
    /// task the rule hides answers as `rule` says).
    pub fn task_as<E: From<TaskCallError>>(
        &self,
        id: TaskId,
        viewer: &Viewer,
        rule: impl FnOnce(&TaskFacts<'_>) -> Result<(), E>,
    ) -> Result<TaskSnap, E> {
        let t = self.task(id)?;
        rule(&self.facts(t))?;
        Ok(self.snapshot(t, viewer))
    }

    /// Task `id`, after `rule` allowed its facts.
    pub fn task_if<E: From<TaskCallError>>(
        &self,
        id: TaskId,
        rule: impl FnOnce(&TaskFacts<'_>) -> Result<(), E>,
    ) -> Result<Task, E> {
        let t = self.task(id)?;
        rule(&self.facts(t))?;
        Ok(t.clone())
    }

    /// Whether a bulk `action` by `viewer` takes the tasks of shelf `v`:
    /// `filter` selects it, the action takes its state, and `viewer` may
    /// end its tasks ([`Viewer::may_end`]).
    pub fn bulk_takes(
        &self,
        action: super::BulkAction,
        viewer: &Viewer,
        filter: &Filter,
        v: ShelfView<'_>,
    ) -> bool {
        filter.selects(viewer, v)
            && action.takes(v.state)
            && viewer.may_end(&v.sight.facts(self.is_server(&v.sight.queue)))
    }

    /// Task `id` as it is now, and whether its queue is a server queue.
    pub fn task_and_server(&self, id: TaskId) -> Option<(Task, bool)> {
        self.tasks
            .get(&id)
            .map(|t| (t.clone(), self.is_server(&t.spec.queue)))
    }

    /// Each of `ids` as it is now (`None`: no such task), and the stage
    /// kinds their queues require.
    pub fn now_of(&self, ids: &[TaskId]) -> (Vec<(TaskId, Option<Task>)>, Vec<Name>) {
        let tasks: Vec<_> = ids
            .iter()
            .map(|id| (*id, self.tasks.get(id).cloned()))
            .collect();
        let required = tasks
            .iter()
            .filter_map(|(_, t)| t.as_ref())
            .filter_map(|t| self.queues.get(&t.spec.queue))
            .flat_map(|q| q.required_stages.iter().cloned())
            .collect();
        (tasks, required)
    }

    /// What a worker's prompt needs besides the task: its effective
    /// attempt limit, and its upstream tasks then children that `viewer`
    /// may see, as they are now.
    pub fn related(&self, task: &Task, viewer: &Viewer) -> (u32, Vec<Task>) {
        let related = self
            .seen(&task.spec.depends_on, viewer)
            .chain(self.seen(&task.children, viewer))
            .filter(|r| r.id != task.id)
            .cloned()
            .collect();
        (self.max_attempts(task), related)
    }

    /// The attempts task `id` has left: none once it ended.
    pub fn attempts_left(&self, id: TaskId) -> u32 {
        self.tasks.get(&id).map_or(0, |t| {
            if t.state.is_terminal() {
                0
            } else {
                self.max_attempts(t).saturating_sub(t.attempt.0)
            }
        })
    }
}

impl Journal {
    /// Task `id` as `viewer` sees it once durable, after `rule` allowed
    /// its facts (a task the rule hides answers as `rule` says).
    pub async fn task<E>(
        &self,
        id: TaskId,
        viewer: &Viewer,
        rule: impl FnOnce(&TaskFacts<'_>) -> Result<(), E>,
    ) -> Result<TaskSnap, E>
    where
        E: From<TaskCallError> + From<JournalError>,
    {
        self.read(|st| st.task_as(id, viewer, rule)).await?
    }

    /// [`State::page`], once what it read is durable.
    pub async fn page(
        &self,
        viewer: &Viewer,
        filter: &Filter,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<Page, JournalError> {
        self.read(|st| st.page(viewer, filter, after, limit)).await
    }

    /// [`State::queue_counts`], once durable.
    pub async fn queue_counts(&self, viewer: &Viewer) -> Result<Vec<QueueCounts>, JournalError> {
        self.read(|st| st.queue_counts(viewer)).await
    }

    /// [`State::summary`] at `now`, once durable.
    pub async fn summary(
        &self,
        viewer: &Viewer,
        now: Timestamp,
    ) -> Result<Vec<Summary>, JournalError> {
        self.read(|st| st.summary(viewer, now)).await
    }

    /// Every queue's tasks per state (every state, zeros included), for
    /// a scrape: counted from the shelves, encoded by the caller after.
    pub async fn task_counts(&self) -> Vec<(Name, Vec<(TaskState, u64)>)> {
        self.peek(|st| {
            st.queues
                .keys()
                .map(|q| (q.clone(), st.index.counts_of(q)))
                .collect()
        })
    }

    /// Whether `queue` is a server queue; `None` when it was never
    /// provisioned.
    pub async fn is_server(&self, queue: &Name) -> Option<bool> {
        self.peek(|st| st.queues.get(queue).map(|q| q.server))
    }

    /// The ctx-dir template of a task with this spec ([`State::template_of`]).
    pub async fn template_of(&self, spec: &super::TaskSpec) -> String {
        self.peek(|st| st.template_of(spec))
    }

    /// Runs `rule` on task `id`'s facts and answers a snapshot of the task
    /// it allowed, without waiting for durability: the facts never change
    /// after enqueue, and whatever the caller then changes is journaled
    /// after what it saw. The snapshot shares the task's spec, so taking
    /// it under the lock copies no brief.
    pub async fn checked<E: From<TaskCallError>>(
        &self,
        id: TaskId,
        rule: impl FnOnce(&TaskFacts<'_>) -> Result<(), E>,
    ) -> Result<Task, E> {
        self.peek(|st| st.task_if(id, rule))
    }

    /// Task `id` as it is now, and whether its queue is a server queue
    /// (a worker call's view of its attempt).
    pub async fn task_now(&self, id: TaskId) -> Option<(Task, bool)> {
        self.peek(|st| st.task_and_server(id))
    }

    /// [`State::now_of`].
    pub async fn tasks_now(&self, ids: &[TaskId]) -> (Vec<(TaskId, Option<Task>)>, Vec<Name>) {
        self.peek(|st| st.now_of(ids))
    }

    /// [`State::related`].
    pub async fn related(&self, task: &Task, viewer: &Viewer) -> (u32, Vec<Task>) {
        self.peek(|st| st.related(task, viewer))
    }

    /// [`State::attempts_left`].
    pub async fn attempts_left(&self, id: TaskId) -> u32 {
        self.peek(|st| st.attempts_left(id))
    }

    /// Runs `f` on a walk over every task before the daemon serves: the
    /// start's audits (what `auth/` must hold, the ctx-dirs to settle),
    /// which read every task once. Nothing that serves calls it.
    pub fn audit<T>(&self, f: impl FnOnce(super::Walk<'_>) -> T) -> T {
        self.peek(|st| f(super::Walk::of(st)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use jiff::{SignedDuration, Timestamp};
    use serde_json::json;

    use super::super::decide::Enqueue;
    use super::super::machine::SplitLimits;
    use super::super::receipt::SubmitInput;
    use super::super::task::LeaseId;
    use super::*;
    use crate::store::{EffectClass, Sha256};

    fn name(s: &str) -> Name {
        Name::parse("name", s).expect("valid")
    }

    /// A small deterministic generator (no seed to keep).
    struct Lcg(u64);

    impl Lcg {
        fn pick(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) as usize) % n
        }
    }

    const VISIBILITY: [&str; 4] = ["private", "surface_only", "allowlist_surfaces", "public"];

    /// A state of `n` tasks over two queues, three namespaces, three
    /// kinds, three requesters and every visibility, moved through claims,
    /// submits and cancels.
    fn state(n: usize, seed: u64) -> State {
        let mut st = State::new(SplitLimits {
            max_depth: 4,
            max_children: 64,
        });
        for (q, server) in [("q1", false), ("q2", true)] {
            let config = serde_json::from_value(json!({"name": q, "server": server})).unwrap();
            let ev = st.decide_queue(config).unwrap();
            st.apply(&ev);
        }
        let mut g = Lcg(seed);
        let now = Timestamp::from_second(1_900_000_000).unwrap();
        let mut next_id = 10_000_000u64;
        for i in 0..n {
            let at = now + SignedDuration::from_millis(i as i64);
            let namespace = ["ns1", "ns2", "ns3"][g.pick(3)];
            let queue = ["q1", "q2"][g.pick(2)];
            let kind = ["k1", "k2", "k3"][g.pick(3)];
            let surface = ["s1", "s2"][g.pick(2)];
            let visibility = VISIBILITY[g.pick(4)];
            let allowed: Vec<&str> = if g.pick(2) == 0 { vec!["s3"] } else { vec![] };
            let spec: super::super::TaskSpec = serde_json::from_value(json!({
                "namespace": namespace, "queue": queue, "kind": kind,
                "effect_class": "read", "producer_surface": surface,
                "visibility_scope": visibility, "allowed_surfaces": allowed,
                "brief": {},
            }))
            .unwrap();
            let requester = name(["r1", "r2", "r3"][g.pick(3)]);
            let pack = (g.pick(4) == 0).then(|| name("pack"));
            next_id -= 1 + g.pick(7) as u64;
            let id = TaskId(next_id);
            let made = st.decide_enqueue(
                spec,
                pack.as_ref(),
                at,
                &Viewer::admin(requester.clone()),
                &mut || id,
            );
            let Ok(Enqueue::New(ev, id)) = made else {
                panic!("enqueued")
            };
            st.apply(&ev);
            let lease = LeaseId(format!("l{i}"));
            match g.pick(5) {
                0 | 1 => {}
                2 => {
                    let ev = st.decide_claim(id, &requester, lease, format!("wh-{i:08x}"), at);
                    st.apply(&ev.unwrap());
                }
                3 => {
                    let ev =
                        st.decide_claim(id, &requester, lease.clone(), format!("wh-{i:08x}"), at);
                    st.apply(&ev.unwrap());
                    let ok = g.pick(2) == 0;
                    let input = SubmitInput::bare(ok, !ok, Sha256::of(&[1]));
                    match st
                        .decide_submit(id, &lease, &input, &requester, at)
                        .unwrap()
                    {
                        super::super::decide::Submit::New { event, .. } => st.apply(&event),
                        super::super::decide::Submit::Existing(_) => unreachable!(),
                    }
                }
                _ => {
                    let ev = st.decide_cancel(id, &requester, at).unwrap();
                    st.apply(&ev);
                }
            }
        }
        st
    }

    /// Viewers of every shape: admin, each requester with some surfaces,
    /// namespaces and queues, one owning nothing.
    fn viewers() -> Vec<Viewer> {
        let set = |xs: &[&str]| xs.iter().map(|x| name(x)).collect::<HashSet<Name>>();
        let mut out = vec![Viewer::admin(name("admin"))];
        for (key, owns, ns, surfaces, queues) in [
            ("r1", true, &["ns1", "ns2"][..], &["s1"][..], &["q1"][..]),
            (
                "r2",
                true,
                &["ns1", "ns2", "ns3"][..],
                &["s3"][..],
                &["q1", "q2"][..],
            ),
            ("r3", false, &["ns3"][..], &["s1", "s2"][..], &["q2"][..]),
            ("r4", true, &["ns2"][..], &[][..], &[][..]),
        ] {
            out.push(Viewer {
                key: name(key),
                owns,
                admin: false,
                claims: true,
                namespaces: set(ns),
                surfaces: set(surfaces),
                queues: set(queues),
                kinds: set(&["k1", "k2", "k3"]),
                effect_classes: [EffectClass::Read].into_iter().collect(),
            });
        }
        out
    }

    /// The filters of a listing, each field given or not.
    fn filters() -> Vec<Filter> {
        let mut out = vec![Filter::default()];
        out.push(Filter {
            queue: Some(name("q1")),
            ..Filter::default()
        });
        out.push(Filter {
            queue: Some(name("q2")),
            state: Some(TaskState::Queued),
            ..Filter::default()
        });
        out.push(Filter {
            kind: Some(name("k2")),
            namespace: Some(name("ns2")),
            ..Filter::default()
        });
        out.push(Filter {
            source_pack: Some(name("pack")),
            state: Some(TaskState::Cancelled),
            ..Filter::default()
        });
        out
    }

    /// What a walk over the whole table selects: the rule the shelves
    /// must answer without walking it.
    fn walked(st: &State, v: &Viewer, f: &Filter) -> Vec<TaskId> {
        st.tasks
            .values()
            .filter(|t| {
                f.queue
                    .as_ref()
                    .is_none_or(|q| t.spec.queue == *q && v.shows_queue(q))
                    && f.kind.as_ref().is_none_or(|k| t.spec.kind == *k)
                    && f.state.is_none_or(|s| t.state == s)
                    && f.namespace.as_ref().is_none_or(|n| t.spec.namespace == *n)
                    && f.source_pack
                        .as_ref()
                        .is_none_or(|p| t.source_pack.as_ref() == Some(p))
                    && v.sees_task(&st.facts(t))
            })
            .map(|t| t.id)
            .collect()
    }

    #[test]
    fn pages_and_counts_from_the_shelves_equal_a_walk_over_the_table() {
        let st = state(3000, 7);
        for v in viewers() {
            for f in filters() {
                let mut got = Vec::new();
                let mut after = None;
                loop {
                    let page = st.page(&v, &f, after, 37);
                    got.extend(page.tasks.iter().map(|t| t.task.id));
                    if !page.more {
                        break;
                    }
                    after = got.last().copied();
                }
                assert_eq!(got, walked(&st, &v, &f), "{} {f:?}", v.key);
            }
            for q in st.queue_counts(&v) {
                let everything = Filter {
                    queue: Some(q.config.name.clone()),
                    ..Filter::default()
                };
                let ids = walked(&st, &v, &everything);
                for (state, n) in &q.counts {
                    let walked = ids.iter().filter(|id| st.tasks[id].state == *state).count();
                    assert_eq!(*n, walked as u64, "{} {} {state:?}", v.key, q.config.name);
                }
            }
            let now = Timestamp::from_second(1_900_000_001).unwrap();
            for s in st.summary(&v, now) {
                let queued = Filter {
                    queue: Some(s.name.clone()),
                    state: Some(TaskState::Queued),
                    ..Filter::default()
                };
                let oldest = walked(&st, &v, &queued)
                    .iter()
                    .map(|id| st.tasks[id].updated_at)
                    .min();
                assert_eq!(s.oldest_queued_since, oldest, "{} {}", v.key, s.name);
            }
        }
    }

    #[test]
    fn a_page_at_a_hundred_thousand_tasks_reads_only_the_page() {
        let st = state(100_000, 11);
        let shelves = st.index.shelves.sights();
        assert!(shelves < 2000, "shelves follow the combinations: {shelves}");
        st.tasks.reads();
        for v in viewers() {
            for f in filters() {
                // No task here has a parent, children or upstream tasks:
                // a page reads its own tasks and nothing else.
                let page = st.page(&v, &f, None, 1);
                assert_eq!(st.tasks.reads(), page.tasks.len(), "{} {f:?}", v.key);
                let page = st.page(&v, &f, None, 100);
                assert_eq!(st.tasks.reads(), page.tasks.len(), "{} {f:?}", v.key);
                if let Some(last) = page.tasks.last() {
                    let next = st.page(&v, &f, Some(last.task.id), 100);
                    assert_eq!(st.tasks.reads(), next.tasks.len());
                }
                let _ = st.queue_counts(&v);
                let _ = st.summary(&v, Timestamp::from_second(1_900_000_000).unwrap());
                assert_eq!(st.tasks.reads(), 0, "counts and summaries read no task");
            }
        }
        let _ = walked(&st, &Viewer::admin(name("admin")), &Filter::default());
        assert_eq!(st.tasks.reads(), 100_000, "a walk is counted");
    }

    #[test]
    fn a_shelf_key_borrowed_from_a_task_finds_the_owned_one() {
        let mut st = state(200, 3);
        let before = st.index.shelves.sights();
        let ids: Vec<TaskId> = st.tasks.values().map(|t| t.id).collect();
        for id in ids {
            if st.tasks[&id].state == TaskState::Queued {
                let ev = st
                    .decide_cancel(id, &name("admin"), Timestamp::now())
                    .unwrap();
                st.apply(&ev);
            }
        }
        let on: usize = st.index.shelves.all().map(|v| v.len).sum();
        assert_eq!(on, st.tasks.len());
        assert!(st.index.shelves.sights() <= before);
        assert_eq!(st.index.shelves.ready_sets().count(), 0);
    }
}
