//! Calls on one task are ordered. Staging a part and submitting hold their
//! task's lock from the credential re-check ([`super::Session::recheck`])
//! through the file writes and the queue call, so of N parallel submits
//! one wins and the ctx-dir holds exactly its result, a refused call
//! touches no file, and a part is either in a submit's fold or refused.
//!
//! The locks are striped by task id: two tasks may share a stripe and then
//! wait for each other briefly. A call holds one stripe at a time, so the
//! stripes cannot deadlock. Prompts take no lock; they only read.

use std::sync::Arc;

use tokio::sync::{Mutex, MutexGuard};

use crate::queue::TaskId;

/// How many locks the tasks share.
pub const STRIPES: usize = 1024;

/// Striped per-task locks: cheap to clone (an `Arc`). A `tokio` mutex,
/// since the holder awaits file writes and the journal while it holds it.
#[derive(Clone, Debug)]
pub struct TaskLocks {
    stripes: Arc<[Mutex<()>]>,
}

impl Default for TaskLocks {
    fn default() -> TaskLocks {
        TaskLocks {
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl TaskLocks {
    /// Waits for `id`'s turn; the turn lasts as long as the guard.
    pub async fn lock(&self, id: TaskId) -> MutexGuard<'_, ()> {
        self.stripes[(id.0 % STRIPES as u64) as usize].lock().await
    }
}
