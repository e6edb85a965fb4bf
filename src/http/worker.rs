//! `/v1/worker/*` (authenticated by a worker handle or token, not a key)
//! and the final pull `GET /v1/tasks/{id}/output` (authenticated by a key).

use http::StatusCode;
use serde_json::json;

use super::error::ApiError;
use super::lifecycle::submitted;
use super::request::Req;
use super::tasks::{task_id, visible};
use super::{Ctx, Resp, json_response};
use crate::auth::Principal;
use crate::store::Durability;
use crate::worker::{self, Route, Session, artifact, file_ref, output, prompt, submit};

fn session(ctx: &Ctx, req: &Req, route: Route) -> Result<Session, ApiError> {
    let wanted = req.query("task_id").map(task_id).transpose()?;
    Ok(worker::resolve(
        &ctx.queue,
        &ctx.tokens,
        req.bearer()?,
        wanted,
        route,
    )?)
}

/// The claiming key: a worker acts under its claimant's authority, so a
/// revoked claimant stops its worker too.
fn holder(ctx: &Ctx, s: &Session) -> Result<Principal, ApiError> {
    let lease = s.task.lease.as_ref().expect("a live attempt has a lease");
    Ok(ctx.keyring.principal(&lease.holder)?)
}

/// Reads a worker body and resolves an `@file:` reference in it.
async fn body(ctx: &Ctx, req: &mut Req, s: &Session) -> Result<Vec<u8>, ApiError> {
    let limit = ctx.limits.worker_body_bytes;
    let raw = req.bytes(limit).await?.to_vec();
    let task = s.task.clone();
    ctx.blocking(move |store| file_ref::resolve(store, &task, raw, limit))
        .await
}

/// `GET /v1/worker/prompt`.
pub async fn prompt(ctx: &Ctx, req: Req) -> Result<Resp, ApiError> {
    let s = session(ctx, &req, Route::Prompt)?;
    let holder = holder(ctx, &s)?;
    let facts = ctx
        .queue
        .peek(|st| prompt::Facts::gather(st, &s.task, &holder));
    let assembled = ctx
        .blocking(move |store| prompt::assemble(store, &facts, &holder))
        .await?;
    Ok(json_response(StatusCode::OK, &assembled))
}

/// `POST /v1/worker/artifact?name=N`: stages one part (last write wins).
pub async fn stage(ctx: &Ctx, mut req: Req) -> Result<Resp, ApiError> {
    let s = session(ctx, &req, Route::Artifact)?;
    let name = req.query("name").unwrap_or_default().to_string();
    let step = worker::step_name(s.task.spec.kind.as_str(), &s.task.spec.brief_value())
        .map_err(|m| ApiError::bad_request("invalid_field", m))?;
    artifact::check_name(&name, &step)?;
    let bytes = body(ctx, &mut req, &s).await?;
    let size = bytes.len();
    let sha = ctx
        .blocking(move |store| store.put_object(&bytes, Durability::Synced))
        .await?;
    ctx.queue
        .stage(s.task.id, s.attempt, name.clone(), sha)
        .await
        .map_err(|e| match e {
            crate::queue::Error::StaleLease { state, attempt } => {
                worker::Error::StaleLease { state, attempt }.into()
            }
            other => ApiError::from(other),
        })?;
    tracing::debug!(task = %s.task.id, part = %name, "part staged");
    Ok(json_response(
        StatusCode::OK,
        &json!({"task_id": s.task.id, "attempt": s.attempt.0, "name": name, "sha256": sha, "size": size}),
    ))
}

/// `POST /v1/worker/submit[?ok=false]`: the final body; completes the attempt.
pub async fn submit(ctx: &Ctx, mut req: Req) -> Result<Resp, ApiError> {
    let s = session(ctx, &req, Route::Submit)?;
    let ok = match req.query("ok") {
        None | Some("true") => true,
        Some("false") => false,
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_query",
                format!("ok must be true or false, not {other:?}"),
            ));
        }
    };
    let holder = holder(ctx, &s)?;
    let bytes = body(ctx, &mut req, &s).await?;
    let queue_placement = ctx.queue.peek(|st| {
        st.queues
            .get(&s.task.spec.queue)
            .and_then(|q| q.placement.clone())
    });
    let done = submit::submit_body(
        &ctx.store,
        &ctx.queue,
        &s,
        &holder,
        queue_placement,
        ok,
        bytes,
    )
    .await?;
    Ok(submitted(s.task.id, &done))
}

/// `GET /v1/tasks/{id}/output`: `{"out": final, "parts": {name: value}}`.
pub async fn output(ctx: &Ctx, req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let task = visible(ctx, &p, task_id(id)?).await?;
    let folded = ctx
        .blocking(move |store| output::fold(store, &task))
        .await?;
    Ok(json_response(StatusCode::OK, &folded))
}
