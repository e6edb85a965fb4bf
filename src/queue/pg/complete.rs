//! The fenced completion: a submit decided by the embedded queue's rules
//! on the task as its caller read it, then recorded by one statement
//! that changes the row only where the lease id, the attempt, the
//! holder, `state = 'claimed'` and a live expiry on the database's clock
//! all still hold (the embedded queue's `State::held`), and writes the
//! receipt and the event rows in that same statement. Under one lease
//! nothing a decision reads can change but the expiry, which the
//! statement checks, so a decision on a read that the fence still
//! matches is the decision the embedded queue would make now.
//!
//! A completion that succeeds releases the dependents waiting on it in
//! the same statement, by a counter on each dependent's row (`blocked`,
//! queued at 0): checking "every upstream has ended" instead would leave
//! a dependent pending for good when two upstreams end together, each
//! seeing the other still claimed; a counter makes the second wait for
//! the first's row lock and re-read. What the statement does not decide
//! it leaves to the task's family transaction ([`super::transact`]): a
//! split child (its parent may wake to combine) and a failure with
//! dependents (those that say `on_upstream_failure: cancel` end with
//! it). It answers those [`Completed::Related`], and changes nothing.
//!
//! Completions that arrive together share the statement, one transaction
//! and one commit (see [`super::batch`]); a submit's `claim_next` claims
//! in that transaction, after the completions (one statement for both
//! deadlocks), for the completions the statement accepted.
//!
//! A refused completion is told apart by one read ([`Standing`]), in the
//! embedded queue's order (`decide_submit`): a resend of the task's
//! latest receipt's request under the same lease is that receipt, a
//! different request under it is a conflict, a live lease of another key
//! is not the caller's, a lease the caller still holds was refused for
//! the family transaction to decide, and anything else is a stale lease.

use std::collections::{BTreeMap, HashSet};

use jiff::Timestamp;
use tokio_postgres::error::SqlState;

use super::lease::{ClaimAsk, ClaimedRow, Fence, Standing, claim_on};
use super::transact;
use crate::database::{Database, Error};
use crate::queue::decide::Submit;
use crate::queue::errors::{SubmitError, TaskCallError};
use crate::queue::machine::{SplitLimits, Transition};
use crate::queue::{Attempt, Event, LeaseId, QueueConfig, SubmitInput, Task, TaskId, TaskState};
use crate::store::{Name, Sha256};

/// Times a batch that lost a deadlock to another is run again.
const DEADLOCK_TRIES: usize = 5;

/// What a completion did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completed {
    /// Recorded, with this receipt.
    Accepted(Sha256),
    /// The same submission was already recorded under this lease, with
    /// this receipt; the task is in this state now.
    Existing(Sha256, TaskState),
    /// The caller holds the task, but its change reaches other tasks than
    /// the statement decides for (a split child's parent, a failure's
    /// dependents): nothing was written, decide it on its family.
    Related,
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
    /// The task's reason afterwards.
    pub reason: Option<String>,
    /// When a retried failure is claimable again.
    pub not_before: Option<Timestamp>,
    /// When it was decided.
    pub at: Timestamp,
}

impl Completion {
    fn fence(&self) -> Fence<'_> {
        Fence {
            id: self.id,
            lease: &self.lease,
            attempt: self.attempt,
            by: &self.by,
        }
    }
}

/// A submit as the embedded queue's rules decide it on one task.
#[derive(Debug)]
pub enum Decision {
    /// A resend of the submission the task already records: its receipt
    /// and the task's state.
    Existing(Sha256, TaskState),
    /// A new submission.
    New(Box<Submission>),
    /// A split child's: its parent may wake, so it is decided on its
    /// family.
    Related,
}

/// A new submission, decided.
#[derive(Debug)]
pub struct Submission {
    /// What the fenced statement writes.
    pub completion: Completion,
    /// The event, and the task's change of state.
    pub event: (Event, Vec<Transition>),
    /// The receipt's bytes.
    pub receipt: Vec<u8>,
}

/// Decides a submit under `lease` by `by` on `seen`, the task as its
/// caller read it, at `now` (to the microsecond), with the queues' `configs`: the embedded
/// queue's `decide_submit` and `apply` on a state of that task alone
/// (what the change does to other tasks, the statement does or leaves
/// to the family transaction).
pub fn decide(
    seen: &Task,
    configs: &BTreeMap<Name, QueueConfig>,
    limits: SplitLimits,
    lease: &LeaseId,
    input: &SubmitInput,
    by: &Name,
    now: Timestamp,
) -> Result<Decision, SubmitError> {
    let id = seen.id;
    if seen.parent.is_some() {
        return Ok(Decision::Related);
    }
    // The database keeps times to the microsecond.
    let now = Timestamp::from_microsecond(now.as_microsecond()).expect("a time in range");
    let mut st = transact::state_of(configs, vec![seen.clone()], limits, now);
    let (event, receipt) = match st.decide_submit(id, lease, input, by, now)? {
        Submit::Existing(_) => {
            let sha = seen.submission.as_ref().expect("submitted").receipt;
            return Ok(Decision::Existing(sha, seen.state));
        }
        Submit::New { event, receipt } => (event, receipt),
    };
    let moved = st.apply_recorded(&event);
    let t = &st.tasks[&id];
    let completion = Completion {
        id,
        lease: lease.clone(),
        attempt: seen.attempt,
        by: by.clone(),
        state: t.state,
        request: input.request,
        receipt: receipt.clone(),
        reason: t.reason.clone(),
        not_before: t.not_before,
        at: now,
    };
    Ok(Decision::New(Box::new(Submission {
        completion,
        event: (event, moved),
        receipt,
    })))
}

/// What [`complete_many`] answers for each completion, in order.
pub type Outcome = Result<Completed, SubmitError>;

/// Records a completion and its receipt, fenced; answers what it did or
/// why it was refused, as the embedded queue words it.
pub async fn complete(db: &Database, c: Completion) -> Result<Outcome, Error> {
    let mut out = complete_then_claim(db, vec![(c, None)]).await?;
    Ok(out.pop().expect("one answer per completion").0)
}

/// Records several completions in one statement (one commit, one WAL
/// flush), each fenced on its own (see [`complete_then_claim`]).
pub async fn complete_many(db: &Database, items: &[Completion]) -> Result<Vec<Outcome>, Error> {
    let items = items.iter().map(|c| (c.clone(), None)).collect();
    let out = complete_then_claim(db, items).await?;
    Ok(out.into_iter().map(|(outcome, _)| outcome).collect())
}

/// Records several completions in one statement, each fenced on its own,
/// then claims in the same transaction what the accepted ones ask for
/// (a submit's `claim_next`); one commit for all. Answers each
/// completion's outcome and what its claim took. The accepted ones get
/// their receipt and their event rows and release the dependents waiting
/// on them; each refused one is told apart after the commit. A deadlock
/// between two batches that release the same dependents in other orders
/// is retried: the transaction that lost it changed nothing.
pub async fn complete_then_claim(
    db: &Database,
    items: Vec<(Completion, Option<ClaimAsk>)>,
) -> Result<Vec<(Outcome, Vec<ClaimedRow>)>, Error> {
    let (items, asks): (Vec<Completion>, Vec<Option<ClaimAsk>>) = items.into_iter().unzip();
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
    let reasons: Vec<Option<&str>> = items.iter().map(|c| c.reason.as_deref()).collect();
    let not_befores: Vec<Option<i64>> = items
        .iter()
        .map(|c| c.not_before.map(|t| t.as_microsecond()))
        .collect();
    let ats: Vec<i64> = items.iter().map(|c| c.at.as_microsecond()).collect();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 11] = [
        &ids,
        &leases,
        &attempts,
        &holders,
        &states,
        &requests,
        &sha_bytes,
        &bodies,
        &reasons,
        &not_befores,
        &ats,
    ];
    let mut client = db.client().await?;
    let statement = client.prepare_cached(COMPLETE).await?;
    let mut tries = 0;
    // Which completion of the batch each accepted row was: by its
    // receipt, as two completions of one task may share a batch (the one
    // the statement took counts).
    let (mut accepted, claimed) = loop {
        let tx = client.transaction().await?;
        let rows = match tx.query(&statement, &params).await {
            Ok(rows) => rows,
            Err(e)
                if e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) && tries < DEADLOCK_TRIES =>
            {
                tries += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let accepted: HashSet<(i64, Vec<u8>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let mut whose = Vec::new();
        let mut wanted = Vec::new();
        for (i, ask) in asks.iter().enumerate() {
            let key = (ids[i], shas[i].as_bytes().to_vec());
            if let Some(ask) = ask
                && accepted.contains(&key)
            {
                whose.push(i);
                wanted.push(ask.clone());
            }
        }
        let claimed = if wanted.is_empty() {
            Vec::new()
        } else {
            claim_on(&tx, wanted).await?
        };
        tx.commit().await?;
        let mut out: Vec<Vec<ClaimedRow>> = asks.iter().map(|_| Vec::new()).collect();
        for (i, rows) in whose.into_iter().zip(claimed) {
            out[i] = rows;
        }
        break (accepted, out);
    };
    drop(client);
    let mut out = Vec::with_capacity(items.len());
    for ((c, sha), claimed) in items.iter().zip(shas).zip(claimed) {
        let outcome = if accepted.remove(&(c.id.0 as i64, sha.as_bytes().to_vec())) {
            Ok(Completed::Accepted(sha))
        } else {
            refused(db, c).await?
        };
        out.push((outcome, claimed));
    }
    Ok(out)
}

/// The fenced completion of a batch: each row changes only under its own
/// live lease, and only where the change is the row's own (no parent; a
/// failure with no dependents); receipts and events are written for the
/// rows that changed; a success counts each pending dependent down once
/// (counted per dependent, so two upstreams ending in one batch count
/// two), queueing it at 0.
const COMPLETE: &str = "\
WITH x AS ( \
  SELECT * FROM unnest($1::int8[], $2::text[], $3::int4[], $4::text[], $5::text[], \
                       $6::bytea[], $7::bytea[], $8::bytea[], $9::text[], $10::int8[], \
                       $11::int8[]) \
    AS x(id, lease, attempt, holder, state, request, sha, body, reason, not_before, at)), \
d AS ( \
  UPDATE tasks t SET state = x.state, reason = x.reason, not_before = micros(x.not_before), \
    lease_id = NULL, lease_holder = NULL, lease_expires = NULL, updated_at = micros(x.at) \
  FROM x \
  WHERE t.id = x.id AND t.lease_id = x.lease AND t.attempt = x.attempt \
    AND t.lease_holder = x.holder AND t.state = 'claimed' AND t.lease_expires > now() \
    AND t.parent IS NULL \
    AND (x.state <> 'failed' OR NOT EXISTS (SELECT 1 FROM task_deps dep WHERE dep.upstream = t.id)) \
  RETURNING t.id, t.attempt, x.lease, x.request, x.sha, x.body, x.state, x.at), \
r AS ( \
  INSERT INTO receipts (task_id, attempt, lease_id, request, sha256, body) \
  SELECT id, attempt, lease, request, sha, body FROM d), \
down AS ( \
  UPDATE tasks t SET blocked = t.blocked - n.n, \
    updated_at = CASE WHEN t.blocked = n.n THEN micros(n.at) ELSE t.updated_at END, \
    state = CASE WHEN t.blocked = n.n THEN 'queued' ELSE 'pending' END \
  FROM (SELECT dep.downstream AS id, count(*)::int AS n, max(d.at) AS at FROM task_deps dep \
        JOIN d ON dep.upstream = d.id WHERE d.state = 'succeeded' GROUP BY dep.downstream) n \
  WHERE t.id = n.id AND t.state = 'pending' \
  RETURNING t.id, t.state, t.attempt), \
e AS ( \
  INSERT INTO events (task_id, from_state, to_state, attempt) \
  SELECT id, 'claimed', state, attempt FROM d \
  UNION ALL SELECT id, 'pending', 'queued', attempt FROM down WHERE state = 'queued') \
SELECT id, sha FROM d";

/// Why a completion changed nothing, in `decide_submit`'s order.
async fn refused(db: &Database, c: &Completion) -> Result<Outcome, Error> {
    let Some(standing) = Standing::read(db, c.id).await? else {
        return Ok(Err(TaskCallError::NotFound.into()));
    };
    if let Some((lease, request, sha)) = &standing.latest
        && *lease == c.lease
    {
        return Ok(if *request == c.request {
            Ok(Completed::Existing(*sha, standing.state))
        } else {
            Err(SubmitError::Conflict)
        });
    }
    Ok(if standing.held_by(c.fence()) {
        Ok(Completed::Related)
    } else {
        Err(standing.refusal(c.fence()).into())
    })
}
