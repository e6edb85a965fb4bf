//! Request and response bodies of the batch routes (`/v1/batch/nouns`,
//! `/v1/batch/tasks`): many noun puts or enqueues in one request, each item
//! carrying exactly the single route's body and answered on its own.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::queue::{TaskId, TaskState};

/// Most items one batch request may carry.
pub const MAX_BATCH_ITEMS: usize = 1000;

/// `POST /v1/batch/nouns`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct NounBatch {
    /// The puts, answered in this order.
    pub items: Vec<NounBatchItem>,
}

/// One noun put: the path segments and the body of
/// `PUT /v1/nouns/{namespace}/{store}/{key}` (a `PutNoun`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct NounBatchItem {
    /// Namespace.
    pub namespace: String,
    /// Store.
    pub store: String,
    /// Key.
    pub key: String,
    /// The `PutNoun` envelope, checked exactly as the single route checks it.
    #[schema(value_type = serde_json::Value)]
    pub envelope: Box<RawValue>,
}

/// `POST /v1/batch/tasks[?dry_run=true]`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct TaskBatch {
    /// TaskSpecs, each the body of `POST /v1/tasks`; enqueued in this order,
    /// so an item's `depends_on` may name tasks created before the request.
    #[schema(value_type = Vec<serde_json::Value>)]
    pub items: Vec<Box<RawValue>>,
}

/// The answer to a batch: one entry per item, in request order.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchReply<T> {
    /// The items' answers.
    pub items: Vec<ItemReply<T>>,
}

/// One item's answer: the status the single route would have sent, and
/// either its body or its error.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemReply<T> {
    /// HTTP status of the item on its own.
    pub status: u16,
    /// The single route's answer, for a 2xx status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<T>,
    /// The single route's `error` object, otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ItemError>,
}

/// The `error` object of an error body: `{code, message, details}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemError {
    /// Stable snake_case code.
    pub code: String,
    /// What happened and what to do next.
    pub message: String,
    /// Structured details.
    pub details: Value,
}

/// What an enqueue in a task batch did (or, in a dry run, would do).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskOutcome {
    /// `create`, `unchanged` (same idempotency key and spec) or, in a dry
    /// run only, `conflict` (same key, another spec; a real enqueue answers
    /// 409 `idempotency_conflict`).
    pub outcome: String,
    /// The task created or found; absent when a dry run would create one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// Its state right after the request; absent in a dry run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    /// Whether this was a dry run.
    pub dry_run: bool,
}
