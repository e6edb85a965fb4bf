//! Contract checks (deterministic, opt-in): when a task's brief pins a
//! contract noun (`brief.contract_ref`) that declares a requirement
//! (schemas, checks or required parts: [`Contract::declares_requirements`]),
//! submit runs the contract's checks
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
//! - `parts_staged` (a contract that declares `parts` with
//!   `required: true`, whether or not it declares anything else, on both
//!   submit routes): every required part was staged by the attempt.
//!
//! A check's detail names the field (a JSON pointer: for a missing or an
//! unexpected field, the field's own), the rule (a schema keyword or the
//! check's own field) and what was found there as a JSON type (`a string`,
//! `nothing`), never a value from the input, the outputs or the contract:
//! a receipt is read by keys that may not read the nouns it was checked
//! against. Each failure is also a [`Problem`] (pointer, keyword, found),
//! which a submit answers with; [`super::problem`] says what a problem
//! shows and how much.
//!
//! Besides the checks, a contract tells the worker what to do: the
//! instruction for a step is `directives.<step>`, else `directive` when the
//! step is the contract's own (`step`, default [`DEFAULT_STEP`]); any other
//! step (a `verify_gate` reviewing a `solve_draft`) gets no instruction from
//! the contract, never the solver's. `parts` lists the named parts a
//! worker is expected to stage: `[{name, media_type?, required?}]`.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use super::problem::Problem;
use super::problem::{missing, plain, schema_problems};
use crate::queue::receipt::CheckOutcome;

/// The skill-pack schema every pinned contract must satisfy.
pub const SKILL_PACK_SCHEMA: &str = include_str!("../../seeds/schema/skill-pack.schema.json");

/// One check's outcome, as recorded in the receipt.
pub type Check = CheckOutcome;

/// The step a contract's top-level `directive` is for, unless the contract
/// names its own `step`.
pub const DEFAULT_STEP: &str = "solve_draft";

/// A check's outcome with the problems behind a failure.
#[derive(Clone, Debug)]
pub struct Evaluated {
    /// The outcome, as recorded in the receipt.
    pub check: Check,
    /// Why it failed (empty when it passed).
    pub problems: Vec<Problem>,
}

/// A part a contract expects the worker to stage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartSpec {
    /// The part's name (a plain file name, as `?name=` takes it).
    pub name: String,
    /// Its media type, for the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Whether a submit must have staged it (`parts_staged`).
    #[serde(default)]
    pub required: bool,
}

/// A contract noun (`noun.skill_pack`), parsed once: what the prompt shows
/// and what submit checks. `doc` is the whole document, for the
/// skill-pack schema check.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Contract {
    /// The document as stored.
    #[serde(skip)]
    pub doc: Value,
    /// Whether the document's fields had the types this struct reads.
    #[serde(skip)]
    typed: bool,
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
    /// The step `directive` is for (default [`DEFAULT_STEP`]).
    #[serde(default)]
    pub step: Option<String>,
    /// Instructions for other steps, by step name.
    #[serde(default)]
    pub directives: Option<std::collections::BTreeMap<String, String>>,
    /// The parts a worker is expected to stage.
    #[serde(default)]
    pub parts: Option<Vec<PartSpec>>,
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
        let mut c = Contract::deserialize(&doc)
            .map(|c| Contract { typed: true, ..c })
            .unwrap_or_default();
        c.doc = doc;
        c
    }

    /// Whether it opts into checks: it declares an input or output schema,
    /// acceptance checks, or a required part. Other contracts (say, only a
    /// directive and a system prompt) are left alone.
    pub fn declares_requirements(&self) -> bool {
        let unreadable_parts = !self.typed && self.doc.get("parts").is_some();
        self.declares_checks() || unreadable_parts || !self.required_parts().is_empty()
    }

    /// Whether it declares an input or output schema or acceptance checks
    /// (the checks over the input and the outputs).
    fn declares_checks(&self) -> bool {
        ["input_schema", "output_schema", "checks"]
            .iter()
            .any(|k| self.doc.get(k).is_some())
    }

    /// The parts a submit must have staged.
    fn required_parts(&self) -> Vec<&PartSpec> {
        self.parts.iter().flatten().filter(|p| p.required).collect()
    }

    /// The contract's instruction for `step`: `directives.<step>`, else
    /// `directive` when `step` is the contract's own step; `None` for any
    /// other step.
    pub fn directive_for(&self, step: &str) -> Option<&str> {
        if let Some(d) = self.directives.as_ref().and_then(|d| d.get(step)) {
            return Some(d);
        }
        let own = self.step.as_deref().unwrap_or(DEFAULT_STEP);
        self.directive.as_deref().filter(|_| own == step)
    }

    /// What the skill-pack schema cannot say about `parts`: each name is a
    /// part name for a task at `step`, and no name is declared twice.
    fn part_problems(&self, step: &str) -> Vec<Problem> {
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for (i, part) in self.parts.iter().flatten().enumerate() {
            let at = format!("/parts/{i}/name");
            if super::artifact::check_name(&part.name, step).is_err() {
                let message = format!("{at}: not a part name for step {step}");
                out.push(Problem::at(Some(&at), "part_name", message));
            } else if !seen.insert(part.name.as_str()) {
                let message = format!("{at}: declared twice");
                out.push(Problem::at(Some(&at), "unique", message));
            }
        }
        out
    }

    /// `contract_is_valid`: the skill-pack schema (only its `parts` for a
    /// contract that declares no schema or check), and what it cannot say
    /// about `parts`.
    fn validity(&self, step: &str) -> Result<String, Vec<Problem>> {
        let mut schema: Value =
            serde_json::from_str(SKILL_PACK_SCHEMA).expect("the skill-pack schema is JSON");
        if !self.declares_checks() {
            let parts = schema["properties"]["parts"].take();
            schema = json!({"type": "object", "properties": {"parts": parts}});
        }
        schema_problems(&schema, &self.doc)
            .and_then(|()| {
                let problems = self.part_problems(step);
                if problems.is_empty() {
                    Ok(())
                } else {
                    Err(problems)
                }
            })
            .map(|()| "the contract satisfies the skill-pack schema".to_string())
    }
}

fn check(name: &str, result: Result<String, Vec<Problem>>) -> Evaluated {
    match result {
        Ok(detail) => Evaluated {
            check: Check {
                name: name.into(),
                ok: true,
                detail,
            },
            problems: Vec::new(),
        },
        Err(problems) => {
            let joined = problems
                .iter()
                .map(|p| p.message.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            let detail = match problems.first().and_then(|p| p.output) {
                Some(i) => format!("output {i}: {joined}"),
                None => joined,
            };
            Evaluated {
                check: Check {
                    name: name.into(),
                    ok: false,
                    detail,
                },
                problems,
            }
        }
    }
}

/// Validates `instance` against `schema`: every problem (the field, the
/// rule, the type found; never a value) in words, joined.
pub fn validate(schema: &Value, instance: &Value) -> Result<(), String> {
    schema_problems(schema, instance).map_err(|problems| {
        problems
            .iter()
            .map(|p| p.message.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// What a submit hands the checks besides the contract: the task's step,
/// its input, its outputs, and the part names the attempt staged.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// The task's step name.
    pub step: &'a str,
    /// The pinned input, when the brief pins one.
    pub input: Option<&'a Value>,
    /// The outputs to check.
    pub outputs: &'a [Value],
    /// The part names the attempt staged.
    pub staged: &'a [String],
}

/// Runs a contract's checks on the task's input, outputs and staged
/// parts: every requirement it declares, each time.
pub fn evaluate(contract: &Contract, subject: Subject<'_>) -> Vec<Evaluated> {
    let mut out = vec![check("contract_is_valid", contract.validity(subject.step))];
    if !out[0].check.ok {
        return out;
    }
    if contract.declares_checks() {
        out.extend(evaluate_checks(contract, subject));
    }
    let required = contract.required_parts();
    if !required.is_empty() {
        out.push(check(
            "parts_staged",
            parts_staged(&required, subject.staged),
        ));
    }
    out
}

/// The checks over the input and the outputs: the schemas and `checks`.
fn evaluate_checks(contract: &Contract, subject: Subject<'_>) -> Vec<Evaluated> {
    let Subject { input, outputs, .. } = subject;
    let mut out = Vec::new();
    if let Some(input) = input {
        out.push(check(
            "input_matches_schema",
            schema_problems(
                contract.input_schema.as_ref().unwrap_or(&Value::Null),
                input,
            )
            .map(|()| "the input matches input_schema".into()),
        ));
    }
    let each = |f: &dyn Fn(&Value) -> Result<(), Vec<Problem>>| -> Result<String, Vec<Problem>> {
        if outputs.is_empty() {
            return Err(plain("outputs", "the submit references no output to check"));
        }
        for (i, o) in outputs.iter().enumerate() {
            f(o).map_err(|problems| {
                problems
                    .into_iter()
                    .map(|p| Problem {
                        output: Some(i),
                        ..p
                    })
                    .collect::<Vec<_>>()
            })?;
        }
        Ok(format!("{} output(s) checked", outputs.len()))
    };
    out.push(check(
        "output_matches_schema",
        each(&|o| schema_problems(contract.output_schema.as_ref().unwrap_or(&Value::Null), o)),
    ));
    for c in contract.checks.iter().flatten() {
        let name = c.name.as_str();
        if name == "output_matches_schema" {
            continue;
        }
        let result = if let Some(op) = c.recompute.as_deref() {
            let pointer = c.pointer.clone().unwrap_or_else(|| format!("/{op}"));
            recompute(op, input)
                .map_err(|m| plain("recompute", m))
                .and_then(|want| {
                    each(&|o| match o.pointer(&pointer) {
                        Some(got) if *got == want => Ok(()),
                        got @ Some(_) => Err(vec![Problem::found(
                            &pointer,
                            "recompute",
                            "differs from the recomputation",
                            got,
                        )]),
                        None => Err(missing(&pointer)),
                    })
                })
        } else if let Some(pointer) = c.pointer.as_deref() {
            each(&|o| bounds(c, o.pointer(pointer), pointer))
        } else {
            Err(plain(
                "unsupported",
                format!(
                    "the daemon does not know how to run check {name:?}; it fails rather than pass unchecked"
                ),
            ))
        };
        out.push(check(name, result));
    }
    out
}

/// Every required part is among the staged ones.
fn parts_staged(required: &[&PartSpec], staged: &[String]) -> Result<String, Vec<Problem>> {
    let missing: Vec<Problem> = required
        .iter()
        .filter(|p| !staged.contains(&p.name))
        .map(|p| {
            let message = format!("required part {:?} was not staged", p.name);
            Problem::at(None, "required", message)
        })
        .collect();
    if missing.is_empty() {
        Ok(format!("{} required part(s) staged", required.len()))
    } else {
        Err(missing)
    }
}

fn bounds(c: &CheckSpec, got: Option<&Value>, pointer: &str) -> Result<(), Vec<Problem>> {
    let got = got.ok_or_else(|| missing(pointer))?;
    let fail = |keyword: &str, rule: &str| vec![Problem::found(pointer, keyword, rule, Some(got))];
    if let Some(want) = &c.equals
        && got != want
    {
        return Err(fail("equals", "differs from the expected value"));
    }
    let n = || got.as_f64().ok_or_else(|| fail("type", "must be a number"));
    if let Some(min) = c.minimum
        && n()? < min
    {
        return Err(fail("minimum", "is below the minimum"));
    }
    if let Some(max) = c.maximum
        && n()? > max
    {
        return Err(fail("maximum", "is above the maximum"));
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

    fn names_and_oks(checks: &[Evaluated]) -> Outcomes {
        checks
            .iter()
            .map(|c| (c.check.name.clone(), c.check.ok))
            .collect()
    }

    fn subject<'a>(input: Option<&'a Value>, outputs: &'a [Value]) -> Subject<'a> {
        Subject {
            step: "solve_draft",
            input,
            outputs,
            staged: &[],
        }
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
                names_and_oks(&evaluate(&contract(), subject(Some(&input), &outputs))),
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
            subject(None, &[json!({})]),
        );
        assert_eq!(
            names_and_oks(&out),
            [("contract_is_valid".to_string(), false)]
        );
        let mut unknown = contract_doc();
        unknown["checks"] = json!([{"name": "looks_good"}]);
        let out = evaluate(
            &Contract::parse(&serde_json::to_vec(&unknown).unwrap()),
            subject(None, &[json!({"sum_of_squares": 1})]),
        );
        assert_eq!(
            out.last().map(|c| (c.check.name.as_str(), c.check.ok)),
            Some(("looks_good", false))
        );
    }

    #[test]
    fn failures_name_pointers_and_keywords() {
        let input = json!({"numbers": [3, 4, 12]});
        let outputs = [json!({"sum_of_squares": "169"})];
        let out = evaluate(&contract(), subject(Some(&input), &outputs));
        let schema = &out[2];
        assert_eq!(schema.check.name, "output_matches_schema");
        let got: Vec<(Option<usize>, Option<&str>, &str)> = schema
            .problems
            .iter()
            .map(|p| (p.output, p.pointer.as_deref(), p.keyword.as_str()))
            .collect();
        assert_eq!(got, [(Some(0), Some("/sum_of_squares"), "type")]);
        assert!(schema.check.detail.starts_with("output 0: "));
        assert!(!schema.check.detail.contains("169"));
        let bound = &out[3];
        assert_eq!(
            bound.problems[0].pointer.as_deref(),
            Some("/sum_of_squares")
        );
        assert_eq!(bound.problems[0].keyword, "type");
    }

    #[test]
    fn failures_name_the_field_the_rule_and_what_was_found() {
        let schema = json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}, "tags": {"type": ["array", "null"]}},
            "required": ["n", "a/b"],
            "additionalProperties": false
        });
        // Output, then each problem as (pointer, keyword, found, message).
        type Row = (&'static str, &'static str, &'static str, &'static str);
        let table: &[(Value, &[Row])] = &[
            (
                json!({}),
                &[
                    (
                        "/n",
                        "required",
                        "nothing",
                        "/n: is required (`required`), found nothing",
                    ),
                    (
                        "/a~1b",
                        "required",
                        "nothing",
                        "/a~1b: is required (`required`), found nothing",
                    ),
                ],
            ),
            (
                json!({"n": "169", "a/b": 1, "summary": "secret", "tags": {}}),
                &[
                    (
                        "/n",
                        "type",
                        "a string",
                        "/n: must be integer (`type`), found a string",
                    ),
                    (
                        "/tags",
                        "type",
                        "an object",
                        "/tags: must be null or array (`type`), found an object",
                    ),
                    (
                        "/a~1b",
                        "additionalProperties",
                        "an integer",
                        "/a~1b: is not a field the schema allows (`additionalProperties`), found an integer",
                    ),
                    (
                        "/summary",
                        "additionalProperties",
                        "a string",
                        "/summary: is not a field the schema allows (`additionalProperties`), found a string",
                    ),
                ],
            ),
        ];
        for (output, want) in table {
            let mut got: Vec<(String, String, String, String)> = schema_problems(&schema, output)
                .unwrap_err()
                .into_iter()
                .map(|p| (p.pointer.unwrap(), p.keyword, p.found.unwrap(), p.message))
                .collect();
            got.sort();
            let mut want: Vec<_> = want
                .iter()
                .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
                .collect();
            want.sort();
            assert_eq!(got, want, "for {output}");
            assert!(!format!("{got:?}").contains("secret") && !format!("{got:?}").contains("169"));
        }
        let c = contract();
        let outputs = [json!({"sum_of_squares": -3})];
        let out = evaluate(&c, subject(Some(&json!({"numbers": [1]})), &outputs));
        let details: Vec<&str> = out.iter().map(|e| e.check.detail.as_str()).collect();
        assert!(
            details.contains(
                &"output 0: /sum_of_squares: is below the minimum (`minimum`), found an integer"
            ),
            "{details:?}"
        );
        assert!(
            details.contains(&"output 0: /sum_of_squares: differs from the recomputation (`recompute`), found an integer"),
            "{details:?}"
        );
    }

    #[test]
    fn directives_go_to_their_own_step_only() {
        let mut doc = contract_doc();
        doc["directive"] = json!("Solve it.");
        let c = Contract::parse(&serde_json::to_vec(&doc).unwrap());
        assert_eq!(c.directive_for("solve_draft"), Some("Solve it."));
        assert_eq!(c.directive_for("verify_gate"), None);
        doc["directives"] = json!({"verify_gate": "Check it."});
        doc["step"] = json!("draft");
        let c = Contract::parse(&serde_json::to_vec(&doc).unwrap());
        assert_eq!(c.directive_for("verify_gate"), Some("Check it."));
        assert_eq!(c.directive_for("solve_draft"), None);
        assert_eq!(c.directive_for("draft"), Some("Solve it."));
    }

    #[test]
    fn parts_are_validated_and_required_ones_checked() {
        let with_parts = |parts: Value| {
            let mut doc = contract_doc();
            doc["parts"] = parts;
            Contract::parse(&serde_json::to_vec(&doc).unwrap())
        };
        let input = json!({"numbers": [1]});
        let outputs = [json!({"sum_of_squares": 1})];
        let valid = |parts: Value| {
            evaluate(&with_parts(parts), subject(Some(&input), &outputs))[0]
                .check
                .ok
        };
        assert!(valid(
            json!([{"name": "plan.md", "media_type": "text/markdown", "required": true}])
        ));
        for bad in [
            json!([{"name": "a/b"}]),
            json!([{"name": ""}]),
            json!([{"name": "solve_draft.md"}]),
            json!([{"name": "p.md"}, {"name": "p.md"}]),
            json!([{"name": "p.md", "media_type": "not a type"}]),
            json!([{"name": "p.md", "required": "yes"}]),
            json!([{"name": "p.md", "colour": "red"}]),
            json!({"name": "p.md"}),
        ] {
            assert!(!valid(bad.clone()), "{bad}");
        }
        let c = with_parts(json!([{"name": "plan.md", "required": true}, {"name": "notes.md"}]));
        let staged = |names: &[&str]| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            let out = evaluate(
                &c,
                Subject {
                    staged: &names,
                    ..subject(Some(&input), &outputs)
                },
            );
            let last = out.last().unwrap();
            assert_eq!(last.check.name, "parts_staged");
            last.check.ok
        };
        assert!(staged(&["plan.md"]));
        assert!(!staged(&["notes.md"]));
    }

    #[test]
    fn required_parts_alone_are_a_requirement_and_checked() {
        let only_parts = |parts: Value| {
            let doc = json!({"contract": "design.v1", "directive": "Plan.", "parts": parts});
            Contract::parse(&serde_json::to_vec(&doc).unwrap())
        };
        let run = |c: &Contract, staged: &[&str]| {
            let names: Vec<String> = staged.iter().map(|n| n.to_string()).collect();
            let out = evaluate(
                c,
                Subject {
                    staged: &names,
                    ..subject(None, &[])
                },
            );
            names_and_oks(&out)
        };
        let optional = only_parts(json!([{"name": "notes.md"}]));
        assert!(!optional.declares_requirements());
        let c = only_parts(json!([{"name": "plan.md", "required": true}]));
        assert!(c.declares_requirements());
        let checked = |ok: bool| {
            vec![
                ("contract_is_valid".to_string(), true),
                ("parts_staged".to_string(), ok),
            ]
        };
        assert_eq!(run(&c, &[]), checked(false));
        assert_eq!(run(&c, &["plan.md"]), checked(true));
        let malformed = only_parts(json!([{"name": "plan.md", "required": "yes"}]));
        assert!(
            malformed.declares_requirements(),
            "unreadable parts never pass"
        );
        assert_eq!(
            run(&malformed, &["plan.md"]),
            [("contract_is_valid".to_string(), false)]
        );
    }
}
