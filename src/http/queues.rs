//! Queue routes: provision, list with counts, and claims.

use std::time::Duration;

use http::StatusCode;

use super::error::{ApiError, ErrorCode};
use super::request::Req;
use super::tasks::{check, task_id, view};
use super::wire::{ClaimNext, Claimed, LeaseView, QueueList, QueueView};
use super::{Ctx, Resp, json_response};
use crate::auth::token::{Claims, new_handle};
use crate::auth::{self, Principal, access};
use crate::queue::{Claim, QueueConfig, State, Task};
use crate::store::Name;

/// Longest long-poll a claim may ask for.
const MAX_WAIT_MS: u64 = 30_000;

/// `POST /v1/queues` (admin).
pub async fn provision(ctx: &Ctx, mut req: Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    auth::require_admin(&p)?;
    let config: QueueConfig = req.json(ctx.limits.max_body_bytes).await?;
    let created = ctx.queue.provision(config.clone()).await?;
    tracing::info!(queue = %config.name, server = config.server, created, "queue provisioned");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json_response(status, &config))
}

/// `GET /v1/queues`: the queues the key may use (all, for admin), with
/// task counts per state: all tasks for admin, else only the tasks the key
/// may see.
pub async fn list(ctx: &Ctx, req: Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let queues = ctx
        .queue
        .read(|st| {
            st.queues
                .values()
                .filter(|q| p.is_admin() || p.grants.queues.contains(&q.name))
                .map(|q| QueueView {
                    config: q.clone(),
                    counts: if p.is_admin() {
                        st.index_counts(&q.name)
                    } else {
                        st.counts_where(&q.name, |t| access::sees_task(&p, &st.facts(t)))
                    }
                    .into_iter()
                    .map(|(s, n)| (s.as_str().to_string(), n))
                    .collect(),
                })
                .collect()
        })
        .await?;
    Ok(json_response(StatusCode::OK, &QueueList { queues }))
}

/// The answer to a claim: the task, its lease, a worker token and handle.
fn claimed(ctx: &Ctx, st: &State, p: &Principal, claim: &Claim) -> Claimed {
    let claims = Claims::worker(
        claim.id.to_string(),
        claim.lease.attempt.0,
        claim.lease.expires_at,
    );
    Claimed {
        task: view(st, &st.tasks[&claim.id], p),
        lease: LeaseView {
            id: Some(claim.lease.id.0.clone()),
            fence: claim.lease.attempt.0,
            expires_at: claim.lease.expires_at,
            holder: claim.lease.holder.to_string(),
        },
        token: ctx.tokens.mint(&claims),
        handle: claim.lease.handle.clone(),
        prompt_url: "/v1/worker/prompt".into(),
    }
}

fn answer(p: &Principal, claimed: &Claimed) -> Resp {
    tracing::info!(task = %claimed.task.task_id, attempt = claimed.lease.fence, by = %p.key_id, "task claimed");
    json_response(StatusCode::OK, claimed)
}

/// `POST /v1/queues/{queue}/claim {kinds?, wait_ms?}`: the next eligible
/// task, long-polling up to `wait_ms`; 204 when none.
pub async fn claim_next(ctx: &Ctx, mut req: Req, queue: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let queue = Name::parse("queue", queue)?;
    access::require(&p, auth::Scope::VerbsClaim)?;
    let body: ClaimNext = req.json(ctx.limits.max_body_bytes).await?;
    if body.wait_ms > MAX_WAIT_MS {
        return Err(ApiError::new(
            ErrorCode::InvalidField,
            format!("wait_ms is at most {MAX_WAIT_MS}"),
        ));
    }
    let server = ctx
        .queue
        .peek(|st| st.queues.get(&queue).map(|q| q.server))
        .ok_or_else(|| crate::queue::EnqueueError::UnknownQueue(queue.to_string()))?;
    access::may_claim_from(&p, &queue, server)?;
    let can = |t: &Task| access::may_claim(&p, &t.facts(server)).is_ok();
    let wait = Duration::from_millis(body.wait_ms);
    let render = |st: &State, c: &Claim| claimed(ctx, st, &p, c);
    let kinds = body.kinds.as_deref();
    match ctx
        .queue
        .claim_next(&queue, kinds, &p.key_id, &new_handle, &can, wait, render)
        .await?
    {
        Some(c) => Ok(answer(&p, &c)),
        None => Ok(super::empty(StatusCode::NO_CONTENT)),
    }
}

/// `POST /v1/tasks/{id}/claim`: claims one task by id.
pub async fn claim_one(ctx: &Ctx, req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let id = task_id(id)?;
    check(ctx, id, &p, access::may_claim)?;
    let render = |st: &State, c: &Claim| claimed(ctx, st, &p, c);
    let c = ctx.queue.claim(id, &p.key_id, &new_handle, render).await?;
    Ok(answer(&p, &c))
}
