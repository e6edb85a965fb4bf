//! How an API answer becomes a tool result: a 2xx JSON body is the
//! result's structured content; an error answer is a tool error
//! (`isError: true`) carrying the HTTP status and the API's
//! `{code, message, details}`, so a model reads the same error a program
//! would.

use base64::Engine;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

use super::ApiReply;
use crate::wire::error::ApiError;

/// A JSON answer as a tool result.
pub fn json(sent: Result<ApiReply, String>) -> CallToolResult {
    let reply = match sent {
        Ok(r) if r.status.is_success() => r,
        Ok(r) => return failure(&r),
        Err(why) => return unreachable(&why),
    };
    match serde_json::from_slice::<Value>(&reply.body) {
        Ok(value) if value.is_object() => CallToolResult::structured(value),
        Ok(value) => CallToolResult::structured(json!({"value": value})),
        Err(_) => CallToolResult::success(vec![ContentBlock::text(
            String::from_utf8_lossy(&reply.body).into_owned(),
        )]),
    }
}

/// A noun's bytes as a tool result: its version, hash and media type, and
/// the body as JSON, text, or base64 for other bytes.
pub fn noun(sent: Result<ApiReply, String>) -> CallToolResult {
    let reply = match sent {
        Ok(r) if r.status.is_success() => r,
        Ok(r) => return failure(&r),
        Err(why) => return unreachable(&why),
    };
    let header = |name: &str| reply.headers.get(name).and_then(|v| v.to_str().ok());
    let media_type = header("content-type").unwrap_or("application/octet-stream");
    let mut out = json!({
        "version": header("x-tessera-version").and_then(|v| v.parse::<u64>().ok()),
        "sha256": header("x-tessera-sha256"),
        "media_type": media_type,
    });
    let as_json = media_type
        .contains("json")
        .then(|| serde_json::from_slice::<Value>(&reply.body).ok())
        .flatten();
    match (as_json, std::str::from_utf8(&reply.body)) {
        (Some(value), _) => out["body"] = value,
        (None, Ok(text)) => out["text"] = json!(text),
        (None, Err(_)) => {
            let b64 = base64::engine::general_purpose::STANDARD.encode(&reply.body);
            out["body_base64"] = json!(b64);
        }
    }
    CallToolResult::structured(out)
}

/// An error answer as a tool error.
fn failure(reply: &ApiReply) -> CallToolResult {
    let body: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let e = &body["error"];
    let code = e["code"].as_str().unwrap_or("unknown");
    let message = e["message"].as_str().map_or_else(
        || String::from_utf8_lossy(&reply.body).into_owned(),
        str::to_string,
    );
    tool_error(json!({
        "status": reply.status.as_u16(),
        "error": {"code": code, "message": message, "details": e["details"]},
    }))
}

/// The daemon could not be reached at all.
fn unreachable(why: &str) -> CallToolResult {
    tool_error(json!({
        "status": null,
        "error": {"code": "unreachable", "message": why, "details": null},
    }))
}

/// A request the API's rules refuse before it is sent (tool arguments
/// read as the API reads a body): the same status, code and details.
pub fn refused(e: &ApiError) -> CallToolResult {
    let mut value = e.body();
    value["status"] = json!(e.status().as_u16());
    tool_error(value)
}

/// A tool error whose text is `<status> <code>: <message>` and whose
/// structured content is `value`.
fn tool_error(value: Value) -> CallToolResult {
    let status = value["status"]
        .as_u64()
        .map_or("-".into(), |s| s.to_string());
    let text = format!(
        "{status} {}: {}",
        value["error"]["code"].as_str().unwrap_or("unknown"),
        value["error"]["message"].as_str().unwrap_or_default()
    );
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}
