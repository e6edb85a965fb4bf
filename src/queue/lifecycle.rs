//! The lease-holding part of the queue's API: claims (next or by id,
//! with long-polling), heartbeat, release, submit, park, resume, split,
//! cancel and part staging. Each one decides through `decide`, journals
//! and applies under the state lock, then waits for its group commit.

use std::time::Duration;

use jiff::Timestamp;

use super::decide::Submit;
use super::query::Filter;
use super::shelf::ShelfView;
use super::{
    Attempt, Bulk, BulkAction, Claimed, Event, Journal, JournalError, LeaseId, Op, Park,
    SplitError, State, SubmitError, SubmitInput, TaskCallError, TaskId, TaskSpec, TaskState,
    Unsynced, task,
};
use crate::auth::token::new_handle;
use crate::store::envelope::Viewer;
use crate::store::{Name, Pin, Sha256};

impl Journal {
    /// Claims `id` for `viewer` under the state lock, with a lease id and
    /// handle drawn before the lock (the RNG is not called under it, but
    /// for a handle that is already taken, which 130 random bits make
    /// moot): the claim as `viewer` sees it, and the journal record to
    /// wait for.
    fn claim_now(
        &self,
        st: &mut State,
        id: TaskId,
        viewer: &Viewer,
        (lease_id, handle): (LeaseId, String),
        at: Timestamp,
    ) -> Result<(u64, Claimed), TaskCallError> {
        let handle = std::iter::once(handle)
            .chain(std::iter::repeat_with(new_handle))
            .find(|h| !st.index.handles.contains_key(h))
            .expect("an unused handle turns up");
        let ev = st.decide_claim(id, &viewer.key, lease_id, handle, at)?;
        let seq = self.commit(st, &ev)?;
        let t = &st.tasks[&id];
        let lease = t.lease.as_deref().cloned().expect("just claimed");
        let handover = self.handover(id, &lease.id);
        let claimed = Claimed {
            task: st.snapshot(t, viewer),
            lease,
            handover,
        };
        Ok((seq, claimed))
    }

    /// Claims the next task on `queue` that `viewer` may claim (of one of
    /// `kinds`, any when `None`), waiting up to `wait` for one to become
    /// ready; `None` when none did, or once long polls have ended
    /// (shutdown). Durable when it returns; the claim is released unless
    /// its [`Handover`] is delivered.
    pub async fn claim_next(
        &self,
        queue: &Name,
        kinds: Option<&[Name]>,
        viewer: &Viewer,
        wait: Duration,
    ) -> Result<Option<Claimed>, TaskCallError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.inner.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Checked after `enable`, so `end_long_polls` either is seen
            // here or wakes this waiter.
            if self.long_polls_ended() {
                return Ok(None);
            }
            let fresh = (task::new_lease_id(), new_handle());
            let found = {
                let mut st = self.lock(Op::Claim);
                let at = Timestamp::now();
                st.promote_due(at);
                match st.find_claimable(queue, kinds, viewer) {
                    Some(id) => Some(self.claim_now(&mut st, id, viewer, fresh, at)?),
                    None => None,
                }
            };
            if let Some((seq, claimed)) = found {
                self.durable(seq).await?;
                return Ok(Some(claimed));
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(deadline) => return Ok(None),
            }
        }
    }

    /// Claims task `id` for `viewer` (the caller has checked it may);
    /// durable when it returns.
    pub async fn claim(&self, id: TaskId, viewer: &Viewer) -> Result<Claimed, TaskCallError> {
        let fresh = (task::new_lease_id(), new_handle());
        let (seq, claimed) = {
            let mut st = self.lock(Op::Claim);
            let at = Timestamp::now();
            st.promote_due(at);
            self.claim_now(&mut st, id, viewer, fresh, at)?
        };
        self.durable(seq).await?;
        Ok(claimed)
    }

    /// Extends a live lease held by `by`; returns the new expiry.
    pub async fn heartbeat(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
    ) -> Result<Timestamp, TaskCallError> {
        self.run(Op::Heartbeat, |st| {
            let ev = st.decide_heartbeat(id, lease_id, by, Timestamp::now())?;
            let Event::Heartbeat { expires_at, .. } = &ev else {
                unreachable!("heartbeat")
            };
            let at = *expires_at;
            Ok((ev, at))
        })
        .await
    }

    /// Returns a claimed task to the queue: a claim held by `by`, or any
    /// claim for `None` (an admin).
    pub async fn release(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: Option<&Name>,
    ) -> Result<TaskState, TaskCallError> {
        self.run_then(
            Op::Release,
            |st| Ok((st.decide_release(id, lease_id, by, Timestamp::now())?, ())),
            |st, ()| st.tasks[&id].state,
        )
        .await
    }

    /// Submits a result under a live lease: journals the receipt and ends
    /// the task, durable once [`super::Queue::synced`] returns for the
    /// token. A resend of the accepted submission returns the same
    /// receipt. The receipt's durable copy is its journal record; its
    /// object is written in the background (readable at once), so a submit
    /// creates no file on its path.
    pub fn submit_unsynced(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        input: &SubmitInput,
        by: &Name,
    ) -> Result<((Sha256, bool, TaskState), Unsynced), SubmitError> {
        let (seq, sha, created, state) = {
            let mut st = self.lock(Op::Submit);
            match st.decide_submit(id, lease_id, input, by, Timestamp::now())? {
                Submit::Existing(id) => {
                    let t = &st.tasks[&id];
                    let sha = t.submission.as_ref().expect("submitted").receipt;
                    (self.inner.committer.appended(), sha, false, t.state)
                }
                Submit::New { event, receipt } => {
                    let Event::Submitted { receipt_sha256, .. } = &event else {
                        unreachable!("submit")
                    };
                    let sha = *receipt_sha256;
                    let seq = self.commit(&mut st, &event)?;
                    // Handed over under the lock: a fold that cuts the
                    // journal after this record flushes the later-writer
                    // before it deletes the record's segment (fold.rs).
                    self.inner.store.put_object_later(sha, receipt);
                    (seq, sha, true, st.tasks[&id].state)
                }
            }
        };
        if created {
            self.inner.ready.notify_waiters();
        }
        Ok(((sha, created, state), Unsynced(Some(seq))))
    }

    /// Parks a claimed task held by `by`.
    pub async fn park(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
        park: Park,
    ) -> Result<TaskState, TaskCallError> {
        self.run_then(
            Op::Park,
            |st| {
                Ok((
                    st.decide_park(id, lease_id, by, park, Timestamp::now())?,
                    (),
                ))
            },
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
        self.run_then(
            Op::Resume,
            |st| Ok((st.decide_resume(id, input_ref, by, Timestamp::now())?, ())),
            |st, ()| st.tasks[&id].state,
        )
        .await
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
        self.run(Op::Split, |st| {
            let draw = &mut task::random_id;
            let ev = st.decide_split(id, lease_id, by, children, within, draw, Timestamp::now())?;
            let Event::Split { children, .. } = &ev else {
                unreachable!("split")
            };
            let ids = children.iter().map(|c| c.id).collect();
            Ok((ev, ids))
        })
        .await
    }

    /// Cancels a task and its live descendants. With `only`, the task must
    /// be in one of those states when the cancel is decided (under the
    /// lock), else it is left alone with `InvalidState`: a prune never
    /// cancels a task a worker claimed after it was listed.
    pub async fn cancel(
        &self,
        id: TaskId,
        by: &Name,
        only: Option<&[TaskState]>,
    ) -> Result<TaskState, TaskCallError> {
        self.run_then(
            Op::Cancel,
            |st| Ok((st.decide_cancel_in(id, by, only, Timestamp::now())?, ())),
            |st, ()| st.tasks[&id].state,
        )
        .await
    }

    /// Queues a failed or cancelled task again as a new attempt (pending
    /// while an upstream is open); returns its state and attempts so far.
    pub async fn retry(
        &self,
        id: TaskId,
        by: &Name,
    ) -> Result<(TaskState, Attempt), TaskCallError> {
        self.run_then(
            Op::Retry,
            |st| Ok((st.decide_retry(id, by, Timestamp::now())?, ())),
            |st, ()| (st.tasks[&id].state, st.tasks[&id].attempt),
        )
        .await
    }

    /// Retries or cancels, as `action` says, up to `limit` of the tasks
    /// `filter` selects that `viewer` may end ([`Viewer::may_end`]) and
    /// whose state the action takes, oldest first; with `dry_run`, only
    /// counts them. Selected from the shelves, so the work under the lock
    /// follows the shelves and `limit`, not the table.
    pub async fn bulk(
        &self,
        action: BulkAction,
        viewer: &Viewer,
        filter: &Filter,
        limit: usize,
        dry_run: bool,
    ) -> Result<Bulk, JournalError> {
        let (seq, out) = {
            let mut st = self.lock(Op::Bulk);
            let takes = |st: &State, v: ShelfView<'_>| st.bulk_takes(action, viewer, filter, v);
            let matched = st.count_where(|v| takes(&st, v));
            let mut done = Vec::new();
            let mut after = None;
            let now = Timestamp::now();
            while !dry_run && done.len() < limit {
                let round = st.ids_where(|v| takes(&st, v), after, limit - done.len());
                let Some((last, _)) = round.last() else { break };
                after = Some(*last);
                for (_, id) in round {
                    // An earlier cancel in this call may have ended it.
                    if !action.takes(st.tasks[&id].state) {
                        continue;
                    }
                    let Ok(ev) = st.decide_bulk(action, id, &viewer.key, now) else {
                        continue;
                    };
                    self.commit(&mut st, &ev)?;
                    let t = &st.tasks[&id];
                    done.push((t.id, t.state, t.attempt));
                }
            }
            let remaining = st.count_where(|v| takes(&st, v));
            let out = Bulk {
                matched,
                done,
                remaining,
            };
            (self.inner.committer.appended(), out)
        };
        if !out.done.is_empty() {
            self.inner.ready.notify_waiters();
        }
        self.durable(seq).await?;
        Ok(out)
    }

    /// Records a staged part for the live attempt of `id`.
    pub async fn stage(
        &self,
        id: TaskId,
        attempt: Attempt,
        name: String,
        sha256: Sha256,
    ) -> Result<(), TaskCallError> {
        self.run(Op::Stage, |st| {
            let ev = st.decide_stage(id, attempt, name, sha256, Timestamp::now())?;
            Ok((ev, ()))
        })
        .await
    }
}
