//! The tasks this daemon's claims took, as each claim left them, kept
//! while the claim's lease is live so that the access check of a call on
//! the task, and a submit under the claim, need no read of it: a task's
//! facts never change, and under one lease nothing a submit's decision
//! reads changes but the lease's expiry, which the fenced statement
//! checks (a decision that is not a new submission is made again on a
//! fresh read). The staged parts change too, and only a contract reads
//! them at submit: a task whose brief pins a contract is not kept.
//!
//! Bounded: at most [`MOST`] claims are kept; a lapsed one is dropped
//! when it is looked for, and all of them when room is needed (at most
//! once a second).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use crate::queue::{Brief, Task, TaskId};

/// Claims kept at most (beyond them, a submit reads its task).
pub const MOST: usize = 65_536;

/// How often a full map is swept for lapsed claims at most.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The tasks of the claims this daemon answered, by id.
#[derive(Debug, Default)]
pub struct Claims {
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    tasks: HashMap<TaskId, Task>,
    /// When a full map was last swept.
    swept: Option<Instant>,
}

impl Claims {
    /// Keeps `t`, just claimed (with its lease), if there is room and its
    /// brief pins no contract.
    pub fn keep(&self, t: &Task) {
        if Brief::of(&t.spec.brief).contract_ref.is_some() {
            return;
        }
        let mut held = self.held.lock().expect("never poisoned");
        if held.tasks.len() >= MOST && held.swept.is_none_or(|at| at.elapsed() >= SWEEP_EVERY) {
            let now = Timestamp::now();
            held.tasks.retain(|_, t| live(t, now));
            held.swept = Some(Instant::now());
        }
        if held.tasks.len() < MOST {
            held.tasks.insert(t.id, t.clone());
        }
    }

    /// Task `id` as this daemon's claim of it left it, while that
    /// claim's lease is live.
    pub fn get(&self, id: TaskId) -> Option<Task> {
        let mut held = self.held.lock().expect("never poisoned");
        let t = held.tasks.get(&id)?;
        if live(t, Timestamp::now()) {
            return Some(t.clone());
        }
        held.tasks.remove(&id);
        None
    }

    /// Forgets task `id`'s claim: its attempt ended, or its lease did.
    pub fn forget(&self, id: TaskId) {
        self.held.lock().expect("never poisoned").tasks.remove(&id);
    }
}

/// Whether `t`'s lease is live at `now` (as the claim left it: a
/// heartbeat since may have extended it).
fn live(t: &Task, now: Timestamp) -> bool {
    t.lease.as_ref().is_some_and(|l| l.live_at(now))
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;
    use serde_json::json;

    use super::*;

    /// Task `id`, claimed, its lease lapsing at `expires_at`.
    fn claimed(id: u64, expires_at: Timestamp) -> Task {
        let now = Timestamp::now();
        serde_json::from_value(json!({
            "id": TaskId(id), "requester": "k", "state": "claimed", "attempt": 1,
            "spec": {"namespace": "ns", "queue": "q", "kind": "k", "effect_class": "read", "brief": {}},
            "lease": {"id": format!("l{id}"), "attempt": 1, "holder": "k",
                      "expires_at": expires_at, "handle": format!("wh-{id}")},
            "created_at": now, "updated_at": now,
        }))
        .expect("a task")
    }

    #[test]
    fn a_claim_is_kept_while_its_lease_is_live_and_until_forgotten() {
        let claims = Claims::default();
        let later = Timestamp::now() + SignedDuration::from_secs(60);
        let lapsed = Timestamp::now() - SignedDuration::from_secs(1);
        claims.keep(&claimed(1, later));
        claims.keep(&claimed(2, lapsed));
        assert_eq!(claims.get(TaskId(1)).map(|t| t.id), Some(TaskId(1)));
        assert!(
            claims.get(TaskId(2)).is_none(),
            "a lapsed lease is not kept"
        );
        assert!(claims.get(TaskId(3)).is_none());
        claims.forget(TaskId(1));
        assert!(claims.get(TaskId(1)).is_none());
    }

    #[test]
    fn a_full_map_makes_room_from_lapsed_claims_only_at_most_once_a_second() {
        let claims = Claims::default();
        let later = Timestamp::now() + SignedDuration::from_secs(60);
        let base = claimed(0, later);
        for id in 0..MOST as u64 {
            let mut t = base.clone();
            t.id = TaskId(id);
            claims.keep(&t);
        }
        let extra = claimed(10_000_000, later);
        claims.keep(&extra);
        assert!(claims.get(extra.id).is_none(), "no room: not kept");

        // Half the leases lapse; the map was swept just now.
        let lapsed = Timestamp::now() - SignedDuration::from_secs(1);
        for (id, t) in claims.held.lock().unwrap().tasks.iter_mut() {
            if id.0 % 2 == 0
                && let Some(l) = t.lease.as_mut()
            {
                l.expires_at = lapsed;
            }
        }
        claims.keep(&extra);
        assert!(
            claims.get(extra.id).is_none(),
            "not swept again within a second"
        );

        claims.held.lock().unwrap().swept = Instant::now().checked_sub(SWEEP_EVERY);
        claims.keep(&extra);
        assert!(claims.get(extra.id).is_some(), "the lapsed made room");
        assert!(claims.get(TaskId(1)).is_some(), "live claims stay");
        assert_eq!(claims.held.lock().unwrap().tasks.len(), MOST / 2 + 1);
    }
}
