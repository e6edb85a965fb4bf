//! Batch routes: many noun puts (`POST /v1/batch/nouns`) or enqueues
//! (`POST /v1/batch/tasks[?dry_run=true]`) in one request, so that a large
//! seed pack imports in a few round trips.
//!
//! No side door: every item goes through the checks of its single route
//! (`nouns::Prepared`, `tasks::authorize_spec`, `Queue::enqueue_many`), and
//! a bad item fails only itself, answered with the status and error code
//! the single route would have sent. The request as a whole answers 401
//! without a valid key, 403 when the key lacks `cas:write` (nouns) or
//! `verbs:enqueue` (tasks), 400 for a malformed body or more than
//! `MAX_BATCH_ITEMS` items, and 413 past `BATCH_BODY_FACTOR` times the body
//! limit; each item's own body is held to the single route's limit.

use std::sync::Arc;

use http::StatusCode;
use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::error::{ApiError, ErrorCode};
use super::nouns::Prepared;
use super::request::Req;
use super::tasks::{authorize_spec, enqueue_outcome, query_name};
use super::{Ctx, Resp, json_response};
use crate::auth::{Principal, Scope, access};
use crate::queue::TaskSpec;
use crate::store::{Name, NounPath};
use crate::wire::json::parse_json;
use crate::wire::{
    BatchReply, ItemError, ItemReply, MAX_BATCH_ITEMS, NounBatch, NounBatchItem, PutNoun,
    PutNounReply, TaskBatch, TaskOutcome,
};

/// A batch body may be this many times the single-request body limit.
const BATCH_BODY_FACTOR: usize = 4;

/// Noun puts of one batch running at once on the blocking pool. Each put
/// waits on its own fsyncs, so overlapping them is what makes a batch fast.
const PUT_CONCURRENCY: usize = 32;

/// `POST /v1/batch/nouns[?source_pack=P]`: `{items: [{namespace, store,
/// key, envelope}]}`; every version written records the seed pack `P`.
pub async fn nouns(ctx: &Ctx, mut req: Req) -> Result<Resp, ApiError> {
    let principal = ctx.authenticate(&req).await?;
    access::require(&principal, Scope::CasWrite)?;
    let source_pack = query_name(&req, "source_pack")?;
    let batch: NounBatch = req
        .json(ctx.limits.max_body_bytes * BATCH_BODY_FACTOR)
        .await?;
    check_count(batch.items.len())?;
    let mut answers: Vec<Option<ItemReply<PutNounReply>>> = vec![None; batch.items.len()];
    let permits = Arc::new(Semaphore::new(PUT_CONCURRENCY));
    let mut running = JoinSet::new();
    for (i, item) in batch.items.iter().enumerate() {
        match prepare_put(ctx, &principal, item, source_pack.clone()) {
            Err(e) => answers[i] = Some(failed(e)),
            Ok(prepared) => {
                let permit = permits
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|e| ApiError::internal(&e))?;
                let store = ctx.store.clone();
                running.spawn_blocking(move || {
                    let _permit = permit;
                    (i, prepared.run(&store))
                });
            }
        }
    }
    while let Some(joined) = running.join_next().await {
        let (i, result) = joined.map_err(|e| ApiError::internal(&e))?;
        answers[i] = Some(match result {
            Ok((status, reply)) => succeeded(status, reply),
            Err(e) => failed(e),
        });
    }
    let items: Vec<_> = answers.into_iter().flatten().collect();
    let written = items.iter().filter(|a| a.status == 201).count();
    tracing::info!(items = items.len(), written, by = %principal.key_id, "noun batch");
    Ok(json_response(StatusCode::OK, &BatchReply { items }))
}

/// One item of a noun batch, checked as `PUT /v1/nouns/...` checks it.
fn prepare_put(
    ctx: &Ctx,
    p: &Principal,
    item: &NounBatchItem,
    source_pack: Option<Name>,
) -> Result<Prepared, ApiError> {
    let path = NounPath::parse(&item.namespace, &item.store, &item.key)?;
    access::may_write_nouns(p, &path.namespace)?;
    let env: PutNoun = item_json(ctx, &item.envelope)?;
    Prepared::new(p.clone(), path, &env, source_pack)
}

/// `POST /v1/batch/tasks[?dry_run=true][&source_pack=P]`: `{items:
/// [TaskSpec]}`, enqueued in order under one queue lock and one durability
/// wait; every task created records the seed pack `P`.
pub async fn tasks(ctx: &Ctx, mut req: Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let dry_run = req.query("dry_run") == Some("true");
    let source_pack = query_name(&req, "source_pack")?;
    access::require(&p, Scope::VerbsEnqueue)?;
    let batch: TaskBatch = req
        .json(ctx.limits.max_body_bytes * BATCH_BODY_FACTOR)
        .await?;
    check_count(batch.items.len())?;
    let mut answers: Vec<Option<ItemReply<TaskOutcome>>> = vec![None; batch.items.len()];
    let (mut specs, mut slots) = (Vec::new(), Vec::new());
    for (i, raw) in batch.items.iter().enumerate() {
        match checked_spec(ctx, &p, raw).await {
            Ok(spec) => {
                specs.push(spec);
                slots.push(i);
            }
            Err(e) => answers[i] = Some(failed(e)),
        }
    }
    let outcomes = ctx
        .queue
        .enqueue_many(specs, &p.viewer, source_pack.as_ref(), dry_run)
        .await?;
    let mut created = 0;
    for (slot, outcome) in slots.into_iter().zip(outcomes) {
        answers[slot] = Some(match enqueue_outcome(outcome, dry_run) {
            Ok((status, answer)) => {
                created += usize::from(status == StatusCode::CREATED);
                succeeded(status, answer)
            }
            Err(e) => failed(e),
        });
    }
    let items: Vec<_> = answers.into_iter().flatten().collect();
    tracing::info!(items = items.len(), created, dry_run, by = %p.key_id, "task batch");
    Ok(json_response(StatusCode::OK, &BatchReply { items }))
}

/// One item of a task batch, parsed and authorized as `POST /v1/tasks` does.
async fn checked_spec(ctx: &Ctx, p: &Principal, raw: &RawValue) -> Result<TaskSpec, ApiError> {
    let mut spec: TaskSpec = item_json(ctx, raw)?;
    authorize_spec(ctx, p, &mut spec).await?;
    Ok(spec)
}

/// An item's body as strict JSON, within the single route's body limit.
fn item_json<T: serde::de::DeserializeOwned>(ctx: &Ctx, raw: &RawValue) -> Result<T, ApiError> {
    let limit = ctx.limits.max_body_bytes;
    if raw.get().len() > limit {
        return Err(ApiError::new(
            ErrorCode::BodyTooLarge,
            format!("this item is over the {limit}-byte limit of a single request"),
        )
        .with(json!({"limit": limit})));
    }
    parse_json(raw.get().as_bytes())
}

fn check_count(n: usize) -> Result<(), ApiError> {
    if n > MAX_BATCH_ITEMS {
        return Err(ApiError::new(
            ErrorCode::TooManyItems,
            format!(
                "a batch holds at most {MAX_BATCH_ITEMS} items; split it into several requests"
            ),
        )
        .with(json!({"items": n, "limit": MAX_BATCH_ITEMS})));
    }
    Ok(())
}

fn succeeded<T: Serialize>(status: StatusCode, result: T) -> ItemReply<T> {
    ItemReply {
        status: status.as_u16(),
        result: Some(result),
        error: None,
    }
}

fn failed<T>(e: ApiError) -> ItemReply<T> {
    ItemReply {
        status: e.status().as_u16(),
        result: None,
        error: Some(ItemError {
            code: e.code.as_str().into(),
            message: e.message,
            details: e.details,
        }),
    }
}
