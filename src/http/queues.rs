//! Queue routes: provision, list with counts, and claims.

use std::time::Duration;

use http::StatusCode;
use serde_json::json;

use super::error::{ApiError, ErrorCode};
use super::request::Req;
use super::tasks::{check, task_id, view};
use super::{Ctx, Resp, json_response};
use crate::auth::token::Claims;
use crate::auth::{self, Principal, access};
use crate::paths;
use crate::queue::{self, Handover, QueuePatch};
use crate::store::Name;
use crate::wire::{
    ClaimAnswer, ClaimNext, ClaimOne, Claimed, ClaimedMany, LeaseView, ProvisionedQueue, QueueList,
    QueueView,
};

/// Longest long-poll a claim may ask for.
const MAX_WAIT_MS: u64 = 30_000;

/// Most tasks one claim request may take (`max`).
const MAX_CLAIMS: u32 = 100;

/// `POST /v1/queues` (admin): makes the queue (`201`), or changes the
/// fields the body names of an existing one (`200`); answers the whole
/// config and `created`.
pub async fn provision(ctx: &Ctx, mut req: Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    auth::require_admin(&p)?;
    let patch: QueuePatch = req.json(ctx.limits.max_body_bytes).await?;
    let queue::Provisioned { config, created } = ctx.queue.provision(patch).await?;
    tracing::info!(queue = %config.name, server = config.server, created, "queue provisioned");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json_response(status, &ProvisionedQueue { config, created }))
}

/// `GET /v1/queues`: the queues the key may use (all, for admin), with
/// task counts per state: all tasks for admin, else only the tasks the key
/// may see.
pub async fn list(ctx: &Ctx, req: Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let queues = ctx
        .queue
        .queue_counts(&p.viewer)
        .await?
        .into_iter()
        .map(|q| QueueView {
            config: q.config,
            counts: crate::wire::counts_by_state(q.counts),
        })
        .collect();
    Ok(json_response(StatusCode::OK, &QueueList { queues }))
}

/// The answer to a claim as `p` gets it, with its handover: the queue's
/// snapshot of it rendered, a worker token minted, after the claim's lock.
fn claimed(ctx: &Ctx, p: &Principal, c: queue::Claimed) -> (Claimed, Handover) {
    let queue::Claimed {
        task,
        lease,
        handover,
    } = c;
    let task = view(task, p);
    let claims = Claims::worker(task.task_id.to_string(), lease.attempt.0, lease.expires_at);
    let answer = Claimed {
        task,
        lease: LeaseView {
            id: Some(lease.id.0.clone()),
            fence: lease.attempt.0,
            expires_at: lease.expires_at,
            holder: lease.holder.to_string(),
        },
        token: ctx.tokens.mint(&claims),
        handle: lease.handle,
        prompt_url: paths::WORKER_PROMPT.at(&[]),
    };
    (answer, handover)
}

/// Claims made for one request, each released when dropped before
/// [`Made::delivered`] (see [`Handover`]): a request abandoned while it
/// waits for the claims' durability, for more claims, or for the rest of
/// its answer leaves no task claimed by nobody.
#[must_use = "deliver the claims, or drop them to release their leases"]
pub struct Made(Vec<(Claimed, Handover)>);

/// The answer of a claim the queue made with a submit (its `claim_next`).
pub fn made(ctx: &Ctx, p: &Principal, c: queue::Claimed) -> Made {
    ctx.metrics.claim_waited(Duration::ZERO);
    Made(vec![taken(ctx, p, c)])
}

/// A claim of `p`'s, logged, as its answer.
fn taken(ctx: &Ctx, p: &Principal, c: queue::Claimed) -> (Claimed, Handover) {
    tracing::debug!(task = %c.task.task.id, attempt = c.lease.attempt.0, by = %p.key_id, "task claimed");
    claimed(ctx, p, c)
}

impl Made {
    /// The claims, handed over: call it only where nothing is awaited
    /// between it and the answer leaving the handler.
    pub fn delivered(self) -> Vec<Claimed> {
        self.0
            .into_iter()
            .map(|(claim, handover)| {
                handover.delivered();
                claim
            })
            .collect()
    }
}

/// Checks a claim request: the `wait_ms` bound, the queue, the key's
/// grants.
pub async fn may_claim_from(
    ctx: &Ctx,
    p: &Principal,
    queue: &Name,
    wait_ms: u64,
) -> Result<(), ApiError> {
    access::require(p, auth::Scope::VerbsClaim)?;
    if wait_ms > MAX_WAIT_MS {
        return Err(ApiError::new(
            ErrorCode::InvalidField,
            format!("wait_ms is at most {MAX_WAIT_MS}"),
        ));
    }
    let server = super::tasks::queue_server(ctx, queue).await?;
    Ok(access::may_claim_from(p, queue, server)?)
}

/// Claims up to `max` tasks on `queue` for `p` (checked by
/// [`may_claim_from`]), long-polling up to `wait_ms` for the first. A long
/// poll dropped while it waits (its client gone) claims nothing, and one
/// whose key is revoked or expires meanwhile ends at once, `401`, with
/// what it claimed released.
pub async fn claim_for(
    ctx: &Ctx,
    p: &Principal,
    queue: &Name,
    kinds: Option<&[Name]>,
    wait_ms: u64,
    max: u32,
) -> Result<Made, ApiError> {
    let mut out = Vec::with_capacity(max as usize);
    let mut wait = Duration::from_millis(wait_ms);
    let started = std::time::Instant::now();
    let unusable = ctx.keyring.unusable(&p.key_id);
    let mut unusable = std::pin::pin!(unusable);
    while out.len() < max as usize {
        let next = ctx.queue.claim_next(queue, kinds, &p.viewer, wait);
        let got = tokio::select! {
            biased;
            () = &mut unusable => {
                return Err(auth::Error::Unauthenticated("the key was revoked or expired during the claim").into());
            }
            got = next => got?,
        };
        if out.is_empty() {
            ctx.metrics.claim_waited(started.elapsed());
        }
        let Some(got) = got else {
            break;
        };
        out.push(taken(ctx, p, got));
        wait = Duration::ZERO;
    }
    Ok(Made(out))
}

/// `POST /v1/queues/{queue}/claim {kinds?, wait_ms?, max?, thin?}`: the
/// next eligible task, long-polling up to `wait_ms`; 204 when none. With
/// `max`, up to that many: `{claims: [...]}`. With `thin`, each claim
/// without the task's content (`ThinClaimed`); [`ClaimAnswer`] decides.
pub async fn claim_next(ctx: &Ctx, mut req: Req, queue: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let queue = Name::parse("queue", queue)?;
    access::require(&p, auth::Scope::VerbsClaim)?;
    let body: ClaimNext = req.json(ctx.limits.max_body_bytes).await?;
    may_claim_from(ctx, &p, &queue, body.wait_ms).await?;
    let kinds = body.kinds.as_deref();
    match body.max {
        None => {
            let got = claim_for(ctx, &p, &queue, kinds, body.wait_ms, 1).await?;
            Ok(match got.delivered().pop() {
                Some(c) => json_response(StatusCode::OK, &ClaimAnswer::of(c, body.thin)),
                None => super::empty(StatusCode::NO_CONTENT),
            })
        }
        Some(max @ 1..=MAX_CLAIMS) => {
            let got = claim_for(ctx, &p, &queue, kinds, body.wait_ms, max).await?;
            let claims = got
                .delivered()
                .into_iter()
                .map(|c| ClaimAnswer::of(c, body.thin))
                .collect();
            Ok(json_response(StatusCode::OK, &ClaimedMany { claims }))
        }
        Some(_) => Err(
            ApiError::new(ErrorCode::InvalidField, format!("max is 1 to {MAX_CLAIMS}"))
                .with(json!({"field": "max"})),
        ),
    }
}

/// `POST /v1/tasks/{id}/claim {thin?}` (or no body): claims one task by
/// id, answered whole or thin as [`ClaimAnswer`] decides.
pub async fn claim_one(ctx: &Ctx, mut req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let id = task_id(id)?;
    check(ctx, id, &p, access::may_claim).await?;
    let body: ClaimOne = req.json_or_default(ctx.limits.max_body_bytes).await?;
    let got = ctx.queue.claim(id, &p.viewer).await?;
    tracing::debug!(task = %id, by = %p.key_id, "task claimed");
    let (answer, handover) = claimed(ctx, &p, got);
    let answer = json_response(StatusCode::OK, &ClaimAnswer::of(answer, body.thin));
    handover.delivered();
    Ok(answer)
}
