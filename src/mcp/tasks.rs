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
//! | failed | failed (the reason, the last receipt's failed checks and note as the error) |
//! | cancelled | cancelled |

use http::Method;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResult, DetailedTask, ErrorCode, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiReply, Gateway, Holder};
use crate::paths::{self, Endpoint};
use crate::queue::receipt::CheckOutcome;
use crate::queue::{Receipt, TaskState};
use crate::store::Sha256;
use crate::wire::TaskView;

/// How often a client should poll a working task, in milliseconds.
const POLL_INTERVAL_MS: u64 = 2000;

/// `tasks/get`: the task's state now.
pub async fn get(gw: &Gateway<'_>, id: &str) -> Result<GetTaskResult, McpError> {
    let view: TaskView = read(gw, &paths::TASK_GET, id).await?;
    let mut failed = None;
    let payload = match view.state {
        TaskState::Pending | TaskState::Queued | TaskState::Claimed | TaskState::Waiting => {
            TaskPayload::Working
        }
        TaskState::Parked => TaskPayload::InputRequired {
            input_requests: Default::default(),
        },
        TaskState::Succeeded => {
            let output: Value = read(gw, &paths::TASK_OUTPUT, id).await?;
            let result = CallToolResult::structured(json!({"task": view, "output": output}));
            TaskPayload::Completed {
                result: object(serde_json::to_value(result)),
            }
        }
        TaskState::Failed => {
            let error = failure(gw, id, &view).await;
            failed = error["message"].as_str().map(str::to_string);
            TaskPayload::Failed {
                error: object(Ok(error)),
            }
        }
        TaskState::Cancelled => TaskPayload::Cancelled,
    };
    let mut task = Task::new(
        view.task_id.to_string(),
        TaskStatus::Working,
        view.created_at.to_string(),
        view.updated_at.to_string(),
    )
    .with_poll_interval_ms(POLL_INTERVAL_MS);
    task.status_message = match (&view.park, failed, &view.reason) {
        (Some(park), _, _) => Some(format!("parked: {}", park.reason)),
        (None, Some(failed), _) => Some(failed),
        (None, None, Some(reason)) => Some(reason.clone()),
        (None, None, None) => Some(view.state.as_str().to_string()),
    };
    Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
}

/// The receipts route's answer, as far as a failure's error reads it.
#[derive(Deserialize)]
struct Receipts {
    receipts: Vec<Listed>,
}

#[derive(Deserialize)]
struct Listed {
    sha256: Sha256,
    receipt: Receipt,
}

/// A failed task's error: why it failed (the task's reason, else its
/// last receipt's failure or the worker's note) and the contract checks
/// that failed, in the message and as data. The API serves a task's
/// receipts only as one list, so the list is read for its last; when
/// that read fails, the error says what the task's view alone says
/// (`receipt_unread` tells why), rather than failing `tasks/get`.
async fn failure(gw: &Gateway<'_>, id: &str, view: &TaskView) -> Value {
    let (last, unread) = if view.receipts.is_empty() {
        (None, None)
    } else {
        match read::<Receipts>(gw, &paths::TASK_RECEIPTS, id).await {
            Ok(list) => (list.receipts.into_iter().last(), None),
            Err(e) => (None, Some(e.message.into_owned())),
        }
    };
    let receipt = last.as_ref().map(|l| &l.receipt);
    let failed_checks: Vec<&CheckOutcome> = receipt
        .and_then(|r| r.checks.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|c| !c.ok)
        .collect();
    let note = receipt.and_then(|r| r.note.clone());
    let reason = view
        .reason
        .clone()
        .or_else(|| receipt.and_then(|r| r.failure.clone()))
        .or_else(|| {
            note.as_ref()
                .map(|n| format!("the worker reported failure: {n}"))
        })
        .unwrap_or_else(|| "the worker reported failure".into());
    let mut message = format!("the task failed: {reason}");
    if !failed_checks.is_empty() {
        let checks: Vec<String> = failed_checks
            .iter()
            .map(|c| format!("{} ({})", c.name, c.detail))
            .collect();
        message.push_str(&format!("; failed checks: {}", checks.join(", ")));
    }
    let mut data = json!({
        "task_id": view.task_id,
        "reason": reason,
        "failed_checks": failed_checks,
        "note": note,
        "receipt": last.as_ref().map(|l| l.sha256).or(view.receipts.last().copied()),
        "receipts": view.receipts,
    });
    if let Some(why) = unread {
        data["receipt_unread"] = json!(why);
    }
    json!({
        "code": ErrorCode::INTERNAL_ERROR.0,
        "message": message,
        "data": data,
    })
}

/// `tasks/cancel`: cancels the Tessera task (its requester or an admin).
pub async fn cancel(gw: &Gateway<'_>, id: &str) -> Result<(), McpError> {
    let _: Value = read(gw, &paths::TASK_CANCEL, id).await?;
    Ok(())
}

fn object(value: Result<Value, serde_json::Error>) -> JsonObject {
    match value {
        Ok(Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

/// A key route's JSON answer for the task `id`; an error answer is a
/// JSON-RPC error (a `tasks/*` method has no tool result to carry it):
/// `404` and other client errors are invalid params, with the API's
/// status and body as data.
async fn read<T: serde::de::DeserializeOwned>(
    gw: &Gateway<'_>,
    endpoint: &Endpoint,
    id: &str,
) -> Result<T, McpError> {
    let method = endpoint.method.clone();
    let body = (method == Method::POST).then(|| "{}".into());
    let reply: ApiReply = gw
        .send(Holder::Key, None, method, endpoint.at(&[id]), body)
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
