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

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use tokio_postgres::GenericClient;

use super::tasks::{self, Counters};
use super::{Database, Error};
use crate::queue::event::Event;
use crate::queue::machine::{SplitLimits, State, Transition};
use crate::queue::spec::QueueConfig;
use crate::queue::table::TaskTable;
use crate::queue::{Task, TaskId};
use crate::store::Name;

/// Times a family may grow while it is locked before the change gives up
/// (and is answered as a database error, to be retried by the caller).
const LOCK_ROUNDS: usize = 4;

/// What a change did: the caller's answer and the tasks' transitions.
#[derive(Debug)]
pub struct Decided<T> {
    /// What the decision answered.
    pub out: T,
    /// The event committed.
    pub event: Event,
    /// Each task's change of state.
    pub transitions: Vec<Transition>,
}

/// Provisions or reconfigures a queue.
pub async fn provision(db: &Database, config: &QueueConfig) -> Result<(), Error> {
    let client = db.client().await?;
    let text = serde_json::to_string(config).expect("a queue config serializes");
    client
        .execute(
            "INSERT INTO queues (name, server, config) VALUES ($1, $2, $3::text::jsonb) \
             ON CONFLICT (name) DO UPDATE SET server = EXCLUDED.server, config = EXCLUDED.config",
            &[&config.name.as_str(), &config.server, &text],
        )
        .await?;
    Ok(())
}

/// Decides and commits one change on the family of `ids` with `decide`,
/// which gets the family's state and the database's time; a refusal
/// (`Err(E)`) changes nothing.
pub async fn decide<T, E>(
    db: &Database,
    limits: SplitLimits,
    ids: &[TaskId],
    decide: impl FnOnce(&State, Timestamp) -> Result<(Event, T), E>,
) -> Result<Result<Decided<T>, E>, Error> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    let us: i64 = tx.query_one("SELECT to_micros(now())", &[]).await?.get(0);
    let now = super::time(us)?;
    let family = lock_family(&*tx, ids).await?;
    let queues = queues(&*tx).await?;
    let mut table = TaskTable::with_capacity(family.len());
    let mut ordered = family;
    ordered.sort_by_key(|t| (t.created_at, t.id));
    let before: HashMap<TaskId, serde_json::Value> = ordered
        .iter()
        .map(|t| (t.id, serde_json::to_value(t).expect("a task serializes")))
        .collect();
    for t in ordered {
        table.push(t);
    }
    let mut st = State::restore(queues, table, Default::default(), limits, now);
    let counted: HashMap<TaskId, Counters> =
        st.all_tasks().map(|t| (t.id, counters(&st, t))).collect();
    let (event, out) = match decide(&st, now) {
        Ok(d) => d,
        Err(e) => return Ok(Err(e)),
    };
    st.applies(&event).map_err(|why| {
        Error::Corrupt(format!(
            "a decided change does not apply to its family: {why}"
        ))
    })?;
    let transitions = st.apply_recorded(&event);
    for t in st.all_tasks() {
        let new = !before.contains_key(&t.id);
        let now_counted = counters(&st, t);
        if before.get(&t.id) == Some(&serde_json::to_value(t).expect("a task serializes"))
            && counted.get(&t.id) == Some(&now_counted)
        {
            continue;
        }
        tasks::save(&*tx, t, now_counted).await?;
        if new {
            for up in t.spec.depends_on.iter() {
                tx.execute(
                    "INSERT INTO task_deps (upstream, downstream) VALUES ($1, $2) \
                     ON CONFLICT DO NOTHING",
                    &[&(up.0 as i64), &(t.id.0 as i64)],
                )
                .await?;
            }
        }
    }
    if let Event::Submitted {
        id,
        lease_id,
        request,
        receipt,
        receipt_sha256,
        ..
    } = &event
    {
        tx.execute(
            "INSERT INTO receipts (task_id, attempt, lease_id, request, sha256, body) \
             VALUES ($1, $2, $3, $4, $5, $6)",
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
    for tr in &transitions {
        tx.execute(
            "INSERT INTO events (task_id, from_state, to_state) VALUES ($1, $2, $3)",
            &[
                &(tr.id.0 as i64),
                &tr.from.map(|s| s.as_str()),
                &tr.to.as_str(),
            ],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(Ok(Decided {
        out,
        event,
        transitions,
    }))
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

/// Locks the family of `ids` and reads it, again while it grows.
async fn lock_family(client: &impl GenericClient, ids: &[TaskId]) -> Result<Vec<Task>, Error> {
    let seeds: Vec<i64> = ids.iter().map(|i| i.0 as i64).collect();
    let mut locked: Vec<i64> = Vec::new();
    for _ in 0..LOCK_ROUNDS {
        let mut family: Vec<i64> = client
            .query(FAMILY, &[&seeds])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        family.sort_unstable();
        if family == locked {
            let ids: Vec<TaskId> = family.iter().map(|i| TaskId(*i as u64)).collect();
            return tasks::load(client, &ids, false).await;
        }
        let ids: Vec<TaskId> = family.iter().map(|i| TaskId(*i as u64)).collect();
        tasks::lock(client, &ids).await?;
        locked = family;
    }
    Err(Error::Corrupt(format!(
        "the family of {ids:?} kept growing while it was locked"
    )))
}

/// The seeds, their descendants, everything downstream of those, the
/// parents of all of them with their children, and every upstream of
/// the seeds, descendants and downstream tasks.
const FAMILY: &str = "\
WITH RECURSIVE fam(id) AS ( \
    SELECT unnest($1::int8[]) \
  UNION \
    SELECT t.id FROM tasks t JOIN fam ON t.parent = fam.id), \
down(id) AS ( \
    SELECT e.downstream FROM task_deps e JOIN fam ON e.upstream = fam.id \
  UNION \
    SELECT e.downstream FROM task_deps e JOIN down ON e.upstream = down.id), \
core AS (SELECT id FROM fam UNION SELECT id FROM down), \
par AS (SELECT DISTINCT t.parent AS id FROM tasks t JOIN core ON t.id = core.id \
        WHERE t.parent IS NOT NULL) \
SELECT c.id FROM core c JOIN tasks t ON t.id = c.id \
UNION SELECT id FROM par \
UNION SELECT t.id FROM tasks t JOIN par ON t.parent = par.id \
UNION SELECT e.upstream FROM task_deps e JOIN core ON e.downstream = core.id";

async fn queues(client: &impl GenericClient) -> Result<BTreeMap<Name, QueueConfig>, Error> {
    let mut out = BTreeMap::new();
    for r in client.query("SELECT config::text FROM queues", &[]).await? {
        let config: QueueConfig = serde_json::from_str(r.get(0))
            .map_err(|e| Error::Corrupt(format!("a queue's config: {e}")))?;
        out.insert(config.name.clone(), config);
    }
    Ok(out)
}
