//! The Model Context Protocol server: Tessera's worker and agent calls as
//! MCP tools, over stdio (`tessera mcp`, a client of a running daemon) and
//! over streamable HTTP (`/mcp` in the daemon, `http/mcp.rs`).
//!
//! One mechanism serves both transports: a tool builds the same request
//! the HTTP API takes and sends it through an [`Api`] with the caller's
//! credential, so authentication, grants, limits and error codes are the
//! API's own. `tessera mcp` sends it over HTTP ([`remote::Remote`]); the
//! daemon hands it to its own routing table in-process, with the `/mcp`
//! caller's peer address. This module owns the tool list and their input
//! types (`tools.rs`), how an answer becomes a tool result (`reply.rs`)
//! and the MCP Tasks view of a Tessera task (`tasks.rs`); it knows no
//! daemon internals.
//!
//! A call whose client has gone is dropped, as the HTTP server drops a
//! request whose connection closed: [`Server`] races every tool call and
//! `tasks/*` request against its cancellation (`notifications/cancelled` over stdio; over
//! `/mcp`, the request's connection closing, since a stateless server has
//! no session to tie a later notification to). So a `claim` still waiting
//! claims nothing, and one made but not yet answered is released by the
//! API's own handover (`queue::Handover`). Over stdio, a `claim` also
//! stops waiting when the client's input ends (`input.rs`).
//!
//! Both transports answer a request alike. `enqueue` answers an MCP task
//! when the request itself declares the Tasks extension in its `_meta`
//! (`io.modelcontextprotocol/clientCapabilities`, as every 2026-07-28
//! request does), and a plain tool result otherwise; a declaration made
//! only at `initialize` is not used, since `/mcp` is stateless and keeps
//! none.
//!
//! Credentials: tools for an agent holding a key (`claim`, `enqueue`,
//! `get_task`, `put_noun`) send the key; tools for a worker holding a
//! `wh-` handle send the `handle` argument when given, else the handle the
//! server was started with. Over HTTP the request's `Authorization` bearer
//! stands in for both.

mod input;
mod remote;
mod reply;
mod tasks;
mod tools;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Method, StatusCode};
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ErrorCode, GetTaskParams,
    GetTaskResult, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};

use crate::wire::error::{ApiError, ErrorCode as ApiErrorCode};

pub use input::{InputEnd, Watched, watch_input};
pub use remote::Remote;

/// The instructions an MCP client shows its model on connecting.
const INSTRUCTIONS: &str = "Tessera routes agent work. With a key: `enqueue` a task, `claim` \
the next task of a queue (the answer carries a `wh-` handle), `get_task`, `put_noun`. With a \
handle: `get_prompt` (brief, directive, contract, pinned inputs), `read_noun` for a pin the \
task names, `heartbeat` to keep the lease alive during long work, `stage_part`, `list_parts`, \
then `submit` the final body, which ends the attempt.";

/// One HTTP API request a tool makes.
#[derive(Clone, Debug)]
pub struct ApiCall {
    /// Method.
    pub method: Method,
    /// Path and query, such as `/v1/worker/artifact?name=draft.md`.
    pub path: String,
    /// The credential sent as `Authorization: Bearer`.
    pub bearer: Option<String>,
    /// A body (JSON for key routes, raw bytes for parts and submits).
    pub body: Option<Bytes>,
}

/// The API's answer, fully read.
#[derive(Clone, Debug)]
pub struct ApiReply {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: Bytes,
}

/// A boxed future of an [`Api`] call; `Err` says why the API could not be
/// reached at all.
pub type Pending = Pin<Box<dyn Future<Output = Result<ApiReply, String>> + Send>>;

/// How tool calls reach the HTTP API.
pub trait Api: Send + Sync + 'static {
    /// Sends `call`; `origin` is the head of the `/mcp` request that
    /// carried the tool call (absent over stdio).
    fn send(&self, call: ApiCall, origin: Option<&Parts>) -> Pending;
}

/// The peer address of an `/mcp` request, kept in its head's extensions so
/// an in-process call is throttled and logged as that peer's.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

/// The credentials a server was started with (stdio); over HTTP the
/// request's bearer is used instead.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    /// A key, for `claim`, `enqueue`, `get_task` and `put_noun`.
    pub key: Option<String>,
    /// A `wh-` handle (or token), for the worker tools.
    pub handle: Option<String>,
}

/// The MCP server: a tool list over an [`Api`]. Cheap to clone.
#[derive(Clone)]
pub struct Server {
    api: Arc<dyn Api>,
    credentials: Credentials,
    input: InputEnd,
}

impl Server {
    /// A server sending its tool calls through `api`, with `credentials`
    /// where a request carries none.
    pub fn new(api: Arc<dyn Api>, credentials: Credentials) -> Server {
        Server {
            api,
            credentials,
            input: InputEnd::never(),
        }
    }

    /// The same server, reading its requests from the input whose end
    /// `input` tells: waiting claims stop there.
    pub fn reading(self, input: InputEnd) -> Server {
        Server { input, ..self }
    }

    /// The gateway a tool call of `context` sends through.
    fn gateway<'a>(&'a self, context: &'a RequestContext<RoleServer>) -> Gateway<'a> {
        let origin = context.extensions.get::<Parts>();
        Gateway {
            api: &*self.api,
            origin,
            bearer: origin.and_then(bearer),
            credentials: &self.credentials,
            input: &self.input,
        }
    }
}

/// Runs a request's `work` unless its client cancels it first; then the
/// work is dropped mid-way, as the HTTP server drops a request whose
/// client has gone (rmcp sends no answer to a cancelled request).
async fn unless_cancelled<T>(
    context: &RequestContext<RoleServer>,
    work: impl Future<Output = Result<T, McpError>>,
) -> Result<T, McpError> {
    tokio::select! {
        biased;
        out = work => out,
        () = context.ct.cancelled() => Err(McpError::new(
            ErrorCode::INVALID_REQUEST,
            "the request was cancelled",
            None,
        )),
    }
}

/// The bearer credential of a request head, read by the API's one rule
/// (`http::request::bearer`); a malformed header sends none, which the
/// API answers with the same `401 unauthenticated`.
fn bearer(parts: &Parts) -> Option<String> {
    crate::wire::bearer::bearer(&parts.headers)
        .ok()
        .flatten()
        .map(str::to_string)
}

/// Which credential a tool sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holder {
    /// An issued key.
    Key,
    /// A worker handle.
    Handle,
}

/// One tool call's way to the API, with its credentials resolved.
struct Gateway<'a> {
    api: &'a dyn Api,
    origin: Option<&'a Parts>,
    bearer: Option<String>,
    credentials: &'a Credentials,
    /// The end of the session's input (never, over `/mcp`).
    input: &'a InputEnd,
}

impl Gateway<'_> {
    /// Sends a request as `holder`; a worker tool's `handle` argument wins.
    async fn send(
        &self,
        holder: Holder,
        handle: Option<&str>,
        method: Method,
        path: String,
        body: Option<Bytes>,
    ) -> Result<ApiReply, String> {
        let configured = match holder {
            Holder::Key => &self.credentials.key,
            Holder::Handle => &self.credentials.handle,
        };
        let bearer = match holder {
            Holder::Handle => handle.map(str::to_string),
            Holder::Key => None,
        }
        .or_else(|| self.bearer.clone())
        .or_else(|| configured.clone());
        if let Some(problem) = bearer
            .as_deref()
            .and_then(crate::client::credential_problem)
        {
            return Ok(malformed(holder, &problem));
        }
        let call = ApiCall {
            method,
            path,
            bearer,
            body,
        };
        self.api.send(call, self.origin).await
    }
}

/// The API's answer to a credential no header can carry, made here
/// because it cannot be sent: `401 unauthenticated`, naming the
/// credential (key or handle) and its bad character, never its text.
fn malformed(holder: Holder, problem: &str) -> ApiReply {
    let what = match holder {
        Holder::Key => "key",
        Holder::Handle => "handle",
    };
    let e = ApiError::new(
        ApiErrorCode::Unauthenticated,
        format!("the {what} is malformed: {problem}; a credential is printable ASCII"),
    );
    ApiReply {
        status: e.status(),
        headers: HeaderMap::new(),
        body: Bytes::from(e.body().to_string()),
    }
}

impl rmcp::ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("tessera", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools::list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // The request's own `_meta` decides, on both transports: a stateless
        // `/mcp` keeps nothing of `initialize`, so a declaration made only
        // there would answer a task over stdio and a plain result over HTTP.
        let wants_task = context
            .meta
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        let args = request.arguments.unwrap_or_default();
        let gw = self.gateway(&context);
        unless_cancelled(&context, tools::call(&gw, &request.name, args, wants_task)).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let gw = self.gateway(&context);
        unless_cancelled(&context, tasks::get(&gw, &request.task_id)).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let gw = self.gateway(&context);
        unless_cancelled(&context, tasks::cancel(&gw, &request.task_id)).await
    }
}
