//! `/v1/worker/*` (authenticated by a worker handle or token, not a key)
//! and the final pull `GET /v1/tasks/{id}/output` (authenticated by a key).

use std::sync::Arc;

use http::StatusCode;
use serde_json::json;
use tokio::sync::MutexGuard;

use super::error::{ApiError, ErrorCode};
use super::lifecycle::submitted;
use super::nouns::{version_query, version_response};
use super::request::Req;
use super::tasks::{task_id, visible};
use super::{Ctx, Resp, json_response};
use crate::queue::SpecRules;
use crate::queue::brief::Address;
use crate::store::{NounPath, Sha256};
use crate::wire::{PartView, StagedPart, WorkerHeartbeat, WorkerParts};
use crate::worker::{
    self, Route, Session, artifact, consumes, file_ref, output, prompt, shim, submit,
};

/// Resolves the worker credential. A valid one is always served; one that
/// fails spends its peer's failure budget, and is answered `429` instead
/// of `401` once that (or the overall) budget is spent.
async fn session(ctx: &Ctx, req: &Req, route: Route) -> Result<Session, ApiError> {
    let peer = req.peer().ip();
    let wanted = req.query("task_id").map(task_id).transpose()?;
    let resolved = match req.bearer() {
        Ok(bearer) => {
            worker::resolve(&ctx.queue, &ctx.tokens, &ctx.keyring, bearer, wanted, route).await
        }
        Err(_) => Err(worker::Error::Unauthenticated(
            "malformed Authorization header",
        )),
    };
    if let Err(worker::Error::Unauthenticated(reason)) = &resolved {
        ctx.throttle.failed(peer, reason)?;
    }
    Ok(resolved?)
}

/// Waits for the task's turn, then resolves the session again from the
/// queue's current state; the turn lasts as long as the guard.
async fn turn<'a>(
    ctx: &'a Ctx,
    s: &Session,
    route: Route,
) -> Result<(MutexGuard<'a, ()>, Session), ApiError> {
    let guard = ctx.task_locks.lock(s.task.id).await;
    let s = s.recheck(&ctx.queue, &ctx.keyring, route).await?;
    Ok((guard, s))
}

/// Runs the part of a worker call that writes files and the journal on its
/// own task, so that it finishes even when the client goes away mid-call:
/// a projected ctx-dir is always followed by its receipt (or swapped back).
async fn to_the_end<T, F>(ctx: &Arc<Ctx>, work: impl FnOnce(Arc<Ctx>) -> F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: Future<Output = Result<T, ApiError>> + Send + 'static,
{
    tokio::spawn(work(ctx.clone()))
        .await
        .map_err(|e| ApiError::internal(&format!("a worker call stopped: {e}")))?
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
    let s = session(ctx, &req, Route::Prompt).await?;
    let facts = prompt::Facts::gather(&ctx.queue, s.task, &s.claimant).await?;
    let claimant = s.claimant;
    let assembled = ctx
        .blocking(move |store| prompt::assemble(store, &facts, &claimant))
        .await?;
    Ok(json_response(StatusCode::OK, &assembled))
}

/// `GET /v1/worker/nouns/{ns}/{store}/{key}[?version=N&sha256=H]`: a noun
/// the task names (its brief's pins, its finished steps' outputs and
/// evidence), read as the claimant; anything else is `404` as for a
/// missing noun.
pub async fn noun(ctx: &Ctx, req: Req, path: [&str; 3]) -> Result<Resp, ApiError> {
    let s = session(ctx, &req, Route::Nouns).await?;
    let path = NounPath::parse(path[0], path[1], path[2])?;
    let (version, sha256) = version_query(&req)?;
    let facts = prompt::Facts::gather(&ctx.queue, s.task, &s.claimant).await?;
    let claimant = s.claimant;
    let started = std::time::Instant::now();
    let (entry, bytes) = ctx
        .blocking(move |store| {
            let allowed = shim::named(store, &facts.task, &facts.related);
            let ns = &facts.task.spec.namespace;
            shim::read(store, &claimant, &allowed, ns, &path, version, sha256)
        })
        .await?;
    ctx.metrics.noun_get(started.elapsed());
    Ok(version_response(&entry, bytes))
}

/// `GET /v1/worker/consumes/{name}`: the raw bytes of a ready `consumes`
/// entry of the task's brief, read as the claimant, with `x-tessera-sha256`;
/// an entry that is missing (or no entry) is `404`.
pub async fn consumed(ctx: &Ctx, req: Req, name: &str) -> Result<Resp, ApiError> {
    let s = session(ctx, &req, Route::Consumes).await?;
    let facts = prompt::Facts::gather(&ctx.queue, s.task, &s.claimant).await?;
    let wanted = name.to_string();
    let found = ctx
        .blocking(move |store| consumes::read(store, &facts.task, &facts.related, &wanted))
        .await?;
    match found {
        Some((sha, bytes)) => Ok(raw_response(&sha, bytes)),
        None => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no ready consumes entry {name:?} for this task"),
        )),
    }
}

/// Raw output bytes with their sha256 in `x-tessera-sha256`.
fn raw_response(sha: &Sha256, bytes: Vec<u8>) -> Resp {
    let mut resp = Resp::new(super::body::full(bytes));
    let headers = resp.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(
        "x-tessera-sha256",
        http::HeaderValue::from_str(&sha.hex()).expect("hex"),
    );
    resp
}

/// `POST /v1/worker/heartbeat`: extends the attempt's lease, as
/// `POST /v1/tasks/{id}/heartbeat` does; answers the new `expires_at`.
pub async fn heartbeat(ctx: &Ctx, req: Req) -> Result<Resp, ApiError> {
    let s = session(ctx, &req, Route::Heartbeat).await?;
    let lease = s.task.lease.as_ref().ok_or(worker::Error::StaleLease {
        state: s.task.state,
        attempt: s.task.attempt,
    })?;
    let expires_at = ctx
        .queue
        .heartbeat(s.task.id, &lease.id, &s.claimant.key_id)
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &WorkerHeartbeat {
            task_id: s.task.id,
            attempt: s.attempt.0,
            expires_at,
        },
    ))
}

/// `GET /v1/worker/parts`: the parts this attempt staged so far, by name,
/// with sha256 and size.
pub async fn parts(ctx: &Ctx, req: Req) -> Result<Resp, ApiError> {
    let s = session(ctx, &req, Route::Parts).await?;
    let staged = s.task.staged.clone();
    let parts = ctx
        .blocking(move |store| {
            staged
                .into_iter()
                .map(|(name, sha)| {
                    let size = store.get_object(&sha)?.len() as u64;
                    Ok(PartView {
                        name,
                        sha256: sha,
                        size,
                    })
                })
                .collect::<Result<Vec<_>, worker::Error>>()
        })
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &WorkerParts {
            task_id: s.task.id,
            attempt: s.attempt.0,
            parts,
        },
    ))
}

/// `POST /v1/worker/artifact?name=N`: stages one part (last write wins).
pub async fn stage(ctx: &Arc<Ctx>, mut req: Req) -> Result<Resp, ApiError> {
    let s = session(ctx, &req, Route::Artifact).await?;
    let name = req.query("name").unwrap_or_default().to_string();
    let step = s.task.spec.step_name();
    artifact::check_name(&name, step.as_str())?;
    let bytes = body(ctx, &mut req, &s).await?;
    let size = bytes.len();
    let part = name.clone();
    let (s, sha) = to_the_end(ctx, move |ctx| async move {
        let ctx = &*ctx;
        let (_turn, s) = turn(ctx, &s, Route::Artifact).await?;
        let sha = artifact::stage(&ctx.store, &ctx.queue, &s, part, bytes).await?;
        Ok((s, sha))
    })
    .await?;
    tracing::debug!(task = %s.task.id, part = %name, "part staged");
    Ok(json_response(
        StatusCode::OK,
        &StagedPart {
            task_id: s.task.id,
            attempt: s.attempt.0,
            part: PartView {
                name,
                sha256: sha,
                size: size as u64,
            },
        },
    ))
}

/// A boolean query parameter, `false` when absent.
fn flag(req: &Req, name: &str) -> Result<bool, ApiError> {
    match req.query(name) {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(ApiError::new(
            ErrorCode::InvalidQuery,
            format!("{name} must be true or false, not {other:?}"),
        )),
    }
}

/// `POST /v1/worker/submit[?ok=false[&final=true]]`: the final body;
/// completes the attempt.
pub async fn submit(ctx: &Arc<Ctx>, mut req: Req) -> Result<Resp, ApiError> {
    let s = session(ctx, &req, Route::Submit).await?;
    let ok = req.query("ok").is_none() || flag(&req, "ok")?;
    let final_failure = flag(&req, "final")?;
    let bytes = body(ctx, &mut req, &s).await?;
    // The final body is read as JSON too (contract checks, the fold).
    req.parsing(&bytes)?;
    let (id, done) = to_the_end(ctx, move |ctx| async move {
        let ctx = &*ctx;
        let (_turn, s) = turn(ctx, &s, Route::Submit).await?;
        let template = ctx.queue.template_of(&s.task.spec).await?;
        let requester = ctx.keyring.usable_principal(&s.task.requester).await?;
        let done = submit::submit_body(
            &ctx.store,
            &ctx.queue,
            &s,
            requester,
            template,
            ok,
            final_failure,
            bytes,
        )
        .await?;
        Ok((s.task.id, done))
    })
    .await?;
    Ok(submitted(id, &done))
}

/// `GET /v1/tasks/{id}/output`: `{"out": final, "parts": {name: value}}`;
/// with `?path=$.out` or `?path=$.parts["name"]`, that one piece's raw
/// bytes and its sha256 (`x-tessera-sha256`).
pub async fn output(ctx: &Ctx, req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let path = req
        .query("path")
        .map(|text| {
            Address::parse(text).map_err(|message| {
                ApiError::new(ErrorCode::InvalidQuery, message).with(json!({"field": "path"}))
            })
        })
        .transpose()?;
    let task = visible(ctx, &p, task_id(id)?).await?;
    let Some(path) = path else {
        let folded = ctx
            .blocking(move |store| output::fold(store, &task))
            .await?;
        return Ok(json_response(StatusCode::OK, &folded));
    };
    let id = task.id;
    let shown = path.to_string();
    let found = ctx
        .blocking(move |store| consumes::raw(store, &task, &path))
        .await?;
    let Some((sha, bytes)) = found else {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("task {id} has no output at {shown}"),
        )
        .with(json!({"path": shown})));
    };
    Ok(raw_response(&sha, bytes))
}
