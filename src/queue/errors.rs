//! What each queue operation can answer, one type per kind of call (as
//! redb does), so a caller matches only the outcomes its call can have:
//! - [`JournalError`]: the journal refused a change or its durability
//!   (every writing call, and reads that wait for durability);
//! - [`TaskCallError`]: a call on one task that its state or its lease
//!   must allow (claim by id, heartbeat, release, park, resume, cancel,
//!   retry, stage);
//! - [`EnqueueError`]: an enqueue (or a queue's configuration);
//! - [`SubmitError`]: a submit;
//! - [`SplitError`]: a split;
//! - [`super::Error`]: opening and recovering the queue.

use super::task::{Attempt, TaskId, TaskState};
use crate::store;

/// The journal refused a change, or cannot say it is durable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// A durable write failed (the journal's, or an fsync elsewhere under
    /// the root): task changes, and reads of state that may not be on
    /// disk, are refused until restart.
    #[error(
        "task changes are refused since a durable write failed: {0}; check the disk and restart the daemon"
    )]
    Failed(store::Incident),
    /// A decided event the state cannot take (a bug, refused rather than
    /// applied).
    #[error("the queue refused an inconsistent change: {0}")]
    Inapplicable(String),
    /// The store refused (out of space: nothing was applied).
    #[error(transparent)]
    Store(#[from] store::Error),
    /// The queue's database (`--queue-url`) cannot be reached or refused
    /// a statement: a change the answer does not confirm may or may not
    /// have been made, so retry it (resends are recognised).
    #[error("{0}; retry once the queue database answers")]
    Unavailable(String),
}

impl JournalError {
    /// The task journal's committer refused: a failed durable write is
    /// the journal's failure, anything else (a full disk) the store's.
    pub(crate) fn from_log(e: store::Error) -> JournalError {
        match e {
            store::Error::StorageFailed(incident) => JournalError::Failed(incident),
            e => JournalError::Store(e),
        }
    }
}

/// A call on one task that its state or its lease must allow.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TaskCallError {
    /// No such task (or one the caller may not see).
    #[error("no such task")]
    NotFound,
    /// The task is not in a state that allows this.
    #[error("cannot {action} a task that is {}", state.as_str())]
    InvalidState {
        /// Its state.
        state: TaskState,
        /// What was asked.
        action: &'static str,
    },
    /// A retry of a task that has not failed and was not cancelled.
    #[error("cannot retry a task that is {}: only failed or cancelled tasks are retried", state.as_str())]
    NotRetryable {
        /// Its state.
        state: TaskState,
    },
    /// The lease named is not the task's live lease.
    #[error("stale lease: the task is {} at attempt {}; this lease no longer holds it", state.as_str(), attempt.0)]
    StaleLease {
        /// The task's state.
        state: TaskState,
        /// Its current attempt.
        attempt: Attempt,
    },
    /// A call on a claim by a key that does not hold it: the lease id
    /// alone proves nothing.
    #[error(
        "this claim is held by another key: calls on a claim are its claimant's (its key, worker token or handle); the lease id alone is not enough"
    )]
    NotClaimant,
    /// A resume by the key that parked the task.
    #[error(
        "the key that parked a task cannot resume it: another principal supplies the new input"
    )]
    ResumedByParker,
    /// The journal refused.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// An enqueue (or a queue configuration) refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnqueueError {
    /// The queue was never provisioned.
    #[error("queue {0:?} is not provisioned; an admin provisions it with POST /v1/queues")]
    UnknownQueue(String),
    /// A spec field that breaks a rule.
    #[error("{field}: {message}")]
    InvalidSpec {
        /// The field.
        field: &'static str,
        /// Why.
        message: String,
    },
    /// A `depends_on` task that does not exist for the caller.
    #[error("depends_on names {0}, which does not exist or is not visible to this key")]
    UnknownUpstream(TaskId),
    /// A task no key but an admin could ever see or claim: its envelope
    /// names no surface to hold. Says what is missing.
    #[error("{0}")]
    Unclaimable(String),
    /// Same idempotency key, different spec.
    #[error("idempotency key already used by {0} with a different spec")]
    IdempotencyConflict(TaskId),
    /// The journal refused.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// A submit refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// The task or its lease does not allow it.
    #[error(transparent)]
    Task(#[from] TaskCallError),
    /// A second, different submit for an attempt that already has a receipt.
    #[error("this attempt already has a receipt for a different submission")]
    Conflict,
}

impl From<JournalError> for SubmitError {
    fn from(e: JournalError) -> SubmitError {
        SubmitError::Task(e.into())
    }
}

/// A split refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SplitError {
    /// The task or its lease does not allow it.
    #[error(transparent)]
    Task(#[from] TaskCallError),
    /// Past the depth or fan-out bounds.
    #[error("split refused: {0}")]
    Limit(String),
    /// A child naming a wider envelope than its parent's.
    #[error("a child cannot change its parent's {field}")]
    Widens {
        /// The field.
        field: &'static str,
    },
    /// A child that is not a valid enqueue.
    #[error(transparent)]
    Child(EnqueueError),
}

impl From<JournalError> for SplitError {
    fn from(e: JournalError) -> SplitError {
        SplitError::Task(e.into())
    }
}
