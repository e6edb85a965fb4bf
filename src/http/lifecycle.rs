//! Routes that move a task along: heartbeat, release, submit, park,
//! resume, split, cancel, retry (one task or by filter). Each authorizes through `auth::access`, checks
//! pins against the store, then lets the queue decide.

use http::StatusCode;

use super::error::{ApiError, ErrorCode};
use super::request::Req;
use super::tasks::{check, queue_server, task_id};
use super::{Ctx, Resp, json_response};
use crate::auth::access;
use crate::queue::{BulkAction, ClaimAfter, LeaseId, Park, TaskId, TaskState};
use crate::wire::{
    BulkBody, BulkReply, Heartbeat, LeaseRef, ParkBody, ResumeBody, Retried, SplitBody, SplitDone,
    StateReply, SubmitBody, Submitted,
};
use crate::worker::{pins, submit};

/// The answer to a completed submit: 201, or 200 for an idempotent resend.
pub fn submitted(id: TaskId, done: &submit::Completed) -> Resp {
    submitted_then(id, done, None)
}

/// The answer to a completed submit with, for `claim_next`, the next claim.
fn submitted_then(
    id: TaskId,
    done: &submit::Completed,
    next: Option<Option<crate::wire::ClaimAnswer>>,
) -> Resp {
    let status = if done.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    json_response(
        status,
        &Submitted {
            task_id: id,
            state: done.state,
            ok: done.state == crate::queue::TaskState::Succeeded,
            receipt_sha256: done.receipt,
            created: done.created,
            next,
            failed_checks: done.failed_checks.clone(),
            projection: done.projection.clone(),
            attempts_left: done.attempts_left,
        },
    )
}

fn state_reply(id: TaskId, state: crate::queue::TaskState) -> Resp {
    json_response(StatusCode::OK, &StateReply { task_id: id, state })
}

/// `POST /v1/tasks/{id}/heartbeat {lease_id}`.
pub async fn heartbeat(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let id = task_id(id)?;
    check(ctx, id, &p, access::may_work).await?;
    let body: LeaseRef = req.json(ctx.limits.max_body_bytes).await?;
    let expires_at = ctx
        .queue
        .heartbeat(id, &LeaseId(body.lease_id), &p.key_id)
        .await?;
    Ok(json_response(StatusCode::OK, &Heartbeat { expires_at }))
}

/// `POST /v1/tasks/{id}/release {lease_id}`.
pub async fn release(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let id = task_id(id)?;
    check(ctx, id, &p, access::may_work).await?;
    let body: LeaseRef = req.json(ctx.limits.max_body_bytes).await?;
    let by = (!p.is_admin()).then_some(&p.key_id);
    let state = ctx.queue.release(id, &LeaseId(body.lease_id), by).await?;
    tracing::info!(task = %id, by = %p.key_id, "task released");
    Ok(state_reply(id, state))
}

/// `POST /v1/tasks/{id}/submit {lease_id, ok, outputs, evidence, note?}`.
pub async fn submit(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let id = task_id(id)?;
    let checked = check(ctx, id, &p, access::may_submit).await?;
    let task = submit::SubmitTask::of(&checked);
    let body: SubmitBody = req.json(ctx.limits.max_body_bytes).await?;
    let next = body.claim_next.clone();
    if let Some(n) = &next {
        super::queues::may_claim_from(ctx, &p, &n.queue, n.wait_ms).await?;
    }
    let (lease, input) = body.input()?;
    let requester = ctx.keyring.usable_principal(&checked.requester).await?;
    let after = next.as_ref().map(|n| ClaimAfter {
        queue: &n.queue,
        kinds: n.kinds.as_deref(),
        viewer: &p.viewer,
    });
    let mut done = submit::complete(
        &ctx.store,
        &ctx.queue,
        &p,
        requester,
        &task,
        &lease,
        input,
        None,
        next.is_none(),
        after,
    )
    .await?;
    let thin = next.as_ref().is_some_and(|n| n.thin);
    let next = match (next, done.next.take()) {
        (None, _) => None,
        (Some(_), Some(claimed)) => Some(super::queues::made(ctx, &p, claimed)),
        (Some(n), None) => {
            let kinds = n.kinds.as_deref();
            let got = super::queues::claim_for(ctx, &p, &n.queue, kinds, n.wait_ms, 1);
            Some(got.await?)
        }
    };
    ctx.queue.synced(done.unsynced).await?;
    let next = next.map(|made| {
        let claim = made.delivered().pop();
        claim.map(|c| crate::wire::ClaimAnswer::of(c, thin))
    });
    Ok(submitted_then(id, &done, next))
}

/// `POST /v1/tasks/{id}/park {lease_id, reason, needs}`.
pub async fn park(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let id = task_id(id)?;
    check(ctx, id, &p, access::may_work).await?;
    let body: ParkBody = req.json(ctx.limits.max_body_bytes).await?;
    let park = Park {
        reason: body.reason,
        needs: body.needs,
        by: None,
    };
    let lease = LeaseId(body.lease_id);
    let state = ctx.queue.park(id, &lease, &p.key_id, park).await?;
    tracing::info!(task = %id, by = %p.key_id, "task parked");
    Ok(state_reply(id, state))
}

/// `POST /v1/tasks/{id}/resume {input_ref}`: an enqueue-level act by a
/// key other than the one that parked the task (see `access::may_resume`);
/// the new input is read as the resumer.
pub async fn resume(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let id = task_id(id)?;
    let ns = check(ctx, id, &p, access::may_resume)
        .await?
        .spec
        .namespace
        .clone();
    let body: ResumeBody = req.json(ctx.limits.max_body_bytes).await?;
    let pin = vec![("input_ref".into(), body.input_ref.clone())];
    pins::check(&ctx.store, &p, &ns, pin).await?;
    let state = ctx
        .queue
        .resume(id, body.input_ref.qualified(&ns), &p.key_id)
        .await?;
    tracing::info!(task = %id, by = %p.key_id, "task resumed");
    Ok(state_reply(id, state))
}

/// `POST /v1/tasks/{id}/split {lease_id, children}`: each child is an
/// enqueue under the requester's grants intersected with the splitting
/// worker's (see `access::split_authority` and `access::may_split_child`).
pub async fn split(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let id = task_id(id)?;
    let parent = check(ctx, id, &p, access::may_work).await?;
    let body: SplitBody = req.json(ctx.limits.max_body_bytes).await?;
    let requester = ctx
        .keyring
        .usable_principal(&parent.requester)
        .await?
        .ok_or_else(|| {
            ApiError::from(crate::auth::Error::Forbidden(
                "the task's requester key is revoked or expired, so its task cannot gain children"
                    .into(),
            ))
        })?;
    let within = access::split_authority(&requester, &p)?;
    let parent_server = queue_server(ctx, &parent.spec.queue).await?;
    let mut children = Vec::with_capacity(body.children.len());
    for (i, child) in body.children.into_iter().enumerate() {
        let spec = child
            .under(&parent.spec)
            .map_err(|field| crate::queue::SplitError::Widens { field })?;
        let spec = super::tasks::authorize_child(ctx, &within, &parent, parent_server, spec)
            .await
            .map_err(|e| e.in_item(i))?;
        children.push(spec);
    }
    let children = ctx
        .queue
        .split(
            id,
            &LeaseId(body.lease_id),
            &p.key_id,
            children,
            &within.viewer,
        )
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

/// `POST /v1/tasks/{id}/cancel[?if_state=pending,queued,parked]`: the
/// requester or an admin. With `if_state`, only a task in one of those
/// states is cancelled (else `409 invalid_state`, nothing changed).
pub async fn cancel(ctx: &Ctx, req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let id = task_id(id)?;
    let only = if_state(&req)?;
    check(ctx, id, &p, access::may_cancel).await?;
    let state = ctx.queue.cancel(id, &p.key_id, only.as_deref()).await?;
    tracing::info!(task = %id, by = %p.key_id, "task cancelled");
    Ok(state_reply(id, state))
}

/// The `if_state` query of a cancel: comma-separated states.
fn if_state(req: &Req) -> Result<Option<Vec<TaskState>>, ApiError> {
    req.query("if_state")
        .map(|list| {
            list.split(',')
                .map(|s| {
                    s.parse().map_err(|m: String| {
                        ApiError::new(ErrorCode::InvalidQuery, format!("if_state: {m}"))
                            .with(serde_json::json!({"field": "if_state"}))
                    })
                })
                .collect()
        })
        .transpose()
}

/// `POST /v1/tasks/{id}/retry {}` (or no body): the requester or an admin queues a
/// failed or cancelled task again as a new attempt (`409 not_retryable`
/// for any other state).
pub async fn retry(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let id = task_id(id)?;
    check(ctx, id, &p, access::may_retry).await?;
    let _: crate::wire::RetryBody = req.json_or_default(ctx.limits.max_body_bytes).await?;
    let (state, attempt) = ctx.queue.retry(id, &p.key_id).await?;
    tracing::info!(task = %id, by = %p.key_id, state = state.as_str(), "task retried");
    Ok(json_response(
        StatusCode::OK,
        &Retried {
            task_id: id,
            state,
            attempt: attempt.0,
        },
    ))
}

/// Most tasks one bulk call acts on.
const MAX_BULK: u32 = 1000;

/// `POST /v1/tasks/retry` and `POST /v1/tasks/cancel`: the tasks the
/// filters select that the key may see and act on (the requester's own,
/// or any for admin), at most `limit` per call; `dry_run` counts them.
pub async fn bulk(ctx: &Ctx, mut req: Req, action: BulkAction) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let body: BulkBody = req.json(ctx.limits.max_body_bytes).await?;
    if body.state.is_some_and(|s| !action.takes(s)) {
        return Err(ApiError::new(
            super::error::ErrorCode::InvalidField,
            match action {
                BulkAction::Retry => "state: a retry takes failed or cancelled tasks",
                BulkAction::Cancel => "state: a cancel takes tasks that have not ended",
            },
        )
        .with(serde_json::json!({"field": "state"})));
    }
    let limit = body.limit.unwrap_or(100).clamp(1, MAX_BULK) as usize;
    let filter = crate::queue::query::Filter {
        queue: body.queue,
        kind: body.kind,
        state: body.state,
        namespace: body.namespace,
        source_pack: body.source_pack,
    };
    let done = ctx
        .queue
        .bulk(action, &p.viewer, &filter, limit, body.dry_run)
        .await?;
    if !done.done.is_empty() {
        tracing::info!(by = %p.key_id, action = ?action, tasks = done.done.len(), remaining = done.remaining, "bulk task change");
    }
    Ok(json_response(
        StatusCode::OK,
        &BulkReply {
            dry_run: body.dry_run,
            matched: done.matched as u64,
            tasks: done
                .done
                .into_iter()
                .map(|(task_id, state, attempt)| Retried {
                    task_id,
                    state,
                    attempt: attempt.0,
                })
                .collect(),
            remaining: done.remaining as u64,
        },
    ))
}
