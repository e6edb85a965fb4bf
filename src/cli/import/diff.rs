//! What changed between a record as the daemon holds it and as the pack
//! writes it: a list of JSON pointers with their old and new values, for
//! the plan's explanations (a noun's new version, a task's conflict).
//!
//! Objects are compared key by key and arrays of equal length item by
//! item; anything else that differs is one change at its pointer.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

/// Values longer than this many characters are shortened in text output.
const SHOWN_CHARS: usize = 40;

/// One changed field.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(super) struct Change {
    /// JSON pointer into the record (`/body/n`, `/visibility`, `/tags`).
    pub(super) pointer: String,
    /// The value the daemon holds; `None` when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) old: Option<Value>,
    /// The value the pack writes; `None` when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) new: Option<Value>,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} → {}",
            self.pointer,
            shown(self.old.as_ref()),
            shown(self.new.as_ref())
        )
    }
}

/// A value as JSON text, cut to [`SHOWN_CHARS`] characters.
fn shown(value: Option<&Value>) -> String {
    let Some(value) = value else {
        return "(absent)".into();
    };
    let text = value.to_string();
    if text.chars().count() <= SHOWN_CHARS {
        return text;
    }
    let cut: String = text.chars().take(SHOWN_CHARS - 1).collect();
    format!("{cut}…")
}

/// Every change from `old` to `new`, in key order.
pub(super) fn changes(old: &Value, new: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    walk(String::new(), Some(old), Some(new), &mut out);
    out
}

fn walk(pointer: String, old: Option<&Value>, new: Option<&Value>, out: &mut Vec<Change>) {
    match (old, new) {
        (Some(a), Some(b)) if a == b => {}
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let child = format!("{pointer}/{}", k.replace('~', "~0").replace('/', "~1"));
                walk(child, a.get(k), b.get(k), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                walk(format!("{pointer}/{i}"), Some(x), Some(y), out);
            }
        }
        (None, None) => {}
        _ => out.push(Change {
            pointer,
            old: old.cloned(),
            new: new.cloned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn changes_name_each_field_with_old_and_new() {
        let old =
            json!({"body": {"n": 1, "list": [1, 2], "gone": true}, "visibility": "surface_only"});
        let new = json!({"body": {"n": 2, "list": [1, 3], "a/b": 1}, "visibility": "private"});
        let got: Vec<String> = changes(&old, &new)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "/body/a~1b: (absent) → 1",
                "/body/gone: true → (absent)",
                "/body/list/1: 2 → 3",
                "/body/n: 1 → 2",
                "/visibility: \"surface_only\" → \"private\"",
            ]
        );
        let long = json!("x".repeat(100));
        let shown = changes(&json!(1), &long)[0].to_string();
        assert!(shown.ends_with("x…"), "{shown}");
        assert_eq!(
            shown.chars().count(),
            ": 1 → ".chars().count() + SHOWN_CHARS
        );
        assert!(changes(&new, &new).is_empty());
    }
}
