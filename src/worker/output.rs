//! The final pull: `{"out": final, "parts": {name: value}}` folded from
//! the task's last receipt. A body or part whose text is a JSON object or
//! array (also inside one code fence) comes back parsed; scalars and prose
//! stay strings; bytes that are not UTF-8 come back as `{"$base64": "…"}`.

use base64::Engine;
use serde_json::{Map, Value, json};

use super::Error;
use crate::queue::{Receipt, Task};
use crate::store::Store;

/// `GET /v1/tasks/{id}/output`: the final pull of the last receipt.
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Output {
    /// The final body: JSON when it parses (a fenced JSON block too),
    /// else text, else `{"$base64": ...}`; `null` before any receipt.
    #[schema(value_type = serde_json::Value)]
    pub out: Value,
    /// Each staged part, shown as `out` is.
    #[schema(value_type = Object)]
    pub parts: Map<String, Value>,
}

/// The fold for a task (null and empty before a worker submitted).
pub fn fold(store: &Store, task: &Task) -> Result<Output, Error> {
    let Some(last) = task.receipts.last() else {
        return Ok(Output {
            out: Value::Null,
            parts: Map::new(),
        });
    };
    let receipt = Receipt::read(store, last)?;
    let out = match &receipt.out {
        Some(body) => value_of(&store.get_object(&body.sha256)?),
        None => Value::Null,
    };
    let mut parts = Map::new();
    for (name, sha) in receipt.parts.iter().flatten() {
        parts.insert(name.clone(), value_of(&store.get_object(sha)?));
    }
    Ok(Output { out, parts })
}

/// How one stored body is shown in the fold.
pub fn value_of(bytes: &[u8]) -> Value {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return json!({"$base64": base64::engine::general_purpose::STANDARD.encode(bytes)});
    };
    structured(text.trim())
        .or_else(|| fenced(text.trim()).and_then(structured))
        .unwrap_or_else(|| Value::String(text.to_string()))
}

fn structured(text: &str) -> Option<Value> {
    if !(text.starts_with('{') || text.starts_with('[')) {
        return None;
    }
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(|v| v.is_object() || v.is_array())
}

/// The inside of exactly one code fence spanning the whole text.
fn fenced(text: &str) -> Option<&str> {
    let rest = text.strip_prefix("```")?;
    let (_lang, rest) = rest.split_once('\n')?;
    let inner = rest.strip_suffix("```")?;
    (!inner.contains("```")).then_some(inner.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_values_table() {
        let cases: &[(&[u8], Value)] = &[
            (b"{\"a\": 1}", json!({"a": 1})),
            (b"  [1, 2]\n", json!([1, 2])),
            (b"```json\n{\"a\": [1]}\n```\n", json!({"a": [1]})),
            (b"```\n[true]\n```", json!([true])),
            (b"42", json!("42")),
            (b"\"quoted\"", json!("\"quoted\"")),
            (b"plain prose\n", json!("plain prose\n")),
            (b"{not json", json!("{not json")),
            (
                b"```json\n{}\n```\n```json\n{}\n```",
                json!("```json\n{}\n```\n```json\n{}\n```"),
            ),
            (
                b"text then ```json\n{}\n```",
                json!("text then ```json\n{}\n```"),
            ),
            (&[0xff, 0x00], json!({"$base64": "/wA="})),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                &value_of(bytes),
                want,
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
