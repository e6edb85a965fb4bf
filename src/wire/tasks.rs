//! Request and response bodies of the queue and task routes.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::auth::EffectClass;
use crate::queue::{ChildSpec, QueueConfig, TaskId, TaskState, Traits};
use crate::store::{Name, Pin, Sha256, Visibility};

/// A queue as listed, with its task counts per state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QueueView {
    /// Its configuration.
    #[serde(flatten)]
    pub config: QueueConfig,
    /// Tasks per state.
    pub counts: BTreeMap<String, u64>,
}

/// The answer to `POST /v1/queues`: the queue's whole config after the
/// post, and whether the post made the queue.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProvisionedQueue {
    /// Its configuration.
    #[serde(flatten)]
    pub config: QueueConfig,
    /// True (`201`) when the post made the queue; false (`200`) when it
    /// existed, and the post changed only the fields it named.
    pub created: bool,
}

/// `GET /v1/queues`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueueList {
    /// The queues the key may use (all, for admin).
    pub queues: Vec<QueueView>,
}

/// The answer to an enqueue.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Enqueued {
    /// The task.
    pub task_id: TaskId,
    /// Its state right after enqueue.
    pub state: TaskState,
    /// False when an idempotent resend found the existing task.
    pub created: bool,
}

/// A lease as shown to its holder.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseView {
    /// The lease id (only its holder and admin see it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The fence: the attempt number this lease belongs to.
    pub fence: u32,
    /// When it lapses unless heartbeated.
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: Timestamp,
    /// The key holding it.
    pub holder: String,
}

/// Another task as seen from this one (a child or an upstream).
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Related {
    /// Its id.
    pub task_id: TaskId,
    /// Its state; absent when the viewer may not see it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    /// Whether it succeeded (terminal tasks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// Its last receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Sha256>,
}

/// A task as shown to a key that may see it.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskView {
    /// Id.
    pub task_id: TaskId,
    /// State.
    pub state: TaskState,
    /// Claims so far.
    pub attempt: u32,
    /// Claims allowed: its spec's own `max_attempts`, or else its queue's.
    pub max_attempts: u32,
    /// Its spec's own `max_attempts`; `null`: its queue's applies.
    pub max_attempts_override: Option<u32>,
    /// Namespace.
    pub namespace: Name,
    /// Queue; `null` to a key that was not issued it (hidden means
    /// missing: the queue answers such a key as one never provisioned).
    pub queue: Option<Name>,
    /// Kind.
    pub kind: Name,
    /// Effect class.
    pub effect_class: EffectClass,
    /// Producer surface.
    pub producer_surface: Option<Name>,
    /// Visibility.
    pub visibility_scope: Visibility,
    /// Allowlisted surfaces.
    pub allowed_surfaces: Vec<Name>,
    /// Idempotency key.
    pub idempotency_key: Option<String>,
    /// The brief (with `input_ref` as last resumed).
    #[schema(value_type = serde_json::Value)]
    pub brief: Box<RawValue>,
    /// Whether its worker may submit `@file:` bodies from its work dir.
    pub allow_file_submit: bool,
    /// Its ctx-dir placement template, if it has one.
    pub placement: Option<String>,
    /// How it is ordered, labelled and run (top-level fields).
    #[serde(flatten)]
    #[schema(inline)]
    pub traits: Traits,
    /// The requester key.
    pub requester: Name,
    /// The seed pack whose import enqueued it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_pack: Option<Name>,
    /// The live lease.
    pub lease: Option<LeaseView>,
    /// Not claimable before.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub not_before: Option<Timestamp>,
    /// The parent it was split from.
    pub parent: Option<TaskId>,
    /// Children from splits.
    pub children: Vec<Related>,
    /// Upstream tasks (`depends_on`).
    pub upstream: Vec<Related>,
    /// Receipt hashes in order.
    pub receipts: Vec<Sha256>,
    /// Why it is parked.
    pub park: Option<crate::queue::Park>,
    /// Why it failed or was cancelled without a receipt.
    pub reason: Option<String>,
    /// Parts staged by the current attempt's worker.
    pub staged: BTreeMap<String, Sha256>,
    /// Enqueued at.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// Last change.
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

/// `GET /v1/tasks`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskList {
    /// A page of tasks the key may see, in id order.
    pub tasks: Vec<TaskView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<TaskId>,
}

/// `POST /v1/queues/{queue}/claim`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct ClaimNext {
    /// Only these kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<Name>>,
    /// Long-poll up to this long (at most 30000).
    #[serde(default)]
    #[schema(maximum = 30000)]
    pub wait_ms: u64,
    /// Claim up to this many tasks at once (1 to 100); the answer is then
    /// `{claims: [...]}` (empty when none was ready within `wait_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
    /// Answer thin claims ([`ThinClaimed`]): the handle, task id, attempt,
    /// lease and routing facts, without the task's brief, for an
    /// orchestrator that relays the handle to the agent that works it
    /// (the agent fetches the rest with `GET /v1/worker/prompt`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub thin: bool,
}

/// The answer to a claim with `max`: each claim whole, or each thin with
/// `thin`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ClaimedMany {
    /// The claims, in claim order.
    pub claims: Vec<ClaimAnswer>,
}

/// A claim: the task and its lease, and the worker's credentials.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Claimed {
    /// The task.
    pub task: TaskView,
    /// The lease.
    pub lease: LeaseView,
    /// A capability token for the worker routes of this attempt.
    pub token: String,
    /// A short handle that stands for the token.
    pub handle: String,
    /// Where the worker fetches its prompt.
    pub prompt_url: String,
}

impl Claimed {
    /// The claim as a thin one: no brief, no token.
    pub fn thin(self) -> ThinClaimed {
        let task = self.task;
        ThinClaimed {
            task_id: task.task_id,
            attempt: task.attempt,
            lease: self.lease,
            handle: self.handle,
            prompt_url: self.prompt_url,
            namespace: task.namespace,
            queue: task.queue,
            kind: task.kind,
            traits: task.traits,
        }
    }
}

/// A thin claim (`thin: true`): what an orchestrator relays to the agent
/// that works the task. It carries the handle and the facts a relay
/// routes by, never the task's content: the agent fetches its prompt
/// (brief, directive, contract, pinned inputs) with the handle.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ThinClaimed {
    /// The task.
    pub task_id: TaskId,
    /// The attempt this claim began (the lease's fence).
    pub attempt: u32,
    /// The lease.
    pub lease: LeaseView,
    /// The short handle the agent works the attempt with.
    pub handle: String,
    /// Where the agent fetches its prompt with the handle.
    pub prompt_url: String,
    /// The task's namespace.
    pub namespace: Name,
    /// Its queue (`null` to a key not issued it).
    pub queue: Option<Name>,
    /// Its kind.
    pub kind: Name,
    /// Its priority, labels and run settings (top-level fields).
    #[serde(flatten)]
    #[schema(inline)]
    pub traits: Traits,
}

/// A claim as its asker wanted it: whole, or thin.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum ClaimAnswer {
    /// The task with its brief, lease, token and handle.
    Full(Box<Claimed>),
    /// The handle, lease and routing facts only.
    Thin(Box<ThinClaimed>),
}

impl ClaimAnswer {
    /// `claim` whole, or thin when `thin`.
    pub fn of(claim: Claimed, thin: bool) -> ClaimAnswer {
        if thin {
            ClaimAnswer::Thin(Box::new(claim.thin()))
        } else {
            ClaimAnswer::Full(Box::new(claim))
        }
    }
}

/// A body naming only a lease.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct LeaseRef {
    /// The live lease.
    pub lease_id: String,
}

/// The answer to a heartbeat.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Heartbeat {
    /// The new expiry.
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: Timestamp,
}

/// `POST /v1/tasks/{id}/submit` (its rules live with the submit path).
pub use crate::worker::submit::SubmitBody;

/// The answer to a submit.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Submitted {
    /// The task.
    pub task_id: TaskId,
    /// Its state after the submit: terminal, or `queued` when a failed
    /// attempt is retried.
    pub state: TaskState,
    /// The receipt's `ok` (false when a contract check failed).
    pub ok: bool,
    /// The receipt's sha256.
    pub receipt_sha256: Sha256,
    /// False for an idempotent resend.
    pub created: bool,
    /// With `claim_next`: the next claim (as the claim route answers it,
    /// thin with `claim_next.thin`), or `null` when none was ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<Option<ClaimAnswer>>,
    /// Each problem of each failed contract check (the field's pointer,
    /// the rule and the JSON type found, never a value); absent when none
    /// failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_checks: Vec<crate::worker::submit::FailedCheck>,
    /// On the worker route: where the result was projected (`written`),
    /// or why not (`skipped` under `check_policy: warn`, `failed` under
    /// `strict`, which fails the attempt), as the receipt records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<crate::queue::receipt::ProjectionRecord>,
    /// After a failed attempt: how many attempts the task has left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts_left: Option<u32>,
}

/// `POST /v1/tasks/{id}/park`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct ParkBody {
    /// The live lease.
    pub lease_id: String,
    /// Why.
    pub reason: String,
    /// What input would let it go on.
    #[serde(default)]
    pub needs: Value,
}

/// `POST /v1/tasks/{id}/resume`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct ResumeBody {
    /// The pin that replaces `brief.input_ref`.
    pub input_ref: Pin,
}

/// `POST /v1/tasks/{id}/split`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct SplitBody {
    /// The live lease.
    pub lease_id: String,
    /// The children.
    pub children: Vec<ChildSpec>,
}

/// The answer to a split.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SplitDone {
    /// The parent, now waiting.
    pub task_id: TaskId,
    /// The children, in order.
    pub children: Vec<TaskId>,
}

/// The answer to park, resume, release and cancel.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StateReply {
    /// The task.
    pub task_id: TaskId,
    /// Its new state.
    pub state: TaskState,
}

/// `POST /v1/tasks/{id}/claim` (or no body): how the claim is answered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct ClaimOne {
    /// Answer a thin claim ([`ThinClaimed`]), as `ClaimNext::thin` does.
    #[serde(default)]
    pub thin: bool,
}

/// `POST /v1/tasks/{id}/retry`: an empty object (no fields yet).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct RetryBody {}

/// The answer to a retry (`POST /v1/tasks/{id}/retry`), and one task of a
/// bulk retry or cancel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Retried {
    /// The task.
    pub task_id: TaskId,
    /// Its state now: `queued` (or `pending` while an upstream is open)
    /// after a retry, `cancelled` after a cancel.
    pub state: TaskState,
    /// Claims so far; the next claim is attempt + 1.
    pub attempt: u32,
}

/// `POST /v1/tasks/retry` and `POST /v1/tasks/cancel`: the tasks to act
/// on, by the task list's filters; only tasks the key may act on count.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct BulkBody {
    /// Only this queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<Name>,
    /// Only this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Name>,
    /// Only this state (one the action can take).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    /// Only this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<Name>,
    /// Only tasks the import of this seed pack enqueued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_pack: Option<Name>,
    /// Count only; change nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// Act on at most this many tasks (1 to 1000, default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// The answer to a bulk retry or cancel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BulkReply {
    /// Whether it only counted.
    pub dry_run: bool,
    /// The tasks the filters selected that the key may act on.
    pub matched: u64,
    /// The tasks acted on, in id order (empty in a dry run).
    pub tasks: Vec<Retried>,
    /// Selected tasks still to act on: call again while it is not 0.
    pub remaining: u64,
}

/// One receipt of a task, with its hash.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReceiptEntry {
    /// The receipt's hash.
    pub sha256: Sha256,
    /// The receipt.
    pub receipt: crate::queue::Receipt,
}

/// `GET /v1/tasks/{id}/receipts`: a task's receipts, in order.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReceiptList {
    /// The task.
    pub task_id: TaskId,
    /// Its receipts, oldest first.
    pub receipts: Vec<ReceiptEntry>,
}
