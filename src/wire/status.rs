//! The body of `GET /v1/status`: an operator's overview of the queues a
//! key may see, and (for admin) the root's storage.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::Health;
use crate::store::Name;

/// `GET /v1/status`.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Status {
    /// The root's health, as `/healthz` reports it.
    pub health: Health,
    /// When the daemon computed this answer.
    #[schema(value_type = String, format = DateTime)]
    pub now: Timestamp,
    /// The queues the key was issued (all, for admin), by name.
    pub queues: Vec<QueueStatus>,
    /// The root's storage: admin only (absent for other keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageStatus>,
}

/// One queue, counting only the tasks the key may see.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueueStatus {
    /// The queue.
    pub name: Name,
    /// Tasks per state (every state, zeros included).
    pub counts: BTreeMap<String, u64>,
    /// When the longest-waiting queued task became queued; absent when
    /// none is queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub oldest_queued_since: Option<Timestamp>,
    /// Claimed tasks whose lease has not lapsed.
    pub live_leases: u64,
}

/// Where the root's bytes are (admin only).
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StorageStatus {
    /// Bytes of the files under `journal/` (segments are preallocated, so
    /// this grows in whole segments).
    pub journal_bytes: u64,
    /// Bytes free to the daemon on the root's file system.
    pub disk_free_bytes: u64,
    /// Size of the root's file system.
    pub disk_total_bytes: u64,
    /// What folding the journal into the snapshot did in this run.
    pub folds: FoldStatus,
}

/// The journal's folds in this run (admin only, within [`StorageStatus`]).
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FoldStatus {
    /// Looks at the journal so far (one a second from the start).
    pub looks: u64,
    /// Whether the last look found closed segments past the bound
    /// (`fold_journal_mib` and half the snapshot, or 8 segments) that are
    /// not folded yet.
    pub due: bool,
    /// Folds that wrote a snapshot.
    pub done: u64,
    /// Folds that failed (a full disk included); each is tried again
    /// a minute later.
    pub failed: u64,
    /// Tasks in the last snapshot a fold wrote.
    pub last_tasks: u64,
    /// How long the last fold took, in milliseconds.
    pub last_ms: u64,
}

impl From<crate::queue::Folds> for FoldStatus {
    fn from(f: crate::queue::Folds) -> FoldStatus {
        FoldStatus {
            looks: f.looks,
            due: f.due,
            done: f.done,
            failed: f.failed,
            last_tasks: f.last_tasks as u64,
            last_ms: f.last_ms,
        }
    }
}
