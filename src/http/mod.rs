//! The hyper 1 server: accept loop, one connection task per client,
//! graceful shutdown. This layer only parses, authenticates and maps
//! errors; the rules live in `auth`, `store` and the other domain modules.
//!
//! Every answer carries `nosniff` and, unless it is one of the overview
//! site's files, a sandboxing Content-Security-Policy (`headers.rs`).
//!
//! Bounds on what clients can hold: a request head must arrive, and a
//! kept-alive connection must send its next one, within
//! `[limits] header_timeout_ms` (hyper's header read timeout, which also
//! runs between requests); the number of open connections is capped
//! (`conns.rs`); request bodies in flight share one memory budget
//! (`budget.rs`).
//!
//! Stopping: when the shutdown future resolves, the listener is closed,
//! long-poll claims answer `204` at once, connections with no request in
//! flight (idle, or halfway through sending a head) are closed, and the
//! requests in flight get [`DRAIN_TIMEOUT`] to finish before their
//! connections are closed too.

mod batch;
pub mod body;
pub mod budget;
pub mod conns;
pub mod error;
mod events;
pub mod headers;
mod keys;
mod lifecycle;
mod mcp;
mod noun_list;
mod nouns;
pub mod openapi;
mod ops;
mod promotions;
mod queues;
pub mod request;
pub mod routes;
mod site;
mod status;
mod tasks;
mod worker;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use serde::Serialize;
use tokio::net::TcpListener;

use crate::auth::throttle::Throttle;
use crate::auth::token::Minter;
use crate::auth::{Keyring, Principal};
use crate::config::Limits;
use crate::queue::Queue;
use crate::store::Store;
use crate::worker::order::TaskLocks;
use budget::BodyBudget;
use conns::{Admission, Connections};
use error::ApiError;
use request::Req;

/// A response.
pub type Resp = Response<body::Body>;

/// How long shutdown waits for in-flight requests before closing their
/// connections. With the journal flush after it, the daemon is gone
/// within 5 s of the signal.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

/// What every handler can reach: the domain handles and the limits.
#[derive(Debug)]
pub struct Ctx {
    /// The noun and object store.
    pub store: Store,
    /// The key index.
    pub keyring: Keyring,
    /// The task queue.
    pub queue: Queue,
    /// What `GET /metrics` shows.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// What `GET /v1/events` streams.
    pub events: Arc<crate::events::Events>,
    /// Worker token minting and verification.
    pub tokens: Minter,
    /// Body size limits and failure budgets.
    pub limits: Limits,
    /// The memory budget request bodies in flight share.
    pub bodies: BodyBudget,
    /// The open connections, their cap and the refused and evicted counts.
    pub connections: Arc<Connections>,
    /// The failed worker credential throttle.
    pub throttle: Throttle,
    /// Worker calls on one task take turns.
    pub task_locks: TaskLocks,
}

impl Ctx {
    /// Authenticates the request's bearer key.
    pub async fn authenticate(&self, req: &Req) -> Result<Principal, ApiError> {
        Ok(self.keyring.authenticate(req.bearer()?).await?)
    }

    /// Runs blocking store work on the blocking pool.
    pub async fn blocking<T, E>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, E> + Send + 'static,
    ) -> Result<T, ApiError>
    where
        T: Send + 'static,
        E: Into<ApiError> + Send + 'static,
    {
        self.store
            .blocking(move |store| f(store).map_err(Into::into))
            .await
    }
}

/// A JSON response.
pub fn json_response<T: Serialize>(status: StatusCode, body: &T) -> Resp {
    // Room for a claim's answer, so it is written without regrowing.
    let mut bytes = Vec::with_capacity(2048);
    serde_json::to_writer(&mut bytes, body).expect("responses serialize");
    let mut resp = Response::new(body::full(bytes));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A response with no body.
pub fn empty(status: StatusCode) -> Resp {
    let mut resp = Response::new(body::full(Bytes::new()));
    *resp.status_mut() = status;
    resp
}

/// Serves connections from `listener` until `shutdown` resolves, then stops
/// accepting, ends long polls, closes idle connections and gives the
/// requests in flight [`DRAIN_TIMEOUT`] to finish.
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>, shutdown: impl Future<Output = ()>) {
    let conns = ctx.connections.clone();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(ctx.limits.header_timeout_ms));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let slot = match conns.admit() {
                    Admission::Admitted(slot) => slot,
                    Admission::Full => {
                        conns::refuse(stream);
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let ctx = ctx.clone();
                let activity = slot.activity();
                let service = service_fn(move |req| {
                    let ctx = ctx.clone();
                    let in_flight = activity.begin();
                    async move {
                        let resp = routes::dispatch(ctx, req, peer).await;
                        drop(in_flight);
                        Ok::<_, Infallible>(resp)
                    }
                });
                let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
                let id = slot.id();
                let task = tokio::spawn(async move {
                    let _slot = slot;
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
                conns.watch(id, task.abort_handle());
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    ctx.queue.end_long_polls();
    ctx.events.close();
    let closed = conns.close_idle();
    tracing::info!(
        closed_idle = closed,
        in_flight = conns.open(),
        "stopped accepting; draining requests in flight"
    );
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(DRAIN_TIMEOUT) => {
            let cut = conns.close_all();
            tracing::warn!(cut, "requests in flight did not finish within {DRAIN_TIMEOUT:?}; closed their connections");
        }
    }
}
