//! Claims and the fence, as statements: a claim takes queued rows with
//! `FOR UPDATE SKIP LOCKED`, filtered by the claimant's grants rendered
//! as SQL, and records their handles in the same statement; a heartbeat
//! and a completion change a row only where the lease id, the attempt,
//! the holder, `state = 'claimed'` and a live expiry on the database's
//! clock all still hold (the embedded queue's `State::held`), and a
//! completion records its receipt in that same statement.
//!
//! A completion that ends its task releases what waits on it in the same
//! statement, by counters on the waiting rows: each dependent's open
//! upstreams (`blocked`, queued at 0) and a split parent's open children
//! (`open_children`, queued to combine at 0). Checking "every upstream
//! has ended" instead would leave a dependent pending for good when two
//! upstreams end together, each seeing the other still claimed; a
//! counter makes the second wait for the first's row lock and re-read.
//!
//! Each change writes its event rows in the statement that makes it
//! ([`super::events`]): no change is seen without its event, and no
//! event without its change.
//!
//! A refused completion is told apart by one read, in the embedded
//! queue's order (`decide_submit`): a resend of the task's latest
//! receipt's request under the same lease is that receipt, a different
//! request under it is a conflict, a live lease of another key is not
//! the caller's, and anything else is a stale lease.

use jiff::Timestamp;

use super::viewer::Grants;
use crate::database::{Database, Error, sha256, time};
use crate::queue::errors::{SubmitError, TaskCallError};
use crate::queue::{Attempt, LeaseId, TaskId, TaskState};
use crate::store::{Name, Sha256};

/// A claim's lease, as the statement wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimedRow {
    /// The task.
    pub id: TaskId,
    /// Its new attempt (the fence).
    pub attempt: Attempt,
    /// Its new lease.
    pub lease: LeaseId,
    /// The worker handle recorded with it.
    pub handle: String,
    /// When the lease lapses, on the database's clock.
    pub expires_at: Timestamp,
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

/// A completion's receipt, built by the same decision as the embedded
/// queue's.
#[derive(Clone, Copy, Debug)]
pub struct Finish<'a> {
    /// The state the task ends in (or `queued` for a retried failure).
    pub state: TaskState,
    /// The submission's request hash (resends are recognised by it).
    pub request: &'a Sha256,
    /// The receipt's bytes.
    pub receipt: &'a [u8],
}

/// What a completion did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completed {
    /// Recorded, with this receipt.
    Accepted(Sha256),
    /// The same submission was already recorded under this lease.
    Existing(Sha256),
}

/// One claimant's ask, owned: what [`claim_many`] and a claim
/// [`Batcher`](super::batch::Batcher) take.
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
            let row = ClaimedRow {
                id: TaskId(r.get::<_, i64>(0) as u64),
                attempt: Attempt(r.get::<_, i32>(1) as u32),
                lease: LeaseId(r.get(2)),
                handle: r.get(3),
                expires_at: time(r.get(4))?,
            };
            let i = owner[row.lease.0.as_str()];
            out[i].push(row);
        }
    }
    Ok(out)
}

/// The claim: the best queued rows the grants allow, locked past the
/// ones another claim holds, each given one of the leases (with its
/// holder and handle); the handles and the event rows in the same
/// statement.
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
           RETURNING t.id, t.attempt, t.lease_id, m.handle, \
             to_micros(t.lease_expires) AS expires_us), \
         h AS (INSERT INTO handles (handle, task_id, attempt) SELECT handle, id, attempt FROM u), \
         e AS (INSERT INTO events (task_id, from_state, to_state, attempt) \
           SELECT id, 'queued', 'claimed', attempt FROM u) \
         SELECT id, attempt, lease_id, handle, expires_us FROM u ORDER BY id",
        claimable = Grants::may_claim("t", "q.server", 5),
        kinds = 5 + super::viewer::PARAMS,
        ttl = LEASE_TTL,
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

/// One completion, owned: what [`complete_many`] and a completion
/// [`Batcher`](super::batch::Batcher) take.
#[derive(Clone, Debug)]
pub struct Completion {
    /// The task.
    pub id: TaskId,
    /// The lease the caller holds.
    pub lease: LeaseId,
    /// The attempt that lease was for.
    pub attempt: Attempt,
    /// The key calling.
    pub by: Name,
    /// The state the task ends in (or `queued` for a retried failure).
    pub state: TaskState,
    /// The submission's request hash.
    pub request: Sha256,
    /// The receipt's bytes.
    pub receipt: Vec<u8>,
}

impl Completion {
    /// The completion of `fence` with `finish`.
    pub fn of(fence: Fence<'_>, finish: Finish<'_>) -> Completion {
        Completion {
            id: fence.id,
            lease: fence.lease.clone(),
            attempt: fence.attempt,
            by: fence.by.clone(),
            state: finish.state,
            request: *finish.request,
            receipt: finish.receipt.to_vec(),
        }
    }

    fn fence(&self) -> Fence<'_> {
        Fence {
            id: self.id,
            lease: &self.lease,
            attempt: self.attempt,
            by: &self.by,
        }
    }
}

/// What [`complete_many`] answers for each completion, in order.
pub type Outcome = Result<Completed, SubmitError>;

/// Records a completion and its receipt, fenced; answers what it did or
/// why it was refused, as the embedded queue words it.
pub async fn complete(
    db: &Database,
    fence: Fence<'_>,
    finish: Finish<'_>,
) -> Result<Outcome, Error> {
    let mut out = complete_many(db, &[Completion::of(fence, finish)]).await?;
    Ok(out.pop().expect("one answer per completion"))
}

/// Records several completions in one statement (one commit, one WAL
/// flush), each fenced on its own: the accepted ones get their receipt
/// and their event rows, and release what waits on them; each refused
/// one is told apart afterwards. A deadlock between two batches that
/// release the same dependents in other orders is retried: the statement
/// that lost it changed nothing.
pub async fn complete_many(db: &Database, items: &[Completion]) -> Result<Vec<Outcome>, Error> {
    let ids: Vec<i64> = items.iter().map(|c| c.id.0 as i64).collect();
    let leases: Vec<&str> = items.iter().map(|c| c.lease.0.as_str()).collect();
    let attempts: Vec<i32> = items.iter().map(|c| c.attempt.0 as i32).collect();
    let holders: Vec<&str> = items.iter().map(|c| c.by.as_str()).collect();
    let states: Vec<&str> = items.iter().map(|c| c.state.as_str()).collect();
    let requests: Vec<&[u8]> = items
        .iter()
        .map(|c| c.request.as_bytes().as_slice())
        .collect();
    let shas: Vec<Sha256> = items.iter().map(|c| Sha256::of(&c.receipt)).collect();
    let sha_bytes: Vec<&[u8]> = shas.iter().map(|s| s.as_bytes().as_slice()).collect();
    let bodies: Vec<&[u8]> = items.iter().map(|c| c.receipt.as_slice()).collect();
    let ends: Vec<bool> = items.iter().map(|c| c.state.is_terminal()).collect();
    let client = db.client().await?;
    let statement = client.prepare_cached(COMPLETE).await?;
    let mut tries = 0;
    // Which row of the batch each accepted task took: by its receipt, as
    // two completions of one task may share a batch (the first counts).
    let mut accepted: std::collections::HashSet<(i64, Vec<u8>)> = loop {
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] = [
            &ids, &leases, &attempts, &holders, &states, &requests, &sha_bytes, &bodies, &ends,
        ];
        match client.query(&statement, &params).await {
            Ok(rows) => break rows.iter().map(|r| (r.get(0), r.get(1))).collect(),
            Err(e)
                if e.code() == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED)
                    && tries < 5 =>
            {
                tries += 1;
            }
            Err(e) => return Err(e.into()),
        }
    };
    drop(client);
    let mut out = Vec::with_capacity(items.len());
    for (c, sha) in items.iter().zip(shas) {
        out.push(
            if accepted.remove(&(c.id.0 as i64, sha.as_bytes().to_vec())) {
                Ok(Completed::Accepted(sha))
            } else {
                refused(db, c).await?
            },
        );
    }
    Ok(out)
}

/// The fenced completion of a batch: each row changes only under its own
/// live lease; receipts and events are written for the rows that did;
/// dependents and split parents count down once per upstream or child
/// that ended (counted per waiting row, so two ending in one batch count
/// two).
const COMPLETE: &str = "\
WITH x AS ( \
  SELECT * FROM unnest($1::int8[], $2::text[], $3::int4[], $4::text[], $5::text[], \
                       $6::bytea[], $7::bytea[], $8::bytea[], $9::bool[]) \
    AS x(id, lease, attempt, holder, state, request, sha, body, ends)), \
d AS ( \
  UPDATE tasks t SET state = x.state, lease_id = NULL, lease_holder = NULL, \
    lease_expires = NULL, updated_at = now() \
  FROM x \
  WHERE t.id = x.id AND t.lease_id = x.lease AND t.attempt = x.attempt \
    AND t.lease_holder = x.holder AND t.state = 'claimed' AND t.lease_expires > now() \
  RETURNING t.id, t.attempt, t.parent, x.lease, x.request, x.sha, x.body, x.ends, x.state), \
r AS ( \
  INSERT INTO receipts (task_id, attempt, lease_id, request, sha256, body) \
  SELECT id, attempt, lease, request, sha, body FROM d), \
e AS ( \
  INSERT INTO events (task_id, from_state, to_state, attempt) \
  SELECT id, 'claimed', state, attempt FROM d), \
down AS ( \
  UPDATE tasks t SET blocked = t.blocked - n.n, updated_at = now(), \
    state = CASE WHEN t.blocked = n.n AND t.state = 'pending' THEN 'queued' ELSE t.state END \
  FROM (SELECT dep.downstream AS id, count(*)::int AS n FROM task_deps dep \
        JOIN d ON dep.upstream = d.id WHERE d.ends GROUP BY dep.downstream) n \
  WHERE t.id = n.id), \
up AS ( \
  UPDATE tasks p SET open_children = p.open_children - n.n, updated_at = now(), \
    state = CASE WHEN p.open_children = n.n AND p.state = 'waiting' THEN 'queued' ELSE p.state END \
  FROM (SELECT parent AS id, count(*)::int AS n FROM d \
        WHERE d.ends AND d.parent IS NOT NULL GROUP BY parent) n \
  WHERE p.id = n.id) \
SELECT id, sha FROM d";

/// Why a completion changed nothing, in `decide_submit`'s order.
async fn refused(db: &Database, c: &Completion) -> Result<Outcome, Error> {
    let client = db.client().await?;
    let latest = client
        .query_opt(
            "SELECT lease_id, request, sha256 FROM receipts WHERE task_id = $1 \
             ORDER BY attempt DESC LIMIT 1",
            &[&(c.id.0 as i64)],
        )
        .await?;
    drop(client);
    if let Some(r) = latest
        && r.get::<_, &str>(0) == c.lease.0
    {
        return Ok(if r.get::<_, &[u8]>(1) == c.request.as_bytes() {
            Ok(Completed::Existing(sha256(r.get(2))?))
        } else {
            Err(SubmitError::Conflict)
        });
    }
    Ok(Err(refusal(db, c.fence()).await?.into()))
}

/// Why a fenced statement changed nothing: the embedded queue's answer.
async fn refusal(db: &Database, fence: Fence<'_>) -> Result<TaskCallError, Error> {
    let client = db.client().await?;
    let Some(r) = client
        .query_opt(
            "SELECT state, attempt, lease_id, lease_holder, \
               coalesce(lease_expires > now(), false) FROM tasks WHERE id = $1",
            &[&(fence.id.0 as i64)],
        )
        .await?
    else {
        return Ok(TaskCallError::NotFound);
    };
    let state: TaskState = r
        .get::<_, &str>(0)
        .parse()
        .map_err(|_| Error::Corrupt(format!("task {} has an unknown state", fence.id)))?;
    let attempt = Attempt(r.get::<_, i32>(1) as u32);
    let live_same_lease = r.get::<_, Option<&str>>(2) == Some(fence.lease.0.as_str()) && r.get(4);
    Ok(
        if live_same_lease && r.get::<_, Option<&str>>(3) != Some(fence.by.as_str()) {
            TaskCallError::NotClaimant
        } else {
            TaskCallError::StaleLease { state, attempt }
        },
    )
}
