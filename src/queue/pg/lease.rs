//! Claims and the fence, as statements: a claim takes queued rows with
//! `FOR UPDATE SKIP LOCKED`, filtered by the claimant's grants rendered
//! as SQL, and records their handles in the same statement; a heartbeat
//! changes a row only where the lease id, the attempt, the holder,
//! `state = 'claimed'` and a live expiry on the database's clock all
//! still hold (the embedded queue's `State::held`), as a completion does
//! ([`super::complete`]).
//!
//! Each change writes its event rows in the statement that makes it
//! ([`super::events`]): no change is seen without its event, and no
//! event without its change.

use jiff::Timestamp;

use super::tasks;
use super::viewer::Grants;
use crate::database::{Database, Error, sha256, time};
use crate::queue::errors::TaskCallError;
use crate::queue::{Attempt, Lease, LeaseId, Task, TaskId, TaskState};
use crate::store::{Name, Sha256};

/// A task a claim statement took, as the claim left it: claimed, with
/// its new attempt (the fence) and lease, whose expiry is on the
/// database's clock (its answer needs no other read).
#[derive(Clone, Debug)]
pub struct ClaimedRow {
    task: Task,
}

impl ClaimedRow {
    /// The claim in a row of [`CLAIM`]: the task's [`tasks::columns`].
    fn of(r: &tokio_postgres::Row) -> Result<ClaimedRow, Error> {
        let task = tasks::read(r)?;
        if task.lease.is_none() {
            return Err(Error::Corrupt(format!(
                "task {} was claimed but has no lease",
                task.id
            )));
        }
        Ok(ClaimedRow { task })
    }

    /// The task.
    pub fn id(&self) -> TaskId {
        self.task.id
    }

    /// Its new attempt.
    pub fn attempt(&self) -> Attempt {
        self.task.attempt
    }

    /// Its new lease, with the worker handle recorded with it.
    pub fn lease(&self) -> &Lease {
        self.task
            .lease
            .as_deref()
            .expect("a claimed row has a lease")
    }

    /// The task as the claim left it.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The task, owned.
    pub fn into_task(self) -> Task {
        self.task
    }
}

/// A lease as a call on it names it.
#[derive(Clone, Copy, Debug)]
pub struct Fence<'a> {
    /// The task.
    pub id: TaskId,
    /// The lease the caller holds.
    pub lease: &'a LeaseId,
    /// The attempt that lease was for.
    pub attempt: Attempt,
    /// The key calling.
    pub by: &'a Name,
}

/// One claimant's ask, owned: what [`claim_many`], a claim
/// [`Batcher`](super::batch::Batcher) and a submit's `claim_next`
/// ([`super::complete`]) take.
#[derive(Clone, Debug)]
pub struct ClaimAsk {
    /// The queue to claim from.
    pub queue: Name,
    /// What the claimant may claim.
    pub grants: std::sync::Arc<Grants>,
    /// The claimant's key.
    pub holder: Name,
    /// Only tasks of these kinds (any when `None`).
    pub kinds: Option<Vec<String>>,
    /// A lease id and a worker handle, minted by the caller, for each
    /// task it would take (as many tasks at most).
    pub leases: Vec<(LeaseId, String)>,
}

/// Claims up to `leases.len()` queued tasks of `queue` that `grants` may
/// claim, for `holder`, with the given lease ids and handles minted by
/// the caller; each lease lasts the task's lease length ([`LEASE_TTL`]).
pub async fn claim(
    db: &Database,
    queue: &Name,
    grants: &Grants,
    holder: &Name,
    leases: &[(LeaseId, String)],
) -> Result<Vec<ClaimedRow>, Error> {
    let ask = ClaimAsk {
        queue: queue.clone(),
        grants: std::sync::Arc::new(grants.clone()),
        holder: holder.clone(),
        kinds: None,
        leases: leases.to_vec(),
    };
    let mut out = claim_many(db, vec![ask]).await?;
    Ok(out.pop().expect("one answer per ask"))
}

/// Claims for several claimants at once: one statement for all the asks
/// on one queue with the same grants and kinds, each task going
/// to the ask whose lease it took; answers each ask's tasks in order.
pub async fn claim_many(db: &Database, asks: Vec<ClaimAsk>) -> Result<Vec<Vec<ClaimedRow>>, Error> {
    let client = db.client().await?;
    claim_on(&client, asks).await
}

/// [`claim_many`] on `client`: inside its transaction, when it is in one
/// (a submit's `claim_next`, committed with the submit).
pub async fn claim_on(
    client: &impl deadpool_postgres::GenericClient,
    asks: Vec<ClaimAsk>,
) -> Result<Vec<Vec<ClaimedRow>>, Error> {
    let mut out: Vec<Vec<ClaimedRow>> = asks.iter().map(|_| Vec::new()).collect();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, a) in asks.iter().enumerate() {
        let same = |g: &Vec<usize>| {
            let b = &asks[g[0]];
            b.queue == a.queue && b.grants == a.grants && b.kinds == a.kinds
        };
        match groups.iter_mut().find(|g| same(g)) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    let statement = client.prepare_cached(&CLAIM).await?;
    for group in groups {
        let first = &asks[group[0]];
        let mut owner = std::collections::HashMap::new();
        let (mut ids, mut handles, mut holders) = (Vec::new(), Vec::new(), Vec::new());
        for &i in &group {
            for (lease, handle) in &asks[i].leases {
                owner.insert(lease.0.as_str(), i);
                ids.push(lease.0.as_str());
                handles.push(handle.as_str());
                holders.push(asks[i].holder.as_str());
            }
        }
        let queue = first.queue.as_str();
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            vec![&queue, &ids, &handles, &holders];
        params.extend(first.grants.params());
        params.push(&first.kinds);
        for r in client.query(&statement, &params).await? {
            let row = ClaimedRow::of(&r)?;
            let i = owner[row.lease().id.0.as_str()];
            out[i].push(row);
        }
    }
    Ok(out)
}

/// The claim: the best queued rows the grants allow, locked past the
/// ones another claim holds, each given one of the leases (with its
/// holder and handle); the handles and the event rows in the same
/// statement, which answers each task claimed whole ([`tasks::columns`];
/// the handles it reads are those before the statement, so the new one
/// is appended; a new attempt has staged nothing).
static CLAIM: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH c AS MATERIALIZED ( \
           SELECT t.id, t.seq, t.priority, {ttl} AS ttl FROM tasks t JOIN queues q ON q.name = t.queue \
           WHERE t.state = 'queued' AND t.queue = $1 \
             AND (t.not_before IS NULL OR t.not_before <= now()) AND {claimable} \
             AND (${kinds}::text[] IS NULL OR t.kind = ANY(${kinds}::text[])) \
           ORDER BY t.priority DESC, t.seq LIMIT cardinality($2::text[]) \
           FOR UPDATE OF t SKIP LOCKED), \
         m AS ( \
           SELECT n.id, n.ttl, x.lease, x.handle, x.holder \
           FROM (SELECT id, ttl, row_number() OVER (ORDER BY priority DESC, seq) AS n FROM c) n \
           JOIN unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY \
             AS x(lease, handle, holder, n) USING (n)), \
         u AS ( \
           UPDATE tasks t SET state = 'claimed', attempt = t.attempt + 1, lease_id = m.lease, \
             lease_holder = m.holder, claimed_at = now(), not_before = NULL, updated_at = now(), \
             lease_expires = now() + make_interval(secs => m.ttl) \
           FROM m WHERE t.id = m.id \
           RETURNING t.*, m.handle AS new_handle), \
         h AS (INSERT INTO handles (handle, task_id, attempt) SELECT new_handle, id, attempt FROM u), \
         e AS (INSERT INTO events (task_id, from_state, to_state, attempt) \
           SELECT id, 'queued', 'claimed', attempt FROM u) \
         SELECT {columns} FROM u t {receipt} ORDER BY t.id",
        claimable = Grants::may_claim("t", "q.server", 5),
        kinds = 5 + super::viewer::PARAMS,
        ttl = LEASE_TTL,
        columns = tasks::columns(
            &format!("array_append({}, t.new_handle)", tasks::HANDLES),
            tasks::NONE_STAGED
        ),
        receipt = tasks::RECEIPT_JOIN,
    )
});

/// A task's lease length in seconds, as `State::lease_ttl` decides it:
/// its own, else its queue's (`q`, the queue's row), else 300.
const LEASE_TTL: &str = "coalesce(t.lease_ttl_s, (q.config->>'lease_ttl_s')::int, 300)";

/// Extends a live lease by the task's lease length ([`LEASE_TTL`]);
/// answers the new expiry.
pub async fn heartbeat(
    db: &Database,
    fence: Fence<'_>,
) -> Result<Result<Timestamp, TaskCallError>, Error> {
    let client = db.client().await?;
    let row = client
        .query_opt(
            &format!(
                "UPDATE tasks t SET updated_at = now(), \
                   lease_expires = now() + make_interval(secs => {LEASE_TTL}) \
                 FROM queues q \
                 WHERE t.id = $1 AND t.lease_id = $2 AND t.attempt = $3 AND t.lease_holder = $4 \
                   AND t.state = 'claimed' AND t.lease_expires > now() AND q.name = t.queue \
                 RETURNING to_micros(t.lease_expires)"
            ),
            &[
                &(fence.id.0 as i64),
                &fence.lease.0,
                &(fence.attempt.0 as i32),
                &fence.by.as_str(),
            ],
        )
        .await?;
    match row {
        Some(r) => Ok(Ok(time(r.get(0))?)),
        None => Ok(Err(refusal(db, fence).await?)),
    }
}

/// Why a fenced statement changed nothing: the embedded queue's answer.
async fn refusal(db: &Database, fence: Fence<'_>) -> Result<TaskCallError, Error> {
    Ok(match Standing::read(db, fence.id).await? {
        None => TaskCallError::NotFound,
        Some(s) => s.refusal(fence),
    })
}

/// Where a task stands, as one read tells apart why a fenced statement
/// changed nothing.
#[derive(Debug)]
pub struct Standing {
    /// Its state.
    pub state: TaskState,
    /// Its attempt.
    pub attempt: Attempt,
    /// Its lease id and holder.
    lease: Option<(String, String)>,
    /// Whether that lease is live on the database's clock.
    live: bool,
    /// Its latest receipt: the lease it was submitted under, its
    /// request's hash and its own.
    pub latest: Option<(LeaseId, Sha256, Sha256)>,
}

impl Standing {
    /// Task `id`'s standing; `None` when there is no such task.
    pub async fn read(db: &Database, id: TaskId) -> Result<Option<Standing>, Error> {
        let client = db.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT t.state, t.attempt, t.lease_id, t.lease_holder, \
                   coalesce(t.lease_expires > now(), false), l.lease_id, l.request, l.sha256 \
                 FROM tasks t LEFT JOIN LATERAL (SELECT lease_id, request, sha256 FROM receipts r \
                   WHERE r.task_id = t.id ORDER BY attempt DESC LIMIT 1) l ON true \
                 WHERE t.id = $1",
            )
            .await?;
        let Some(r) = client.query_opt(&statement, &[&(id.0 as i64)]).await? else {
            return Ok(None);
        };
        let state = r
            .get::<_, &str>(0)
            .parse()
            .map_err(|_| Error::Corrupt(format!("task {id} has an unknown state")))?;
        let lease = match (r.get(2), r.get(3)) {
            (Some(id), Some(holder)) => Some((id, holder)),
            _ => None,
        };
        let latest = match r.get::<_, Option<String>>(5) {
            None => None,
            Some(lease) => Some((LeaseId(lease), sha256(r.get(6))?, sha256(r.get(7))?)),
        };
        Ok(Some(Standing {
            state,
            attempt: Attempt(r.get::<_, i32>(1) as u32),
            lease,
            live: r.get(4),
            latest,
        }))
    }

    /// Whether `fence`'s lease is the task's live one.
    fn live_lease(&self, fence: Fence<'_>) -> Option<&str> {
        let (id, holder) = self.lease.as_ref()?;
        (self.live && *id == fence.lease.0).then_some(holder.as_str())
    }

    /// Whether `fence` holds the task now: its live lease, attempt and
    /// holder.
    pub fn held_by(&self, fence: Fence<'_>) -> bool {
        self.state == TaskState::Claimed
            && self.attempt == fence.attempt
            && self.live_lease(fence) == Some(fence.by.as_str())
    }

    /// Why a call under `fence` is refused, as the embedded queue says.
    pub fn refusal(&self, fence: Fence<'_>) -> TaskCallError {
        match self.live_lease(fence) {
            Some(holder) if holder != fence.by.as_str() => TaskCallError::NotClaimant,
            _ => TaskCallError::StaleLease {
                state: self.state,
                attempt: self.attempt,
            },
        }
    }
}
