//! `Brief`: the fields of a task's brief that the daemon itself reads (its
//! pins, directive, step, agent and a flow step's `consumes`), parsed in
//! this one place. The rest of
//! the brief is the worker's, kept byte for byte in the spec.
//!
//! ```json
//! {"directive": "Sum the squares.", "step": "solve_draft", "agent": "solver",
//!  "contract_ref": {"store": "contracts", "key": "sum", "version": 1, "sha256": "…"},
//!  "input_ref": {"namespace": "team", "store": "inputs", "key": "n", "version": 2, "sha256": "…"},
//!  "consumes": {"plan": {"step": "design", "path": "$.parts[\"plan.md\"]"}},
//!  "anything_else": "for the worker"}
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::store::canonical::json_depth;
use crate::store::{Name, Pin};
pub use tessera_core::Address;

/// Deepest nesting of arrays and objects a brief may have.
pub const MAX_DEPTH: usize = 64;

/// The daemon's view of a brief.
#[derive(Clone, Debug, Default)]
pub struct Brief {
    /// The contract noun the task is checked against.
    pub contract_ref: Option<Pin>,
    /// The input noun (replaced by a resume).
    pub input_ref: Option<Pin>,
    /// The instruction for the worker.
    pub directive: Option<String>,
    /// The step name (the projected `<step>.md`); defaults from the kind.
    pub step: Option<Name>,
    /// The agent to run, for the worker.
    pub agent: Option<String>,
    /// Upstream outputs the worker reads, by the name it knows them by
    /// (a flow step's `consumes`; resolved at prompt time).
    pub consumes: Option<BTreeMap<Name, Consume>>,
}

/// One `consumes` entry: which upstream step, and which piece of its output.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Consume {
    /// The upstream's step name (`brief.step`, or its kind without `verb.`),
    /// matched among the task's `depends_on`.
    pub step: Name,
    /// `$.out` or `$.parts["name"]`.
    pub path: Address,
}

impl Brief {
    /// Parses a brief: a JSON object at most [`MAX_DEPTH`] deep whose
    /// daemon fields, when present, have their types. The error names the
    /// field (`brief` or `brief.<field>`) and says why.
    pub fn parse(raw: &RawValue) -> Result<Brief, (&'static str, String)> {
        let text = raw.get();
        if !text.trim_start().starts_with('{') {
            return Err(("brief", "the brief must be a JSON object".into()));
        }
        if json_depth(text.as_bytes()) > MAX_DEPTH {
            return Err((
                "brief",
                format!("the brief nests deeper than {MAX_DEPTH} levels"),
            ));
        }
        let map: Map<String, Value> = serde_json::from_str(text)
            .map_err(|e| ("brief", format!("the brief is not a JSON object: {e}")))?;
        Ok(Brief {
            contract_ref: field(&map, "contract_ref", "brief.contract_ref")?,
            input_ref: field(&map, "input_ref", "brief.input_ref")?,
            directive: field(&map, "directive", "brief.directive")?,
            step: field(&map, "step", "brief.step")?,
            agent: field(&map, "agent", "brief.agent")?,
            consumes: field(&map, "consumes", "brief.consumes")?,
        })
    }

    /// The brief of a stored spec (checked at enqueue, so it parses).
    pub fn of(raw: &RawValue) -> Brief {
        Brief::parse(raw).unwrap_or_default()
    }

    /// The pins the daemon dereferences for the task, with their fields.
    pub fn pins(&self) -> Vec<(String, Pin)> {
        [
            ("brief.contract_ref", &self.contract_ref),
            ("brief.input_ref", &self.input_ref),
        ]
        .into_iter()
        .filter_map(|(f, p)| p.clone().map(|p| (f.to_string(), p)))
        .collect()
    }

    /// The step name: `step` when set, else the kind without its `verb.`
    /// prefix (or the whole kind).
    pub fn step_name(&self, kind: &Name) -> Name {
        self.step.clone().unwrap_or_else(|| {
            kind.as_str()
                .strip_prefix("verb.")
                .and_then(|s| Name::parse("step", s).ok())
                .unwrap_or_else(|| kind.clone())
        })
    }
}

/// One daemon field of a brief: absent or null is `None`.
fn field<T: DeserializeOwned>(
    map: &Map<String, Value>,
    name: &str,
    path: &'static str,
) -> Result<Option<T>, (&'static str, String)> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => T::deserialize(v)
            .map(Some)
            .map_err(|e| (path, format!("{path}: {e}"))),
    }
}

/// The brief with `input_ref` replaced (a resume), other fields untouched.
pub fn with_input(raw: &RawValue, input_ref: &Pin) -> Result<Box<RawValue>, serde_json::Error> {
    let mut map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(raw.get())?;
    map.insert("input_ref".into(), serde_json::to_value(input_ref)?);
    serde_json::value::to_raw_value(&map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_string()).unwrap()
    }

    #[test]
    fn briefs_table() {
        let ok = Brief::parse(&raw(r#"{"step":"draft","x":{"y":[1]}}"#)).unwrap();
        assert_eq!(ok.step.unwrap().as_str(), "draft");
        let flow = Brief::parse(&raw(
            r#"{"consumes": {"plan": {"step": "design", "path": "$.parts[\"plan.md\"]"}}}"#,
        ))
        .unwrap();
        let plan = &flow.consumes.unwrap()[&Name::parse("name", "plan").unwrap()];
        assert_eq!(plan.path, Address::Part("plan.md".into()));
        let cases: &[(&str, &str)] = &[
            ("[]", "brief"),
            (r#"{"step": "a/b"}"#, "brief.step"),
            (r#"{"input_ref": {"store": "s"}}"#, "brief.input_ref"),
            (r#"{"directive": 7}"#, "brief.directive"),
            (
                r#"{"consumes": {"p": {"step": "s", "path": "$.x"}}}"#,
                "brief.consumes",
            ),
            (r#"{"consumes": {"p": {"step": "s"}}}"#, "brief.consumes"),
            (
                r#"{"consumes": {"a/b": {"step": "s", "path": "$.out"}}}"#,
                "brief.consumes",
            ),
        ];
        for (text, field) in cases {
            assert_eq!(Brief::parse(&raw(text)).unwrap_err().0, *field, "{text}");
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(80), "]".repeat(80));
        assert_eq!(Brief::parse(&raw(&deep)).unwrap_err().0, "brief");
    }

    #[test]
    fn step_names_default_from_the_kind() {
        let b = Brief::default();
        let kind = Name::parse("kind", "verb.solve_draft").unwrap();
        assert_eq!(b.step_name(&kind).as_str(), "solve_draft");
        let plain = Name::parse("kind", "review").unwrap();
        assert_eq!(b.step_name(&plain).as_str(), "review");
    }
}
