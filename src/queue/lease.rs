//! Leases over time: the sweeper ends lapsed leases (the attempt counts,
//! backoff applies, attempts may run out) and makes delayed retries ready;
//! a [`Handover`] ends the lease of a claim whose answer never reached its
//! claimant. A lease id itself is minted in `task::new_lease_id`; fencing
//! (a call naming an older lease changes nothing) is `State::held` in
//! `decide`.

use std::time::Duration;

use jiff::Timestamp;

use super::{Event, Journal, JournalError as Error, LeaseId, Op, Queue, TaskId};

/// How often lapsed leases and due retries are looked for.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

impl Journal {
    /// One sweep: lapsed leases end (counting the attempt), due retries
    /// become ready. Returns how many leases expired.
    pub fn sweep(&self) -> Result<usize, Error> {
        let now = Timestamp::now();
        let (promoted, expired) = {
            let mut st = self.lock(Op::Sweep);
            let promoted = st.promote_due(now);
            let events = st.decide_expiries(now);
            for ev in &events {
                if let Event::Released { id, attempt, .. } = ev {
                    tracing::info!(task = %id, attempt = attempt.0, "lease expired");
                }
                self.commit(&mut st, ev)?;
            }
            (promoted, events.len())
        };
        if promoted || expired > 0 {
            self.inner.ready.notify_waiters();
        }
        Ok(expired)
    }

    /// Sweeps every 100 ms until `stop` resolves.
    pub async fn sweep_until(&self, stop: impl std::future::Future<Output = ()>) {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = tick.tick() => match self.sweep() {
                    Ok(_) => {}
                    // A full disk refuses the expiry before it is applied;
                    // the next sweep tries again (the store logs the state).
                    Err(Error::Store(crate::store::Error::OutOfSpace { .. })) => {}
                    // A journal failure is final until restart: say so
                    // once, then stop.
                    Err(e) => {
                        tracing::error!(error = %e, "queue sweeps stopped; leases will not expire until restart");
                        return;
                    }
                },
                () = &mut stop => return,
            }
        }
    }
}

/// A claim on its way to its claimant. A claim is committed before it is
/// answered (it must be durable first), so the request that made it can
/// be abandoned after the commit: its client gone, or its call cancelled,
/// while it waits for durability or for the rest of its answer. Dropped
/// before [`Handover::delivered`], this releases the lease at once rather
/// than leave the task claimed for a whole lease with nobody holding its
/// handle. The release is an ordinary one: it counts as an attempt (on
/// the last one the task fails, `attempts_exhausted`), as the lease's
/// expiry would have. A long poll abandoned while it waits claims nothing,
/// so costs nothing.
///
/// Made under the claim's lock (a queue handle and two ids), it must not be
/// dropped under the state lock, which its release takes.
#[derive(Debug)]
#[must_use = "call delivered() once the claim's answer is handed over; dropping it releases the lease"]
pub struct Handover {
    /// `None` once delivered.
    queue: Option<Queue>,
    id: TaskId,
    lease: LeaseId,
}

impl Handover {
    /// The handover of the claim of `id` under `lease`, just made, that
    /// releases through `queue`.
    pub(in crate::queue) fn new(queue: Queue, id: TaskId, lease: &LeaseId) -> Handover {
        Handover {
            queue: Some(queue),
            id,
            lease: lease.clone(),
        }
    }
}

impl Journal {
    /// The handover of the claim of `id` under `lease`, just made.
    pub(super) fn handover(&self, id: TaskId, lease: &LeaseId) -> Handover {
        Handover::new(Queue::from(self.clone()), id, lease)
    }

    /// Releases a lease whose claim was never handed over. Journaled and
    /// applied now, and durable with the next group commit, as a sweep's
    /// expiry is: nobody waits for it.
    pub(super) fn release_undelivered(&self, id: TaskId, lease: &LeaseId) {
        let released = {
            let mut st = self.lock(Op::Release);
            st.decide_release(id, lease, None, Timestamp::now())
                .and_then(|ev| Ok(self.commit(&mut st, &ev)?))
        };
        match released {
            Ok(_) => {
                tracing::info!(task = %id, "claim abandoned before its answer was handed over; lease released");
                self.inner.ready.notify_waiters();
            }
            // Already ended (a cancel, a sweep) or the journal refused:
            // the lease ends by itself at its expiry.
            Err(e) => tracing::debug!(task = %id, error = %e, "abandoned claim not released"),
        }
    }
}

impl Handover {
    /// The claim's answer is handed over: the lease is its claimant's.
    pub fn delivered(mut self) {
        self.queue = None;
    }
}

impl Drop for Handover {
    fn drop(&mut self) {
        if let Some(queue) = self.queue.take() {
            queue.release_undelivered(self.id, &self.lease);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::super::{
        Enqueued, FoldAfter, Handover, Journal as Queue, SplitLimits, TaskId, TaskState,
    };
    use crate::store::envelope::Viewer;
    use crate::store::{Access, Name, Store};

    /// Enqueues a task on `q`; its id.
    async fn enqueue(queue: &Queue) -> TaskId {
        let spec = serde_json::from_value(json!({
            "namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read",
            "producer_surface": "s", "brief": {}
        }))
        .unwrap();
        let me = Name::parse("key", "k1").unwrap();
        let made = queue
            .enqueue_many(vec![spec], &Viewer::admin(me), None, false)
            .await
            .unwrap();
        match made.into_iter().next() {
            Some(Ok(Enqueued::Created(id, _))) => id,
            other => panic!("not enqueued: {other:?}"),
        }
    }

    /// A queue `q` on a fresh root with one ready task, and its id.
    async fn one_ready(root: &std::path::Path) -> (Queue, TaskId) {
        let store = Store::open(root, Access::Exclusive).unwrap();
        let limits = SplitLimits {
            max_depth: 4,
            max_children: 64,
        };
        let (queue, _) = Queue::open(
            &store,
            limits,
            crate::store::log::segment::SEGMENT_BYTES,
            FoldAfter::default(),
        )
        .unwrap();
        let config = serde_json::from_value(json!({"name": "q"})).unwrap();
        queue.provision(config).await.unwrap();
        let id = enqueue(&queue).await;
        (queue, id)
    }

    /// Claims the next task of `q`, waiting `wait`, with its handover.
    async fn claim(queue: &Queue, wait: Duration) -> Option<(TaskId, Handover)> {
        let q = Name::parse("queue", "q").unwrap();
        let claimed = queue
            .claim_next(
                &q,
                None,
                &Viewer::admin(Name::parse("key", "k1").unwrap()),
                wait,
            )
            .await
            .unwrap()?;
        Some((claimed.task.task.id, claimed.handover))
    }

    fn state_and_attempt(queue: &Queue, id: TaskId) -> (TaskState, u32) {
        queue.peek(|st| {
            let t = &st.tasks[&id];
            (t.state, t.attempt.0)
        })
    }

    #[tokio::test]
    async fn a_handover_dropped_undelivered_releases_the_lease_and_a_delivered_one_keeps_it() {
        let root = tempfile::tempdir().unwrap();
        let (queue, id) = one_ready(root.path()).await;
        let (_, handover) = claim(&queue, Duration::ZERO).await.expect("the task");
        assert_eq!(state_and_attempt(&queue, id), (TaskState::Claimed, 1));
        drop(handover);
        // Released as a release is: the attempt counts.
        assert_eq!(state_and_attempt(&queue, id), (TaskState::Queued, 1));

        let (_, handover) = claim(&queue, Duration::ZERO).await.expect("again");
        handover.delivered();
        assert_eq!(state_and_attempt(&queue, id), (TaskState::Claimed, 2));
    }

    #[tokio::test]
    async fn a_long_poll_dropped_while_it_waits_claims_nothing() {
        let root = tempfile::tempdir().unwrap();
        let (queue, _) = one_ready(root.path()).await;
        let (_, first) = claim(&queue, Duration::ZERO).await.expect("the task");
        first.delivered();
        let waiting = claim(&queue, Duration::from_secs(10));
        let cut = tokio::time::timeout(Duration::from_millis(50), waiting).await;
        assert!(cut.is_err(), "nothing was ready");
        let second = enqueue(&queue).await;
        let st = queue.peek(|st| st.tasks[&second].state);
        assert_eq!(st, TaskState::Queued);
    }
}
