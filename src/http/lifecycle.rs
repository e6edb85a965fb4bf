//! Routes that move a task along: heartbeat, release, submit, park,
//! resume, split, cancel. Each authorizes through `auth::access`, checks
//! pins against the store, then lets the queue decide.

use http::StatusCode;
use serde_json::{Map, Value, json};

use super::error::ApiError;
use super::request::Req;
use super::tasks::{check, task_id};
use super::wire::{
    Heartbeat, LeaseRef, ParkBody, ResumeBody, SplitBody, SplitDone, StateReply, SubmitBody,
    Submitted,
};
use super::{Ctx, Resp, json_response};
use crate::auth::{Principal, access};
use crate::queue::{LeaseId, Park, SubmitInput, Task, TaskId};
use crate::store::{Name, Pin, Sha256, canonical_json};

fn state_reply(id: TaskId, state: crate::queue::TaskState) -> Resp {
    json_response(StatusCode::OK, &StateReply { task_id: id, state })
}

/// `POST /v1/tasks/{id}/heartbeat {lease_id}`.
pub async fn heartbeat(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let id = task_id(id)?;
    check(ctx, id, &p, access::may_work)?;
    let body: LeaseRef = req.json(ctx.limits.max_body_bytes).await?;
    let expires_at = ctx.queue.heartbeat(id, &LeaseId(body.lease_id)).await?;
    Ok(json_response(StatusCode::OK, &Heartbeat { expires_at }))
}

/// `POST /v1/tasks/{id}/release {lease_id}`.
pub async fn release(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let id = task_id(id)?;
    check(ctx, id, &p, access::may_work)?;
    let body: LeaseRef = req.json(ctx.limits.max_body_bytes).await?;
    let state = ctx.queue.release(id, &LeaseId(body.lease_id)).await?;
    tracing::info!(task = %id, by = %p.key_id, "task released");
    Ok(state_reply(id, state))
}

/// Checks that every pin names an existing version with that sha256,
/// readable by `p`; a bad one is `422 invalid_pin` naming it.
pub async fn check_pins(
    ctx: &Ctx,
    p: &Principal,
    ns: &Name,
    pins: Vec<(String, Pin)>,
) -> Result<(), ApiError> {
    let p = p.clone();
    let ns = ns.clone();
    ctx.blocking(move |store| {
        for (field, pin) in &pins {
            let pin_ns = pin.namespace.clone().unwrap_or_else(|| ns.clone());
            let read = store.read_pin(pin, &ns, |entry| {
                access::may_read_nouns(&p, &pin_ns)?;
                access::read_noun(&p, entry).map_err(ApiError::from)
            });
            if let Err(e) = read {
                let reason = match e.code {
                    "pin_mismatch" => e.message,
                    "version_not_found" | "not_found" => {
                        "no such noun version is visible to this key".to_string()
                    }
                    "forbidden" => e.message,
                    _ => return Err(e),
                };
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_pin",
                    format!("{field}: {reason}"),
                )
                .with(json!({"field": field, "pin": pin})));
            }
        }
        Ok::<(), ApiError>(())
    })
    .await
}

/// The one submit path: pins checked, receipt written, task ended. The
/// worker routes call it too, with their final body in `extra`.
pub async fn submit_attempt(
    ctx: &Ctx,
    p: &Principal,
    task: &Task,
    lease_id: LeaseId,
    mut input: SubmitInput,
) -> Result<Submitted, ApiError> {
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
    check_pins(ctx, p, &task.spec.namespace, pins).await?;
    let ns = &task.spec.namespace;
    input.outputs = input.outputs.iter().map(|pin| pin.qualified(ns)).collect();
    input.evidence = input.evidence.iter().map(|pin| pin.qualified(ns)).collect();
    let (sha, created, state) = ctx
        .queue
        .submit(task.id, &lease_id, &input, &p.key_id)
        .await?;
    if created {
        tracing::info!(task = %task.id, state = state.as_str(), receipt = %sha, "task submitted");
    }
    Ok(Submitted {
        task_id: task.id,
        state,
        ok: state == crate::queue::TaskState::Succeeded,
        receipt_sha256: sha,
        created,
    })
}

/// `POST /v1/tasks/{id}/submit {lease_id, ok, outputs, evidence, note?}`.
pub async fn submit(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let id = task_id(id)?;
    let task = check(ctx, id, &p, access::may_submit)?;
    let raw = req.bytes(ctx.limits.max_body_bytes).await?;
    let body: SubmitBody = super::request::parse_json(&raw)?;
    if body.note.as_ref().is_some_and(|n| n.len() > 4096) {
        return Err(ApiError::bad_request(
            "invalid_field",
            "note is at most 4096 bytes",
        ));
    }
    let request = Sha256::of(&canonical_json(
        &serde_json::to_value(&body).expect("bodies serialize"),
    ));
    let input = SubmitInput {
        ok: body.ok,
        outputs: body.outputs,
        evidence: body.evidence,
        note: body.note,
        extra: Map::new(),
        request,
    };
    let done = submit_attempt(ctx, &p, &task, LeaseId(body.lease_id), input).await?;
    let status = if done.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json_response(status, &done))
}

/// `POST /v1/tasks/{id}/park {lease_id, reason, needs}`.
pub async fn park(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let id = task_id(id)?;
    check(ctx, id, &p, access::may_work)?;
    let body: ParkBody = req.json(ctx.limits.max_body_bytes).await?;
    let park = Park {
        reason: body.reason,
        needs: body.needs,
    };
    let state = ctx.queue.park(id, &LeaseId(body.lease_id), park).await?;
    tracing::info!(task = %id, by = %p.key_id, "task parked");
    Ok(state_reply(id, state))
}

/// `POST /v1/tasks/{id}/resume {input_ref}`: by any key that sees the task
/// and holds `verbs:enqueue` (not necessarily requester or worker).
pub async fn resume(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let id = task_id(id)?;
    let task = check(ctx, id, &p, access::may_resume)?;
    let body: ResumeBody = req.json(ctx.limits.max_body_bytes).await?;
    let ns = task.spec.namespace.clone();
    check_pins(
        ctx,
        &p,
        &ns,
        vec![("input_ref".into(), body.input_ref.clone())],
    )
    .await?;
    let pin: Value = serde_json::to_value(body.input_ref.qualified(&ns)).expect("pins serialize");
    let state = ctx.queue.resume(id, pin, &p.key_id).await?;
    tracing::info!(task = %id, by = %p.key_id, "task resumed");
    Ok(state_reply(id, state))
}

/// `POST /v1/tasks/{id}/split {lease_id, children}`.
pub async fn split(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let id = task_id(id)?;
    check(ctx, id, &p, access::may_work)?;
    let body: SplitBody = req.json(ctx.limits.max_body_bytes).await?;
    let sees = |t: &Task| access::sees_task(&p, &t.facts(false));
    let children = ctx
        .queue
        .split(id, &LeaseId(body.lease_id), body.children, &sees)
        .await?;
    tracing::info!(task = %id, children = children.len(), "task split");
    Ok(json_response(
        StatusCode::OK,
        &SplitDone {
            task_id: id,
            children,
        },
    ))
}

/// `POST /v1/tasks/{id}/cancel`: the requester or an admin.
pub async fn cancel(ctx: &Ctx, req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let id = task_id(id)?;
    check(ctx, id, &p, access::may_cancel)?;
    let state = ctx.queue.cancel(id, &p.key_id).await?;
    tracing::info!(task = %id, by = %p.key_id, "task cancelled");
    Ok(state_reply(id, state))
}
