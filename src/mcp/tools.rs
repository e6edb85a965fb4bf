//! The tools: their input types (schemas from the same `utoipa` derives
//! as the OpenAPI document's, made standalone by `wire::schema`), their
//! descriptions, and the API request each one makes.
//!
//! Arguments are as strict as the API's bodies, by one mechanism: every
//! input type refuses unknown fields, and is read by the API's own rule
//! for refused JSON (`http::request::json_refusal`), so a misspelled field
//! is the `400 unknown_field` the route gives. Where a route takes a JSON
//! body (`claim`, `enqueue`, `put_noun`), the tool takes the route's path
//! fields out and sends the rest as given, to be read by the route's own
//! body type; the listed schema is that type's, closed with
//! `additionalProperties: false` like every other input's.

use bytes::Bytes;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResponse, CallToolResult, CreateTaskResult, JsonObject, Tool};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{Gateway, Holder, reply, tasks};
use crate::paths::{self, Endpoint};
use crate::queue::{TaskId, TaskSpec};
use crate::store::{Name, Pin};
use crate::wire::json::json_refusal;
use crate::wire::whole_numbers;
use crate::wire::{ClaimNext, PutNoun};
use crate::wire::{flattened, schema};
use utoipa::PartialSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{RefBuilder, Schema};

/// `claim`: the next task of a queue, with its lease and worker handle.
#[derive(Debug, Deserialize)]
pub struct ClaimArgs {
    /// The queue to claim from.
    pub queue: Name,
    /// The claim body of `POST /v1/queues/{queue}/claim`: every other
    /// field, sent as given for the route to read.
    #[serde(flatten)]
    pub next: JsonObject,
}

/// `enqueue`: a task, as `POST /v1/tasks` takes it.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueArgs {
    /// The task envelope, sent as given for the route to read.
    #[schema(value_type = TaskSpec)]
    pub spec: Value,
}

/// `get_task`: one task the key may see.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GetTaskArgs {
    /// The task id, such as `t12`.
    pub task_id: TaskId,
}

/// `put_noun`: a noun version, as `PUT /v1/nouns/{ns}/{store}/{key}` takes it.
#[derive(Debug, Deserialize)]
pub struct PutNounArgs {
    /// Namespace.
    pub namespace: Name,
    /// Store.
    pub store: Name,
    /// Key.
    pub key: Name,
    /// The put body: every other field, sent as given for the route to
    /// read.
    #[serde(flatten)]
    pub noun: JsonObject,
}

/// A worker tool with no input but the handle.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HandleArgs {
    /// The `wh-` handle from a claim; defaults to the server's own
    /// (`--handle`, `TESSERA_HANDLE`, or the HTTP bearer).
    #[serde(default)]
    pub handle: Option<String>,
}

/// `stage_part`: one part of the attempt's output (last write wins).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StagePartArgs {
    /// The part's name, as the contract's `parts` list it.
    pub name: String,
    /// The part's exact content.
    pub content: String,
    /// The `wh-` handle from a claim; defaults to the server's own.
    #[serde(default)]
    pub handle: Option<String>,
}

/// `submit`: the final body; ends the attempt.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitArgs {
    /// The final body: a string is sent exactly, any other JSON value as
    /// its JSON text.
    #[schema(value_type = serde_json::Value)]
    pub body: Value,
    /// Whether the work succeeded (default true).
    #[serde(default)]
    pub ok: Option<bool>,
    /// With `ok: false`, fail the task now instead of retrying it.
    #[serde(default, rename = "final")]
    pub final_failure: bool,
    /// The `wh-` handle from a claim; defaults to the server's own.
    #[serde(default)]
    pub handle: Option<String>,
}

/// `read_noun`: a pinned noun the task names (brief pins, finished steps'
/// outputs and evidence), read as the claimant.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadNounArgs {
    /// The pin, as the prompt lists it.
    pub pin: Pin,
    /// The `wh-` handle from a claim; defaults to the server's own.
    #[serde(default)]
    pub handle: Option<String>,
}

impl utoipa::PartialSchema for ClaimArgs {
    fn schema() -> RefOr<Schema> {
        flattened::with_fields::<ClaimNext>(
            "`claim`: the claim body of `POST /v1/queues/{queue}/claim` and the queue.",
            vec![("queue", described::<Name>("The queue to claim from."))],
        )
    }
}

impl utoipa::ToSchema for ClaimArgs {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        ClaimNext::schemas(schemas);
        schemas.push((Name::name().into_owned(), Name::schema()));
    }
}

impl utoipa::PartialSchema for PutNounArgs {
    fn schema() -> RefOr<Schema> {
        flattened::with_fields::<PutNoun>(
            "`put_noun`: the body of `PUT /v1/nouns/{ns}/{store}/{key}` and the noun's path.",
            vec![
                ("namespace", described::<Name>("Namespace.")),
                ("store", described::<Name>("Store.")),
                ("key", described::<Name>("Key.")),
            ],
        )
    }
}

impl utoipa::ToSchema for PutNounArgs {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        PutNoun::schemas(schemas);
        schemas.push((Name::name().into_owned(), Name::schema()));
    }
}

/// A reference to `T`'s schema, with a description of the field.
fn described<T: utoipa::ToSchema>(description: &str) -> RefOr<Schema> {
    RefBuilder::new()
        .ref_location_from_schema_name(T::name())
        .description(Some(description))
        .build()
        .into()
}

/// Every tool, with its description and input schema.
pub fn list() -> Vec<Tool> {
    fn tool<T: utoipa::ToSchema>(name: &'static str, description: &'static str) -> Tool {
        Tool::new(
            name,
            description,
            std::sync::Arc::new(schema::standalone::<T>()),
        )
    }
    vec![
        tool::<ClaimArgs>(
            "claim",
            "Claim the next ready task of a queue (key). Answers the task, its lease and a `wh-` \
             handle for the worker tools; `null` when none is ready. With `thin: true`, only the \
             handle, task id, attempt, lease and routing facts, to relay the handle to the agent \
             that works the task (it reads the brief with `get_prompt`).",
        ),
        tool::<EnqueueArgs>(
            "enqueue",
            "Enqueue a task (key). When the request declares the MCP Tasks extension in its \
             `_meta` client capabilities, the answer is an MCP task that follows the Tessera \
             task's state; otherwise the enqueue's result.",
        ),
        tool::<GetTaskArgs>("get_task", "Show a task the key may see (key)."),
        tool::<PutNounArgs>(
            "put_noun",
            "Write a noun version (key), compare-and-swap on `expected_version`.",
        ),
        tool::<HandleArgs>(
            "get_prompt",
            "The claimed task's prompt (handle): brief, directive, contract, expected parts and \
             the pinned inputs.",
        ),
        tool::<ReadNounArgs>(
            "read_noun",
            "Read a noun the task pins, as its claimant (handle).",
        ),
        tool::<HandleArgs>(
            "heartbeat",
            "Extend the attempt's lease (handle); call it during long work.",
        ),
        tool::<StagePartArgs>(
            "stage_part",
            "Stage one part of the output (handle); staging never ends the attempt.",
        ),
        tool::<HandleArgs>(
            "list_parts",
            "The parts this attempt staged so far (handle).",
        ),
        tool::<SubmitArgs>(
            "submit",
            "Submit the final body (handle); ends the attempt and answers the receipt.",
        ),
    ]
}

/// Runs tool `name` with `args`; `wants_task` when the request declared
/// the MCP Tasks extension.
pub async fn call(
    gw: &Gateway<'_>,
    name: &str,
    args: JsonObject,
    wants_task: bool,
) -> Result<CallToolResponse, McpError> {
    let args = Value::Object(args);
    let result = match name {
        "claim" => match parse::<ClaimArgs>(args) {
            Ok(a) => claim(gw, a).await,
            Err(e) => e,
        },
        "enqueue" => match parse::<EnqueueArgs>(args) {
            Ok(a) => return enqueue(gw, a, wants_task).await,
            Err(e) => e,
        },
        "get_task" => match parse::<GetTaskArgs>(args) {
            Ok(a) => key_json(gw, &paths::TASK_GET, &[&a.task_id.to_string()], None).await,
            Err(e) => e,
        },
        "put_noun" => match parse::<PutNounArgs>(args) {
            Ok(a) => {
                let at = [a.namespace.as_str(), a.store.as_str(), a.key.as_str()];
                key_json(gw, &paths::NOUN_PUT, &at, Some(to_json(&a.noun))).await
            }
            Err(e) => e,
        },
        "get_prompt" | "heartbeat" | "list_parts" => match parse::<HandleArgs>(args) {
            Ok(a) => {
                let (endpoint, body) = match name {
                    "get_prompt" => (&paths::WORKER_PROMPT, None),
                    "heartbeat" => (&paths::WORKER_HEARTBEAT, Some("{}".into())),
                    _ => (&paths::WORKER_PARTS, None),
                };
                let sent = gw.send(
                    Holder::Handle,
                    a.handle.as_deref(),
                    endpoint.method.clone(),
                    endpoint.at(&[]),
                    body,
                );
                reply::json(sent.await)
            }
            Err(e) => e,
        },
        "read_noun" => match parse::<ReadNounArgs>(args) {
            Ok(a) => read_noun(gw, a).await,
            Err(e) => e,
        },
        "stage_part" => match parse::<StagePartArgs>(args) {
            Ok(a) => {
                let name: String = form_urlencoded::byte_serialize(a.name.as_bytes()).collect();
                let path = format!("{}?name={name}", paths::WORKER_ARTIFACT.at(&[]));
                let body = Some(Bytes::from(a.content));
                let sent = gw.send(
                    Holder::Handle,
                    a.handle.as_deref(),
                    paths::WORKER_ARTIFACT.method.clone(),
                    path,
                    body,
                );
                reply::json(sent.await)
            }
            Err(e) => e,
        },
        "submit" => match parse::<SubmitArgs>(args) {
            Ok(a) => submit(gw, a).await,
            Err(e) => e,
        },
        other => {
            return Err(McpError::invalid_params(
                format!("no tool named {other:?}; tools/list names them"),
                None,
            ));
        }
    };
    Ok(result.into())
}

/// Tool arguments as `T`, or the tool error the API gives a body it
/// refuses the same way (`unknown_field`, `invalid_body`).
fn parse<T: DeserializeOwned>(args: Value) -> Result<T, CallToolResult> {
    whole_numbers::from_value(args).map_err(|e| reply::refused(&json_refusal(&e)))
}

fn to_json<T: serde::Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("request bodies serialize"))
}

/// A key route answering JSON.
async fn key_json(
    gw: &Gateway<'_>,
    endpoint: &Endpoint,
    at: &[&str],
    body: Option<Bytes>,
) -> CallToolResult {
    let (method, path) = (endpoint.method.clone(), endpoint.at(at));
    reply::json(gw.send(Holder::Key, None, method, path, body).await)
}

/// Claims; a claim still waiting when the session's input ends is
/// dropped (so the API claims nothing, or releases what it claimed) and
/// answers none, as the route does when the daemon stops.
async fn claim(gw: &Gateway<'_>, a: ClaimArgs) -> CallToolResult {
    let path = paths::QUEUE_CLAIM.at(&[a.queue.as_str()]);
    let none = if a.next.contains_key("max") {
        json!({"claims": []})
    } else {
        json!({"claimed": null})
    };
    let sent = gw.send(
        Holder::Key,
        None,
        paths::QUEUE_CLAIM.method.clone(),
        path,
        Some(to_json(&a.next)),
    );
    let sent = tokio::select! {
        biased;
        sent = sent => sent,
        () = gw.input.ended() => return CallToolResult::structured(none),
    };
    match sent {
        Ok(r) if r.status == http::StatusCode::NO_CONTENT => CallToolResult::structured(none),
        other => reply::json(other),
    }
}

/// Enqueues; for a client with the Tasks extension, answers an MCP task
/// seeded from the Tessera task's state.
async fn enqueue(
    gw: &Gateway<'_>,
    a: EnqueueArgs,
    wants_task: bool,
) -> Result<CallToolResponse, McpError> {
    let sent = gw.send(
        Holder::Key,
        None,
        paths::TASK_ENQUEUE.method.clone(),
        paths::TASK_ENQUEUE.at(&[]),
        Some(to_json(&a.spec)),
    );
    let answer = reply::json(sent.await);
    let id = answer
        .structured_content
        .as_ref()
        .and_then(|v| v["task_id"].as_str())
        .map(str::to_string);
    match id {
        Some(id) if wants_task && answer.is_error != Some(true) => {
            let task = tasks::get(gw, &id).await?;
            Ok(CreateTaskResult::new(task.task.task).into())
        }
        _ => Ok(answer.into()),
    }
}

async fn read_noun(gw: &Gateway<'_>, a: ReadNounArgs) -> CallToolResult {
    let handle = a.handle.as_deref();
    let namespace = match &a.pin.namespace {
        Some(ns) => ns.to_string(),
        None => {
            let sent = gw.send(
                Holder::Handle,
                handle,
                paths::WORKER_PROMPT.method.clone(),
                paths::WORKER_PROMPT.at(&[]),
                None,
            );
            let prompt = reply::json(sent.await);
            let ns = prompt
                .structured_content
                .as_ref()
                .and_then(|p| p["context"]["task_metadata"]["namespace"].as_str())
                .map(str::to_string);
            match ns {
                Some(ns) if prompt.is_error != Some(true) => ns,
                _ => return prompt,
            }
        }
    };
    let p = &a.pin;
    let at = [namespace.as_str(), p.store.as_str(), p.key.as_str()];
    let path = format!(
        "{}?version={}&sha256={}",
        paths::WORKER_NOUN.at(&at),
        p.version,
        p.sha256
    );
    reply::noun(
        gw.send(
            Holder::Handle,
            handle,
            paths::WORKER_NOUN.method.clone(),
            path,
            None,
        )
        .await,
    )
}

async fn submit(gw: &Gateway<'_>, a: SubmitArgs) -> CallToolResult {
    let body = match a.body {
        Value::String(s) => Bytes::from(s),
        other => to_json(&other),
    };
    let ok = a.ok.unwrap_or(true);
    let path = format!(
        "{}?ok={ok}&final={}",
        paths::WORKER_SUBMIT.at(&[]),
        a.final_failure
    );
    let sent = gw.send(
        Holder::Handle,
        a.handle.as_deref(),
        paths::WORKER_SUBMIT.method.clone(),
        path,
        Some(body),
    );
    reply::json(sent.await)
}
