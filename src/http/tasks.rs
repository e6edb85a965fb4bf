//! Task routes: enqueue, list, show, receipts; and the task view shared by
//! every answer that shows a task.

use http::StatusCode;
use serde_json::json;

use super::error::{ApiError, ErrorCode};
use super::request::Req;
use super::wire::{Enqueued as EnqueuedReply, LeaseView, Related, TaskList, TaskOutcome, TaskView};
use super::{Ctx, Resp, json_response};
use crate::auth::access::{self, TaskFacts};
use crate::auth::{self, Principal};
use crate::queue::{Enqueued, State, Task, TaskId, TaskSpec, TaskState};
use crate::store::Name;

/// Largest page of `GET /v1/tasks`.
const MAX_PAGE: usize = 1000;

/// Parses a task id path segment.
pub fn task_id(s: &str) -> Result<TaskId, ApiError> {
    s.parse().map_err(|e: crate::queue::task::BadTaskId| {
        ApiError::new(ErrorCode::InvalidTaskId, e.to_string())
    })
}

/// Runs an access rule against a task; `NotFound` when it does not exist.
/// It does not wait for durability: the facts it checks never change
/// after enqueue, and whatever the caller then does is journaled after.
pub fn check(
    ctx: &Ctx,
    id: TaskId,
    p: &Principal,
    rule: fn(&Principal, &TaskFacts<'_>) -> Result<(), auth::Error>,
) -> Result<(), ApiError> {
    check_then(ctx, id, p, rule, |_| ())
}

/// [`check`], then `read` of the task under the same look (what the
/// caller needs of it, rather than a copy of the whole task).
pub fn check_then<T>(
    ctx: &Ctx,
    id: TaskId,
    p: &Principal,
    rule: fn(&Principal, &TaskFacts<'_>) -> Result<(), auth::Error>,
    read: impl FnOnce(&Task) -> T,
) -> Result<T, ApiError> {
    ctx.queue.peek(|st| {
        let t = st.task(id)?;
        rule(p, &st.facts(t))?;
        Ok::<_, ApiError>(read(t))
    })
}

/// How a task looks to `p` (who may see it). Related tasks `p` may not
/// see are left out, so their ids never show, and so is the name of a
/// queue `p` was not issued (`access::shows_queue`).
pub fn view(st: &State, t: &Task, p: &Principal) -> TaskView {
    let visible = |id: &TaskId| {
        st.tasks
            .get(id)
            .filter(|r| access::sees_task(p, &st.facts(r)))
    };
    let related = |id: &TaskId| {
        visible(id).map(|r| Related {
            task_id: r.id,
            state: Some(r.state),
            ok: r.ok(),
            receipt: r.receipts.last().copied(),
        })
    };
    let lease = t.lease.as_ref().map(|l| LeaseView {
        id: (p.is_admin() || l.holder == p.key_id).then(|| l.id.0.clone()),
        fence: l.attempt.0,
        expires_at: l.expires_at,
        holder: l.holder.to_string(),
    });
    TaskView {
        task_id: t.id,
        state: t.state,
        attempt: t.attempt.0,
        max_attempts: st.max_attempts(t),
        namespace: t.spec.namespace.clone(),
        queue: access::shows_queue(p, &t.spec.queue).then(|| t.spec.queue.clone()),
        kind: t.spec.kind.clone(),
        effect_class: t.spec.effect_class,
        producer_surface: t.spec.producer_surface.clone(),
        visibility_scope: t.spec.visibility_scope,
        allowed_surfaces: t.spec.allowed_surfaces.clone(),
        priority: t.spec.priority,
        tags: t.spec.tags.clone(),
        target_cohorts: t.spec.target_cohorts.clone(),
        idempotency_key: t.spec.idempotency_key.clone(),
        brief: t.spec.brief.clone(),
        requester: t.requester.clone(),
        source_pack: t.source_pack.clone(),
        lease,
        not_before: t.not_before,
        parent: t.parent.filter(|id| visible(id).is_some()),
        children: t.children.iter().filter_map(related).collect(),
        upstream: t.spec.depends_on.iter().filter_map(related).collect(),
        receipts: t.receipts.clone(),
        park: t.park.as_deref().cloned(),
        reason: t.reason.clone(),
        staged: t.staged.clone(),
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
    let server = queue_server(ctx, &spec.queue)?;
    spec.producer_surface = access::may_enqueue(p, &spec.facts(&p.key_id, server))?;
    access::reachable(&spec.facts(&p.key_id, server).envelope)
        .map_err(crate::queue::EnqueueError::Unclaimable)?;
    check_spec(ctx, p, spec).await
}

/// Authorizes one split child (already under its parent's envelope) as
/// an enqueue under `within`, the requester's grants intersected with the
/// splitting worker's.
pub async fn authorize_child(
    ctx: &Ctx,
    within: &Principal,
    parent: &Task,
    spec: TaskSpec,
) -> Result<TaskSpec, ApiError> {
    let server = queue_server(ctx, &spec.queue)?;
    let parent_facts = ctx.queue.peek(|st| st.facts(parent).server_queue);
    access::may_split_child(
        within,
        &parent.facts(parent_facts),
        parent.spec.priority,
        &spec.facts(&parent.requester, server),
        spec.priority,
    )?;
    check_spec(ctx, within, &spec).await?;
    Ok(spec)
}

/// Whether `queue` is a server queue (unknown when never provisioned).
fn queue_server(ctx: &Ctx, queue: &crate::store::Name) -> Result<bool, ApiError> {
    ctx.queue
        .peek(|st| st.queues.get(queue).map(|q| q.server))
        .ok_or_else(|| crate::queue::EnqueueError::UnknownQueue(queue.to_string()).into())
}

/// The spec's own rules, its brief's pins as `p` reads them, and a strict
/// placement's reachability.
async fn check_spec(ctx: &Ctx, p: &Principal, spec: &TaskSpec) -> Result<(), ApiError> {
    let brief = spec
        .check()
        .map_err(|(field, message)| crate::queue::EnqueueError::InvalidSpec { field, message })?;
    crate::worker::pins::check(&ctx.store, p, &spec.namespace, brief.pins()).await?;
    if spec.check_policy == crate::queue::CheckPolicy::Strict {
        let template = ctx.queue.peek(|st| st.template_of(spec));
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
    let p = ctx.authenticate(&req)?;
    let dry_run = req.query("dry_run") == Some("true");
    let source_pack = query_name(&req, "source_pack")?;
    access::require(&p, auth::Scope::VerbsEnqueue)?;
    let mut spec: TaskSpec = req.json(ctx.limits.max_body_bytes).await?;
    authorize_spec(ctx, &p, &mut spec).await?;
    let sees = |t: &Task| access::sees_task(&p, &t.facts(false));
    let outcome = ctx
        .queue
        .enqueue_many(vec![spec], &p.key_id, source_pack.as_ref(), &sees, dry_run)
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
    let p = ctx.authenticate(&req)?;
    let id = task_id(id)?;
    let v = ctx
        .queue
        .read(|st| {
            let t = st.task(id)?;
            access::read_task(&p, &st.facts(t))?;
            Ok::<_, ApiError>(view(st, t, &p))
        })
        .await??;
    Ok(json_response(StatusCode::OK, &v))
}

/// The task list's filters (`GET /v1/tasks`), also those of the bulk
/// retry and cancel routes. They select; they grant nothing.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only this queue.
    pub queue: Option<Name>,
    /// Only this kind.
    pub kind: Option<Name>,
    /// Only this state.
    pub state: Option<TaskState>,
    /// Only this namespace.
    pub namespace: Option<Name>,
    /// Only tasks the import of this seed pack enqueued.
    pub source_pack: Option<Name>,
}

impl Filter {
    /// Whether the task passes every filter given, as `p` sees it: a
    /// queue `p` may not see named (`access::shows_queue`) selects
    /// nothing, as a queue never provisioned does.
    pub fn matches(&self, p: &Principal, t: &Task) -> bool {
        self.queue
            .as_ref()
            .is_none_or(|q| t.spec.queue == *q && access::shows_queue(p, q))
            && self.kind.as_ref().is_none_or(|k| t.spec.kind == *k)
            && self.state.is_none_or(|s| t.state == s)
            && self
                .namespace
                .as_ref()
                .is_none_or(|n| t.spec.namespace == *n)
            && self
                .source_pack
                .as_ref()
                .is_none_or(|p| t.source_pack.as_ref() == Some(p))
    }
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
    let p = ctx.authenticate(&req)?;
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
    let page = ctx
        .queue
        .read(|st| {
            let mut matching = st
                .tasks
                .after(cursor)
                .filter(|t| filter.matches(&p, t) && access::sees_task(&p, &st.facts(t)));
            let tasks: Vec<TaskView> = matching
                .by_ref()
                .take(limit)
                .map(|t| view(st, t, &p))
                .collect();
            let more = matching.next().is_some();
            TaskList {
                next_cursor: if more {
                    tasks.last().map(|t| t.task_id)
                } else {
                    None
                },
                tasks,
            }
        })
        .await?;
    Ok(json_response(StatusCode::OK, &page))
}

/// A task the key may see, as it is once durable.
pub async fn visible(ctx: &Ctx, p: &Principal, id: TaskId) -> Result<Task, ApiError> {
    ctx.queue
        .read(|st| {
            let t = st.task(id)?;
            access::read_task(p, &st.facts(t))?;
            Ok::<_, ApiError>(t.clone())
        })
        .await?
}

/// `GET /v1/tasks/{id}/receipts`: the receipt records, in order.
pub async fn receipts(ctx: &Ctx, req: Req, id: &str) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let t = visible(ctx, &p, task_id(id)?).await?;
    let shas = t.receipts.clone();
    let records = ctx
        .blocking(move |store| {
            shas.iter()
                .map(|sha| {
                    let bytes = store.get_object(sha)?;
                    let record: serde_json::Value =
                        serde_json::from_slice(&bytes).map_err(|e| {
                            ApiError::internal(&format!("receipt {sha} is not JSON: {e}"))
                        })?;
                    Ok(json!({"sha256": sha, "receipt": record}))
                })
                .collect::<Result<Vec<_>, ApiError>>()
        })
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"task_id": t.id, "receipts": records}),
    ))
}
