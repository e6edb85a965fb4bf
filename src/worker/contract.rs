//! Contract checks (deterministic, opt-in): when a task's brief pins a
//! contract noun (`brief.contract_ref`) that declares schemas or checks
//! ([`Contract::declares_checks`]), submit runs the contract's checks
//! on the referenced outputs and records each `{name, ok, detail}` in the
//! receipt; any failing check makes the receipt `ok: false`. No other noun
//! write is validated: generic nouns accept any JSON.
//!
//! The checks, in order:
//! - `contract_is_valid`: the contract against the skill-pack schema
//!   (`seeds/schema/skill-pack.schema.json`); if it fails, nothing else runs;
//! - `input_matches_schema`: the pinned input against `input_schema`;
//! - `output_matches_schema`: every output against `output_schema`;
//! - each other entry of `checks`: `recompute: <operation>` recomputes the
//!   operation from the input and compares it with the output at `pointer`
//!   (default `/<operation>`); `pointer` with `minimum`, `maximum` or
//!   `equals` tests the value there. A check the daemon cannot run fails:
//!   missing evidence never turns into a pass.
//!
//! A check's detail names JSON pointers and schema keywords, never a value
//! from the input, the outputs or the contract: a receipt is read by keys
//! that may not read the nouns it was checked against.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::queue::receipt::CheckOutcome;

/// The skill-pack schema every pinned contract must satisfy.
pub const SKILL_PACK_SCHEMA: &str = include_str!("../../seeds/schema/skill-pack.schema.json");

/// One check's outcome, as recorded in the receipt.
pub type Check = CheckOutcome;

/// A contract noun (`noun.skill_pack`), parsed once: what the prompt shows
/// and what submit checks. `doc` is the whole document, for the
/// skill-pack schema check.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Contract {
    /// The document as stored.
    #[serde(skip)]
    pub doc: Value,
    /// The instruction for the worker.
    #[serde(default)]
    pub directive: Option<String>,
    /// The system prompt for an agent.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// JSON Schema of the input noun.
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// JSON Schema of each output.
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// Acceptance checks.
    #[serde(default)]
    pub checks: Option<Vec<CheckSpec>>,
}

/// One entry of a contract's `checks`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CheckSpec {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// A deterministic operation to recompute from the input.
    #[serde(default)]
    pub recompute: Option<String>,
    /// Where in each output to look.
    #[serde(default)]
    pub pointer: Option<String>,
    /// Lower bound of the number there.
    #[serde(default)]
    pub minimum: Option<f64>,
    /// Upper bound of the number there.
    #[serde(default)]
    pub maximum: Option<f64>,
    /// The value expected there.
    #[serde(default)]
    pub equals: Option<Value>,
}

impl Contract {
    /// Parses a stored contract body. A body that is not JSON, or whose
    /// fields have the wrong types, is a contract whose checks all fail
    /// ([`evaluate`] reports it through `contract_is_valid`).
    pub fn parse(bytes: &[u8]) -> Contract {
        let doc: Value = serde_json::from_slice(bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()));
        let mut c = Contract::deserialize(&doc).unwrap_or_default();
        c.doc = doc;
        c
    }

    /// Whether it opts into checks: it declares an input or output schema
    /// or acceptance checks. Other contracts (say, only a directive and a
    /// system prompt) are left alone.
    pub fn declares_checks(&self) -> bool {
        ["input_schema", "output_schema", "checks"]
            .iter()
            .any(|k| self.doc.get(k).is_some())
    }
}

fn check(name: &str, result: Result<String, String>) -> Check {
    match result {
        Ok(detail) => Check {
            name: name.into(),
            ok: true,
            detail,
        },
        Err(detail) => Check {
            name: name.into(),
            ok: false,
            detail,
        },
    }
}

/// Validates `instance` against `schema`; every error as the instance's
/// JSON pointer and the schema keyword that failed (never the value).
pub fn validate(schema: &Value, instance: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|_| "the schema is not a valid JSON Schema".to_string())?;
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            format!("{at}: fails `{}`", e.kind().keyword())
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Runs a contract's checks on the task's input and outputs.
pub fn evaluate(contract: &Contract, input: Option<&Value>, outputs: &[Value]) -> Vec<Check> {
    let schema: Value =
        serde_json::from_str(SKILL_PACK_SCHEMA).expect("the skill-pack schema is JSON");
    let valid = validate(&schema, &contract.doc)
        .map(|()| "the contract satisfies the skill-pack schema".to_string());
    let mut out = vec![check("contract_is_valid", valid.clone())];
    if valid.is_err() {
        return out;
    }
    if let Some(input) = input {
        out.push(check(
            "input_matches_schema",
            validate(
                contract.input_schema.as_ref().unwrap_or(&Value::Null),
                input,
            )
            .map(|()| "the input matches input_schema".into()),
        ));
    }
    let each = |f: &dyn Fn(&Value) -> Result<(), String>| -> Result<String, String> {
        if outputs.is_empty() {
            return Err("the submit references no output to check".into());
        }
        for (i, o) in outputs.iter().enumerate() {
            f(o).map_err(|e| format!("output {i}: {e}"))?;
        }
        Ok(format!("{} output(s) checked", outputs.len()))
    };
    out.push(check(
        "output_matches_schema",
        each(&|o| validate(contract.output_schema.as_ref().unwrap_or(&Value::Null), o)),
    ));
    for c in contract.checks.iter().flatten() {
        let name = c.name.as_str();
        if name == "output_matches_schema" {
            continue;
        }
        let result = if let Some(op) = c.recompute.as_deref() {
            let pointer = c.pointer.clone().unwrap_or_else(|| format!("/{op}"));
            recompute(op, input).and_then(|want| {
                each(&|o| match o.pointer(&pointer) {
                    Some(got) if *got == want => Ok(()),
                    Some(_) => Err(format!("{pointer} differs from the recomputation")),
                    None => Err(format!("no value at {pointer}")),
                })
            })
        } else if let Some(pointer) = c.pointer.as_deref() {
            each(&|o| bounds(c, o.pointer(pointer), pointer))
        } else {
            Err(format!(
                "the daemon does not know how to run check {name:?}; it fails rather than pass unchecked"
            ))
        };
        out.push(check(name, result));
    }
    out
}

fn bounds(c: &CheckSpec, got: Option<&Value>, pointer: &str) -> Result<(), String> {
    let got = got.ok_or_else(|| format!("no value at {pointer}"))?;
    if let Some(want) = &c.equals
        && got != want
    {
        return Err(format!("{pointer} does not equal the expected value"));
    }
    let n = || {
        got.as_f64()
            .ok_or_else(|| format!("{pointer} is not a number"))
    };
    if let Some(min) = c.minimum
        && n()? < min
    {
        return Err(format!("{pointer} is below the minimum"));
    }
    if let Some(max) = c.maximum
        && n()? > max
    {
        return Err(format!("{pointer} is above the maximum"));
    }
    Ok(())
}

/// The deterministic operations the daemon can recompute.
fn recompute(op: &str, input: Option<&Value>) -> Result<Value, String> {
    let input = input.ok_or("the brief pins no input_ref to recompute from")?;
    match op {
        "sum_of_squares" => {
            let numbers = input["numbers"]
                .as_array()
                .ok_or("the input has no numbers array")?;
            let mut sum: i128 = 0;
            for n in numbers {
                let n = i128::from(n.as_i64().ok_or("an entry of /numbers is not an integer")?);
                sum = sum.checked_add(n * n).ok_or("the sum overflows")?;
            }
            i64::try_from(sum)
                .map(|s| json!(s))
                .map_err(|_| "the sum overflows".into())
        }
        other => Err(format!(
            "the daemon has no deterministic adapter for operation {other:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract() -> Contract {
        Contract::parse(&serde_json::to_vec(&contract_doc()).unwrap())
    }

    fn contract_doc() -> Value {
        json!({
            "contract": "tessera.work.example.v1",
            "operation": {"name": "sum_of_squares"},
            "input_schema": {"type": "object", "required": ["numbers"]},
            "output_schema": {"type": "object", "required": ["sum_of_squares"], "properties": {"sum_of_squares": {"type": "integer"}}},
            "checks": [
                {"name": "output_matches_schema"},
                {"name": "result_is_non_negative", "pointer": "/sum_of_squares", "minimum": 0},
                {"name": "result_matches_recomputation", "recompute": "sum_of_squares"}
            ],
            "shims": "none",
            "execution": {"worker": "external", "server_fallback": false}
        })
    }

    type Outcomes = Vec<(String, bool)>;

    fn names_and_oks(checks: &[Check]) -> Outcomes {
        checks.iter().map(|c| (c.name.clone(), c.ok)).collect()
    }

    #[test]
    fn checks_table() {
        let input = json!({"numbers": [3, 4, 12]});
        let all = |ok: [bool; 5]| -> Outcomes {
            [
                "contract_is_valid",
                "input_matches_schema",
                "output_matches_schema",
                "result_is_non_negative",
                "result_matches_recomputation",
            ]
            .iter()
            .zip(ok)
            .map(|(n, o)| (n.to_string(), o))
            .collect()
        };
        let cases: Vec<(Vec<Value>, Outcomes)> = vec![
            (
                vec![json!({"sum_of_squares": 169})],
                all([true, true, true, true, true]),
            ),
            (
                vec![json!({"sum_of_squares": 170})],
                all([true, true, true, true, false]),
            ),
            (
                vec![json!({"sum_of_squares": "169"})],
                all([true, true, false, false, false]),
            ),
            (
                vec![json!({"sum_of_squares": -1})],
                all([true, true, true, false, false]),
            ),
            (vec![], all([true, true, false, false, false])),
        ];
        for (outputs, want) in cases {
            assert_eq!(
                names_and_oks(&evaluate(&contract(), Some(&input), &outputs)),
                want,
                "{outputs:?}"
            );
        }
    }

    #[test]
    fn an_invalid_contract_or_an_unknown_check_never_passes() {
        let mut bad = contract_doc();
        bad.as_object_mut().unwrap().remove("execution");
        let out = evaluate(
            &Contract::parse(&serde_json::to_vec(&bad).unwrap()),
            None,
            &[json!({})],
        );
        assert_eq!(
            names_and_oks(&out),
            [("contract_is_valid".to_string(), false)]
        );
        let mut unknown = contract_doc();
        unknown["checks"] = json!([{"name": "looks_good"}]);
        let out = evaluate(
            &Contract::parse(&serde_json::to_vec(&unknown).unwrap()),
            None,
            &[json!({"sum_of_squares": 1})],
        );
        assert_eq!(
            out.last().map(|c| (c.name.as_str(), c.ok)),
            Some(("looks_good", false))
        );
    }
}
