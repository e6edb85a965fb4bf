//! What the queue's committed changes, syncs and lock holds add to the
//! metrics: the queue tells each of its observers after the fact
//! (`queue::Observer`), and this counts claims, submits by outcome,
//! lease expiries, retries and enqueues per queue, and times attempts
//! from claim to submit.

use std::sync::{MutexGuard, PoisonError};
use std::time::Duration;

use hashbrown::HashMap;
use jiff::Timestamp;

use super::{Metrics, SubmitLabels, label, outcome};
use crate::queue::{Event, Observer, Op, TaskId, TaskState, Transition};

impl Metrics {
    fn claimed(&self) -> MutexGuard<'_, HashMap<TaskId, Timestamp>> {
        self.claimed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Observer for Metrics {
    fn committed(&self, _seq: u64, ev: &Event, moved: &[Transition]) {
        // Only a provisioned queue's name becomes a label: enqueue and
        // split refuse any other, so a task's queue is one.
        let queue_of = |id: &TaskId| {
            moved
                .iter()
                .find(|m| m.id == *id)
                .map(|m| label(&m.sight.queue))
        };
        match ev {
            Event::Claimed { id, at, .. } => {
                if let Some(q) = queue_of(id) {
                    self.claims.get_or_create(&q).inc();
                }
                self.claimed().insert(*id, *at);
            }
            Event::Submitted { id, ok, at, .. } => {
                if let Some(q) = queue_of(id) {
                    let labels = SubmitLabels {
                        queue: q.queue.clone(),
                        outcome: outcome(*ok),
                    };
                    self.submits.get_or_create(&labels).inc();
                    if let Some(t0) = self.claimed().remove(id) {
                        let took = at.duration_since(t0).as_secs_f64().max(0.0);
                        self.claim_to_submit.get_or_create(&q).observe(took);
                    }
                }
            }
            Event::Released {
                id, expired: true, ..
            } => {
                if let Some(q) = queue_of(id) {
                    self.expiries.get_or_create(&q).inc();
                }
            }
            _ => {}
        }
        let attempt_ended = matches!(
            ev,
            Event::Submitted { .. } | Event::Released { expired: true, .. }
        );
        for m in moved {
            let q = label(&m.sight.queue);
            match (m.from, m.to) {
                (None, _) => self.enqueued.get_or_create(&q).inc(),
                (Some(TaskState::Failed | TaskState::Cancelled), TaskState::Queued) => {
                    self.retries.get_or_create(&q).inc()
                }
                (Some(TaskState::Claimed), TaskState::Queued) if attempt_ended => {
                    self.retries.get_or_create(&q).inc()
                }
                _ => 0,
            };
            if m.from == Some(TaskState::Claimed) {
                self.claimed().remove(&m.id);
            }
        }
    }

    fn held(&self, op: Op, took: Duration) {
        self.lock_held[op as usize].observe(took.as_secs_f64());
    }
}

impl crate::store::log::SyncObserver for Metrics {
    fn synced(&self, _durable: u64, records: u64, took: Duration) {
        self.commit.observe(took.as_secs_f64());
        self.commit_records.observe(records as f64);
    }
}
