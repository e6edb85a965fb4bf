//! Completing an attempt. [`complete`] is the one receipt path: the key
//! route `POST /v1/tasks/{id}/submit` and the worker route
//! `POST /v1/worker/submit` both end here (one receipt type, one state
//! machine). [`submit_body`] is the worker route's part: store the final
//! body and parts as objects, project them into the ctx-dir, then complete.

use serde_json::{Map, Value, json};

use super::projection::{self, Projection};
use super::{Error, Session, contract, step_name};
use crate::auth::{Principal, access};
use crate::queue::placement::DEFAULT_PLACEMENT;
use crate::queue::{CheckPolicy, LeaseId, Queue, SubmitInput, Task, TaskState};
use crate::store::{Durability, Pin, Sha256, Store, canonical_json};

/// What a completed submit returns.
#[derive(Clone, Debug)]
pub struct Completed {
    /// The receipt's hash.
    pub receipt: Sha256,
    /// False for an idempotent resend.
    pub created: bool,
    /// The task's state after it.
    pub state: TaskState,
}

/// Checks that every pin names an existing version with that sha256,
/// readable by `p`, and returns their bytes in order.
pub async fn check_pins(
    store: &Store,
    p: &Principal,
    task: &Task,
    pins: Vec<(String, Pin)>,
) -> Result<Vec<Vec<u8>>, Error> {
    let p = p.clone();
    let ns = task.spec.namespace.clone();
    store
        .blocking(move |store| {
            let mut read_all = Vec::with_capacity(pins.len());
            for (field, pin) in pins {
                let pin_ns = pin.namespace.clone().unwrap_or_else(|| ns.clone());
                let read = store.read_pin::<Error>(&pin, &ns, |entry| {
                    access::may_read_nouns(&p, &pin_ns)?;
                    Ok(access::read_noun(&p, entry)?)
                });
                let reason = match read {
                    Ok(bytes) => {
                        read_all.push(bytes);
                        continue;
                    }
                    Err(Error::Store(crate::store::Error::PinMismatch {
                        version, actual, ..
                    })) => {
                        format!("version {version} has sha256 {actual}, not the pinned one")
                    }
                    Err(Error::Store(
                        crate::store::Error::NounNotFound
                        | crate::store::Error::VersionNotFound { .. },
                    ))
                    | Err(Error::Auth(crate::auth::Error::Hidden)) => {
                        "no such noun version is visible to this key".into()
                    }
                    Err(Error::Auth(crate::auth::Error::Forbidden(m))) => m,
                    Err(e) => return Err(e),
                };
                return Err(Error::InvalidPin {
                    field,
                    reason,
                    pin: Box::new(pin),
                });
            }
            Ok(read_all)
        })
        .await
}

/// A stored body as the JSON a contract check reads (text that is not
/// JSON becomes a string, which a schema then refuses).
fn as_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// Runs the pinned contract's checks (if the brief pins one that declares
/// them) on `outputs`, the submit's output bodies (or the worker's final
/// body when it names no output pins). The contract and input reads are
/// the daemon's own: the requester pinned them.
async fn contract_checks(
    store: &Store,
    task: &Task,
    outputs: Vec<Value>,
) -> Result<Option<Vec<contract::Check>>, Error> {
    let brief = task.spec.brief_value();
    let Some(contract_ref) = brief.get("contract_ref").cloned() else {
        return Ok(None);
    };
    let ns = task.spec.namespace.clone();
    let input_ref = brief.get("input_ref").cloned();
    store
        .blocking(move |store| {
            let read = |v: &Value| -> Result<Value, String> {
                let pin: Pin =
                    serde_json::from_value(v.clone()).map_err(|e| format!("not a pin: {e}"))?;
                let bytes = store
                    .read_pin::<crate::store::Error>(&pin, &ns, |_| Ok(()))
                    .map_err(|e| e.to_string())?;
                Ok(as_json(&bytes))
            };
            let contract_doc = match read(&contract_ref) {
                Ok(c) => c,
                Err(e) => {
                    return Ok(Some(vec![contract::Check {
                        name: "contract_is_valid".into(),
                        ok: false,
                        detail: format!("the pinned contract cannot be read: {e}"),
                    }]));
                }
            };
            if !contract::declares_checks(&contract_doc) {
                return Ok(None);
            }
            let mut extra = Vec::new();
            let input = match input_ref.as_ref().map(&read) {
                None => None,
                Some(Ok(v)) => Some(v),
                Some(Err(e)) => {
                    extra.push(contract::Check {
                        name: "input_is_readable".into(),
                        ok: false,
                        detail: e,
                    });
                    None
                }
            };
            let mut checks = contract::evaluate(&contract_doc, input.as_ref(), &outputs);
            checks.extend(extra);
            Ok(Some(checks))
        })
        .await
}

/// The one submit path: pins checked, contract checks run, receipt
/// written, task ended. `fallback` is the worker's final body as JSON,
/// checked against the contract when the submit names no output pins.
pub async fn complete(
    store: &Store,
    queue: &Queue,
    p: &Principal,
    task: &Task,
    lease_id: &LeaseId,
    mut input: SubmitInput,
    fallback: Option<Value>,
) -> Result<Completed, Error> {
    let pins = input
        .outputs
        .iter()
        .enumerate()
        .map(|(i, pin)| (format!("outputs[{i}]"), pin.clone()))
        .chain(
            input
                .evidence
                .iter()
                .enumerate()
                .map(|(i, pin)| (format!("evidence[{i}]"), pin.clone())),
        )
        .collect();
    let bodies = check_pins(store, p, task, pins).await?;
    let mut outputs: Vec<Value> = bodies[..input.outputs.len()]
        .iter()
        .map(|b| as_json(b))
        .collect();
    if outputs.is_empty() {
        outputs.extend(fallback);
    }
    let ns = &task.spec.namespace;
    input.outputs = input.outputs.iter().map(|pin| pin.qualified(ns)).collect();
    input.evidence = input.evidence.iter().map(|pin| pin.qualified(ns)).collect();
    if let Some(checks) = contract_checks(store, task, outputs).await? {
        if let Some(failed) = checks.iter().find(|c| !c.ok) {
            input.ok = false;
            input.extra.insert(
                "failure".into(),
                json!(format!("check {} failed: {}", failed.name, failed.detail)),
            );
        }
        input.extra.insert("checks".into(), json!(checks));
    }
    let (receipt, created, state) = queue.submit(task.id, lease_id, &input, &p.key_id).await?;
    if created {
        tracing::info!(task = %task.id, state = state.as_str(), receipt = %receipt, "task submitted");
    }
    Ok(Completed {
        receipt,
        created,
        state,
    })
}

/// The worker's final submit: `body` is the final body (already resolved
/// from `@file:`), `ok` the worker's verdict, `holder` the claiming key.
pub async fn submit_body(
    store: &Store,
    queue: &Queue,
    session: &Session,
    holder: &Principal,
    queue_placement: Option<String>,
    ok: bool,
    body: Vec<u8>,
) -> Result<Completed, Error> {
    let task = &session.task;
    let lease = task.lease.clone().ok_or(Error::StaleLease {
        state: task.state,
        attempt: task.attempt,
    })?;
    let step =
        step_name(task.spec.kind.as_str(), &task.spec.brief_value()).map_err(Error::FileRef)?;
    let template = task
        .spec
        .placement
        .clone()
        .or(queue_placement)
        .unwrap_or_else(|| DEFAULT_PLACEMENT.into());
    let staged: Vec<(String, Sha256)> = task.staged.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let (task_id, attempt, policy) = (task.id, session.attempt.0, task.spec.check_policy);
    let namespace = task.spec.namespace.clone();
    let fallback = Some(super::output::value_of(&body)).filter(|v| v.is_object() || v.is_array());
    let out = json!({"sha256": Sha256::of(&body), "size": body.len()});
    let step_for_files = step.clone();
    let projected = store
        .blocking(move |store| {
            store.put_object(&body, Durability::Synced)?;
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
                ok,
                body: &body,
                parts: &parts,
            };
            Ok::<_, Error>(projection::project(store, &p).map_err(|reason| (p.path(), reason)))
        })
        .await?;
    let (swap, projection) = match projected {
        Ok(swap) => {
            let record = json!({"status": "written", "path": swap.path});
            (Some(swap), record)
        }
        Err((path, reason)) if policy == CheckPolicy::Strict => {
            return Err(Error::ProjectionFailed { path, reason });
        }
        Err((path, reason)) => {
            tracing::warn!(task = %task_id, path = %path, reason = %reason, "projection skipped (check_policy: warn)");
            (
                None,
                json!({"status": "skipped", "path": path, "reason": reason}),
            )
        }
    };
    let parts: Map<String, Value> = task
        .staged
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let request = Sha256::of(&canonical_json(
        &json!({"attempt": attempt, "ok": ok, "out": out, "parts": parts}),
    ));
    let mut extra = Map::new();
    extra.insert("out".into(), out);
    extra.insert("parts".into(), Value::Object(parts));
    extra.insert("step".into(), json!(step));
    extra.insert("projection".into(), projection);
    let input = SubmitInput {
        ok,
        outputs: vec![],
        evidence: vec![],
        note: None,
        extra,
        request,
    };
    let done = complete(store, queue, holder, task, &lease.id, input, fallback).await;
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
