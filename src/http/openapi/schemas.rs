//! The schema registry the document is assembled with: every body is
//! referenced through its type's `utoipa::ToSchema` derive (its fields and
//! nested types come along); the error body is written from the error
//! table.

use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::http::error::ErrorCode;
use crate::wire::schema;

/// The document's `components.schemas`, filled as operations name bodies.
#[derive(Default)]
pub(crate) struct Schemas(Map<String, Value>);

impl Schemas {
    /// A `$ref` to `T`'s schema, registering it and every type it names.
    pub fn of<T: ToSchema>(&mut self) -> Value {
        let mut found = vec![(T::name().into_owned(), T::schema())];
        T::schemas(&mut found);
        for (name, schema) in found {
            let schema = schema::json(&name, schema);
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
            let schema = schema::json(&name, schema);
            self.0.insert(name, schema);
        }
        schema::json(&T::name(), T::schema())
    }

    /// A `$ref` to the error body, `{"error": {code, message, details}}`,
    /// its code one of the error table's ([`ErrorCode::ALL`]).
    pub fn error(&mut self) -> Value {
        let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        let schema = object(json!({"error": object(json!({
            "code": {"type": "string", "enum": codes},
            "message": {"type": "string"},
            "details": {"type": "object", "description": "Structured details; never a value the caller may not read."},
        }))}));
        self.0.insert("Error".into(), schema);
        reference("Error")
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
