//! One schema generator for both ends: the `utoipa::ToSchema` derives.
//! The OpenAPI document files each type under `components.schemas`
//! (`http::openapi`); an MCP tool's input schema is one type's schema made
//! standalone here, the types it names under `$defs`. OpenAPI 3.1 is JSON
//! Schema 2020-12, so the same schema serves both.
//!
//! A struct that flattens another ([`crate::queue::Traits`] into a spec and a view) is
//! derived as `allOf` of the two objects; [`json`] merges them into one
//! object, closed to other fields when the struct refuses them.

use serde_json::{Map, Value};
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;

use crate::queue::{ChildSpec, TaskSpec};

/// The types that flatten another and refuse unknown fields: the derive
/// cannot say so under `allOf`, so [`json`] closes their merged object.
fn refuses_unknown_fields(name: &str) -> bool {
    [TaskSpec::name(), ChildSpec::name()].contains(&name.into())
}

/// The schema named `name` as JSON, each flattened `allOf` of objects
/// merged into one object (closed when `name` refuses unknown fields).
pub fn json(name: &str, schema: RefOr<Schema>) -> Value {
    let mut v = serde_json::to_value(schema).expect("schemas serialize");
    merge_flattened(&mut v);
    if refuses_unknown_fields(name) {
        v["additionalProperties"] = Value::Bool(false);
    }
    v
}

/// Merges every `allOf` whose members are all inline objects into one
/// object: their properties and required fields together.
fn merge_flattened(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.values_mut().for_each(merge_flattened);
            let Some(Value::Array(members)) = map.get("allOf") else {
                return;
            };
            let objects = members
                .iter()
                .all(|m| m.get("type") == Some(&Value::String("object".into())));
            if !objects {
                return;
            }
            let Some(Value::Array(members)) = map.remove("allOf") else {
                unreachable!("checked above");
            };
            let (mut properties, mut required) = (Map::new(), Vec::new());
            for mut member in members {
                if let Some(Value::Object(p)) = member.get_mut("properties").map(Value::take) {
                    properties.extend(p);
                }
                if let Some(Value::Array(r)) = member.get_mut("required").map(Value::take) {
                    required.extend(r);
                }
            }
            map.insert("type".into(), "object".into());
            map.insert("properties".into(), Value::Object(properties));
            if !required.is_empty() {
                map.insert("required".into(), Value::Array(required));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(merge_flattened),
        _ => {}
    }
}

/// `T`'s schema as a standalone JSON Schema: its own object, with every
/// type it names under `$defs` and each reference pointing there.
pub fn standalone<T: ToSchema>() -> Map<String, Value> {
    let mut named = Vec::new();
    T::schemas(&mut named);
    let mut defs = Map::new();
    for (name, schema) in named {
        let mut schema = json(&name, schema);
        to_defs(&mut schema);
        defs.insert(name, schema);
    }
    let mut root = json(&T::name(), T::schema());
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::{Map, Value};

    use utoipa::ToSchema;

    use super::standalone;
    use crate::queue::{ChildSpec, TaskSpec};

    /// What a field holds, coarsely: its enum's values, or its JSON types
    /// other than `null`, with a `$ref` followed into `defs`.
    fn kind(schema: &Value, defs: &Map<String, Value>) -> BTreeSet<String> {
        if let Some(r) = schema["$ref"].as_str() {
            let name = r.rsplit('/').next().unwrap();
            return kind(&defs[name], defs);
        }
        if let Some(Value::Array(one_of)) = schema.get("oneOf") {
            return one_of.iter().flat_map(|s| kind(s, defs)).collect();
        }
        if let Some(Value::Array(values)) = schema.get("enum") {
            return values.iter().map(|v| format!("enum {v}")).collect();
        }
        match &schema["type"] {
            Value::String(t) => [t.clone()].into(),
            Value::Array(ts) => ts.iter().map(|t| t.as_str().unwrap().to_owned()).collect(),
            _ => BTreeSet::new(),
        }
        .into_iter()
        .filter(|t| t != "null")
        .collect()
    }

    /// The seed-pack schema (`seeds/schema/seed-pack.schema.json`), which
    /// authors' editors and the importer read, against the spec's
    /// generated schema: a pack task may set exactly the spec's fields
    /// but the three the pack decides, each holding what the spec's does
    /// and nothing more (a map `placement` passed the pack's schema
    /// once and failed at enqueue), and a template lists the same fields.
    #[test]
    fn the_seed_pack_schema_matches_the_spec() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/seeds/schema/seed-pack.schema.json"
        );
        let pack: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let pack_defs = pack["$defs"].as_object().unwrap();
        let spec = Value::Object(standalone::<TaskSpec>());
        let spec_defs = spec["$defs"].as_object().cloned().unwrap_or_default();

        let mut fields = pack_defs["task_fields"]["properties"]
            .as_object()
            .unwrap()
            .clone();
        fields.extend(pack_defs["task"]["properties"].as_object().unwrap().clone());
        fields.remove("id");
        let from_the_pack = ["namespace", "producer_surface", "idempotency_key"];
        let spec_fields = spec["properties"].as_object().unwrap();
        let want: BTreeSet<&String> = spec_fields
            .keys()
            .filter(|f| !from_the_pack.contains(&f.as_str()))
            .collect();
        assert_eq!(
            fields.keys().collect::<BTreeSet<_>>(),
            want,
            "a pack task's fields"
        );
        let template = pack_defs["template"]["properties"].as_object().unwrap();
        for field in &want {
            assert!(
                template.contains_key(*field),
                "a template cannot set {field}"
            );
        }
        for (field, schema) in &fields {
            let (theirs, ours) = (
                kind(schema, pack_defs),
                kind(&spec_fields[field], &spec_defs),
            );
            assert!(
                ours.is_subset(&theirs) && !ours.is_empty(),
                "{field}: the pack says {theirs:?}, the spec {ours:?}"
            );
            let extra: Vec<&String> = theirs.difference(&ours).collect();
            assert!(extra.is_empty(), "{field}: the pack also allows {extra:?}");
        }
    }

    /// Whether `schema` lets a value be `null`, with a `$ref` followed
    /// into `defs`.
    fn nullable(schema: &Value, defs: &Map<String, Value>) -> bool {
        if let Some(r) = schema["$ref"].as_str() {
            let name = r.rsplit('/').next().unwrap();
            return nullable(&defs[name], defs);
        }
        let any = |key: &str| {
            schema[key]
                .as_array()
                .is_some_and(|all| all.iter().any(|s| nullable(s, defs)))
        };
        let typed = match &schema["type"] {
            Value::String(t) => t == "null",
            Value::Array(ts) => ts.iter().any(|t| t == "null"),
            _ => false,
        };
        typed || any("oneOf") || any("anyOf")
    }

    /// Every field a request body's schema lets be `null` takes `null`,
    /// in each body whose fields have deserializers of their own (a
    /// `producer_surface: null` was refused with 400 while the document
    /// allowed it).
    #[test]
    fn a_field_the_schema_lets_be_null_takes_null() {
        fn check<T: ToSchema + serde::de::DeserializeOwned>(base: Value) {
            let schema = Value::Object(standalone::<T>());
            let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
            let fields = schema["properties"].as_object().unwrap();
            let nullable: Vec<&String> = fields
                .iter()
                .filter(|(_, s)| nullable(s, &defs))
                .map(|(name, _)| name)
                .collect();
            assert!(!nullable.is_empty(), "{}: no nullable field", T::name());
            serde_json::from_value::<T>(base.clone()).expect("the base body is taken");
            for field in nullable {
                let mut body = base.clone();
                body[field.as_str()] = Value::Null;
                if let Err(e) = serde_json::from_value::<T>(body) {
                    panic!("{}: {field}: null is refused: {e}", T::name());
                }
            }
        }
        let spec = serde_json::json!({
            "namespace": "ns", "queue": "q", "kind": "verb.k",
            "effect_class": "read", "brief": {}
        });
        check::<TaskSpec>(spec);
        check::<ChildSpec>(serde_json::json!({
            "queue": "q", "kind": "verb.k", "effect_class": "read", "brief": {}
        }));
        check::<crate::queue::provision::QueuePatch>(serde_json::json!({"name": "q"}));
        check::<crate::wire::PutNoun>(serde_json::json!({"expected_version": 0, "body": {}}));
    }
}
