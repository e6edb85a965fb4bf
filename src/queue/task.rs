//! `Task` and its vocabulary: `TaskId`, `Attempt`, `LeaseId`, `TaskState`.

use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::spec::{SpecRules, TaskSpec};
use crate::store::{Name, Sha256};

pub use tessera_core::task::{BadTaskId, TaskId};

/// A random task id of 16 digits from the OS RNG (about 53 bits): new
/// ids are drawn until one is unused.
pub fn random_id() -> TaskId {
    TaskId(rand::random_range(
        1_000_000_000_000_000..10_000_000_000_000_000,
    ))
}

/// The attempt number, which is also the lease's fence: each claim is
/// attempt + 1, and a call naming an older attempt's lease is stale.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
#[derive(utoipa::ToSchema)]
pub struct Attempt(pub u32);

impl Attempt {
    /// Whether no claim has happened yet.
    pub fn is_zero(&self) -> bool {
        self.0 == 0
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A lease's id: random, shown only to its holder; every mutation of a
/// claimed task must name the current one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseId(pub String);

/// Where a task is in its life. Terminal states change only by an
/// explicit retry (failed or cancelled back to queued); succeeded never
/// changes.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Waiting for upstream tasks (`depends_on`) to end.
    Pending,
    /// Claimable (once `not_before` has passed).
    Queued,
    /// Held by a live lease.
    Claimed,
    /// Split: waiting for its children to end, then queued to combine.
    Waiting,
    /// Parked: waiting for another principal to resume it with input.
    Parked,
    /// Terminal: a receipt with `ok: true`.
    Succeeded,
    /// Terminal: a failed attempt that is not retried (final, a failed
    /// contract check, or the last attempt), or attempts exhausted.
    Failed,
    /// Terminal: cancelled by its requester or an admin.
    Cancelled,
}

impl TaskState {
    /// Every state, in table order.
    pub const ALL: [TaskState; 8] = [
        TaskState::Pending,
        TaskState::Queued,
        TaskState::Claimed,
        TaskState::Waiting,
        TaskState::Parked,
        TaskState::Succeeded,
        TaskState::Failed,
        TaskState::Cancelled,
    ];

    /// Whether the state is final.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Failed | TaskState::Cancelled
        )
    }

    /// Whether a retry may queue the task again: it failed (attempts
    /// exhausted included) or was cancelled.
    pub fn is_retryable(self) -> bool {
        matches!(self, TaskState::Failed | TaskState::Cancelled)
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Queued => "queued",
            TaskState::Claimed => "claimed",
            TaskState::Waiting => "waiting",
            TaskState::Parked => "parked",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }
}

impl FromStr for TaskState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown state {s:?}"))
    }
}

/// A live lease.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    /// The lease id.
    pub id: LeaseId,
    /// The attempt it belongs to (its fence).
    pub attempt: Attempt,
    /// The key id that claimed.
    pub holder: Name,
    /// When it lapses unless heartbeated.
    pub expires_at: Timestamp,
    /// The worker handle (`wh-` + 26 base32) minted with the claim.
    pub handle: String,
}

impl Lease {
    /// Whether the lease is live at `now` ([`live_until`]).
    pub fn live_at(&self, now: Timestamp) -> bool {
        live_until(self.expires_at, now)
    }
}

/// Whether a lease that expires at `expires_at` is live at `now`: until
/// that instant, whether or not the sweeper has yet ended it. The one
/// liveness rule (calls on a claim, worker routes, expiries, the status
/// summary).
pub fn live_until(expires_at: Timestamp, now: Timestamp) -> bool {
    expires_at > now
}

/// Why a parked task waits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Park {
    /// The worker's reason.
    pub reason: String,
    /// What input would let it go on (free-form JSON from the worker).
    pub needs: serde_json::Value,
    /// The key that parked it (the lease holder), which may not resume it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<Name>,
}

/// The submission a receipt answered, kept so a resend is recognised.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Submission {
    /// The attempt submitted.
    pub attempt: Attempt,
    /// The lease it named.
    pub lease_id: LeaseId,
    /// sha256 of the canonical submit request.
    pub request: Sha256,
    /// The receipt written.
    pub receipt: Sha256,
}

/// A task: its spec and where it is. Owned by the queue's state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Task {
    /// Its id.
    pub id: TaskId,
    /// What was enqueued (with `input_ref` replaced by resumes).
    /// Shared, so a snapshot of the task copies a pointer, not the spec.
    pub spec: std::sync::Arc<TaskSpec>,
    /// The key id that enqueued it (the requester); children inherit it.
    pub requester: Name,
    /// The seed pack whose import enqueued it (a label; children have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_pack: Option<Name>,
    /// The task it was split from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<TaskId>,
    /// 0 for top-level tasks, parent depth + 1 for children.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
    /// Children from splits, in creation order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<TaskId>,
    /// Current state.
    pub state: TaskState,
    /// Claims so far (the current or last attempt).
    #[serde(default, skip_serializing_if = "Attempt::is_zero")]
    pub attempt: Attempt,
    /// The live lease, when claimed (boxed, like the other fields most
    /// tasks never set, to keep the table of tasks small).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Box<Lease>>,
    /// Not claimable before this instant (backoff, or the spec's `not_before`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Timestamp>,
    /// Receipt hashes in order (a `prev` chain).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receipts: Vec<Sha256>,
    /// Parts the current attempt's worker staged, by name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub staged: std::collections::BTreeMap<String, Sha256>,
    /// Objects of parts staged and then dropped: staged again under the
    /// same name, or staged by an attempt before the current one (a claim
    /// starts with none staged). Nothing reads them; they are kept so every
    /// object a worker wrote stays named (`tessera fsck` reports objects
    /// nothing names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<Sha256>,
    /// The worker handle of each attempt, in order (attempt n is index n-1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handles: Vec<String>,
    /// Spec fingerprint, kept when the spec has an idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Sha256>,
    /// The last submission, for idempotent resends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submission: Option<Box<Submission>>,
    /// Why it is parked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub park: Option<Box<Park>>,
    /// Why it failed without a receipt (`attempts_exhausted`), or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Enqueue time.
    pub created_at: Timestamp,
    /// Time of the last change.
    pub updated_at: Timestamp,
}

/// Moves a list with spare room into an allocation of exactly its length.
/// (Shrinking in place would leave the spare room as a free fragment too
/// small for the next task's allocations; a whole freed buffer is reused.)
pub(super) fn refit<T>(list: &mut Vec<T>) {
    if list.capacity() > list.len() {
        let mut exact = Vec::with_capacity(list.len());
        exact.append(list);
        *list = exact;
    }
}

/// A fresh lease id: 128 random bits from the OS, as hex.
pub fn new_lease_id() -> LeaseId {
    let mut buf = [0u8; 16];
    // The thread's CSPRNG (ChaCha, seeded and reseeded by the OS): no
    // system call per claim.
    rand::Rng::fill_bytes(&mut rand::rng(), &mut buf);
    LeaseId(hex::encode(buf))
}

impl Task {
    /// What the access rules need to know about this task.
    pub fn facts(&self, server_queue: bool) -> crate::store::envelope::TaskFacts<'_> {
        self.spec.facts(&self.requester, server_queue)
    }

    /// Drops the spare room of the task's lists, as after parsing it.
    pub fn shrink_to_fit(&mut self) {
        refit(&mut self.children);
        refit(&mut self.receipts);
        refit(&mut self.dropped);
        refit(&mut self.handles);
    }

    /// The key ids the task names, each with its part in the task: its
    /// requester, the holder of its live lease, the key that parked it.
    pub fn key_ids(&self) -> impl Iterator<Item = (&Name, &'static str)> {
        std::iter::once((&self.requester, "requester"))
            .chain(self.lease.as_ref().map(|l| (&l.holder, "claimant")))
            .chain(
                self.park
                    .as_ref()
                    .and_then(|p| p.by.as_ref())
                    .map(|by| (by, "parker")),
            )
    }

    /// `ok` of a terminal task: true iff it succeeded.
    pub fn ok(&self) -> Option<bool> {
        self.state
            .is_terminal()
            .then_some(self.state == TaskState::Succeeded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_round_trip_and_garbage_is_refused() {
        assert_eq!("t42".parse::<TaskId>().unwrap(), TaskId(42));
        assert_eq!(TaskId(7).to_string(), "t7");
        for bad in ["", "t", "42", "t-1", "tx", "t99999999999999999999", "T1"] {
            assert!(bad.parse::<TaskId>().is_err(), "{bad:?}");
        }
    }
}
