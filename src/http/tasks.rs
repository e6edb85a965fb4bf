//! Task routes: enqueue, list, show, receipts; and the task view shared by
//! every answer that shows a task.

use http::StatusCode;
use serde_json::json;

use super::error::{ApiError, ErrorCode};
use super::request::Req;
use super::{Ctx, Resp, json_response};
use crate::auth::access::{self, TaskFacts};
use crate::auth::{self, Principal};
use crate::queue::SpecRules;
use crate::queue::query::{Filter, Related, TaskSnap};
use crate::queue::{Enqueued, Task, TaskId, TaskSpec, TaskState};
use crate::store::Name;
use crate::wire::{
    Enqueued as EnqueuedReply, LeaseView, ReceiptEntry, ReceiptList, Related as WireRelated,
    TaskList, TaskOutcome, TaskView,
};

/// Largest page of `GET /v1/tasks`.
const MAX_PAGE: usize = 1000;

/// Parses a task id path segment.
pub fn task_id(s: &str) -> Result<TaskId, ApiError> {
    s.parse().map_err(|e: crate::queue::task::BadTaskId| {
        ApiError::new(ErrorCode::InvalidTaskId, e.to_string())
    })
}

/// Runs an access rule against a task and answers the task it allowed;
/// `NotFound` when it does not exist (`Queue::checked`).
pub async fn check(
    ctx: &Ctx,
    id: TaskId,
    p: &Principal,
    rule: fn(&Principal, &TaskFacts<'_>) -> Result<(), auth::Error>,
) -> Result<Task, ApiError> {
    ctx.queue
        .checked(id, |f| rule(p, f).map_err(ApiError::from))
        .await
}

/// How a task looks to `p`, from the queue's snapshot of it for `p`
/// (related tasks `p` may not see are already left out, so their ids
/// never show); so is the name of a queue `p` was not issued
/// (`access::shows_queue`), and a lease id `p` does not hold.
pub fn view(snap: TaskSnap, p: &Principal) -> TaskView {
    let related = |r: Related| WireRelated {
        task_id: r.id,
        state: Some(r.state),
        ok: r.ok,
        receipt: r.receipt,
    };
    let TaskSnap {
        task: t,
        max_attempts,
        parent,
        children,
        upstream,
    } = snap;
    let lease = t.lease.as_ref().map(|l| LeaseView {
        id: (p.is_admin() || l.holder == p.key_id).then(|| l.id.0.clone()),
        fence: l.attempt.0,
        expires_at: l.expires_at,
        holder: l.holder.to_string(),
    });
    let spec = std::sync::Arc::unwrap_or_clone(t.spec);
    TaskView {
        task_id: t.id,
        state: t.state,
        attempt: t.attempt.0,
        max_attempts,
        max_attempts_override: spec.max_attempts,
        queue: access::shows_queue(p, &spec.queue).then_some(spec.queue),
        namespace: spec.namespace,
        kind: spec.kind,
        effect_class: spec.effect_class,
        producer_surface: spec.producer_surface,
        visibility_scope: spec.visibility_scope,
        allowed_surfaces: spec.allowed_surfaces.into_vec(),
        idempotency_key: spec.idempotency_key.map(String::from),
        brief: spec.brief,
        allow_file_submit: spec.allow_file_submit,
        placement: spec.placement.map(String::from),
        traits: spec.traits,
        requester: t.requester,
        source_pack: t.source_pack,
        lease,
        not_before: t.not_before,
        parent,
        children: children.into_iter().map(related).collect(),
        upstream: upstream.into_iter().map(related).collect(),
        receipts: t.receipts,
        park: t.park.map(|p| *p),
        reason: t.reason,
        staged: t.staged,
        created_at: t.created_at,
        updated_at: t.updated_at,
    }
}

/// Authorizes a spec for enqueue and fills in its producer surface: the
/// key's grants, the spec's own rules, then the brief's pins, read as the
/// requester (a pin it may not read is refused exactly as a missing one).
pub async fn authorize_spec(ctx: &Ctx, p: &Principal, spec: &mut TaskSpec) -> Result<(), ApiError> {
    access::require(p, auth::Scope::VerbsEnqueue)?;
    access::require_namespace(p, &spec.namespace)?;
    let server = queue_server(ctx, &spec.queue).await?;
    spec.producer_surface = access::may_enqueue(p, &spec.facts(&p.key_id, server))?;
    access::reachable(&spec.facts(&p.key_id, server).envelope)
        .map_err(crate::queue::EnqueueError::Unclaimable)?;
    check_spec(ctx, p, spec).await
}

/// Authorizes one split child (already under its parent's envelope) as
/// an enqueue under `within`, the requester's grants intersected with the
/// splitting worker's; `parent_server` says whether the parent's queue is
/// a server queue.
pub async fn authorize_child(
    ctx: &Ctx,
    within: &Principal,
    parent: &Task,
    parent_server: bool,
    spec: TaskSpec,
) -> Result<TaskSpec, ApiError> {
    let server = queue_server(ctx, &spec.queue).await?;
    access::may_split_child(
        within,
        &parent.facts(parent_server),
        parent.spec.traits.priority,
        &spec.facts(&parent.requester, server),
        spec.traits.priority,
    )?;
    check_spec(ctx, within, &spec).await?;
    Ok(spec)
}

/// Whether `queue` is a server queue (unknown when never provisioned).
pub async fn queue_server(ctx: &Ctx, queue: &crate::store::Name) -> Result<bool, ApiError> {
    ctx.queue
        .is_server(queue)
        .await?
        .ok_or_else(|| crate::queue::EnqueueError::UnknownQueue(queue.to_string()).into())
}

/// The spec's own rules, its brief's pins as `p` reads them, and a strict
/// placement's reachability.
async fn check_spec(ctx: &Ctx, p: &Principal, spec: &TaskSpec) -> Result<(), ApiError> {
    let brief = spec
        .check()
        .map_err(|(field, message)| crate::queue::EnqueueError::InvalidSpec { field, message })?;
    crate::worker::pins::check(&ctx.store, p, &spec.namespace, brief.pins()).await?;
    if spec.traits.check_policy == crate::queue::CheckPolicy::Strict {
        let template = ctx.queue.template_of(spec).await?;
        if crate::queue::placement::check_template(&template).is_ok() {
            let ns = spec.namespace.clone();
            ctx.blocking(move |store| {
                crate::worker::projection::check_placement(store, &ns, &template).map_err(|m| {
                    ApiError::new(ErrorCode::PlacementUnresolvable, m)
                        .with(json!({"field": "placement"}))
                })
            })
            .await?;
        }
    }
    Ok(())
}

/// How one enqueue outcome is answered, by `POST /v1/tasks` and by each
/// item of `POST /v1/batch/tasks` alike: 201 create, 200 unchanged, and
/// in a dry run 200 create or conflict; other refusals are errors.
pub fn enqueue_outcome(
    outcome: Result<Enqueued, crate::queue::EnqueueError>,
    dry_run: bool,
) -> Result<(StatusCode, TaskOutcome), ApiError> {
    let shown = |s: TaskState| (!dry_run).then_some(s);
    let (status, name, task_id, state) = match outcome {
        Ok(Enqueued::Created(id, s)) => (StatusCode::CREATED, "create", Some(id), shown(s)),
        Ok(Enqueued::WouldCreate) => (StatusCode::OK, "create", None, None),
        Ok(Enqueued::Existing(id, s)) => (StatusCode::OK, "unchanged", Some(id), shown(s)),
        Err(crate::queue::EnqueueError::IdempotencyConflict(id)) if dry_run => {
            (StatusCode::OK, "conflict", Some(id), None)
        }
        Err(e) => return Err(e.into()),
    };
    Ok((
        status,
        TaskOutcome {
            outcome: name.into(),
            task_id,
            state,
            dry_run,
        },
    ))
}

/// `POST /v1/tasks[?dry_run=true][&source_pack=P]`. A dry run answers
/// `{outcome: create | unchanged | conflict, task_id?, dry_run}` and
/// writes nothing; a task created records the seed pack `P`.
pub async fn enqueue(ctx: &Ctx, mut req: Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let dry_run = req.query("dry_run") == Some("true");
    let source_pack = query_name(&req, "source_pack")?;
    access::require(&p, auth::Scope::VerbsEnqueue)?;
    let mut spec: TaskSpec = req.json(ctx.limits.max_body_bytes).await?;
    authorize_spec(ctx, &p, &mut spec).await?;
    let outcome = ctx
        .queue
        .enqueue_many(vec![spec], &p.viewer, source_pack.as_ref(), dry_run)
        .await?
        .remove(0);
    let (status, answer) = enqueue_outcome(outcome, dry_run)?;
    let (Some(id), Some(state)) = (answer.task_id, answer.state) else {
        return Ok(json_response(status, &answer));
    };
    let created = status == StatusCode::CREATED;
    if created {
        tracing::debug!(task = %id, by = %p.key_id, state = state.as_str(), "task enqueued");
    }
    Ok(json_response(
        status,
        &EnqueuedReply {
            task_id: id,
            state,
            created,
        },
    ))
}

/// `GET /v1/tasks/{id}`.
pub async fn show(ctx: &Ctx, req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let id = task_id(id)?;
    let snap = ctx
        .queue
        .task(id, &p.viewer, |f| {
            access::read_task(&p, f).map_err(ApiError::from)
        })
        .await?;
    Ok(json_response(StatusCode::OK, &view(snap, &p)))
}

/// A name-valued query parameter.
pub fn query_name(req: &Req, field: &'static str) -> Result<Option<Name>, ApiError> {
    Ok(req
        .query(field)
        .map(|v| Name::parse(field, v))
        .transpose()?)
}

/// `GET /v1/tasks?queue=&kind=&state=&namespace=&source_pack=&cursor=&limit=`:
/// tasks the key may see.
pub async fn list(ctx: &Ctx, req: Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let state: Option<TaskState> = req
        .query("state")
        .map(|s| {
            s.parse()
                .map_err(|m: String| ApiError::new(ErrorCode::InvalidQuery, m))
        })
        .transpose()?;
    let cursor = req.query("cursor").map(task_id).transpose()?;
    let limit = req
        .query_u64("limit")?
        .map_or(100, |n| (n as usize).clamp(1, MAX_PAGE));
    let filter = Filter {
        queue: query_name(&req, "queue")?,
        kind: query_name(&req, "kind")?,
        state,
        namespace: query_name(&req, "namespace")?,
        source_pack: query_name(&req, "source_pack")?,
    };
    let page = ctx.queue.page(&p.viewer, &filter, cursor, limit).await?;
    let tasks: Vec<TaskView> = page.tasks.into_iter().map(|t| view(t, &p)).collect();
    let page = TaskList {
        next_cursor: if page.more {
            tasks.last().map(|t| t.task_id)
        } else {
            None
        },
        tasks,
    };
    Ok(json_response(StatusCode::OK, &page))
}

/// A task the key may see, as it is once durable.
pub async fn visible(ctx: &Ctx, p: &Principal, id: TaskId) -> Result<Task, ApiError> {
    let snap = ctx
        .queue
        .task(id, &p.viewer, |f| {
            access::read_task(p, f).map_err(ApiError::from)
        })
        .await?;
    Ok(snap.task)
}

/// `GET /v1/tasks/{id}/receipts`: the receipt records, in order.
pub async fn receipts(ctx: &Ctx, req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let t = visible(ctx, &p, task_id(id)?).await?;
    let shas = t.receipts.clone();
    let records = ctx
        .blocking(move |store| {
            shas.iter()
                .map(|sha| {
                    let bytes = store.get_object(sha)?;
                    let receipt = serde_json::from_slice(&bytes).map_err(|e| {
                        ApiError::internal(&format!("receipt {sha} is not a receipt: {e}"))
                    })?;
                    Ok(ReceiptEntry {
                        sha256: *sha,
                        receipt,
                    })
                })
                .collect::<Result<Vec<_>, ApiError>>()
        })
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &ReceiptList {
            task_id: t.id,
            receipts: records,
        },
    ))
}
