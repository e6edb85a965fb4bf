//! Completing an attempt. [`complete`] is the one receipt path: the key
//! route `POST /v1/tasks/{id}/submit` and the worker route
//! `POST /v1/worker/submit` both end here (one receipt type, one state
//! machine). [`submit_body`] is the worker route's part: store the final
//! body and parts as objects, project them into the ctx-dir, then complete.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::projection::{self, Projection, Unplaced};
use super::{Error, Session, contract, pins};
use crate::auth::Principal;
use crate::queue::receipt::{BodyRef, ProjectionRecord, ProjectionStatus, WorkerResult};
use crate::queue::{
    Brief, CheckPolicy, ClaimAfter, LeaseId, Queue, SubmitInput, Task, TaskState, Unsynced,
};
use crate::store::{Durability, Name, Pin, Sha256, Store, canonical_json, canonical_sorted};

/// `POST /v1/tasks/{id}/submit`: the key route's submit request (fields
/// in key order: its request hash is `canonical_sorted`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct SubmitBody {
    /// Claim the next task with the acknowledgement (one request per job);
    /// not part of the submit itself, so not of its request hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_next: Option<NextClaim>,
    /// Evidence noun pins.
    #[serde(default)]
    pub evidence: Vec<Pin>,
    /// With `ok: false`: the failure is final, so the task fails now even
    /// with attempts left (no retry).
    #[serde(default, rename = "final", skip_serializing_if = "std::ops::Not::not")]
    pub final_failure: bool,
    /// The live lease.
    pub lease_id: String,
    /// A short note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Success as the worker sees it.
    pub ok: bool,
    /// Output noun pins.
    #[serde(default)]
    pub outputs: Vec<Pin>,
}

/// What `claim_next` on a submit asks for: a claim as
/// `POST /v1/queues/{queue}/claim {kinds?, wait_ms?}` would make it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct NextClaim {
    /// Only these kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<crate::store::Name>>,
    /// The queue.
    pub queue: crate::store::Name,
    /// Long-poll up to this long (at most 30000).
    #[serde(default)]
    #[schema(maximum = 30000)]
    pub wait_ms: u64,
    /// Answer the claim thin (the claim route's `thin`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub thin: bool,
}

/// Longest note a submit may carry, in bytes.
pub const MAX_NOTE: usize = 4096;

impl SubmitBody {
    /// The lease it names and the submit it asks for (its request hash is
    /// over the canonical body, so a resend is recognised).
    pub fn input(mut self) -> Result<(LeaseId, SubmitInput), Error> {
        self.claim_next = None;
        if self.note.as_ref().is_some_and(|n| n.len() > MAX_NOTE) {
            return Err(Error::InvalidField {
                field: "note",
                message: format!("at most {MAX_NOTE} bytes"),
            });
        }
        check_final(self.ok, self.final_failure)?;
        let request = Sha256::of(&canonical_sorted(&self));
        let input = SubmitInput {
            ok: self.ok,
            outputs: self.outputs,
            evidence: self.evidence,
            note: self.note,
            worker: None,
            checks: None,
            failure: None,
            final_failure: self.final_failure,
            request,
        };
        Ok((LeaseId(self.lease_id), input))
    }
}

/// `final` says a failure is final: it goes with `ok: false` only.
pub fn check_final(ok: bool, final_failure: bool) -> Result<(), Error> {
    if ok && final_failure {
        return Err(Error::InvalidField {
            field: "final",
            message: "final marks a failed submit (ok: false) as not to be retried".into(),
        });
    }
    Ok(())
}

/// What a completed submit returns.
#[derive(Debug)]
pub struct Completed {
    /// The receipt's hash.
    pub receipt: Sha256,
    /// False for an idempotent resend.
    pub created: bool,
    /// The task's state after it.
    pub state: TaskState,
    /// Wait for this before acknowledging, when `complete` did not.
    pub unsynced: Unsynced,
    /// Each problem of each failed contract check (empty when none failed).
    pub failed_checks: Vec<FailedCheck>,
    /// Where the worker route projected the result, or why it did not
    /// (`None` on the key route, which projects nothing).
    pub projection: Option<ProjectionRecord>,
    /// Attempts the task has left after a failed attempt (`None` when it
    /// succeeded).
    pub attempts_left: Option<u32>,
    /// The next task, when the submit asked for one and the queue claimed
    /// it with the submit ([`Queue::submit_then`]).
    pub next: Option<crate::queue::Claimed>,
}

/// One problem of a failed contract check, as a submit answers it: the
/// check, the output it failed on, the JSON pointer and the rule (a schema
/// keyword or the check's own field), never a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FailedCheck {
    /// The check's name.
    pub name: String,
    /// Where, and by which rule.
    #[serde(flatten)]
    pub problem: contract::Problem,
}

/// What a submit reads of its task: the snapshot the queue answered for
/// its access check (a shared queue decides the submit on it, fenced to
/// its lease), its brief parsed once.
#[derive(Clone, Debug)]
pub struct SubmitTask<'a> {
    /// The task, as the access check read it. Its namespace qualifies
    /// pins without one; its staged parts are the contract's.
    pub task: &'a Task,
    /// Its brief's daemon fields.
    pub brief: Brief,
    /// Its step name (the projected `<step>.md`).
    pub step: Name,
}

impl SubmitTask<'_> {
    /// What a submit reads of `task`: itself, its parsed brief and its
    /// step name.
    pub fn of(task: &Task) -> SubmitTask<'_> {
        let brief = Brief::of(&task.spec.brief);
        let step = brief.step_name(&task.spec.kind);
        SubmitTask { task, brief, step }
    }
}

/// A stored body as the JSON a contract check reads (text that is not
/// JSON becomes a string, which a schema then refuses).
fn as_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// Runs the pinned contract's checks (if the brief pins one that declares
/// a requirement) on `outputs`, the submit's output bodies (or the
/// worker's final body when it names no output pins) and the part names
/// the attempt staged. A pin is read for a check only when
/// both the task's requester (who pinned it; `None` when its key is no
/// longer usable) and `claimant`, who is answered with the verdict, may
/// read it: any other pin fails its check without saying anything about
/// the noun, so a verdict never tells the claimant what it may not read.
async fn contract_checks(
    store: &Store,
    task: &SubmitTask<'_>,
    requester: Option<Principal>,
    claimant: &Principal,
    outputs: Vec<Value>,
) -> Result<Option<Vec<contract::Evaluated>>, Error> {
    let Some(contract_pin) = task.brief.contract_ref.clone() else {
        return Ok(None);
    };
    let step = task.step.to_string();
    let ns = task.task.spec.namespace.clone();
    let input_pin = task.brief.input_ref.clone();
    let staged: Vec<String> = task.task.staged.keys().cloned().collect();
    let claimant = claimant.clone();
    store
        .blocking(move |store| {
            let read = |pin: &Pin| {
                pins::entry_as(store, &claimant, pin, &ns).ok()?;
                requester
                    .as_ref()
                    .and_then(|p| pins::read_as(store, p, pin, &ns).ok())
            };
            let failed = |name: &str, what: &str| {
                let detail = format!(
                    "the pinned {what} is not readable by the task's requester or by the submitting key (missing, hidden, or a pin that does not match)"
                );
                contract::Evaluated {
                    check: contract::Check {
                        name: name.into(),
                        ok: false,
                        detail: detail.clone(),
                    },
                    problems: vec![contract::Problem {
                        output: None,
                        pointer: None,
                        keyword: "readable".into(),
                        found: None,
                        message: detail,
                    }],
                }
            };
            let Some(bytes) = read(&contract_pin) else {
                return Ok(Some(vec![failed("contract_is_valid", "contract")]));
            };
            let contract = contract::Contract::parse(&bytes);
            if !contract.declares_requirements() {
                return Ok(None);
            }
            let (input, unreadable) = match &input_pin {
                None => (None, None),
                Some(pin) => match read(pin) {
                    Some(bytes) => (Some(as_json(&bytes)), None),
                    None => (None, Some(failed("input_is_readable", "input"))),
                },
            };
            let subject = contract::Subject {
                step: &step,
                input: input.as_ref(),
                outputs: &outputs,
                staged: &staged,
            };
            let mut checks = contract::evaluate(&contract, subject);
            checks.extend(unreadable);
            Ok::<_, Error>(Some(checks))
        })
        .await
}

/// The daemon's verdict on a submit: its pins checked and qualified, the
/// contract's checks run (a failed check fails the attempt for good:
/// `failure`), with each failed check's problems. `fallback` is the
/// worker's final body as JSON, checked against the contract when the
/// submit names no output pins.
pub async fn verdict(
    store: &Store,
    p: &Principal,
    requester: Option<Principal>,
    task: &SubmitTask<'_>,
    mut input: SubmitInput,
    fallback: Option<Value>,
) -> Result<(SubmitInput, Vec<FailedCheck>), Error> {
    let named = |what: &str, list: &[Pin]| -> Vec<(String, Pin)> {
        list.iter()
            .enumerate()
            .map(|(i, pin)| (format!("{what}[{i}]"), pin.clone()))
            .collect()
    };
    let ns = &task.task.spec.namespace;
    let outputs_pinned = named("outputs", &input.outputs);
    let mut outputs: Vec<Value> = if task.brief.contract_ref.is_some() {
        let bodies = pins::read(store, p, ns, outputs_pinned).await?;
        bodies.iter().map(|b| as_json(b)).collect()
    } else {
        pins::check(store, p, ns, outputs_pinned).await?;
        Vec::new()
    };
    pins::check(store, p, ns, named("evidence", &input.evidence)).await?;
    if outputs.is_empty() {
        outputs.extend(fallback);
    }
    input.outputs = input.outputs.iter().map(|pin| pin.qualified(ns)).collect();
    input.evidence = input.evidence.iter().map(|pin| pin.qualified(ns)).collect();
    let mut failed_checks = Vec::new();
    if let Some(evaluated) = contract_checks(store, task, requester, p, outputs).await? {
        if let Some(failed) = evaluated.iter().find(|c| !c.check.ok) {
            input.ok = false;
            let c = &failed.check;
            input.failure = Some(format!("check {} failed: {}", c.name, c.detail));
        }
        let mut checks = Vec::with_capacity(evaluated.len());
        for e in evaluated {
            failed_checks.extend(e.problems.into_iter().map(|problem| FailedCheck {
                name: e.check.name.clone(),
                problem,
            }));
            checks.push(e.check);
        }
        input.checks = Some(checks);
    }
    Ok((input, failed_checks))
}

/// The one submit path: the [`verdict`], then the receipt written and the
/// task ended (or queued again for a retryable failure). With `wait`, it
/// returns once the receipt is durable; without, the caller waits for
/// `Completed::unsynced` before acknowledging.
#[allow(clippy::too_many_arguments)]
pub async fn complete(
    store: &Store,
    queue: &Queue,
    p: &Principal,
    requester: Option<Principal>,
    task: &SubmitTask<'_>,
    lease_id: &LeaseId,
    input: SubmitInput,
    fallback: Option<Value>,
    wait: bool,
    after: Option<ClaimAfter<'_>>,
) -> Result<Completed, Error> {
    let (input, failed_checks) = verdict(store, p, requester, task, input, fallback).await?;
    let done = Done {
        failed_checks,
        projection: None,
        wait,
    };
    record(queue, p, task.task, lease_id, &input, done, after).await
}

/// What a submit's answer waits for and carries besides the receipt.
struct Done {
    failed_checks: Vec<FailedCheck>,
    projection: Option<ProjectionRecord>,
    wait: bool,
}

/// Writes the receipt of a submit whose [`verdict`] is in `input`.
async fn record(
    queue: &Queue,
    p: &Principal,
    seen: &Task,
    lease_id: &LeaseId,
    input: &SubmitInput,
    Done {
        failed_checks,
        projection,
        wait,
    }: Done,
    after: Option<ClaimAfter<'_>>,
) -> Result<Completed, Error> {
    let id = seen.id;
    let ((receipt, created, state), unsynced, next) = queue
        .submit_then(seen, lease_id, input, &p.key_id, after)
        .await?;
    let attempts_left = match state {
        TaskState::Succeeded => None,
        _ => Some(queue.attempts_left(id).await?),
    };
    if wait {
        queue
            .synced(unsynced)
            .await
            .map_err(crate::queue::SubmitError::from)?;
    }
    if created {
        tracing::debug!(task = %id, state = state.as_str(), receipt = %receipt, "task submitted");
    }
    Ok(Completed {
        receipt,
        created,
        state,
        unsynced,
        failed_checks,
        projection,
        attempts_left,
        next,
    })
}

/// The worker's final submit: `body` is the final body (already resolved
/// from `@file:`), `ok` the worker's verdict and `final_failure` whether a
/// failure is final, `requester` the task's requester (for the contract
/// checks), `template` its ctx-dir template (`State::template_of`). The
/// daemon's verdict comes first, so the projected `<step>.md` carries it.
/// The caller holds the task's turn ([`super::order`]) and re-checked the
/// session under it, so the staged parts are all this attempt will have.
#[allow(clippy::too_many_arguments)]
pub async fn submit_body(
    store: &Store,
    queue: &Queue,
    session: &Session,
    requester: Option<Principal>,
    template: String,
    ok: bool,
    final_failure: bool,
    body: Vec<u8>,
) -> Result<Completed, Error> {
    check_final(ok, final_failure)?;
    let task = &session.task;
    let lease = task.lease.clone().ok_or(Error::StaleLease {
        state: task.state,
        attempt: task.attempt,
    })?;
    let submitting = SubmitTask::of(task);
    let step = submitting.step.to_string();
    let staged: Vec<(String, Sha256)> = task.staged.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let (task_id, attempt, policy) = (task.id, session.attempt.0, task.spec.traits.check_policy);
    let namespace = task.spec.namespace.clone();
    let fallback = Some(super::output::value_of(&body)).filter(|v| v.is_object() || v.is_array());
    let out = BodyRef {
        sha256: Sha256::of(&body),
        size: body.len() as u64,
    };
    let parts = task.staged.clone();
    let mut asked = json!({"attempt": attempt, "ok": ok, "out": out, "parts": parts});
    if final_failure {
        asked["final"] = json!(true);
    }
    let input = SubmitInput::bare(ok, final_failure, Sha256::of(&canonical_json(&asked)));
    let (mut input, failed_checks) = verdict(
        store,
        &session.claimant,
        requester,
        &submitting,
        input,
        fallback,
    )
    .await?;
    let verdict_ok = input.ok;
    let step_for_files = step.clone();
    let projected = store
        .blocking(move |store| {
            let mut parts = Vec::with_capacity(staged.len());
            for (name, sha) in &staged {
                parts.push((name.clone(), store.get_object(sha)?));
            }
            let p = Projection {
                template: &template,
                namespace: &namespace,
                task_id,
                step: &step_for_files,
                attempt,
                ok: verdict_ok,
                body: &body,
                parts: &parts,
            };
            // The body is stored only once the submit will be recorded
            // with it, so a refused submit leaves no object nothing names.
            let projected = match projection::project(store, &p) {
                Ok(swap) => Ok(swap),
                Err(Unplaced::Blocked(reason)) => Err((p.path(), reason)),
                Err(Unplaced::Storage(e)) => return Err(Error::Store(e)),
            };
            if let Err(e) = store.put_object(&body, Durability::Synced) {
                if let Ok(swap) = projected {
                    swap.undo();
                }
                return Err(Error::Store(e));
            }
            Ok(projected)
        })
        .await?;
    let (swap, projection) = match projected {
        Ok(swap) => {
            let record = ProjectionRecord {
                status: ProjectionStatus::Written,
                path: swap.path.clone(),
                reason: None,
            };
            (Some(swap), record)
        }
        Err((path, reason)) if policy == CheckPolicy::Strict => {
            tracing::warn!(task = %task_id, path = %path, reason = %reason, "projection failed, so the attempt fails (check_policy: strict)");
            input.ok = false;
            // A failed check's failure, set first, stays the receipt's.
            input.failure.get_or_insert_with(|| {
                format!(
                    "the result could not be projected to {path} (check_policy: strict): {reason}"
                )
            });
            let record = ProjectionRecord {
                status: ProjectionStatus::Failed,
                path,
                reason: Some(reason),
            };
            (None, record)
        }
        Err((path, reason)) => {
            tracing::warn!(task = %task_id, path = %path, reason = %reason, "projection skipped (check_policy: warn)");
            let record = ProjectionRecord {
                status: ProjectionStatus::Skipped,
                path,
                reason: Some(reason),
            };
            (None, record)
        }
    };
    input.worker = Some(WorkerResult {
        out,
        parts,
        step,
        projection: projection.clone(),
    });
    let done = record(
        queue,
        &session.claimant,
        task,
        &lease.id,
        &input,
        Done {
            failed_checks,
            projection: Some(projection),
            wait: true,
        },
        None,
    )
    .await;
    match (done, swap) {
        (Ok(done), Some(swap)) => {
            swap.finish();
            Ok(done)
        }
        (Err(e), Some(swap)) => {
            swap.undo();
            Err(e)
        }
        (result, None) => result,
    }
}
