//! The tasks this daemon's claims took, as each claim left them, kept
//! while the claim's lease is live so that a submit under it needs no
//! read of its task: the access check reads the task's facts, which
//! never change, and the submit is decided on the rest, of which one
//! lease changes nothing but its expiry and its staged parts. The
//! fenced statement checks the expiry; a decision that is not a new
//! submission is made again on a fresh read; the staged parts are read
//! again by the caller that needs them (a contract's required parts).
//!
//! Bounded: at most [`MOST`] claims are kept, and a lapsed one is
//! dropped when it is looked for or when room is needed.

use std::collections::HashMap;
use std::sync::Mutex;

use jiff::Timestamp;

use crate::queue::{Task, TaskId};

/// Claims kept at most (beyond them, a submit reads its task).
pub const MOST: usize = 65_536;

/// The tasks of the claims this daemon answered, by id.
#[derive(Debug, Default)]
pub struct Claims {
    held: Mutex<HashMap<TaskId, Task>>,
}

impl Claims {
    /// Keeps `t`, just claimed (with its lease).
    pub fn keep(&self, t: &Task) {
        let mut held = self.held.lock().expect("never poisoned");
        if held.len() >= MOST {
            let now = Timestamp::now();
            held.retain(|_, t| live(t, now));
        }
        if held.len() < MOST {
            held.insert(t.id, t.clone());
        }
    }

    /// Task `id` as this daemon's claim of it left it, while that
    /// claim's lease is live.
    pub fn get(&self, id: TaskId) -> Option<Task> {
        let mut held = self.held.lock().expect("never poisoned");
        let t = held.get(&id)?;
        if live(t, Timestamp::now()) {
            return Some(t.clone());
        }
        held.remove(&id);
        None
    }

    /// Forgets task `id`'s claim: its attempt ended, or its lease did.
    pub fn forget(&self, id: TaskId) {
        self.held.lock().expect("never poisoned").remove(&id);
    }
}

/// Whether `t`'s lease is live at `now` (as the claim left it: a
/// heartbeat since may have extended it).
fn live(t: &Task, now: Timestamp) -> bool {
    t.lease.as_ref().is_some_and(|l| l.live_at(now))
}
