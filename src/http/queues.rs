//! Queue routes: provision, list with counts, and claims.

use std::time::Duration;

use http::StatusCode;
use serde_json::json;

use super::error::{ApiError, ErrorCode};
use super::request::Req;
use super::tasks::{check, task_id, view};
use super::wire::{ClaimNext, Claimed, ClaimedMany, LeaseView, QueueList, QueueView, TaskView};
use super::{Ctx, Resp, json_response};
use crate::auth::token::{Claims, new_handle};
use crate::auth::{self, Principal, access};
use crate::queue::{Claim, Lease, QueueConfig, State, Task};
use crate::store::Name;

/// Longest long-poll a claim may ask for.
const MAX_WAIT_MS: u64 = 30_000;

/// Most tasks one claim request may take (`max`).
const MAX_CLAIMS: u32 = 100;

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
            let mine: Vec<&crate::queue::QueueConfig> = st
                .queues
                .values()
                .filter(|q| access::shows_queue(&p, &q.name))
                .collect();
            let mut seen = if p.is_admin() {
                Default::default()
            } else {
                let names: Vec<&Name> = mine.iter().map(|q| &q.name).collect();
                st.counts_where(&names, |t| access::sees_task(&p, &st.facts(t)))
            };
            mine.into_iter()
                .map(|q| QueueView {
                    config: q.clone(),
                    counts: seen
                        .remove(&q.name)
                        .unwrap_or_else(|| st.index_counts(&q.name))
                        .into_iter()
                        .map(|(s, n)| (s.as_str().to_string(), n))
                        .collect(),
                })
                .collect()
        })
        .await?;
    Ok(json_response(StatusCode::OK, &QueueList { queues }))
}

/// The answer to a claim: the task as `p` sees it and its lease, read
/// under the claim's lock, then (after it) a worker token and the handle.
fn claimed(ctx: &Ctx, (task, lease): (TaskView, Lease)) -> Claimed {
    let claims = Claims::worker(task.task_id.to_string(), lease.attempt.0, lease.expires_at);
    Claimed {
        task,
        lease: LeaseView {
            id: Some(lease.id.0.clone()),
            fence: lease.attempt.0,
            expires_at: lease.expires_at,
            holder: lease.holder.to_string(),
        },
        token: ctx.tokens.mint(&claims),
        handle: lease.handle,
        prompt_url: "/v1/worker/prompt".into(),
    }
}

/// What a claim reads under its lock: the task's view and its new lease.
fn seen(p: &Principal) -> impl Fn(&State, &Claim) -> (TaskView, Lease) + '_ {
    move |st, c| (view(st, &st.tasks[&c.id], p), c.lease.clone())
}

/// Checks a claim request (`wait_ms` bound, the queue, the key's grants)
/// and returns whether `queue` is a server queue.
pub fn may_claim_from(
    ctx: &Ctx,
    p: &Principal,
    queue: &Name,
    wait_ms: u64,
) -> Result<bool, ApiError> {
    access::require(p, auth::Scope::VerbsClaim)?;
    if wait_ms > MAX_WAIT_MS {
        return Err(ApiError::new(
            ErrorCode::InvalidField,
            format!("wait_ms is at most {MAX_WAIT_MS}"),
        ));
    }
    let server = ctx
        .queue
        .peek(|st| st.queues.get(queue).map(|q| q.server))
        .ok_or_else(|| crate::queue::EnqueueError::UnknownQueue(queue.to_string()))?;
    access::may_claim_from(p, queue, server)?;
    Ok(server)
}

/// Claims up to `max` tasks on `queue` for `p` (checked by
/// [`may_claim_from`]), long-polling up to `wait_ms` for the first.
pub async fn claim_for(
    ctx: &Ctx,
    p: &Principal,
    queue: &Name,
    server: bool,
    kinds: Option<&[Name]>,
    wait_ms: u64,
    max: u32,
) -> Result<Vec<Claimed>, ApiError> {
    let can = |t: &Task| access::may_claim(p, &t.facts(server)).is_ok();
    let mut out = Vec::with_capacity(max as usize);
    let mut wait = Duration::from_millis(wait_ms);
    let started = std::time::Instant::now();
    while out.len() < max as usize {
        let got = ctx
            .queue
            .claim_next(queue, kinds, &p.key_id, &new_handle, &can, wait, seen(p))
            .await?;
        if out.is_empty() {
            ctx.metrics.claim_waited(started.elapsed());
        }
        let Some(got) = got else { break };
        tracing::debug!(task = %got.0.task_id, attempt = got.1.attempt.0, by = %p.key_id, "task claimed");
        out.push(claimed(ctx, got));
        wait = Duration::ZERO;
    }
    Ok(out)
}

/// `POST /v1/queues/{queue}/claim {kinds?, wait_ms?, max?}`: the next
/// eligible task, long-polling up to `wait_ms`; 204 when none. With `max`,
/// up to that many: `{claims: [...]}`.
pub async fn claim_next(ctx: &Ctx, mut req: Req, queue: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let queue = Name::parse("queue", queue)?;
    access::require(&p, auth::Scope::VerbsClaim)?;
    let body: ClaimNext = req.json(ctx.limits.max_body_bytes).await?;
    let server = may_claim_from(ctx, &p, &queue, body.wait_ms)?;
    let kinds = body.kinds.as_deref();
    match body.max {
        None => {
            let mut got = claim_for(ctx, &p, &queue, server, kinds, body.wait_ms, 1).await?;
            Ok(match got.pop() {
                Some(c) => json_response(StatusCode::OK, &c),
                None => super::empty(StatusCode::NO_CONTENT),
            })
        }
        Some(max @ 1..=MAX_CLAIMS) => {
            let claims = claim_for(ctx, &p, &queue, server, kinds, body.wait_ms, max).await?;
            Ok(json_response(StatusCode::OK, &ClaimedMany { claims }))
        }
        Some(_) => Err(
            ApiError::new(ErrorCode::InvalidField, format!("max is 1 to {MAX_CLAIMS}"))
                .with(json!({"field": "max"})),
        ),
    }
}

/// `POST /v1/tasks/{id}/claim`: claims one task by id.
pub async fn claim_one(ctx: &Ctx, req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let id = task_id(id)?;
    check(ctx, id, &p, access::may_claim)?;
    let got = ctx
        .queue
        .claim(id, &p.key_id, &new_handle, seen(&p))
        .await?;
    tracing::debug!(task = %id, by = %p.key_id, "task claimed");
    Ok(json_response(StatusCode::OK, &claimed(ctx, got)))
}
