//! A change decided by the embedded queue's own rules on the rows it
//! touches: one transaction locks the task named and its family (its
//! descendants, what waits on them, their parents and siblings, and
//! every upstream of those), builds a [`State`] of just those tasks and
//! the queues, lets the caller decide an [`Event`] on it at the
//! database's clock, applies it, and writes back every task it changed
//! or made (or whose counters it changed: a dependent's open upstreams),
//! with the receipt of a submit and an event row per transition. So park, resume, split, cancel, retry and release answer
//! as the embedded queue does, from the same code; the hot path (claims
//! and completions) has statements of its own ([`super::lease`]).
//!
//! Ids are locked in id order, so two changes on overlapping families
//! wait for each other instead of deadlocking; if the family grew while
//! it was being locked (a task enqueued on it meanwhile), it is locked
//! again as it is now.
//!
//! A change refused (or a provision that changes nothing) rolls its
//! transaction back and waits for that before it answers. A transaction
//! only dropped is rolled back when its connection gets to the message,
//! and until then its row locks hold: a claim's `SKIP LOCKED` on another
//! connection passed over the task, so a claim right after a refused
//! resume answered 204.

use std::collections::{BTreeMap, HashMap};

use deadpool_postgres::GenericClient;
use jiff::Timestamp;

use super::lease::{self, ClaimAsk, ClaimedRow};
use super::tasks::{self, Counters};
use crate::database::{Database, Error};
use crate::queue::event::Event;
use crate::queue::machine::{SplitLimits, State, Transition};
use crate::queue::spec::QueueConfig;
use crate::queue::table::TaskTable;
use crate::queue::{Task, TaskId};
use crate::store::Name;

/// Times a family may grow while it is locked before the change gives up
/// (and is answered as a database error, to be retried by the caller).
const LOCK_ROUNDS: usize = 4;

/// What a change did: the caller's answer, and each event committed
/// with the transitions it made.
#[derive(Debug)]
pub struct Decided<T> {
    /// What the decision answered.
    pub out: T,
    /// The events committed, in order, each with its tasks' changes of
    /// state.
    pub made: Vec<(Event, Vec<Transition>)>,
    /// What the claim asked to follow the change took (committed with
    /// it).
    pub claimed: Vec<ClaimedRow>,
}

/// A change being decided: the family's state, with every event decided
/// on it so far applied (committed together at the end).
pub struct Step {
    st: State,
    made: Vec<(Event, Vec<Transition>)>,
    broken: Option<String>,
}

impl Step {
    /// The family's state, as the events so far left it.
    pub fn state(&self) -> &State {
        &self.st
    }

    /// Applies `ev`, decided on [`Step::state`]; an event the state
    /// cannot take (a bug) fails the whole change.
    pub fn apply(&mut self, ev: Event) {
        if self.broken.is_some() {
            return;
        }
        match self.st.applies(&ev) {
            Ok(()) => {
                let moved = self.st.apply_recorded(&ev);
                self.made.push((ev, moved));
            }
            Err(why) => self.broken = Some(why),
        }
    }
}

/// A state of `found` (each once, in the order they were made) and
/// `queues` at `now`.
pub fn state_of(
    queues: &BTreeMap<Name, QueueConfig>,
    found: Vec<Task>,
    limits: SplitLimits,
    now: Timestamp,
) -> State {
    let mut table = TaskTable::with_capacity(found.len());
    for t in found {
        table.push(t);
    }
    State::restore(queues.clone(), table, Default::default(), limits, now)
}

/// What a provision wrote: the queue's config after it, whether the
/// queue is new, and whether anything changed.
pub struct Provision {
    /// The config after it.
    pub config: QueueConfig,
    /// The queue is new.
    pub created: bool,
    /// The row was written.
    pub changed: bool,
}

/// Provisions queue `name`, or changes it, with `merge` deciding its
/// config from the one its locked row holds (`None` for a new queue); a
/// refusal (`Err(E)`) writes nothing. Two daemons provisioning one queue
/// at once each merge over what the other committed.
pub async fn provision<E>(
    db: &Database,
    name: &Name,
    merge: impl Fn(Option<&QueueConfig>) -> Result<QueueConfig, E>,
) -> Result<Result<Provision, E>, Error> {
    let mut client = db.client().await?;
    loop {
        let tx = client.transaction().await?;
        let row = tx
            .query_opt(
                "SELECT config::text FROM queues WHERE name = $1 FOR UPDATE",
                &[&name.as_str()],
            )
            .await?;
        let current: Option<QueueConfig> = row
            .map(|r| serde_json::from_str(r.get(0)))
            .transpose()
            .map_err(|e| Error::Corrupt(format!("queue {name}'s config: {e}")))?;
        let config = match merge(current.as_ref()) {
            Ok(c) => c,
            Err(e) => {
                tx.rollback().await?;
                return Ok(Err(e));
            }
        };
        let created = current.is_none();
        if current.as_ref() == Some(&config) {
            tx.rollback().await?;
            return Ok(Ok(Provision {
                config,
                created,
                changed: false,
            }));
        }
        let text = serde_json::to_string(&config).expect("a queue config serializes");
        let statement = if created {
            "INSERT INTO queues (name, server, config) VALUES ($1, $2, $3::text::jsonb) \
             ON CONFLICT (name) DO NOTHING"
        } else {
            "UPDATE queues SET server = $2, config = $3::text::jsonb WHERE name = $1"
        };
        let written = tx
            .execute(statement, &[&name.as_str(), &config.server, &text])
            .await?;
        if written == 0 {
            // Another daemon made the queue since the read: merge over its.
            tx.rollback().await?;
            continue;
        }
        tx.commit().await?;
        return Ok(Ok(Provision {
            config,
            created,
            changed: true,
        }));
    }
}

/// Decides and commits one change on the family of `ids` with `decide`,
/// which gets the family's state and the database's time, then reads
/// what `then` needs from the state right after the change; a refusal
/// (`Err(E)`) changes nothing.
pub async fn decide<T, U, E>(
    db: &Database,
    limits: SplitLimits,
    ids: &[TaskId],
    claim: Option<ClaimAsk>,
    decide: impl FnOnce(&State, Timestamp) -> Result<(Event, T), E>,
    then: impl FnOnce(&State, T) -> U,
) -> Result<Result<Decided<U>, E>, Error> {
    run(db, limits, ids, claim, |step, now| {
        let (ev, out) = decide(step.state(), now)?;
        step.apply(ev);
        Ok(then(step.state(), out))
    })
    .await
}

/// Decides any number of events on the family of `ids` with `decide`
/// (each applied on the [`Step`] before the next is decided) and commits
/// them in one transaction, with `claim`'s claim after them when one is
/// asked (a submit's `claim_next`: one commit for both); a refusal
/// (`Err(E)`) changes nothing.
pub async fn run<T, E>(
    db: &Database,
    limits: SplitLimits,
    ids: &[TaskId],
    claim: Option<ClaimAsk>,
    decide: impl FnOnce(&mut Step, Timestamp) -> Result<T, E>,
) -> Result<Result<Decided<T>, E>, Error> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    // Sent together: the connection pipelines them (one round trip).
    let clock = async {
        let now = tx.prepare_cached("SELECT to_micros(now())").await?;
        let us: i64 = tx.query_one(&now, &[]).await?.get(0);
        crate::database::time(us)
    };
    let (now, family, queues) = futures_util::try_join!(clock, lock_family(&tx, ids), queues(&tx))?;
    let before: HashMap<TaskId, (serde_json::Value, bool)> = family
        .iter()
        .map(|t| {
            let json = serde_json::to_value(t).expect("a task serializes");
            (t.id, (json, !t.staged.is_empty()))
        })
        .collect();
    let st = state_of(&queues, family, limits, now);
    let counted: HashMap<TaskId, Counters> =
        st.all_tasks().map(|t| (t.id, counters(&st, t))).collect();
    let mut step = Step {
        st,
        made: Vec::new(),
        broken: None,
    };
    let out = match decide(&mut step, now) {
        Ok(out) => out,
        Err(e) => {
            tx.rollback().await?;
            return Ok(Err(e));
        }
    };
    let Step { st, made, broken } = step;
    if let Some(why) = broken {
        tx.rollback().await?;
        return Err(Error::Corrupt(format!(
            "a decided change does not apply to its family: {why}"
        )));
    }
    let changed: Vec<(Task, Counters, Option<bool>)> = st
        .all_tasks()
        .filter_map(|t| {
            let now_counted = counters(&st, t);
            let was = before.get(&t.id);
            let same = was.is_some_and(|(json, _)| {
                *json == serde_json::to_value(t).expect("a task serializes")
            }) && counted.get(&t.id) == Some(&now_counted);
            (!same).then(|| (t.clone(), now_counted, was.map(|(_, staged)| *staged)))
        })
        .collect();
    drop(st);
    // New tasks are written by one statement, with their edges; the others
    // have what changed of them written.
    let (new, saved): (Vec<_>, Vec<_>) = changed.iter().partition(|(_, _, was)| was.is_none());
    let inserts = async {
        let new: Vec<(&Task, Counters)> = new.iter().map(|(t, c, _)| (t, *c)).collect();
        tasks::insert_many(&tx, &new).await?;
        let (mut ups, mut downs) = (Vec::new(), Vec::new());
        for (t, _, was) in &changed {
            if was.is_none() {
                for u in &t.spec.depends_on {
                    ups.push(u.0 as i64);
                    downs.push(t.id.0 as i64);
                }
            }
        }
        if !ups.is_empty() {
            let statement = tx
                .prepare_cached(
                    "INSERT INTO task_deps (upstream, downstream) \
                     SELECT * FROM unnest($1::int8[], $2::int8[]) ON CONFLICT DO NOTHING",
                )
                .await?;
            tx.execute(&statement, &[&ups, &downs]).await?;
        }
        Ok::<_, Error>(())
    };
    let saves = async {
        for (t, now_counted, was) in saved {
            tasks::save(&tx, t, *now_counted, was.unwrap_or(false)).await?;
        }
        Ok::<_, Error>(())
    };
    let receipts = async {
        for (event, _) in &made {
            if let Event::Submitted {
                id,
                lease_id,
                request,
                receipt,
                receipt_sha256,
                ..
            } = event
            {
                tx.execute(
                    &tx.prepare_cached(
                        "INSERT INTO receipts (task_id, attempt, lease_id, request, sha256, body) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
                    )
                    .await?,
                    &[
                        &(id.0 as i64),
                        &(receipt.attempt.0 as i32),
                        &lease_id.0,
                        &request.as_bytes().as_slice(),
                        &receipt_sha256.as_bytes().as_slice(),
                        &receipt.bytes(),
                    ],
                )
                .await?;
            }
        }
        Ok::<_, Error>(())
    };
    let moved = made.iter().flat_map(|(_, m)| m);
    let mut ids: Vec<i64> = Vec::new();
    let mut froms: Vec<Option<&str>> = Vec::new();
    let mut tos: Vec<&str> = Vec::new();
    let mut attempts: Vec<i32> = Vec::new();
    for tr in moved {
        ids.push(tr.id.0 as i64);
        froms.push(tr.from.map(|s| s.as_str()));
        tos.push(tr.to.as_str());
        attempts.push(tr.attempt.0 as i32);
    }
    let events = async {
        if !ids.is_empty() {
            tx.execute(
                &tx.prepare_cached(
                    "INSERT INTO events (task_id, from_state, to_state, attempt) \
                 SELECT * FROM unnest($1::int8[], $2::text[], $3::text[], $4::int4[])",
                )
                .await?,
                &[&ids, &froms, &tos, &attempts],
            )
            .await?;
        }
        Ok::<_, Error>(())
    };
    // Pipelined as well; the commit waits for all three.
    futures_util::try_join!(saves, inserts, receipts, events)?;
    let claimed = match claim {
        Some(ask) => lease::claim_on(&tx, vec![ask]).await?.concat(),
        None => Vec::new(),
    };
    tx.commit().await?;
    Ok(Ok(Decided { out, made, claimed }))
}

/// The counters a claim and a completion keep on the row: open
/// upstreams of a pending task and open children, where every one of
/// them is in the family (else left as they are).
fn counters(st: &State, t: &Task) -> Counters {
    let open = |ids: &[TaskId]| -> Option<i32> {
        let mut n = 0;
        for id in ids {
            n += i32::from(!st.tasks.get(id)?.state.is_terminal());
        }
        Some(n)
    };
    Counters {
        blocked: if t.state == crate::queue::TaskState::Pending {
            open(&t.spec.depends_on)
        } else {
            Some(0)
        },
        open_children: open(&t.children),
    }
}

/// Locks the family of `ids` and reads it, again while it grows: the
/// rows are locked as they are read, in the order the tasks were made
/// (one order for every transaction, so two never wait on each other).
async fn lock_family(client: &impl GenericClient, ids: &[TaskId]) -> Result<Vec<Task>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut locked: Vec<i64> = Vec::new();
    let mut loaded = Vec::new();
    for _ in 0..LOCK_ROUNDS {
        let family = family(client, ids).await?;
        if family == locked {
            return Ok(loaded);
        }
        let ids: Vec<TaskId> = family.iter().map(|i| TaskId(*i as u64)).collect();
        loaded = tasks::load(client, &ids, true).await?;
        locked = family;
    }
    Err(Error::Corrupt(format!(
        "the family of {ids:?} kept growing while it was locked"
    )))
}

/// The seeds, their descendants, everything downstream of those, the
/// parents of all of them with their children, and every upstream of
/// the seeds, descendants and downstream tasks: those that exist, in id
/// order. Walked a step at a time with [`EDGES`] (one statement for a
/// task with no relatives), each step by index: one recursive statement
/// for the whole walk was planned with scans of every task (a generic
/// plan cannot know the seeds are few) and took milliseconds.
async fn family(client: &impl GenericClient, seeds: &[TaskId]) -> Result<Vec<i64>, Error> {
    let statement = client.prepare_cached(EDGES).await?;
    let mut edges: HashMap<i64, Edges> = HashMap::new();
    let fetch = async |ids: Vec<i64>, edges: &mut HashMap<i64, Edges>| -> Result<(), Error> {
        let wanted: Vec<i64> = ids.into_iter().filter(|i| !edges.contains_key(i)).collect();
        if wanted.is_empty() {
            return Ok(());
        }
        for r in client.query(&statement, &[&wanted]).await? {
            let e = Edges {
                parent: r.get(1),
                children: r.get(2),
                upstream: r.get(3),
                downstream: r.get(4),
            };
            edges.insert(r.get(0), e);
        }
        Ok(())
    };
    let mut core: std::collections::BTreeSet<i64> = std::collections::BTreeSet::new();
    let mut frontier: Vec<i64> = seeds.iter().map(|i| i.0 as i64).collect();
    fetch(frontier.clone(), &mut edges).await?;
    frontier.retain(|i| edges.contains_key(i));
    // The seeds and their descendants, then what is downstream of those.
    for step in [
        |e: &Edges| e.children.clone(),
        |e: &Edges| e.downstream.clone(),
    ] {
        let mut todo: Vec<i64> = if core.is_empty() {
            frontier.clone()
        } else {
            core.iter().copied().collect()
        };
        core.extend(todo.iter().copied());
        while !todo.is_empty() {
            let next: Vec<i64> = todo
                .iter()
                .filter_map(|i| edges.get(i))
                .flat_map(step)
                .filter(|i| !core.contains(i))
                .collect();
            fetch(next.clone(), &mut edges).await?;
            core.extend(next.iter().copied());
            todo = next;
        }
    }
    let parents: Vec<i64> = core.iter().filter_map(|i| edges.get(i)?.parent).collect();
    fetch(parents.clone(), &mut edges).await?;
    let mut family = core.clone();
    for p in &parents {
        family.insert(*p);
        family.extend(
            edges
                .get(p)
                .into_iter()
                .flat_map(|e| e.children.iter().copied()),
        );
    }
    for c in &core {
        family.extend(
            edges
                .get(c)
                .into_iter()
                .flat_map(|e| e.upstream.iter().copied()),
        );
    }
    Ok(family.into_iter().collect())
}

/// A task's relatives, as [`EDGES`] reads them.
struct Edges {
    parent: Option<i64>,
    children: Vec<i64>,
    upstream: Vec<i64>,
    downstream: Vec<i64>,
}

/// Each task of `$1` that exists: its id, parent, children, upstream and
/// downstream tasks.
const EDGES: &str = "\
SELECT t.id, t.parent, \
  ARRAY(SELECT c.id FROM tasks c WHERE c.parent = t.id), \
  ARRAY(SELECT e.upstream FROM task_deps e WHERE e.downstream = t.id), \
  ARRAY(SELECT e.downstream FROM task_deps e WHERE e.upstream = t.id) \
FROM tasks t WHERE t.id = ANY($1)";

/// Every queue's config.
pub(super) async fn queues(
    client: &impl GenericClient,
) -> Result<BTreeMap<Name, QueueConfig>, Error> {
    let mut out = BTreeMap::new();
    let statement = client
        .prepare_cached("SELECT config::text FROM queues")
        .await?;
    for r in client.query(&statement, &[]).await? {
        let config: QueueConfig = serde_json::from_str(r.get(0))
            .map_err(|e| Error::Corrupt(format!("a queue's config: {e}")))?;
        out.insert(config.name.clone(), config);
    }
    Ok(out)
}
