//! Gap briefs: a task as written (a [`Draft`]), its full TaskSpec with the
//! pack's defaults applied, and the noun refs inside its brief.
//!
//! Drafts come from a file's `tasks` section (here) or from a template's
//! items (`template`). Checking them against each other (ids, depends_on,
//! refs to nouns, cycles) is `resolve`'s job.

use serde::Deserialize;
use serde_json::{Map, Value};
use tessera_core::name;
use tessera_core::task::TaskSpec;

use crate::plan::{Pack, Source};
use crate::report::push_pointer;

/// Fields the spec must end up with, from the task or the pack's defaults.
const REQUIRED: &[&str] = &["queue", "kind", "effect_class", "visibility_scope"];

/// A task as written, before it is checked against the rest of the pack.
#[derive(Debug, Clone)]
pub(crate) struct Draft {
    pub(crate) id: String,
    /// The task's TaskSpec fields and brief (no `id`, no `depends_on`).
    pub(crate) fields: Map<String, Value>,
    pub(crate) depends_on: Vec<String>,
    /// Index of the file in `resolve::Ctx::files` holding the fields.
    pub(crate) file: usize,
    /// JSON pointer of the task (or its template) in that file.
    pub(crate) pointer: String,
    /// File and pointer of the id: the task's `id`, or the template item.
    pub(crate) id_file: usize,
    pub(crate) id_pointer: String,
    /// Where the task, or its template item, was written.
    pub(crate) source: Source,
}

/// Splits a task object (already schema-valid) into a draft.
pub(crate) fn draft(
    task: &Map<String, Value>,
    file: usize,
    pointer: String,
    source: Source,
) -> Draft {
    let mut fields = task.clone();
    let id = match fields.remove("id") {
        Some(Value::String(s)) => s,
        _ => String::new(),
    };
    let depends_on = match fields.remove("depends_on") {
        Some(Value::Array(ids)) => ids
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    let id_pointer = push_pointer(&pointer, "id");
    Draft {
        id,
        fields,
        depends_on,
        file,
        pointer,
        id_file: file,
        id_pointer,
        source,
    }
}

/// A surface as the plan keeps it: without the `surface:` prefix.
pub(crate) fn bare_surface(s: &str) -> String {
    s.strip_prefix("surface:").unwrap_or(s).to_owned()
}

/// `seed:<pack>:<id>`: stable across re-imports, so enqueue is idempotent.
pub(crate) fn idempotency_key(pack: &str, id: &str) -> String {
    format!("seed:{pack}:{id}")
}

/// The full TaskSpec of a draft: defaults, then the task's own fields, then
/// what the pack decides, read as the daemon reads a spec (surfaces bare,
/// sets sorted, whole numbers as integers) and checked by the spec's own
/// rules. The error names every missing field, or the field the daemon
/// would refuse.
pub(crate) fn spec(
    pack: &Pack,
    defaults: &Map<String, Value>,
    draft: &Draft,
) -> Result<TaskSpec, String> {
    let mut spec = defaults.clone();
    spec.extend(draft.fields.clone());
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|f| !spec.contains_key(*f))
        .collect();
    match missing.as_slice() {
        [] => {}
        [f] => {
            return Err(format!(
                "no {f}: set `{f}` on the task, or `defaults.{f}` in the pack file"
            ));
        }
        _ => {
            let list = missing.join(", ");
            return Err(format!(
                "no {list}: set them on the task, or under `defaults` in the pack file"
            ));
        }
    }
    spec.insert("namespace".into(), pack.namespace.clone().into());
    spec.insert(
        "producer_surface".into(),
        pack.producer_surface.clone().into(),
    );
    spec.insert(
        "idempotency_key".into(),
        idempotency_key(&pack.name, &draft.id).into(),
    );
    let spec = TaskSpec::deserialize(Value::Object(spec)).map_err(|e| e.to_string())?;
    spec.check_fields()
        .map_err(|(field, why)| format!("{field}: {why}"))?;
    Ok(spec)
}

/// A `{noun: ...}` object found in a brief: its pointer (relative to the
/// brief) and the store and key it names, or why it is malformed.
pub(crate) type FoundRef = (String, Result<(String, String), String>);

/// Every `{noun: "<store>/<key>"}` object in `brief`, in document order.
/// An object whose only field is `noun` is a ref and must be well formed;
/// full pins and anything else are left alone.
pub(crate) fn noun_refs(brief: &Value) -> Vec<FoundRef> {
    let mut out = Vec::new();
    let mut todo = vec![(String::new(), brief)];
    while let Some((pointer, value)) = todo.pop() {
        match value {
            Value::Object(map) if map.len() == 1 && map.contains_key("noun") => {
                out.push((pointer, parse_ref(&map["noun"])));
            }
            Value::Object(map) => {
                for (k, v) in map.iter().rev() {
                    todo.push((push_pointer(&pointer, k), v));
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate().rev() {
                    todo.push((push_pointer(&pointer, &i.to_string()), v));
                }
            }
            _ => {}
        }
    }
    out
}

fn parse_ref(v: &Value) -> Result<(String, String), String> {
    let hint = "write {noun: \"<store>/<key>\"} naming a noun of this pack";
    let Some(text) = v.as_str() else {
        return Err(format!("a noun ref must be a string; {hint}"));
    };
    match text.split_once('/') {
        Some((store, key)) if name::is_valid(store) && name::is_valid(key) => {
            Ok((store.to_owned(), key.to_owned()))
        }
        _ => Err(format!("{text:?} is not a noun ref; {hint}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refs_are_found_in_document_order_and_checked() {
        let brief = json!({
            "contract_ref": {"noun": "work.contracts/sum-squares"},
            "inputs": [{"noun": "work.inputs/numbers"}, {"noun": "bad"}],
            "pin": {"store": "s", "key": "k", "version": 1, "sha256": "00"},
            "not_a_ref": {"noun": "x/y", "extra": 1},
            "z": {"noun": 5},
        });
        let got: Vec<FoundRef> = noun_refs(&brief);
        let ok = |p: &str, s: &str, k: &str| (p.to_owned(), Ok((s.to_owned(), k.to_owned())));
        assert_eq!(got[0], ok("/contract_ref", "work.contracts", "sum-squares"));
        assert_eq!(got[1], ok("/inputs/0", "work.inputs", "numbers"));
        assert_eq!(got[2].0, "/inputs/1");
        assert!(
            got[2]
                .1
                .as_ref()
                .unwrap_err()
                .contains("\"bad\" is not a noun ref")
        );
        assert_eq!(got[3].0, "/z");
        assert!(got[3].1.as_ref().unwrap_err().contains("must be a string"));
        assert_eq!(got.len(), 4);
    }

    #[test]
    fn spec_applies_defaults_then_the_task_then_the_pack() {
        let pack = Pack {
            name: "p".into(),
            version: "1".into(),
            namespace: "ns".into(),
            producer_surface: "team".into(),
        };
        let defaults = json!({"queue": "q", "effect_class": "read", "visibility_scope": "private", "tags": ["d"]});
        let task = json!({"id": "a", "kind": "verb.x", "tags": ["t"], "allowed_surfaces": ["surface:s1", "s2"], "brief": {}});
        let d = draft(
            task.as_object().unwrap(),
            0,
            "/tasks/0".into(),
            Source::default(),
        );
        let spec = spec(&pack, defaults.as_object().unwrap(), &d).unwrap();
        assert_eq!(
            Value::Object(spec.full_json()),
            json!({
                "queue": "q", "kind": "verb.x", "effect_class": "read", "visibility_scope": "private",
                "tags": ["t"], "allowed_surfaces": ["s1", "s2"], "target_cohorts": [], "brief": {},
                "priority": 0, "on_upstream_failure": "run", "lease_ttl_s": null, "check_policy": "warn",
                "namespace": "ns", "producer_surface": "team", "idempotency_key": "seed:p:a",
            })
        );
        let bare = draft(
            json!({"id": "b", "brief": {}}).as_object().unwrap(),
            0,
            "/tasks/1".into(),
            Source::default(),
        );
        let error = super::spec(&pack, &Map::new(), &bare).unwrap_err();
        assert_eq!(
            error,
            "no queue, kind, effect_class, visibility_scope: set them on the task, or under `defaults` in the pack file"
        );
        let only_kind =
            json!({"queue": "q", "effect_class": "read", "visibility_scope": "private"});
        let error = super::spec(&pack, only_kind.as_object().unwrap(), &bare).unwrap_err();
        assert_eq!(
            error,
            "no kind: set `kind` on the task, or `defaults.kind` in the pack file"
        );
    }
}
