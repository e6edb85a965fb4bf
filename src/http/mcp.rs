//! `/mcp`: the MCP server (`crate::mcp`) over streamable HTTP, mounted in
//! the routing table without a web framework. rmcp's tower service runs
//! stateless (no sessions: every POST stands alone and is answered as
//! JSON), and each tool call goes through this daemon's own routing table
//! in-process ([`InProcess`]) with the `/mcp` request's `Authorization`
//! and peer address, so auth, grants, throttling, limits, metrics and
//! error codes are exactly the HTTP API's.

use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower_service::Service;

use super::body::Chunks;
use super::error::{ApiError, ErrorCode};
use super::request::Req;
use super::{Ctx, Resp, routes};
use crate::mcp::{Api, ApiCall, ApiReply, Credentials, Peer, Pending, Server};
use crate::wire::json::parse_json;

/// Chunks of an answer held for a slow reader.
const CHUNK_DEPTH: usize = 16;

/// `POST /mcp` (and the other methods streamable HTTP defines).
pub async fn serve(ctx: &Arc<Ctx>, mut req: Req) -> Result<Resp, ApiError> {
    let limit = ctx.limits.max_body_bytes.max(ctx.limits.worker_body_bytes);
    let body = req.bytes(limit).await?;
    req.parsing(&body)?;
    let mut parts = req.parts.clone();
    parts.extensions.insert(Peer(req.peer()));
    accept_both(&mut parts.headers);
    let api: Arc<dyn Api> = Arc::new(InProcess(ctx.clone()));
    let server = Server::new(api, Credentials::default());
    // Every tool call needs the caller's own key or handle, as every API
    // route does, so the Host check that guards credential-less local
    // servers from DNS rebinding adds nothing here; the daemon answers
    // on whatever name it is reached by.
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(limit)
        .disable_allowed_hosts();
    let mut service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let sent_json = is_json(&parts.headers);
    let answer = service
        .call(http::Request::from_parts(parts, Full::new(body.clone())))
        .await
        .unwrap_or_else(|never| match never {});
    let (parts, mut answer) = answer.into_parts();
    if parts.status.is_client_error() && !is_json(&parts.headers) {
        return Err(refusal(parts.status, answer, &body, sent_json).await);
    }
    let (tx, out) = Chunks::channel(CHUNK_DEPTH);
    tokio::spawn(async move {
        while let Some(Ok(frame)) = answer.frame().await {
            if let Ok(data) = frame.into_data()
                && tx.send(data).await.is_err()
            {
                break;
            }
        }
    });
    Ok(Resp::from_parts(parts, out))
}

/// Streamable HTTP asks a client to accept both JSON and SSE; one that
/// names neither (no `Accept`, or `*/*`) is taken to accept both, since
/// every answer here is JSON.
fn accept_both(headers: &mut http::HeaderMap) {
    let named = headers.get_all(http::header::ACCEPT).iter().any(|v| {
        let v = v.to_str().unwrap_or_default();
        v.contains("application/json") || v.contains("text/event-stream")
    });
    if !named {
        headers.insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static("application/json, text/event-stream"),
        );
    }
}

/// Whether a head says its body is JSON.
fn is_json(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"))
}

/// The SDK's own refusal of a request it cannot take (a plain-text 4xx)
/// as this API's error body. A body the SDK could not read as JSON gets
/// the answer the API gives that body (`too_deep` past the API's depth
/// limit, `malformed_json`), so a client sees one rule on every route; a
/// JSON body that is not a JSON-RPC message is `invalid_body`, and only a
/// body sent as another media type is `invalid_media_type`.
async fn refusal<B: hyper::body::Body + Unpin>(
    status: http::StatusCode,
    answer: B,
    sent: &[u8],
    sent_json: bool,
) -> ApiError {
    let code = if status == http::StatusCode::UNSUPPORTED_MEDIA_TYPE {
        if let Err(e) = parse_json::<serde::de::IgnoredAny>(sent) {
            return e;
        }
        if sent_json {
            ErrorCode::InvalidBody
        } else {
            ErrorCode::InvalidMediaType
        }
    } else {
        ErrorCode::InvalidBody
    };
    let text = match answer.collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(_) => String::new(),
    };
    ApiError::new(
        code,
        format!("not an MCP request this server takes ({status}): {text}"),
    )
    .with(serde_json::json!({"mcp_status": status.as_u16()}))
}

/// The daemon's own routing table as an [`Api`]: a tool call becomes a
/// request with the `/mcp` caller's peer address, routed in this process.
struct InProcess(Arc<Ctx>);

impl Api for InProcess {
    fn send(&self, call: ApiCall, origin: Option<&http::request::Parts>) -> Pending {
        let ctx = self.0.clone();
        let peer = origin.and_then(|p| p.extensions.get::<Peer>()).copied();
        Box::pin(async move {
            let Some(Peer(peer)) = peer else {
                return Err("an in-process call needs the /mcp caller's address".into());
            };
            let mut head = http::Request::builder().method(call.method).uri(call.path);
            if let Some(bearer) = &call.bearer {
                head = head.header(http::header::AUTHORIZATION, format!("Bearer {bearer}"));
            }
            let (parts, ()) = head.body(()).map_err(|e| e.to_string())?.into_parts();
            let body = call.body.unwrap_or_default();
            let req = Req::whole(parts, body, peer, ctx.bodies.clone());
            let resp = routes::answer(ctx, req).await;
            let (parts, body) = resp.into_parts();
            let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
            Ok(ApiReply {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        })
    }
}
