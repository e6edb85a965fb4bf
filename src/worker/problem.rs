//! A failed check's problems: where (a JSON pointer, the field), which
//! rule, and what was found there as a JSON type, never a value. Field
//! names are shown: a missing field's name comes from the contract's
//! schema, and an unexpected one's from the checked document, so a
//! document keyed by data (an object keyed by emails) shows those keys to
//! whoever reads the receipt; long names are cut, and one check reports
//! at most [`MAX_PROBLEMS`] problems, so a receipt stays small whatever
//! the document's size.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most problems one check reports; the rest are counted in one more.
pub const MAX_PROBLEMS: usize = 20;

/// Longest field name a problem shows, in characters.
pub const MAX_NAME_CHARS: usize = 64;

/// Where and why a check failed: a JSON pointer into the checked document
/// (the field), the rule that failed (a JSON Schema keyword, or the check's
/// own field such as `minimum` or `recompute`) and the JSON type found
/// there, never a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Problem {
    /// Which output (by position) failed, for the output checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<usize>,
    /// Where, when the failure has a place.
    pub pointer: Option<String>,
    /// The rule that failed.
    pub keyword: String,
    /// What was found at `pointer`: a JSON type (`a string`, `an
    /// object`) or `nothing`, never the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
    /// The same in words (field, rule and what was found).
    #[serde(skip)]
    pub message: String,
}

impl Problem {
    pub(super) fn at(pointer: Option<&str>, keyword: &str, message: String) -> Problem {
        Problem {
            output: None,
            pointer: pointer.map(str::to_string),
            keyword: keyword.into(),
            found: None,
            message,
        }
    }

    /// A problem at `pointer`: the field breaks `keyword` (`rule` says
    /// how, in words), and what is there is `found`.
    pub(super) fn found(
        pointer: &str,
        keyword: &str,
        rule: &str,
        found: Option<&Value>,
    ) -> Problem {
        let found = kind_of(found);
        Problem {
            found: Some(found.to_string()),
            ..Problem::at(
                Some(pointer),
                keyword,
                format!("{pointer}: {rule} (`{keyword}`), found {found}"),
            )
        }
    }
}

/// A value's JSON type as a failure names it (never the value itself).
fn kind_of(value: Option<&Value>) -> &'static str {
    match value {
        None => "nothing",
        Some(Value::Null) => "null",
        Some(Value::Bool(_)) => "a boolean",
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => "an integer",
        Some(Value::Number(_)) => "a number",
        Some(Value::String(_)) => "a string",
        Some(Value::Array(_)) => "an array",
        Some(Value::Object(_)) => "an object",
    }
}

/// `parent`'s field `name` as a JSON pointer (RFC 6901 escapes), a name
/// longer than [`MAX_NAME_CHARS`] cut there and marked with `…`.
fn child(parent: &str, name: &str) -> String {
    let parent = parent.trim_end_matches('/');
    let mut shown: String = name.chars().take(MAX_NAME_CHARS).collect();
    if shown.len() < name.len() {
        shown.push('…');
    }
    format!("{parent}/{}", shown.replace('~', "~0").replace('/', "~1"))
}

/// One problem without a place.
pub(super) fn plain(keyword: &str, message: impl Into<String>) -> Vec<Problem> {
    vec![Problem::at(None, keyword, message.into())]
}

/// Validates `instance` against `schema`: each error as a [`Problem`], a
/// missing or an unexpected field named by its own pointer, one problem
/// per field, at most [`MAX_PROBLEMS`] and then one that counts the rest.
pub(super) fn schema_problems(schema: &Value, instance: &Value) -> Result<(), Vec<Problem>> {
    use jsonschema::error::{TypeKind, ValidationErrorKind as Kind};
    let validator = jsonschema::validator_for(schema)
        .map_err(|_| plain("schema", "the schema is not a valid JSON Schema"))?;
    let mut errors = Vec::new();
    for e in validator.iter_errors(instance) {
        let at = e.instance_path().to_string();
        let at = if at.is_empty() { "/".to_string() } else { at };
        let here = instance.pointer(e.instance_path().as_str());
        let keyword = e.kind().keyword();
        match e.kind() {
            Kind::Required { property } => {
                let name = property
                    .as_str()
                    .map_or_else(|| property.to_string(), str::to_string);
                errors.push(Problem::found(
                    &child(&at, &name),
                    keyword,
                    "is required",
                    None,
                ));
            }
            Kind::AdditionalProperties { unexpected }
            | Kind::UnevaluatedProperties { unexpected } => {
                errors.extend(unexpected.iter().map(|name| {
                    let field = here.and_then(|v| v.get(name));
                    Problem::found(
                        &child(&at, name),
                        keyword,
                        "is not a field the schema allows",
                        field,
                    )
                }));
            }
            Kind::Type { kind } => {
                let want = match kind {
                    TypeKind::Single(t) => t.to_string(),
                    TypeKind::Multiple(ts) => ts
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(" or "),
                };
                errors.push(Problem::found(
                    &at,
                    keyword,
                    &format!("must be {want}"),
                    here,
                ));
            }
            _ => errors.push(Problem::found(
                &at,
                keyword,
                "breaks the schema's rule",
                here,
            )),
        }
    }
    if errors.len() > MAX_PROBLEMS {
        let more = errors.len() - MAX_PROBLEMS;
        errors.truncate(MAX_PROBLEMS);
        errors.push(Problem::at(
            None,
            "truncated",
            format!("and {more} more problem(s)"),
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// No value at `pointer`.
pub(super) fn missing(pointer: &str) -> Vec<Problem> {
    vec![Problem::found(pointer, "pointer", "must be present", None)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_check_reports_a_bounded_number_of_problems_and_cuts_long_names() {
        let schema = json!({
            "type": "object",
            "properties": {"a": {}},
            "additionalProperties": false
        });
        let long = "k".repeat(200);
        let mut doc = serde_json::Map::new();
        for i in 0..1000 {
            doc.insert(format!("field{i:04}"), json!(i));
        }
        doc.insert(long.clone(), json!("x"));
        let problems = schema_problems(&schema, &Value::Object(doc)).unwrap_err();
        assert_eq!(problems.len(), MAX_PROBLEMS + 1);
        let last = problems.last().unwrap();
        assert_eq!(
            (last.keyword.as_str(), last.message.as_str()),
            ("truncated", "and 981 more problem(s)")
        );
        let one = json!({ long.clone(): 1 });
        let cut = schema_problems(&schema, &one).unwrap_err();
        let shown = format!("/{}…", "k".repeat(MAX_NAME_CHARS));
        assert_eq!(cut[0].pointer.as_deref(), Some(shown.as_str()));
    }
}
