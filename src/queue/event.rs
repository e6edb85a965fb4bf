//! Journal events: one per state change, applied by `machine` both live and
//! at replay. An event holds everything its application needs (ids, lease
//! ids, timestamps, receipts), so replay never consults the clock or the RNG.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::receipt::Receipt;
use super::spec::{QueueConfig, TaskSpec};
use super::task::{Attempt, Lease, LeaseId, Park, TaskId};
use crate::store::{Name, Pin, Sha256};

/// A new task as created by enqueue or split.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewTask {
    /// The id assigned.
    pub id: TaskId,
    /// The spec (for children: already narrowed to the parent's envelope).
    pub spec: TaskSpec,
    /// The requester key id.
    pub requester: Name,
    /// The spec's fingerprint, when it has an idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Sha256>,
    /// The seed pack whose import enqueued it (a label that grants
    /// nothing); absent for other enqueues, for split children and in
    /// records older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_pack: Option<Name>,
}

/// One state change. Externally tagged (`{"claimed": {...}}`): an
/// internally tagged enum would buffer its content, which a brief kept as
/// raw JSON cannot be read back from.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A queue was provisioned or reconfigured.
    QueueSet {
        /// Its configuration.
        config: QueueConfig,
    },
    /// A task was enqueued.
    Enqueued {
        /// The task.
        task: Box<NewTask>,
        /// When.
        at: Timestamp,
    },
    /// A task was claimed.
    Claimed {
        /// The task.
        id: TaskId,
        /// The new lease (its attempt is the task's attempt + 1).
        lease: Lease,
        /// When.
        at: Timestamp,
    },
    /// A lease was extended.
    Heartbeat {
        /// The task.
        id: TaskId,
        /// The new expiry.
        expires_at: Timestamp,
    },
    /// A lease ended without a result: released by its holder, or expired.
    Released {
        /// The task.
        id: TaskId,
        /// The attempt that ended.
        attempt: Attempt,
        /// Expired (backoff applies) rather than released.
        expired: bool,
        /// When.
        at: Timestamp,
    },
    /// A receipt was written: the task is terminal, or (a failed attempt
    /// with attempts left, `retry_at`) queued again.
    Submitted {
        /// The task.
        id: TaskId,
        /// The lease submitted under.
        lease_id: LeaseId,
        /// sha256 of the canonical submit request, for idempotent resends.
        request: Sha256,
        /// The receipt record (its canonical JSON hashes to `receipt_sha256`).
        receipt: Box<Receipt>,
        /// The receipt's hash.
        receipt_sha256: Sha256,
        /// Succeeded or failed.
        ok: bool,
        /// A failed attempt that is retried: the task is queued again, not
        /// claimable before this instant (its backoff). Absent in records
        /// written before failed attempts could be retried: those failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_at: Option<Timestamp>,
        /// When.
        at: Timestamp,
    },
    /// A failed or cancelled task was queued again by its requester or an
    /// admin, as a new attempt of the same task.
    Retried {
        /// The task.
        id: TaskId,
        /// The retrying key.
        by: Name,
        /// When.
        at: Timestamp,
    },
    /// A task was parked.
    Parked {
        /// The task.
        id: TaskId,
        /// Why, and what it needs.
        park: Park,
        /// When.
        at: Timestamp,
    },
    /// A parked task was resumed with a new input pin.
    Resumed {
        /// The task.
        id: TaskId,
        /// The pin that replaces `brief.input_ref`.
        input_ref: Pin,
        /// The resuming key.
        by: Name,
        /// When.
        at: Timestamp,
    },
    /// A claimed task was split into children and now waits for them.
    Split {
        /// The parent.
        id: TaskId,
        /// The children.
        children: Vec<NewTask>,
        /// When.
        at: Timestamp,
    },
    /// A task and its non-terminal descendants were cancelled.
    Cancelled {
        /// The task.
        id: TaskId,
        /// The cancelling key.
        by: Name,
        /// When.
        at: Timestamp,
    },
    /// A worker staged a named part for the current attempt.
    Staged {
        /// The task.
        id: TaskId,
        /// The attempt.
        attempt: Attempt,
        /// The part name.
        name: String,
        /// The part's object.
        sha256: Sha256,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_enqueue_recorded_before_source_pack_replays_without_one_and_encodes_the_same() {
        let old = r#"{"enqueued":{"task":{"id":"t1","spec":{"namespace":"n","queue":"q","kind":"k","effect_class":"read","visibility_scope":"surface_only","brief":{}},"requester":"k1"},"at":"2026-01-01T00:00:00Z"}}"#;
        let ev: Event = serde_json::from_str(old).unwrap();
        let Event::Enqueued { task, .. } = &ev else {
            panic!("{ev:?}")
        };
        assert_eq!(task.source_pack, None);
        assert_eq!(serde_json::to_string(&ev).unwrap(), old);
    }
}
