//! Receipts: the immutable record that ends an attempt with a result.
//! A receipt is canonical JSON stored as an object; its sha256 is returned
//! to the submitter, and `prev` chains a task's receipts in order.

use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Map, Value};

use super::task::{Attempt, TaskId, TaskState};
use crate::store::{Name, Pin, Sha256, canonical_json};

/// What a submit brings besides the lease.
#[derive(Clone, Debug)]
pub struct SubmitInput {
    /// Success or failure as the worker sees it.
    pub ok: bool,
    /// Output noun pins.
    pub outputs: Vec<Pin>,
    /// Evidence noun pins.
    pub evidence: Vec<Pin>,
    /// A short note.
    pub note: Option<String>,
    /// Further receipt fields from other layers (contract checks, the
    /// worker's final body and parts, the projection outcome).
    pub extra: Map<String, Value>,
    /// sha256 of the canonical submit request (for idempotent resends).
    pub request: Sha256,
}

/// The receipt record. Field order is irrelevant: it is stored canonical.
#[derive(Serialize)]
struct Receipt<'a> {
    task_id: TaskId,
    attempt: Attempt,
    state: &'static str,
    ok: bool,
    outputs: &'a [Pin],
    evidence: &'a [Pin],
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'a str>,
    by_key: &'a Name,
    at: Timestamp,
    prev: Option<Sha256>,
}

/// Builds a receipt and returns it with its canonical hash.
pub fn build(
    task_id: TaskId,
    attempt: Attempt,
    input: &SubmitInput,
    by_key: &Name,
    at: Timestamp,
    prev: Option<Sha256>,
) -> (Value, Sha256) {
    let state = if input.ok {
        TaskState::Succeeded
    } else {
        TaskState::Failed
    };
    let mut value = serde_json::to_value(Receipt {
        task_id,
        attempt,
        state: state.as_str(),
        ok: input.ok,
        outputs: &input.outputs,
        evidence: &input.evidence,
        note: input.note.as_deref(),
        by_key,
        at,
        prev,
    })
    .expect("receipts serialize");
    if let Value::Object(map) = &mut value {
        for (k, v) in &input.extra {
            map.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let sha = Sha256::of(&canonical_json(&value));
    (value, sha)
}

/// The canonical bytes of a receipt record.
pub fn bytes(receipt: &Value) -> Vec<u8> {
    canonical_json(receipt)
}
