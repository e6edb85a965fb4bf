//! JSON Schema validation of pack files against the embedded
//! `seeds/schema/seed-pack.schema.json`, with each error turned into a
//! [`Problem`]: the pointer of the field at fault, the pointer to take the
//! line from, and a message written for the pack's author.
//!
//! The schema is the single statement of a file's shape. This module only
//! words its errors; it never adds rules of its own. Meaning (refs, ids,
//! cycles) is `resolve`'s job.

use std::sync::OnceLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{ValidationError, Validator};
use serde_json::{Value, json};

use crate::report::{did_you_mean, push_pointer};

/// The schema text, embedded so the binary needs no file at run time.
pub(crate) const SCHEMA: &str = include_str!("../../seeds/schema/seed-pack.schema.json");

/// The kinds of document the schema describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Doc {
    /// `pack.yaml` / `pack.toml`.
    PackFile,
    /// A file named by `include`.
    SectionFile,
    /// A template's `items_file`.
    ItemsFile,
    /// One task after template expansion.
    Task,
}

impl Doc {
    fn def(self) -> Option<&'static str> {
        match self {
            Doc::PackFile => None,
            Doc::SectionFile => Some("section_file"),
            Doc::ItemsFile => Some("items_file"),
            Doc::Task => Some("task"),
        }
    }
}

/// One schema error, located and worded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The field at fault (for a missing field, where it should be).
    pub(crate) pointer: String,
    /// Where to take the line from (for a missing field, its parent).
    pub(crate) line_pointer: String,
    pub(crate) message: String,
}

struct Schemas {
    root: Value,
    pack: Validator,
    section: Validator,
    items: Validator,
    task: Validator,
}

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        // The schema ships inside this crate; a test proves it compiles, so
        // failing here is a build defect, not an input error.
        let root: Value = serde_json::from_str(SCHEMA).expect("embedded schema is JSON");
        let build = |doc: Doc| {
            let schema = match doc.def() {
                None => root.clone(),
                Some(def) => json!({
                    "$schema": root["$schema"],
                    "$defs": root["$defs"],
                    "$ref": format!("#/$defs/{def}"),
                }),
            };
            jsonschema::validator_for(&schema).expect("embedded schema compiles")
        };
        Schemas {
            pack: build(Doc::PackFile),
            section: build(Doc::SectionFile),
            items: build(Doc::ItemsFile),
            task: build(Doc::Task),
            root,
        }
    })
}

/// Every schema problem of `value` read as a `doc`.
pub(crate) fn check(doc: Doc, value: &Value) -> Vec<Problem> {
    let s = schemas();
    let validator = match doc {
        Doc::PackFile => &s.pack,
        Doc::SectionFile => &s.section,
        Doc::ItemsFile => &s.items,
        Doc::Task => &s.task,
    };
    let mut out = Vec::new();
    for error in validator.iter_errors(value) {
        word(doc, &error, &mut out);
    }
    out
}

/// The field names an object at `pointer` of a `doc` may hold.
fn allowed_fields(doc: Doc, pointer: &str) -> Vec<String> {
    let defs = &schemas().root["$defs"];
    let segments: Vec<&str> = pointer.split('/').skip(1).collect();
    let def = match (doc, segments.as_slice()) {
        (Doc::PackFile, []) => return keys(&schemas().root["properties"]),
        (Doc::SectionFile, []) => "section_file",
        (Doc::ItemsFile, []) => "items_file",
        (Doc::Task, []) => "task",
        (_, ["defaults"]) => "defaults",
        (_, ["nouns", _]) => "noun",
        (_, ["tasks", _]) => "task",
        (_, ["templates", _]) => "template",
        (_, ["catalog", _]) => "catalog_pin",
        (_, ["flows", _]) => "flow",
        (_, ["flows", _, "steps", _]) => "flow_step",
        (_, ["flows", _, "steps", _, "consumes", _]) => "consume",
        _ => return Vec::new(),
    };
    let mut fields = keys(&defs[def]["properties"]);
    if matches!(def, "task" | "defaults" | "flow" | "flow_step") {
        fields.extend(keys(&defs["task_fields"]["properties"]));
    }
    fields.sort();
    fields
}

fn keys(properties: &Value) -> Vec<String> {
    properties
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Fields only the pack file may set, and fields only the pack decides.
const PACK_ONLY: &[&str] = &[
    "pack",
    "version",
    "namespace",
    "producer_surface",
    "defaults",
    "include",
];
const FROM_PACK: &[&str] = &["namespace", "producer_surface", "idempotency_key"];

fn word(doc: Doc, error: &ValidationError<'_>, out: &mut Vec<Problem>) {
    let at = error.instance_path().as_str().to_owned();
    let instance = error.instance();
    let mut push = |pointer: String, line_pointer: String, message: String| {
        out.push(Problem {
            pointer,
            line_pointer,
            message,
        });
    };
    match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            let allowed = allowed_fields(doc, &at);
            for field in unexpected {
                let pointer = push_pointer(&at, field);
                let message = unknown_field(doc, &at, field, &allowed);
                push(pointer.clone(), pointer, message);
            }
        }
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            push(
                push_pointer(&at, name),
                at.clone(),
                "required field is missing".into(),
            );
        }
        ValidationErrorKind::Type { kind } => {
            let expected: Vec<&str> = match kind {
                TypeKind::Single(t) => vec![article(t.as_str())],
                TypeKind::Multiple(set) => set.iter().map(|t| article(t.as_str())).collect(),
            };
            let message = format!(
                "expected {}, found {}",
                expected.join(" or "),
                describe(instance)
            );
            push(at.clone(), at, message);
        }
        ValidationErrorKind::Enum { options } => {
            let options: Vec<&str> = options
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let listed = options
                .iter()
                .map(|o| format!("{o:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            let mut message = format!("{} is not one of {listed}", describe(instance));
            if let Some(s) = instance
                .as_str()
                .and_then(|s| did_you_mean(s, options.iter().copied()))
            {
                message.push_str(&format!("; did you mean {s:?}?"));
            }
            push(at.clone(), at, message);
        }
        ValidationErrorKind::Pattern { pattern } => {
            let message = format!("{} {}", describe(instance), pattern_hint(pattern));
            push(at.clone(), at, message);
        }
        ValidationErrorKind::OneOfNotValid { .. }
        | ValidationErrorKind::OneOfMultipleValid { .. } => {
            let (a, b) = if instance.get("items").is_some()
                || instance.get("items_file").is_some()
                || at.starts_with("/templates")
            {
                ("items", "items_file")
            } else {
                ("body", "body_file")
            };
            let message = if instance.get(a).is_some() && instance.get(b).is_some() {
                format!("has both `{a}` and `{b}`; keep one")
            } else {
                format!("needs `{a}` (written inline) or `{b}` (a file in the pack)")
            };
            push(at.clone(), at, message);
        }
        ValidationErrorKind::Minimum { limit } => {
            push(
                at.clone(),
                at,
                format!("{} is less than the minimum {limit}", describe(instance)),
            );
        }
        ValidationErrorKind::MinItems { limit } => {
            push(at.clone(), at, format!("needs at least {limit} item(s)"));
        }
        ValidationErrorKind::MinLength { .. } => {
            push(at.clone(), at, "must not be empty".into());
        }
        ValidationErrorKind::UniqueItems => {
            push(at.clone(), at, "lists the same entry twice".into());
        }
        _ => push(at.clone(), at, error.to_string()),
    }
}

fn unknown_field(doc: Doc, at: &str, field: &str, allowed: &[String]) -> String {
    let in_task = matches!(doc, Doc::Task)
        || at.starts_with("/tasks/")
        || at.starts_with("/templates/")
        || at == "/defaults";
    if in_task && FROM_PACK.contains(&field) {
        return "unknown field; namespace, producer_surface and idempotency_key come from the pack and may not be set here".into();
    }
    if doc == Doc::SectionFile && at.is_empty() && PACK_ONLY.contains(&field) {
        return "unknown field; only pack.yaml or pack.toml may set it".into();
    }
    if at.is_empty() && field == "items" && doc != Doc::ItemsFile {
        return "unknown field; a template's items_file must not also be matched by `include`"
            .into();
    }
    if let Some(s) = did_you_mean(field, allowed.iter().map(String::as_str)) {
        return format!("unknown field; did you mean {s:?}?");
    }
    if allowed.is_empty() {
        "unknown field".into()
    } else {
        format!("unknown field; expected one of: {}", allowed.join(", "))
    }
}

fn pattern_hint(pattern: &str) -> String {
    if pattern.starts_with("^[A-Za-z0-9]") {
        "is not a valid name: use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit".into()
    } else if pattern.starts_with("^(surface:)") {
        "is not a valid surface: write `name` or `surface:name` (letters, digits, '.', '_', '-')"
            .into()
    } else if pattern.starts_with("^[0-9a-f]{64}") {
        "is not a sha256: write the 64 lowercase hex digits `sha256sum` prints".into()
    } else if pattern.starts_with("^[0-9]{4}") {
        "is not an RFC 3339 timestamp with an offset, e.g. 2025-01-31T09:00:00Z".into()
    } else {
        format!("does not match {pattern}")
    }
}

fn article(t: &str) -> &'static str {
    match t {
        "array" => "a list",
        "object" => "a map",
        "string" => "a string",
        "integer" => "an integer",
        "number" => "a number",
        "boolean" => "true or false",
        "null" => "null",
        _ => "another type",
    }
}

/// A short description of a value for messages: its type and a preview.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let preview: String = s.chars().take(60).collect();
            if preview.len() < s.len() {
                format!("{preview:?}…")
            } else {
                format!("{preview:?}")
            }
        }
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a map".into(),
    }
}

#[cfg(test)]
mod tests;
