//! `GET /v1/openapi.json`: the API as an OpenAPI 3.1 document, assembled
//! once from the router's table (`routes/table.rs`: each route's
//! credential, summary, query, body and answers) and the wire types'
//! schemas (`utoipa::ToSchema` derives). It holds no secrets, so it is
//! served without a credential. `POST /mcp` is in it as one operation
//! taking and answering JSON-RPC: MCP clients discover its tools over MCP
//! itself.

use std::sync::LazyLock;

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use serde_json::{Map, Value, json};

use super::error::ApiError;
use super::routes::ROUTES;
use super::{Resp, body};

mod operations;
mod schemas;

pub use operations::Auth;
pub(crate) use operations::{
    Operation, boolean, count, output_address, part_name, state_list, string,
};
pub(crate) use schemas::Schemas;

/// The document, serialized once.
static DOCUMENT: LazyLock<Bytes> = LazyLock::new(|| {
    Bytes::from(serde_json::to_vec(&document()).expect("the document serializes"))
});

/// `GET /v1/openapi.json`.
pub fn serve() -> Result<Resp, ApiError> {
    let mut resp = Response::new(body::full(DOCUMENT.clone()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

/// The OpenAPI 3.1 document of every route.
pub fn document() -> Value {
    let mut s = Schemas::default();
    let ops: Vec<Operation> = ROUTES.iter().map(|r| r.operation(&mut s)).collect();
    let error = s.error();
    let mut paths = Map::new();
    for op in &ops {
        let item = paths.entry(op.path).or_insert_with(|| json!({}));
        item[op.method.as_str().to_ascii_lowercase()] = operation(op, &error, &mut s);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Tessera",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Nouns (versioned, content-addressed records) and verbs (leased tasks with receipts) over one sandboxed root. Every error is {\"error\": {\"code\", \"message\", \"details\"}} with the status its code always has.",
        },
        "paths": paths,
        "components": {
            "schemas": s.into_map(),
            "securitySchemes": {
                "key": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An issued key's secret (`POST /v1/keys`): `Authorization: Bearer <secret>`. Its grants decide what it may see and do; what it may not see answers 404.",
                },
                "worker": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A claim's worker handle (`wh-...`) or capability token: `Authorization: Bearer <handle>`. Bound to one attempt; dies with its lease. A key with `?task_id=` works too.",
                },
            },
        },
    })
}

/// One operation object.
fn operation(op: &Operation, error: &Value, s: &mut Schemas) -> Value {
    let mut parameters: Vec<Value> = path_names(op.path)
        .map(|name| {
            json!({"name": name, "in": "path", "required": true, "schema": path_schema(name, s)})
        })
        .collect();
    parameters.extend(op.query.iter().map(|(name, schema, required, what)| {
        json!({"name": name, "in": "query", "required": required, "description": what, "schema": schema})
    }));
    let mut responses = Map::new();
    for answer in &op.ok {
        // A second answer with the same status adds its media type.
        let r = responses
            .entry(answer.status.to_string())
            .or_insert_with(|| json!({"description": answer.what}));
        if let Some((media, schema)) = &answer.body {
            r["content"][*media] = json!({"schema": schema});
        }
    }
    for status in op.error_statuses() {
        let reason = http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Error");
        responses.insert(
            status.to_string(),
            json!({"description": reason, "content": {"application/json": {"schema": error}}}),
        );
    }
    let security = match op.auth {
        Auth::None => json!([]),
        Auth::Key => json!([{"key": []}]),
        Auth::Worker => json!([{"worker": []}, {"key": []}]),
    };
    let mut o = json!({
        "operationId": operation_id(op),
        "summary": op.summary,
        "parameters": parameters,
        "responses": responses,
        "security": security,
    });
    if let Some((media, schema, required)) = &op.body {
        o["requestBody"] = json!({"required": required, "content": { *media: {"schema": schema} }});
    }
    o
}

/// The `{name}` segments of a path template.
fn path_names(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
}

fn path_schema(name: &str, s: &mut Schemas) -> Value {
    match name {
        "namespace" | "store" | "key" | "queue" => s.of::<crate::store::Name>(),
        "id" => s.of::<crate::queue::TaskId>(),
        _ => string(),
    }
}

/// `get_v1_tasks_id_receipts` for `GET /v1/tasks/{id}/receipts`.
fn operation_id(op: &Operation) -> String {
    let mut id = String::new();
    for c in format!("{} {}", op.method, op.path).chars() {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '_'
        };
        if c != '_' || !(id.is_empty() || id.ends_with('_')) {
            id.push(c);
        }
    }
    id.trim_end_matches('_').to_string()
}
