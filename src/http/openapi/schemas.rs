//! The schema registry the document is assembled with: wire types are
//! referenced through their `utoipa::ToSchema` derives (their fields and
//! their nested types come along), and the few bodies a handler builds as
//! plain JSON are written out here beside them.

use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::http::error::ErrorCode;
use crate::store::Sha256;

/// The document's `components.schemas`, filled as operations name bodies.
#[derive(Default)]
pub(crate) struct Schemas(Map<String, Value>);

impl Schemas {
    /// A `$ref` to `T`'s schema, registering it and every type it names.
    pub fn of<T: ToSchema>(&mut self) -> Value {
        let mut found = vec![(T::name().into_owned(), T::schema())];
        T::schemas(&mut found);
        for (name, schema) in found {
            let schema = serde_json::to_value(schema).expect("schemas serialize");
            self.0.insert(name, schema);
        }
        reference(&T::name())
    }

    /// `T`'s schema written inline (for generic wrappers such as a batch
    /// reply), registering the types it names.
    pub fn inline<T: ToSchema>(&mut self) -> Value {
        let mut found = Vec::new();
        T::schemas(&mut found);
        for (name, schema) in found {
            let schema = serde_json::to_value(schema).expect("schemas serialize");
            self.0.insert(name, schema);
        }
        serde_json::to_value(T::schema()).expect("schemas serialize")
    }

    /// A `$ref` to a body a handler builds as JSON.
    pub fn built(&mut self, body: Built) -> Value {
        let name = format!("{body:?}");
        let schema = handwritten(self, body);
        self.0.insert(name.clone(), schema);
        reference(&name)
    }

    /// The collected schemas, by name.
    pub fn into_map(self) -> Map<String, Value> {
        self.0
    }
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// An object schema whose listed properties are all required.
fn object(properties: Value) -> Value {
    let required: Vec<&String> = properties
        .as_object()
        .map_or(vec![], |m| m.keys().collect());
    json!({"type": "object", "properties": properties, "required": required})
}

/// The bodies handlers assemble as JSON; each is a schema named after its
/// variant.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Built {
    /// `{"error": {code, message, details}}`, listing every code.
    Error,
    /// `GET /v1/worker/prompt`.
    Prompt,
    /// `GET /v1/tasks/{id}/output`.
    Output,
    /// `GET /v1/tasks/{id}/receipts`.
    ReceiptList,
    /// `POST /v1/promotions`.
    PromotionReply,
    /// `POST /v1/worker/heartbeat`.
    WorkerHeartbeat,
    /// `POST /v1/worker/artifact`.
    StagedPart,
    /// `GET /v1/worker/parts`.
    WorkerParts,
}

fn handwritten(s: &mut Schemas, body: Built) -> Value {
    let sha = s.of::<Sha256>();
    let task_id = s.of::<crate::queue::TaskId>();
    let time = json!({"type": "string", "format": "date-time"});
    let attempt = json!({"type": "integer", "minimum": 0});
    match body {
        Built::Error => {
            let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
            object(json!({"error": object(json!({
                "code": {"type": "string", "enum": codes},
                "message": {"type": "string"},
                "details": {"type": "object", "description": "Structured details; never a value the caller may not read."},
            }))}))
        }
        Built::Prompt => {
            let mut p = object(json!({
                "task_id": task_id,
                "attempt": attempt,
                "agent": {},
                "system": {"type": "string"},
                "prompt": {"type": "string"},
                "context": {"type": "object", "description": "{project_root, work_dir, task_metadata, steps[]}: pointers to upstream outputs, never their content."},
            }));
            p["description"] = json!(
                "The prompt of a claimed attempt, assembled at fetch time; also `step`, `brief`, `contract` and `shim` (the caller-scoped view of the pinned contract and input)."
            );
            p
        }
        Built::Output => json!({
            "type": "object",
            "description": "The final pull: `out` is the final body, `parts` each staged part (JSON when it parses, else text, else `{\"$base64\": ...}`).",
            "properties": {"out": {}, "parts": {"type": "object"}},
            "required": ["out", "parts"],
        }),
        Built::ReceiptList => object(json!({
            "task_id": task_id,
            "receipts": {"type": "array", "items": object(json!({
                "sha256": sha,
                "receipt": {"type": "object", "description": "{task_id, attempt, state, ok, outputs[], evidence[], by_key, at, prev}"},
            }))},
        })),
        Built::PromotionReply => object(json!({
            "promotion_sha256": sha,
            "promotion": s.of::<crate::promotion::Promoted>(),
        })),
        Built::WorkerHeartbeat => object(json!({
            "task_id": task_id, "attempt": attempt, "expires_at": time,
        })),
        Built::StagedPart => object(json!({
            "task_id": task_id,
            "attempt": attempt,
            "name": {"type": "string"},
            "sha256": sha,
            "size": {"type": "integer", "minimum": 0},
        })),
        Built::WorkerParts => object(json!({
            "task_id": task_id,
            "attempt": attempt,
            "parts": {"type": "array", "items": object(json!({
                "name": {"type": "string"},
                "sha256": sha,
                "size": {"type": "integer", "minimum": 0},
            }))},
        })),
    }
}
