//! Receipts: the immutable record that ends an attempt with a result.
//! A receipt is canonical JSON stored as an object; its sha256 is returned
//! to the submitter, and `prev` chains a task's receipts in order.
//! [`Receipt`] is the one type that writes and reads them.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::task::{Attempt, TaskId, TaskState};
use crate::store::{self, Name, Pin, Sha256, Store, canonical_sorted};

/// A stored body: its hash and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BodyRef {
    /// sha256 of the bytes (an object under `objects/`).
    pub sha256: Sha256,
    /// Size in bytes.
    pub size: u64,
}

/// Whether the ctx-dir projection of a worker submit was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProjectionStatus {
    /// The ctx-dir holds this submit's result.
    Written,
    /// It could not be written, and the step went on
    /// (`check_policy: warn`).
    Skipped,
    /// It could not be written, so the attempt failed for good
    /// (`check_policy: strict`): the receipt's `failure` says why.
    Failed,
}

/// Where a worker submit's result was projected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectionRecord {
    /// The ctx-dir, relative to the root.
    pub path: String,
    /// Why it was not written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Written or skipped.
    pub status: ProjectionStatus,
}

/// A worker submit's final body, parts, step and projection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerResult {
    /// The final body.
    pub out: BodyRef,
    /// The staged parts folded into this submit, by name.
    pub parts: BTreeMap<String, Sha256>,
    /// The step name (`<step>.md`).
    pub step: String,
    /// The projection outcome.
    pub projection: ProjectionRecord,
}

/// One contract check's outcome. `detail` names JSON pointers and schema
/// keywords, never a value the receipt's readers may not see.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CheckOutcome {
    /// What was checked, or why it failed.
    pub detail: String,
    /// The check's name.
    pub name: String,
    /// Whether it passed.
    pub ok: bool,
}

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
    /// The worker route's result, when it came through `/v1/worker/submit`.
    pub worker: Option<WorkerResult>,
    /// The contract checks run, when the task's contract declares them.
    pub checks: Option<Vec<CheckOutcome>>,
    /// Why the daemon failed the attempt (a failed check): such a
    /// failure is deterministic, so the task is not retried.
    pub failure: Option<String>,
    /// The submitter says the failure is final: no retry.
    pub final_failure: bool,
    /// sha256 of the canonical submit request (for idempotent resends).
    pub request: Sha256,
}

impl SubmitInput {
    /// A submit that carries only its verdict (parts, if any, were staged
    /// before it): no outputs, evidence, note or checks yet.
    pub fn bare(ok: bool, final_failure: bool, request: Sha256) -> SubmitInput {
        SubmitInput {
            ok,
            outputs: vec![],
            evidence: vec![],
            note: None,
            worker: None,
            checks: None,
            failure: None,
            final_failure,
            request,
        }
    }

    /// Whether a failed attempt may be retried: the submitter did not
    /// call it final and no contract check failed.
    pub fn retryable(&self) -> bool {
        !self.ok && !self.final_failure && self.failure.is_none()
    }
}

/// The receipt record, as stored (canonical JSON) and read back. Its
/// fields, and those of the records in it, are declared in key order: it
/// is written by `canonical_sorted`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Receipt {
    /// When.
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    /// The attempt it ends.
    pub attempt: Attempt,
    /// The submitting key.
    pub by_key: Name,
    /// Contract checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Vec<CheckOutcome>>,
    /// Evidence pins (namespace filled in).
    pub evidence: Vec<Pin>,
    /// Why the daemon failed the attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The submitter said the failure is final.
    #[serde(default, rename = "final", skip_serializing_if = "std::ops::Not::not")]
    pub final_failure: bool,
    /// The submitter's note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The daemon's verdict.
    pub ok: bool,
    /// The worker's final body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<BodyRef>,
    /// Output pins (namespace filled in).
    pub outputs: Vec<Pin>,
    /// The worker's staged parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<BTreeMap<String, Sha256>>,
    /// The task's previous receipt.
    pub prev: Option<Sha256>,
    /// The ctx-dir projection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<ProjectionRecord>,
    /// For a failed attempt: whether the task went back to the queue for
    /// another attempt (absent on successes and on receipts written before
    /// failed attempts could be retried, which were never retried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<bool>,
    /// The attempt's outcome: `succeeded` or `failed`.
    pub state: TaskState,
    /// The step name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The task.
    pub task_id: TaskId,
}

impl Receipt {
    /// Builds the receipt of a submit; `retry` says whether a failed
    /// attempt sends the task back to the queue.
    pub fn build(
        task_id: TaskId,
        attempt: Attempt,
        input: &SubmitInput,
        by_key: &Name,
        at: Timestamp,
        prev: Option<Sha256>,
        retry: bool,
    ) -> Receipt {
        let worker = input.worker.clone();
        Receipt {
            task_id,
            attempt,
            state: if input.ok {
                TaskState::Succeeded
            } else {
                TaskState::Failed
            },
            ok: input.ok,
            retry: (!input.ok).then_some(retry),
            final_failure: input.final_failure,
            outputs: input.outputs.clone(),
            evidence: input.evidence.clone(),
            note: input.note.clone(),
            by_key: by_key.clone(),
            at,
            prev,
            out: worker.as_ref().map(|w| w.out),
            parts: worker.as_ref().map(|w| w.parts.clone()),
            step: worker.as_ref().map(|w| w.step.clone()),
            projection: worker.map(|w| w.projection),
            checks: input.checks.clone(),
            failure: input.failure.clone(),
        }
    }

    /// The canonical bytes (what is stored and hashed).
    pub fn bytes(&self) -> Vec<u8> {
        canonical_sorted(self)
    }

    /// Reads a stored receipt by its hash (from its row when this root
    /// lacks it: another daemon took the submit).
    pub fn read(store: &Store, sha: &Sha256) -> Result<Receipt, store::Error> {
        let bytes = store.get_row_object(sha)?;
        serde_json::from_slice(&bytes).map_err(|e| store::Error::CorruptRef {
            path: store::object::object_path(sha),
            message: format!("not a receipt: {e}"),
        })
    }

    /// Whether the receipt's outputs or evidence hold exactly `pin`.
    pub fn cites(&self, pin: &Pin) -> bool {
        self.outputs.iter().chain(&self.evidence).any(|p| p == pin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::canonical_record;

    /// Every field set, so each one's place in the key order is checked
    /// (`canonical_sorted` compares with the `Value` route in tests too).
    #[test]
    fn a_receipt_with_every_field_writes_its_canonical_bytes_straight() {
        let name = |s: &str| Name::parse("test", s).unwrap();
        let pin = Pin {
            namespace: Some(name("team")),
            store: name("outputs"),
            key: name("k"),
            version: 3,
            sha256: Sha256::of(b"v3"),
        };
        let input = SubmitInput {
            ok: false,
            outputs: vec![pin.clone()],
            evidence: vec![pin],
            note: Some("a \"quoted\" note\n".into()),
            worker: Some(WorkerResult {
                out: BodyRef {
                    sha256: Sha256::of(b"out"),
                    size: 3,
                },
                parts: BTreeMap::from([
                    ("z.md".into(), Sha256::of(b"z")),
                    ("a.md".into(), Sha256::of(b"a")),
                ]),
                step: "draft".into(),
                projection: ProjectionRecord {
                    status: ProjectionStatus::Skipped,
                    path: "ctx/t1".into(),
                    reason: Some("blocked".into()),
                },
            }),
            checks: Some(vec![CheckOutcome {
                name: "schema".into(),
                ok: false,
                detail: "/0: required".into(),
            }]),
            failure: Some("check schema failed".into()),
            final_failure: true,
            request: Sha256::of(b"request"),
        };
        let at: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
        let prev = Some(Sha256::of(b"prev"));
        let receipt = Receipt::build(
            TaskId(1),
            Attempt(2),
            &input,
            &name("worker"),
            at,
            prev,
            true,
        );
        assert_eq!(receipt.bytes(), canonical_record(&receipt));
    }
}
