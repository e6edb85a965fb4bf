//! What the worker routes answer, beside the prompt (`worker::prompt`)
//! and a submit's receipt.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::queue::TaskId;
use crate::store::Sha256;

/// `POST /v1/worker/heartbeat`: the attempt's lease, extended.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkerHeartbeat {
    /// The task.
    pub task_id: TaskId,
    /// The attempt the credential is bound to.
    pub attempt: u32,
    /// When the lease now ends unless extended again.
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: Timestamp,
}

/// One staged part.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PartView {
    /// Its name.
    pub name: String,
    /// Its bytes' hash.
    pub sha256: Sha256,
    /// Its size in bytes.
    pub size: u64,
}

/// `GET /v1/worker/parts`: the parts the attempt staged so far.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkerParts {
    /// The task.
    pub task_id: TaskId,
    /// The attempt.
    pub attempt: u32,
    /// The parts, by name.
    pub parts: Vec<PartView>,
}

/// `POST /v1/worker/artifact`: the part just staged.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StagedPart {
    /// The task.
    pub task_id: TaskId,
    /// The attempt.
    pub attempt: u32,
    /// The part.
    #[serde(flatten)]
    pub part: PartView,
}
