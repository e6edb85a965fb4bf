//! The router: each request is served by the one [`Route`] of [`ROUTES`]
//! (`table.rs`, where each endpoint is declared once) whose method and
//! path template fit it. A path some route serves under another method
//! answers 405 with `Allow`; any other path answers 404 `no_route`.
//! Handlers live in the modules named after what they serve.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use futures_util::FutureExt;
use http::{HeaderValue, Method, header};
use hyper::body::Incoming;

use super::error::{ApiError, ErrorCode};
use super::openapi::{Auth, Operation, Schemas};
use super::request::Req;

use super::{Ctx, Resp, headers};
use crate::paths::Endpoint;

mod table;

pub use table::ROUTES;

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
    let found = req.segments().map(|segs| find(&method, segs));
    let template = match &found {
        Ok(Found::Route(route, _)) => route.endpoint.path,
        _ => NO_ROUTE,
    };
    let mut allow = None;
    let served = async {
        match found? {
            Found::Route(route, params) => (route.handler)(ctx.clone(), req, params).await,
            Found::OtherMethods(methods) => {
                let listed: Vec<&str> = methods.iter().map(Method::as_str).collect();
                let error = ApiError::new(
                    ErrorCode::MethodNotAllowed,
                    format!(
                        "this path takes {} only; see GET /v1/openapi.json",
                        listed.join(", ")
                    ),
                )
                .with(serde_json::json!({ "allow": listed }));
                allow = Some(listed.join(", "));
                Err(error)
            }
            Found::Nothing => Err(no_route()),
        }
    };
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
    if let Some(allow) = allow.and_then(|a| HeaderValue::from_str(&a).ok()) {
        resp.headers_mut().insert(header::ALLOW, allow);
    }
    headers::protect(&mut resp);
    let status = resp.status().as_u16();
    ctx.metrics
        .request(&method, template, status, started.elapsed());
    resp
}

/// What a handler answers: a response or an API error.
pub type Served = Pin<Box<dyn Future<Output = Result<Resp, ApiError>> + Send>>;

/// A route's handler: the daemon's context, the request, and the path's
/// `{name}` segments.
pub type Handler = fn(Arc<Ctx>, Req, Params) -> Served;

/// What a route's OpenAPI operation takes and answers beyond its method,
/// path, credential and summary: its query, body and success answers.
pub(crate) type Describe = fn(Operation, &mut Schemas) -> Operation;

/// One endpoint of the API, declared once: its method and path template
/// (a `paths` constant, which clients build paths from), the
/// credential it takes, a one-line summary, the handler that serves it and
/// what the OpenAPI document says it takes and answers. The router, `/metrics`'
/// route label and the document all read this one declaration.
pub struct Route {
    /// Its method and path template (`paths`).
    pub endpoint: &'static Endpoint,
    /// The credential it takes.
    pub auth: Auth,
    /// One line on what it does.
    pub summary: &'static str,
    /// Serves it.
    handler: Handler,
    /// Its query, body and answers, for the document.
    describe: Describe,
}

impl Route {
    const fn new(
        endpoint: &'static Endpoint,
        auth: Auth,
        summary: &'static str,
        handler: Handler,
        describe: Describe,
    ) -> Route {
        Route {
            endpoint,
            auth,
            summary,
            handler,
            describe,
        }
    }

    /// The route's OpenAPI operation, its schemas filed in `s`.
    pub(crate) fn operation(&self, s: &mut Schemas) -> Operation {
        let e = self.endpoint;
        let op = Operation::new(e.method.clone(), e.path, self.auth, self.summary);
        (self.describe)(op, s)
    }
}

/// The path of one request, matched to a route: its `{name}` segments.
pub struct Params {
    /// The route's template, split once into segments ([`BY_LENGTH`]).
    template: &'static [&'static str],
    segments: Vec<String>,
}

impl Params {
    /// The segment the template names `{name}`. A name the template does
    /// not have is a bug in the table, which every route's tests reach.
    fn get(&self, name: &str) -> &str {
        self.template
            .iter()
            .zip(&self.segments)
            .find(|(t, _)| t.strip_prefix('{').and_then(|t| t.strip_suffix('}')) == Some(name))
            .map(|(_, s)| s.as_str())
            .unwrap_or_else(|| {
                panic!(
                    "route /{} has no {{{name}}} segment",
                    self.template.join("/")
                )
            })
    }

    /// A noun route's namespace, store and key.
    fn noun(&self) -> [&str; 3] {
        [self.get("namespace"), self.get("store"), self.get("key")]
    }
}

/// A route and its template's segments.
type Split = (&'static Route, Vec<&'static str>);

/// [`ROUTES`] split into segments once, filed by segment count, so a
/// request is checked against the few that could fit.
static BY_LENGTH: LazyLock<HashMap<usize, Vec<Split>>> = LazyLock::new(|| {
    let mut by: HashMap<usize, Vec<_>> = HashMap::new();
    for r in ROUTES {
        let segs: Vec<&str> = r.endpoint.path.trim_matches('/').split('/').collect();
        by.entry(segs.len()).or_default().push((r, segs));
    }
    by
});

/// What the table has for one request.
enum Found {
    /// The first route listed for the method and path.
    Route(&'static Route, Params),
    /// No route for the method, but these methods serve the path.
    OtherMethods(Vec<Method>),
    /// No route serves the path.
    Nothing,
}

/// The route for `method` on the path split into `segs` (a `{name}`
/// segment of a template stands for any one segment).
fn find(method: &Method, segments: Vec<String>) -> Found {
    let mut others = Vec::new();
    for (route, t) in BY_LENGTH.get(&segments.len()).into_iter().flatten() {
        let fits = t
            .iter()
            .zip(&segments)
            .all(|(t, s)| t.starts_with('{') || t == s);
        if !fits {
            continue;
        }
        let e = route.endpoint;
        if e.method == method {
            let params = Params {
                template: t,
                segments,
            };
            return Found::Route(route, params);
        }
        if !others.contains(&e.method) {
            others.push(e.method.clone());
        }
    }
    if others.is_empty() {
        Found::Nothing
    } else {
        Found::OtherMethods(others)
    }
}

/// The route a request no route serves is counted under in `/metrics`
/// (any other is counted under its route's template, never its path).
pub const NO_ROUTE: &str = "(no route)";

fn no_route() -> ApiError {
    ApiError::new(
        ErrorCode::NoRoute,
        "no such route; see the README and GET /v1/openapi.json for the API",
    )
}
