//! Commands → events: every rule of the task lifecycle is checked here,
//! against the state, with no I/O. The caller supplies the clock and any
//! randomness (lease ids, handles), which the events then carry.

use jiff::Timestamp;

use super::errors::{EnqueueError, SplitError, SubmitError, TaskCallError};
use super::event::{Event, NewTask};
use super::machine::State;
use super::receipt::{Receipt, SubmitInput};
use super::spec::{QueueConfig, TaskSpec};
use super::task::{Attempt, Lease, LeaseId, Park, Task, TaskId, TaskState};
use crate::store::envelope::Viewer;
use crate::store::{Name, Pin, Sha256};

/// The outcome of an enqueue: a new task, or the existing one for the same
/// idempotency key and spec.
pub enum Enqueue {
    /// Append this event; the task gets this id.
    New(Event, TaskId),
    /// Nothing to write.
    Existing(TaskId),
}

/// The outcome of a submit: a new receipt, or the one a resend already has.
pub enum Submit {
    /// Append this event.
    New {
        /// The `Submitted` event.
        event: Event,
        /// Its receipt's canonical bytes, encoded once for the hash and
        /// the object store.
        receipt: Vec<u8>,
    },
    /// The same submission was already accepted with this receipt.
    Existing(TaskId),
}

fn invalid(field: &'static str, message: impl Into<String>) -> EnqueueError {
    EnqueueError::InvalidSpec {
        field,
        message: message.into(),
    }
}

/// Checks a queue's config before it is provisioned: its numbers and
/// its placement template.
pub fn check_queue(config: &QueueConfig) -> Result<(), EnqueueError> {
    config.check().map_err(|(f, m)| invalid(f, m))?;
    if let Some(p) = &config.placement {
        super::placement::check_template(p).map_err(|m| invalid("placement", m))?;
    }
    Ok(())
}

impl State {
    /// A task by id, or `NotFound`.
    pub fn task(&self, id: TaskId) -> Result<&Task, TaskCallError> {
        self.tasks.get(&id).ok_or(TaskCallError::NotFound)
    }

    /// Provision or reconfigure a queue.
    pub fn decide_queue(&self, config: QueueConfig) -> Result<Event, EnqueueError> {
        check_queue(&config)?;
        Ok(Event::QueueSet { config })
    }

    fn check_new(&self, spec: &TaskSpec, viewer: &Viewer) -> Result<(), EnqueueError> {
        if !self.queues.contains_key(&spec.queue) {
            return Err(EnqueueError::UnknownQueue(spec.queue.to_string()));
        }
        spec.check_fields().map_err(|(f, m)| invalid(f, m))?;
        if let Some(p) = &spec.placement {
            super::placement::check_template(p).map_err(|m| invalid("placement", m))?;
        }
        for u in &spec.depends_on {
            if !self
                .tasks
                .get(u)
                .is_some_and(|t| viewer.sees_task(&self.facts(t)))
            {
                return Err(EnqueueError::UnknownUpstream(*u));
            }
        }
        Ok(())
    }

    /// An id no task has, nor any of `taken`, from ids `draw` offers.
    fn unused_id(&self, draw: &mut dyn FnMut() -> TaskId, taken: &[NewTask]) -> TaskId {
        std::iter::repeat_with(draw)
            .find(|id| !self.tasks.contains(id) && taken.iter().all(|t| t.id != *id))
            .expect("an unused id turns up")
    }

    /// Enqueue a spec, from the seed pack `source_pack` when an import
    /// sends it, with an id from `draw` ([`task::random_id`] on the live
    /// path). `viewer` is the requester's: the task is its key's, and
    /// `depends_on` may only name tasks it sees.
    pub fn decide_enqueue(
        &self,
        spec: TaskSpec,
        source_pack: Option<&Name>,
        at: Timestamp,
        viewer: &Viewer,
        draw: &mut dyn FnMut() -> TaskId,
    ) -> Result<Enqueue, EnqueueError> {
        if let Some(key) = &spec.idempotency_key
            && let Some((id, fp)) = self.idempotent(&spec.namespace, &viewer.key, key)
        {
            return if *fp == spec.fingerprint() {
                Ok(Enqueue::Existing(*id))
            } else {
                Err(EnqueueError::IdempotencyConflict(*id))
            };
        }
        self.check_new(&spec, viewer)?;
        let id = self.unused_id(draw, &[]);
        let task = NewTask {
            id,
            fingerprint: spec.idempotency_key.as_ref().map(|_| spec.fingerprint()),
            spec,
            requester: viewer.key.clone(),
            source_pack: source_pack.cloned(),
        };
        Ok(Enqueue::New(
            Event::Enqueued {
                task: Box::new(task),
                at,
            },
            id,
        ))
    }

    /// The best task on `queue` that `viewer` may claim: ready now, of
    /// one of `kinds` (any when `None`), highest priority then oldest.
    /// Each ready set holds tasks of one sight, so one look at a set's
    /// first task decides for all of it.
    pub fn find_claimable(
        &self,
        queue: &Name,
        kinds: Option<&[Name]>,
        viewer: &Viewer,
    ) -> Option<TaskId> {
        let server = self.is_server(queue);
        self.index
            .shelves
            .ready_sets()
            .filter(|(sight, _)| {
                sight.queue == *queue
                    && kinds.is_none_or(|ks| ks.contains(&sight.kind))
                    && viewer.claim_refusal(&sight.facts(server)).is_none()
            })
            .filter_map(|(_, set)| set.first())
            .min()
            .and_then(|(_, pos)| self.tasks.at(*pos))
            .map(|t| t.id)
    }

    /// Claim a ready task: a new lease for attempt + 1.
    pub fn decide_claim(
        &self,
        id: TaskId,
        holder: &Name,
        lease_id: LeaseId,
        handle: String,
        at: Timestamp,
    ) -> Result<Event, TaskCallError> {
        let t = self.task(id)?;
        if !self.is_ready(t, at) {
            return Err(TaskCallError::InvalidState {
                state: t.state,
                action: "claim",
            });
        }
        let lease = Lease {
            id: lease_id,
            attempt: Attempt(t.attempt.0 + 1),
            holder: holder.clone(),
            expires_at: at + self.lease_ttl(t),
            handle,
        };
        Ok(Event::Claimed { id, lease, at })
    }

    /// The task, if `lease_id` is its live lease at `now` (else
    /// `StaleLease`) and `by` holds it (else `NotClaimant`): a call on a
    /// claim is its claimant's. `by` is `None` only where a claim is ended
    /// for its holder: by an admin, or by the daemon (a claim whose answer
    /// never left).
    pub fn held(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: Option<&Name>,
        now: Timestamp,
    ) -> Result<&Task, TaskCallError> {
        let t = self.task(id)?;
        match &t.lease {
            Some(l) if l.id == *lease_id && l.live_at(now) => {
                if by.is_some_and(|by| *by != l.holder) {
                    return Err(TaskCallError::NotClaimant);
                }
                Ok(t)
            }
            _ => Err(TaskCallError::StaleLease {
                state: t.state,
                attempt: t.attempt,
            }),
        }
    }

    /// Extend the live lease by the task's lease length.
    pub fn decide_heartbeat(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
        now: Timestamp,
    ) -> Result<Event, TaskCallError> {
        let t = self.held(id, lease_id, Some(by), now)?;
        Ok(Event::Heartbeat {
            id,
            expires_at: now + self.lease_ttl(t),
        })
    }

    /// Give the task back (the attempt counts); `by` is `None` for an
    /// admin or the daemon, who may end any claim.
    pub fn decide_release(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: Option<&Name>,
        now: Timestamp,
    ) -> Result<Event, TaskCallError> {
        let t = self.held(id, lease_id, by, now)?;
        Ok(Event::Released {
            id,
            attempt: t.attempt,
            expired: false,
            at: now,
        })
    }

    /// Every lease that has lapsed by `now`.
    pub fn decide_expiries(&self, now: Timestamp) -> Vec<Event> {
        self.index
            .leases
            .iter()
            .take_while(|(expires, _)| !super::task::live_until(*expires, now))
            .map(|(_, id)| Event::Released {
                id: *id,
                attempt: self.tasks[id].attempt,
                expired: true,
                at: now,
            })
            .collect()
    }

    /// Stage part `name` (object `sha256`) for `attempt` of `id`, which
    /// must be the task's live attempt at `now` (else `StaleLease`).
    pub fn decide_stage(
        &self,
        id: TaskId,
        attempt: Attempt,
        name: String,
        sha256: Sha256,
        now: Timestamp,
    ) -> Result<Event, TaskCallError> {
        let t = self.task(id)?;
        let live = t
            .lease
            .as_ref()
            .is_some_and(|l| l.attempt == attempt && l.live_at(now));
        if t.state != TaskState::Claimed || !live {
            return Err(TaskCallError::StaleLease {
                state: t.state,
                attempt: t.attempt,
            });
        }
        Ok(Event::Staged {
            id,
            attempt,
            name,
            sha256,
        })
    }

    /// Submit a result: a receipt, and a terminal state. A resend of the
    /// accepted submission under the same lease gets the same receipt.
    pub fn decide_submit(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        input: &SubmitInput,
        by: &Name,
        now: Timestamp,
    ) -> Result<Submit, SubmitError> {
        let t = self.task(id)?;
        if let Some(s) = &t.submission
            && s.lease_id == *lease_id
        {
            return if s.request == input.request {
                Ok(Submit::Existing(id))
            } else {
                Err(SubmitError::Conflict)
            };
        }
        let t = self.held(id, lease_id, Some(by), now)?;
        let retry_at = self.retry_at(t, input, now);
        let prev = t.receipts.last().copied();
        let receipt = Receipt::build(id, t.attempt, input, by, now, prev, retry_at.is_some());
        let bytes = receipt.bytes();
        let event = Event::Submitted {
            id,
            lease_id: lease_id.clone(),
            request: input.request,
            ok: receipt.ok,
            retry_at,
            receipt: Box::new(receipt),
            receipt_sha256: Sha256::of(&bytes),
            at: now,
        };
        Ok(Submit::New {
            event,
            receipt: bytes,
        })
    }

    /// When a failed attempt is retried: a retryable failure (not final,
    /// no failed contract check) with attempts left goes back to the
    /// queue after the queue's backoff; `None` ends the task.
    fn retry_at(&self, t: &Task, input: &SubmitInput, now: Timestamp) -> Option<Timestamp> {
        input
            .retryable()
            .then(|| self.next_attempt(t, t.attempt, now))
            .flatten()
    }

    /// Re-queue a failed or cancelled task (attempts exhausted included)
    /// as a new attempt of the same task.
    pub fn decide_retry(
        &self,
        id: TaskId,
        by: &Name,
        now: Timestamp,
    ) -> Result<Event, TaskCallError> {
        let t = self.task(id)?;
        if !t.state.is_retryable() {
            return Err(TaskCallError::NotRetryable { state: t.state });
        }
        Ok(Event::Retried {
            id,
            by: by.clone(),
            at: now,
        })
    }

    /// Park: the lease ends and the task waits for input.
    pub fn decide_park(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
        park: Park,
        now: Timestamp,
    ) -> Result<Event, TaskCallError> {
        let t = self.held(id, lease_id, Some(by), now)?;
        let park = Park {
            by: t.lease.as_ref().map(|l| l.holder.clone()),
            ..park
        };
        Ok(Event::Parked { id, park, at: now })
    }

    /// Resume a parked task with a new input pin, by a key other than
    /// the one that parked it (decided here, with the park it applies to).
    pub fn decide_resume(
        &self,
        id: TaskId,
        input_ref: Pin,
        by: &Name,
        now: Timestamp,
    ) -> Result<Event, TaskCallError> {
        let t = self.task(id)?;
        if t.state != TaskState::Parked {
            return Err(TaskCallError::InvalidState {
                state: t.state,
                action: "resume",
            });
        }
        if t.park.as_ref().and_then(|p| p.by.as_ref()) == Some(by) {
            return Err(TaskCallError::ResumedByParker);
        }
        Ok(Event::Resumed {
            id,
            input_ref,
            by: by.clone(),
            at: now,
        })
    }

    /// Split into children (specs already under the parent's envelope,
    /// from [`super::ChildSpec::under`]), with ids from `draw`; the
    /// parent waits.
    #[allow(clippy::too_many_arguments)]
    pub fn decide_split(
        &self,
        id: TaskId,
        lease_id: &LeaseId,
        by: &Name,
        children: Vec<TaskSpec>,
        within: &Viewer,
        draw: &mut dyn FnMut() -> TaskId,
        now: Timestamp,
    ) -> Result<Event, SplitError> {
        let t = self.held(id, lease_id, Some(by), now)?;
        if t.depth + 1 > self.limits.max_depth {
            return Err(SplitError::Limit(format!(
                "children would be at depth {}; the limit is {}",
                t.depth + 1,
                self.limits.max_depth
            )));
        }
        let total = t.children.len() + children.len();
        if children.is_empty() || total > self.limits.max_children {
            return Err(SplitError::Limit(format!(
                "a split names 1 or more children and a task has at most {} ({total} asked)",
                self.limits.max_children
            )));
        }
        let mut out = Vec::with_capacity(children.len());
        for spec in children {
            self.check_new(&spec, within).map_err(SplitError::Child)?;
            out.push(NewTask {
                id: self.unused_id(draw, &out),
                spec,
                requester: t.requester.clone(),
                fingerprint: None,
                source_pack: None,
            });
        }
        Ok(Event::Split {
            id,
            children: out,
            at: now,
        })
    }

    /// Cancel `id` as [`State::decide_cancel`] does, only while it is in
    /// one of `only` (any state when `None`), else `InvalidState`: a prune
    /// never cancels a task a worker claimed after it was listed.
    pub fn decide_cancel_in(
        &self,
        id: TaskId,
        by: &Name,
        only: Option<&[TaskState]>,
        now: Timestamp,
    ) -> Result<Event, TaskCallError> {
        let state = self.task(id)?.state;
        if only.is_some_and(|states| !states.contains(&state)) {
            return Err(TaskCallError::InvalidState {
                state,
                action: "cancel",
            });
        }
        self.decide_cancel(id, by, now)
    }

    /// A bulk call's change to `id`: a retry or a cancel by `by`.
    pub fn decide_bulk(
        &self,
        action: super::BulkAction,
        id: TaskId,
        by: &Name,
        now: Timestamp,
    ) -> Result<Event, TaskCallError> {
        match action {
            super::BulkAction::Retry => self.decide_retry(id, by, now),
            super::BulkAction::Cancel => self.decide_cancel(id, by, now),
        }
    }

    /// Cancel a task that has not ended (and its live descendants).
    pub fn decide_cancel(
        &self,
        id: TaskId,
        by: &Name,
        now: Timestamp,
    ) -> Result<Event, TaskCallError> {
        let t = self.task(id)?;
        if t.state.is_terminal() {
            return Err(TaskCallError::InvalidState {
                state: t.state,
                action: "cancel",
            });
        }
        Ok(Event::Cancelled {
            id,
            by: by.clone(),
            at: now,
        })
    }
}
