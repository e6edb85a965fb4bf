//! A Tessera task as an MCP task (the Tasks extension,
//! `io.modelcontextprotocol/tasks`): the MCP task id is the Tessera task
//! id, and every `tasks/get` reads the task's durable state from the API
//! with the caller's key, so the MCP view survives restarts and agrees
//! with every other client's. States map as:
//!
//! | Tessera | MCP |
//! | --- | --- |
//! | pending, queued, claimed, waiting | working |
//! | parked | input_required (the park's reason as the status message) |
//! | succeeded | completed (the task and its output as the result) |
//! | failed | failed (the reason as the error) |
//! | cancelled | cancelled |

use http::Method;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResult, DetailedTask, ErrorCode, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use serde_json::{Value, json};

use super::{ApiReply, Gateway, Holder};
use crate::http::wire::TaskView;
use crate::queue::TaskState;

/// How often a client should poll a working task, in milliseconds.
const POLL_INTERVAL_MS: u64 = 2000;

/// `tasks/get`: the task's state now.
pub async fn get(gw: &Gateway<'_>, id: &str) -> Result<GetTaskResult, McpError> {
    let id = segment(id);
    let view: TaskView = read(gw, Method::GET, format!("/v1/tasks/{id}")).await?;
    let payload = match view.state {
        TaskState::Pending | TaskState::Queued | TaskState::Claimed | TaskState::Waiting => {
            TaskPayload::Working
        }
        TaskState::Parked => TaskPayload::InputRequired {
            input_requests: Default::default(),
        },
        TaskState::Succeeded => {
            let output: Value = read(gw, Method::GET, format!("/v1/tasks/{id}/output")).await?;
            let result = CallToolResult::structured(json!({"task": view, "output": output}));
            TaskPayload::Completed {
                result: object(serde_json::to_value(result)),
            }
        }
        TaskState::Failed => TaskPayload::Failed {
            error: object(Ok(json!({
                "code": ErrorCode::INTERNAL_ERROR.0,
                "message": view.reason.clone().unwrap_or_else(|| "the task failed".into()),
                "data": {"task_id": view.task_id, "receipts": view.receipts},
            }))),
        },
        TaskState::Cancelled => TaskPayload::Cancelled,
    };
    let mut task = Task::new(
        view.task_id.to_string(),
        TaskStatus::Working,
        view.created_at.to_string(),
        view.updated_at.to_string(),
    )
    .with_poll_interval_ms(POLL_INTERVAL_MS);
    task.status_message = match (&view.park, &view.reason) {
        (Some(park), _) => Some(format!("parked: {}", park.reason)),
        (None, Some(reason)) => Some(reason.clone()),
        (None, None) => Some(view.state.as_str().to_string()),
    };
    Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
}

/// `tasks/cancel`: cancels the Tessera task (its requester or an admin).
pub async fn cancel(gw: &Gateway<'_>, id: &str) -> Result<(), McpError> {
    let path = format!("/v1/tasks/{}/cancel", segment(id));
    let _: Value = read(gw, Method::POST, path).await?;
    Ok(())
}

/// A task id as one path segment, whatever the client sent.
fn segment(id: &str) -> String {
    percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn object(value: Result<Value, serde_json::Error>) -> JsonObject {
    match value {
        Ok(Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

/// A key route's JSON answer; an error answer is a JSON-RPC error (a
/// `tasks/*` method has no tool result to carry it): `404` and other
/// client errors are invalid params, with the API's status and body as data.
async fn read<T: serde::de::DeserializeOwned>(
    gw: &Gateway<'_>,
    method: Method,
    path: String,
) -> Result<T, McpError> {
    let body = (method == Method::POST).then(|| "{}".into());
    let reply: ApiReply = gw
        .send(Holder::Key, None, method, path, body)
        .await
        .map_err(|why| McpError::internal_error(why, None))?;
    if !reply.status.is_success() {
        let error: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
        let data = json!({"status": reply.status.as_u16(), "error": error["error"]});
        let message = error["error"]["message"]
            .as_str()
            .unwrap_or("refused")
            .to_string();
        return Err(if reply.status.is_client_error() {
            McpError::invalid_params(message, Some(data))
        } else {
            McpError::internal_error(message, Some(data))
        });
    }
    serde_json::from_slice(&reply.body).map_err(|e| McpError::internal_error(e.to_string(), None))
}
