//! The lease-holding part of the queue's API: claims (next or by id,
//! with long-polling), heartbeat, release, submit, park, resume, split,
//! cancel and part staging. Each one decides through `decide`, journals
//! and applies under the state lock, then waits for its group commit.

use std::time::Duration;

use jiff::Timestamp;

use super::decide::Submit;
use super::{
    Attempt, Bulk, BulkAction, Claim, Event, JournalError, LeaseId, Park, Queue, SplitError, State,
    SubmitError, SubmitInput, Task, TaskCallError, TaskId, TaskSpec, TaskState, Unsynced, task,
};
use crate::store::{Name, Pin, Sha256};

impl Queue {
    /// Claims `id` under the state lock with a lease id and handle drawn
    /// before the lock (the OS RNG is not called under it, but for a
    /// handle that is already taken, which 130 random bits make moot).
    fn claim_now(
        &self,
        st: &mut State,
        id: TaskId,
        holder: &Name,
        (lease_id, handle): (LeaseId, String),
        fresh_handle: &(dyn Fn() -> String + Sync),
        at: Timestamp,
    ) -> Result<(u64, Claim), TaskCallError> {
        let handle = std::iter::once(handle)
            .chain(std::iter::repeat_with(fresh_handle))
            .find(|h| !st.index.handles.contains_key(h))
            .expect("an unused handle turns up");
        let ev = st.decide_claim(id, holder, lease_id, handle, at)?;
        let seq = self.commit(st, &ev)?;
        let lease = st.tasks[&id]
            .lease
            .as_deref()
            .cloned()
            .expect("just claimed");
        Ok((seq, Claim { id, lease }))
    }

    /// Claims the next task on `queue` that `can` allows, waiting up to
    /// `wait` for one to become ready; `None` when none did, or once long
    /// polls have ended (shutdown). `render` reads what the caller shows of
    /// the claim, under the claim's own lock.
    #[allow(clippy::too_many_arguments)]
    pub async fn claim_next<R>(
        &self,
        queue: &Name,
        kinds: Option<&[Name]>,
        holder: &Name,
        handle: &(dyn Fn() -> String + Sync),
        can: &(dyn Fn(&Task) -> bool + Sync),
        wait: Duration,
        render: impl FnOnce(&State, &Claim) -> R,
    ) -> Result<Option<R>, TaskCallError> {
        let mut render = Some(render);
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
            let fresh = (task::new_lease_id(), handle());
            let found = {
                let mut st = self.lock();
                let at = Timestamp::now();
                st.promote_due(at);
                match st.find_claimable(queue, kinds, can) {
                    Some(id) => {
                        let (seq, claim) =
                            self.claim_now(&mut st, id, holder, fresh, handle, at)?;
                        let render = render.take().expect("rendered once");
                        Some((seq, render(&st, &claim)))
                    }
                    None => None,
                }
            };
            if let Some((seq, out)) = found {
                self.durable(seq).await?;
                return Ok(Some(out));
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(deadline) => return Ok(None),
            }
        }
    }

    /// Claims one task by id (the caller has checked it may).
    pub async fn claim<R>(
        &self,
        id: TaskId,
        holder: &Name,
        handle: &(dyn Fn() -> String + Sync),
        render: impl FnOnce(&State, &Claim) -> R,
    ) -> Result<R, TaskCallError> {
        let fresh = (task::new_lease_id(), handle());
        let (seq, out) = {
            let mut st = self.lock();
            let at = Timestamp::now();
            st.promote_due(at);
            let (seq, claim) = self.claim_now(&mut st, id, holder, fresh, handle, at)?;
            (seq, render(&st, &claim))
        };
        self.durable(seq).await?;
        Ok(out)
    }

    /// Extends a live lease held by `by`; returns the new expiry.
    pub async fn heartbeat(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
    ) -> Result<Timestamp, TaskCallError> {
        self.run(|st| {
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
            |st| Ok((st.decide_release(id, lease_id, by, Timestamp::now())?, ())),
            |st, ()| st.tasks[&id].state,
        )
        .await
    }

    /// Submits a result under a live lease: journals the receipt and ends
    /// the task. A resend of the accepted submission returns the same
    /// receipt. The receipt's durable copy is its journal record; its
    /// object is written in the background (readable at once), so a submit
    /// creates no file on its path.
    pub async fn submit(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        input: &SubmitInput,
        by: &Name,
    ) -> Result<(Sha256, bool, TaskState), SubmitError> {
        let (out, unsynced) = self.submit_unsynced(id, lease_id, input, by)?;
        self.synced(unsynced).await?;
        Ok(out)
    }

    /// [`Queue::submit`] without the wait: the submit is journaled and
    /// applied, and durable once [`Queue::synced`] returns for the token.
    /// A caller with more to journal (a claim of the next task) waits once
    /// for both.
    pub fn submit_unsynced(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        input: &SubmitInput,
        by: &Name,
    ) -> Result<((Sha256, bool, TaskState), Unsynced), SubmitError> {
        let (seq, sha, created, state) = {
            let mut st = self.lock();
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
        Ok(((sha, created, state), Unsynced(seq)))
    }

    /// Waits until the change behind `unsynced` is durable.
    pub async fn synced(&self, unsynced: Unsynced) -> Result<(), JournalError> {
        self.durable(unsynced.0).await
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
            |st| Ok((st.decide_resume(id, input_ref, by, Timestamp::now())?, ())),
            |st, ()| st.tasks[&id].state,
        )
        .await
    }

    /// Splits a claimed task held by `by` into children; returns their ids.
    pub async fn split(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
        children: Vec<TaskSpec>,
        sees: &(dyn Fn(&Task) -> bool + Sync),
    ) -> Result<Vec<TaskId>, SplitError> {
        self.run(|st| {
            let draw = &mut TaskId::random;
            let ev = st.decide_split(id, lease_id, by, children, sees, draw, Timestamp::now())?;
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
            |st| {
                let state = st.task(id)?.state;
                if only.is_some_and(|states| !states.contains(&state)) {
                    return Err(TaskCallError::InvalidState {
                        state,
                        action: "cancel",
                    });
                }
                Ok((st.decide_cancel(id, by, Timestamp::now())?, ()))
            },
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
            |st| Ok((st.decide_retry(id, by, Timestamp::now())?, ())),
            |st, ()| (st.tasks[&id].state, st.tasks[&id].attempt),
        )
        .await
    }

    /// Retries or cancels (`action`) the tasks `select` picks, at most
    /// `limit` of them in id order, under one lock and one durability
    /// wait; with `dry_run`, only counts them. A task `action` cannot take
    /// (a cancelled one, a succeeded one) is never selected.
    pub async fn bulk(
        &self,
        action: BulkAction,
        by: &Name,
        select: &(dyn Fn(&State, &Task) -> bool + Sync),
        limit: usize,
        dry_run: bool,
    ) -> Result<Bulk, JournalError> {
        let takes = |st: &State, t: &Task| action.takes(t.state) && select(st, t);
        let (seq, out) = {
            let mut st = self.lock();
            let matched: Vec<TaskId> = st
                .tasks
                .values()
                .filter(|t| takes(&st, t))
                .map(|t| t.id)
                .collect();
            let mut done = Vec::new();
            if !dry_run {
                let now = Timestamp::now();
                for id in &matched {
                    if done.len() == limit {
                        break;
                    }
                    // An earlier cancel in this call may have ended it.
                    if !takes(&st, &st.tasks[id]) {
                        continue;
                    }
                    let ev = match action {
                        BulkAction::Retry => st.decide_retry(*id, by, now),
                        BulkAction::Cancel => st.decide_cancel(*id, by, now),
                    };
                    let Ok(ev) = ev else { continue };
                    self.commit(&mut st, &ev)?;
                    let t = &st.tasks[id];
                    done.push((t.id, t.state, t.attempt));
                }
            }
            let remaining = matched
                .iter()
                .filter(|id| takes(&st, &st.tasks[*id]))
                .count();
            let out = Bulk {
                matched: matched.len(),
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
        self.run(|st| {
            let t = st.task(id)?;
            if t.state != TaskState::Claimed || t.attempt != attempt {
                return Err(TaskCallError::StaleLease {
                    state: t.state,
                    attempt: t.attempt,
                });
            }
            Ok((
                Event::Staged {
                    id,
                    attempt,
                    name,
                    sha256,
                },
                (),
            ))
        })
        .await
    }
}
