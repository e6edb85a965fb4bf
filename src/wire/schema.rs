//! One schema generator for both ends: the `utoipa::ToSchema` derives.
//! The OpenAPI document files each type under `components.schemas`
//! (`http::openapi`); an MCP tool's input schema is one type's schema made
//! standalone here, the types it names under `$defs`. OpenAPI 3.1 is JSON
//! Schema 2020-12, so the same schema serves both.

use serde_json::{Map, Value};
use utoipa::ToSchema;

/// `T`'s schema as a standalone JSON Schema: its own object, with every
/// type it names under `$defs` and each reference pointing there.
pub fn standalone<T: ToSchema>() -> Map<String, Value> {
    let mut named = Vec::new();
    T::schemas(&mut named);
    let mut defs = Map::new();
    for (name, schema) in named {
        let mut schema = serde_json::to_value(schema).expect("schemas serialize");
        to_defs(&mut schema);
        defs.insert(name, schema);
    }
    let mut root = serde_json::to_value(T::schema()).expect("schemas serialize");
    to_defs(&mut root);
    let Value::Object(mut root) = root else {
        unreachable!("a type's schema is an object");
    };
    if !defs.is_empty() {
        root.insert("$defs".into(), Value::Object(defs));
    }
    root
}

/// Points every `#/components/schemas/` reference in `v` at `#/$defs/`.
fn to_defs(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => {
                        if let Some(name) = r.strip_prefix("#/components/schemas/") {
                            *r = format!("#/$defs/{name}");
                        }
                    }
                    (_, v) => to_defs(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(to_defs),
        _ => {}
    }
}
