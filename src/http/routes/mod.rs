//! The routing table: every route of the API, method and path, in one
//! `match`. Handlers live in the modules named after what they serve.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use futures_util::FutureExt;
use http::Method;
use hyper::body::Incoming;

use super::error::{ApiError, ErrorCode};
use super::request::Req;
use crate::queue::BulkAction;

use super::mcp;
use super::{
    Ctx, Resp, batch, events, headers, keys, lifecycle, noun_list, nouns, openapi, ops, promotions,
    queues, site, status, tasks, worker,
};

/// Routes one request from `peer` and turns any error into its JSON answer.
/// A handler that panics answers 500 and leaves shared state usable: the
/// queue checks every change before applying it and its lock shrugs off
/// poisoning, so one request never takes the others down.
pub async fn dispatch(ctx: Arc<Ctx>, req: hyper::Request<Incoming>, peer: SocketAddr) -> Resp {
    let req = Req::new(req, peer, ctx.bodies.clone());
    let leftover = req.leftover();
    let stall = ctx.bodies.stall();
    let mut resp = answer(ctx, req).await;
    leftover.settle(&mut resp, stall).await;
    resp
}

/// Routes one request already split into a [`Req`] (a connection's, or an
/// `/mcp` tool call's), turns any error into its JSON answer, and gives
/// every answer the headers of `headers.rs`.
pub async fn answer(ctx: Arc<Ctx>, req: Req) -> Resp {
    let started = Instant::now();
    let method = req.method().clone();
    let segments = req.segments();
    let template = segments.as_deref().ok().and_then(|s| matched(&method, s));
    let served = route(&ctx, req, segments, template);
    let mut resp = match AssertUnwindSafe(served).catch_unwind().await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => e.into_response(),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            ApiError::internal(&format!("a request handler panicked: {what}")).into_response()
        }
    };
    headers::protect(&mut resp);
    let status = resp.status().as_u16();
    ctx.metrics.request(
        &method,
        template.unwrap_or(NO_ROUTE),
        status,
        started.elapsed(),
    );
    resp
}

/// One route the router serves: its method and its path template, whose
/// `{name}` segments stand for any one segment.
#[derive(Clone, Debug)]
pub struct RouteSpec {
    /// The method.
    pub method: Method,
    /// The path template, as the OpenAPI document spells it.
    pub path: &'static str,
}

impl RouteSpec {
    const fn new(method: Method, path: &'static str) -> RouteSpec {
        RouteSpec { method, path }
    }
}

/// Route templates as segments, by method and segment count, each with
/// its template as [`ROUTES`] spells it.
type Templates = HashMap<(Method, usize), Vec<(&'static str, Vec<&'static str>)>>;

/// [`ROUTES`]' templates split into segments once, filed by method and
/// segment count, so a request is checked against the few that could fit.
static LISTED: LazyLock<Templates> = LazyLock::new(|| {
    let mut by = Templates::new();
    for r in ROUTES {
        let segs: Vec<&str> = r.path.trim_matches('/').split('/').collect();
        by.entry((r.method.clone(), segs.len()))
            .or_default()
            .push((r.path, segs));
    }
    by
});

/// The template of the first route [`ROUTES`] lists for `method` on the
/// path split into `segs` (a `{name}` segment of a template stands for any
/// one segment), or `None` when no route is listed there.
fn matched(method: &Method, segs: &[impl AsRef<str>]) -> Option<&'static str> {
    LISTED
        .get(&(method.clone(), segs.len()))?
        .iter()
        .find_map(|(path, t)| {
            let fits = t
                .iter()
                .zip(segs)
                .all(|(t, s)| t.starts_with('{') || *t == s.as_ref());
            fits.then_some(*path)
        })
}

/// The route a request no route serves is counted under in `/metrics`
/// (any other is counted under its route's template, never its path).
pub const NO_ROUTE: &str = "(no route)";

/// Every route of the API. The router answers `no_route` to anything not
/// listed here, and the OpenAPI document must list exactly these.
pub const ROUTES: &[RouteSpec] = &[
    RouteSpec::new(Method::GET, "/healthz"),
    RouteSpec::new(Method::GET, "/metrics"),
    RouteSpec::new(Method::GET, "/v1/openapi.json"),
    RouteSpec::new(Method::GET, "/v1/events"),
    RouteSpec::new(Method::GET, "/v1/status"),
    RouteSpec::new(Method::GET, "/"),
    RouteSpec::new(Method::GET, "/ui/{name}"),
    RouteSpec::new(Method::GET, "/v1/nouns"),
    RouteSpec::new(Method::PUT, "/v1/nouns/{namespace}/{store}/{key}"),
    RouteSpec::new(Method::GET, "/v1/nouns/{namespace}/{store}/{key}"),
    RouteSpec::new(Method::GET, "/v1/nouns/{namespace}/{store}/{key}/versions"),
    RouteSpec::new(
        Method::POST,
        "/v1/nouns/{namespace}/{store}/{key}/quarantine",
    ),
    RouteSpec::new(
        Method::POST,
        "/v1/nouns/{namespace}/{store}/{key}/unquarantine",
    ),
    RouteSpec::new(Method::POST, "/v1/batch/nouns"),
    RouteSpec::new(Method::POST, "/v1/batch/tasks"),
    RouteSpec::new(Method::POST, "/v1/keys"),
    RouteSpec::new(Method::GET, "/v1/keys"),
    RouteSpec::new(Method::DELETE, "/v1/keys/{key_id}"),
    RouteSpec::new(Method::POST, "/v1/queues"),
    RouteSpec::new(Method::GET, "/v1/queues"),
    RouteSpec::new(Method::POST, "/v1/queues/{queue}/claim"),
    RouteSpec::new(Method::POST, "/v1/tasks"),
    RouteSpec::new(Method::POST, "/v1/tasks/retry"),
    RouteSpec::new(Method::POST, "/v1/tasks/cancel"),
    RouteSpec::new(Method::GET, "/v1/tasks"),
    RouteSpec::new(Method::GET, "/v1/tasks/{id}"),
    RouteSpec::new(Method::GET, "/v1/tasks/{id}/receipts"),
    RouteSpec::new(Method::POST, "/v1/tasks/{id}/claim"),
    RouteSpec::new(Method::POST, "/v1/tasks/{id}/heartbeat"),
    RouteSpec::new(Method::POST, "/v1/tasks/{id}/release"),
    RouteSpec::new(Method::POST, "/v1/tasks/{id}/submit"),
    RouteSpec::new(Method::POST, "/v1/tasks/{id}/park"),
    RouteSpec::new(Method::POST, "/v1/tasks/{id}/resume"),
    RouteSpec::new(Method::POST, "/v1/tasks/{id}/split"),
    RouteSpec::new(Method::POST, "/v1/tasks/{id}/cancel"),
    RouteSpec::new(Method::POST, "/v1/tasks/{id}/retry"),
    RouteSpec::new(Method::GET, "/v1/tasks/{id}/output"),
    RouteSpec::new(Method::POST, "/v1/promotions"),
    RouteSpec::new(Method::GET, "/v1/worker/prompt"),
    RouteSpec::new(Method::POST, "/v1/worker/artifact"),
    RouteSpec::new(Method::POST, "/v1/worker/submit"),
    RouteSpec::new(Method::GET, "/v1/worker/nouns/{namespace}/{store}/{key}"),
    RouteSpec::new(Method::POST, "/v1/worker/heartbeat"),
    RouteSpec::new(Method::GET, "/v1/worker/parts"),
    RouteSpec::new(Method::GET, "/v1/worker/consumes/{name}"),
    RouteSpec::new(Method::POST, "/mcp"),
];

/// Serves `req`, whose path is `segments`, by the route whose `template`
/// [`matched`] found.
async fn route(
    ctx: &Arc<Ctx>,
    req: Req,
    segments: Result<Vec<String>, ApiError>,
    template: Option<&'static str>,
) -> Result<Resp, ApiError> {
    let segments = segments?;
    if template.is_none() {
        return Err(no_route());
    }
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = req.method().clone();
    match (method, segs.as_slice()) {
        (Method::GET, ["healthz"]) => ops::healthz(ctx).await,
        (Method::GET, ["v1", "openapi.json"]) => openapi::serve(),
        (Method::GET, ["metrics"]) => ops::metrics(ctx, &req).await,
        (Method::GET, ["v1", "events"]) => events::stream(ctx, req).await,
        (Method::GET, ["v1", "status"]) => status::status(ctx, req).await,
        (Method::GET, [""]) => site::index(&req),
        (Method::GET, ["ui", name]) => site::file(&req, name),

        (Method::GET, ["v1", "nouns"]) => noun_list::list(ctx, req).await,
        (Method::PUT, ["v1", "nouns", ns, st, key]) => nouns::put(ctx, req, [ns, st, key]).await,
        (Method::GET, ["v1", "nouns", ns, st, key]) => nouns::get(ctx, req, [ns, st, key]).await,
        (Method::GET, ["v1", "nouns", ns, st, key, "versions"]) => {
            nouns::versions(ctx, req, [ns, st, key]).await
        }
        (Method::POST, ["v1", "nouns", ns, st, key, "quarantine"]) => {
            nouns::quarantine(ctx, req, [ns, st, key], true).await
        }
        (Method::POST, ["v1", "nouns", ns, st, key, "unquarantine"]) => {
            nouns::quarantine(ctx, req, [ns, st, key], false).await
        }

        (Method::POST, ["v1", "batch", "nouns"]) => batch::nouns(ctx, req).await,
        (Method::POST, ["v1", "batch", "tasks"]) => batch::tasks(ctx, req).await,

        (Method::POST, ["v1", "keys"]) => keys::issue(ctx, req).await,
        (Method::GET, ["v1", "keys"]) => keys::list(ctx, req).await,
        (Method::DELETE, ["v1", "keys", key_id]) => keys::revoke(ctx, req, key_id).await,

        (Method::POST, ["v1", "queues"]) => queues::provision(ctx, req).await,
        (Method::GET, ["v1", "queues"]) => queues::list(ctx, req).await,
        (Method::POST, ["v1", "queues", queue, "claim"]) => {
            queues::claim_next(ctx, req, queue).await
        }

        (Method::POST, ["v1", "tasks"]) => tasks::enqueue(ctx, req).await,
        (Method::POST, ["v1", "tasks", "retry"]) => {
            lifecycle::bulk(ctx, req, BulkAction::Retry).await
        }
        (Method::POST, ["v1", "tasks", "cancel"]) => {
            lifecycle::bulk(ctx, req, BulkAction::Cancel).await
        }
        (Method::GET, ["v1", "tasks"]) => tasks::list(ctx, req).await,
        (Method::GET, ["v1", "tasks", id]) => tasks::show(ctx, req, id).await,
        (Method::GET, ["v1", "tasks", id, "receipts"]) => tasks::receipts(ctx, req, id).await,
        (Method::POST, ["v1", "tasks", id, "claim"]) => queues::claim_one(ctx, req, id).await,
        (Method::POST, ["v1", "tasks", id, "heartbeat"]) => {
            lifecycle::heartbeat(ctx, req, id).await
        }
        (Method::POST, ["v1", "tasks", id, "release"]) => lifecycle::release(ctx, req, id).await,
        (Method::POST, ["v1", "tasks", id, "submit"]) => lifecycle::submit(ctx, req, id).await,
        (Method::POST, ["v1", "tasks", id, "park"]) => lifecycle::park(ctx, req, id).await,
        (Method::POST, ["v1", "tasks", id, "resume"]) => lifecycle::resume(ctx, req, id).await,
        (Method::POST, ["v1", "tasks", id, "split"]) => lifecycle::split(ctx, req, id).await,
        (Method::POST, ["v1", "tasks", id, "cancel"]) => lifecycle::cancel(ctx, req, id).await,
        (Method::POST, ["v1", "tasks", id, "retry"]) => lifecycle::retry(ctx, req, id).await,
        (Method::GET, ["v1", "tasks", id, "output"]) => worker::output(ctx, req, id).await,

        (Method::POST, ["v1", "promotions"]) => promotions::promote(ctx, req).await,

        (Method::GET, ["v1", "worker", "prompt"]) => worker::prompt(ctx, req).await,
        (Method::POST, ["v1", "worker", "artifact"]) => worker::stage(ctx, req).await,
        (Method::POST, ["v1", "worker", "submit"]) => worker::submit(ctx, req).await,
        (Method::GET, ["v1", "worker", "nouns", ns, st, key]) => {
            worker::noun(ctx, req, [ns, st, key]).await
        }
        (Method::POST, ["v1", "worker", "heartbeat"]) => worker::heartbeat(ctx, req).await,
        (Method::GET, ["v1", "worker", "parts"]) => worker::parts(ctx, req).await,
        (Method::GET, ["v1", "worker", "consumes", name]) => worker::consumed(ctx, req, name).await,

        (Method::POST, ["mcp"]) => mcp::serve(ctx, req).await,

        _ => Err(no_route()),
    }
}

fn no_route() -> ApiError {
    ApiError::new(
        ErrorCode::NoRoute,
        "no such route; see the README and GET /v1/openapi.json for the API",
    )
}
