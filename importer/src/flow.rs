//! Flows (Blueprints): named steps, each a task template, whose
//! `consumes` entries read an upstream step's output by address (`$.out`,
//! `$.parts["plan.md"]`).
//!
//! A flow expands into one [`Draft`] per step, with id `<flow>.<step>`:
//! the pack's defaults, then the flow's own task fields (placement,
//! check_policy, ... declared once), then the step's. Its brief gets
//! `step` (the step's name, so the daemon projects `<step>.md` and finds
//! the step among a dependent's upstreams) and `consumes` (name →
//! `{step, path}`, the address in its canonical spelling); its
//! `depends_on` is every step it consumes or lists in `after`, in the
//! flow's order. The daemon
//! resolves `consumes` when the worker fetches its prompt.
//!
//! Checked here: duplicate step names, an unknown step (with a
//! suggestion), an address that does not parse, and a brief that sets
//! `step` or `consumes` itself. Cycles are `resolve`'s (the drafts carry
//! their `depends_on`). Once every noun is known, [`check_parts`] refuses
//! a part address that the upstream cannot produce because its contract
//! (a noun of this pack) declares its parts and not this one.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::plan::{FlowConsume, FlowItem, FlowStep, NounBody, NounItem};
use crate::report::{did_you_mean, push_pointer};
use crate::resolve::Ctx;
use crate::task::Draft;
use tessera_core::Address;

/// Brief fields the flow writes; a step's own brief may not set them.
const FLOW_FIELDS: &[&str] = &["step", "consumes"];

/// One flow, expanded.
pub(crate) struct Expansion {
    /// One draft per step.
    pub(crate) drafts: Vec<Draft>,
    /// The flow as its steps, for the plan.
    pub(crate) flow: FlowItem,
    /// Every part address, for [`check_parts`].
    pub(crate) reads: Vec<Read>,
}

/// A part address read from an upstream step, with what its contract is.
pub(crate) struct Read {
    file: usize,
    /// Pointer of the entry's `path`.
    at: String,
    step: String,
    part: String,
    /// The upstream's `brief.contract_ref`, when it is a `{noun}` ref.
    contract: Option<String>,
}

/// Expands the flow at `pointer` in file `file`.
pub(crate) fn expand(
    ctx: &mut Ctx,
    file: usize,
    pointer: &str,
    flow: &Map<String, Value>,
) -> Expansion {
    let fid = flow
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut shared = flow.clone();
    shared.remove("id");
    shared.remove("steps");
    let steps: Vec<&Map<String, Value>> = flow
        .get("steps")
        .and_then(Value::as_array)
        .map(|s| s.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();

    let mut first: HashMap<&str, usize> = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        let name = name_of(step);
        if let Some(&j) = first.get(name) {
            let at = format!("{pointer}/steps/{i}/name");
            let line = ctx.line(file, &format!("{pointer}/steps/{j}"));
            ctx.at(
                file,
                &at,
                format!("duplicate step {name:?} in flow {fid:?}; first defined at line {line}"),
            );
        } else {
            first.insert(name, i);
        }
    }
    let names: Vec<&str> = steps.iter().map(|s| name_of(s)).collect();
    let contract_of = |step: &Map<String, Value>| {
        step.get("brief")
            .and_then(|b| b.get("contract_ref"))
            .and_then(|r| r.as_object())
            .filter(|r| r.len() == 1)
            .and_then(|r| r.get("noun"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };

    let mut out = Expansion {
        drafts: Vec::new(),
        flow: FlowItem {
            id: fid.clone(),
            steps: Vec::new(),
            source: ctx.source(file, pointer),
        },
        reads: Vec::new(),
    };
    for (i, step) in steps.iter().enumerate() {
        let at = format!("{pointer}/steps/{i}");
        let name = name_of(step).to_owned();
        let known = |ctx: &mut Ctx, wanted: &str, field_at: &str| -> Option<usize> {
            let found = first.get(wanted).copied();
            if found.is_none() {
                let hint = match did_you_mean(wanted, names.iter().copied()) {
                    Some(s) => format!("; did you mean {s:?}?"),
                    None => format!("; its steps are {}", names_list(&steps)),
                };
                ctx.at(
                    file,
                    field_at,
                    format!("no step {wanted:?} in flow {fid:?}{hint}"),
                );
            }
            found
        };

        let mut consumes = Vec::new();
        let mut brief_consumes = Map::new();
        let mut upstream: Vec<usize> = Vec::new();
        let entries = step.get("consumes").and_then(Value::as_object);
        for (local, entry) in entries.into_iter().flatten() {
            let entry_at = push_pointer(&push_pointer(&at, "consumes"), local);
            let from = entry
                .get("step")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let path_at = push_pointer(&entry_at, "path");
            let upstream_index = known(ctx, from, &push_pointer(&entry_at, "step"));
            let text = entry
                .get("path")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let address = match Address::parse(text) {
                Ok(a) => a,
                Err(message) => {
                    ctx.at(file, &path_at, message);
                    continue;
                }
            };
            if let (Some(u), Some(part)) = (upstream_index, address.part()) {
                out.reads.push(Read {
                    file,
                    at: path_at,
                    step: from.to_owned(),
                    part: part.to_owned(),
                    contract: contract_of(steps[u]),
                });
            }
            brief_consumes.insert(
                local.clone(),
                json!({"step": from, "path": address.to_string()}),
            );
            upstream.extend(upstream_index);
            consumes.push(FlowConsume {
                name: local.clone(),
                step: from.to_owned(),
                path: address,
            });
        }
        let after: Vec<String> = step
            .get("after")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        for (j, wanted) in after.iter().enumerate() {
            upstream.extend(known(ctx, wanted, &format!("{at}/after/{j}")));
        }
        upstream.sort_unstable();
        upstream.dedup();
        let depends_on = upstream
            .iter()
            .map(|&u| format!("{fid}.{}", name_of(steps[u])))
            .collect();

        let mut fields = shared.clone();
        for (k, v) in step.iter() {
            if !matches!(k.as_str(), "name" | "consumes" | "after") {
                fields.insert(k.clone(), v.clone());
            }
        }
        let mut brief = match fields.remove("brief") {
            Some(Value::Object(b)) => b,
            _ => Map::new(),
        };
        for f in FLOW_FIELDS {
            if brief.contains_key(*f) {
                let message = format!(
                    "brief.{f} is written by the flow (the step's name and its `consumes`); remove it"
                );
                ctx.at(file, &format!("{at}/brief/{f}"), message);
            }
        }
        brief.insert("step".into(), Value::String(name.clone()));
        if !brief_consumes.is_empty() {
            brief.insert("consumes".into(), Value::Object(brief_consumes));
        }
        fields.insert("brief".into(), Value::Object(brief));

        let task_id = format!("{fid}.{name}");
        out.drafts.push(Draft {
            id: task_id.clone(),
            fields,
            depends_on,
            file,
            pointer: at.clone(),
            id_file: file,
            id_pointer: push_pointer(&at, "name"),
            source: ctx.source(file, &at),
        });
        out.flow.steps.push(FlowStep {
            name,
            task_id,
            consumes,
            after,
        });
    }
    out
}

/// Refuses each part address whose upstream's contract, a noun of this
/// pack, declares its parts without that one.
pub(crate) fn check_parts(ctx: &mut Ctx, reads: &[Read], nouns: &[NounItem]) {
    for r in reads {
        let Some(contract) = &r.contract else {
            continue;
        };
        let declared = nouns
            .iter()
            .find(|n| format!("{}/{}", n.store, n.key) == *contract)
            .and_then(|n| match &n.body {
                NounBody::Json(v) => v.get("parts").and_then(Value::as_array),
                NounBody::Bytes { .. } => None,
            });
        let Some(declared) = declared else {
            continue;
        };
        let names: Vec<&str> = declared
            .iter()
            .filter_map(|p| p.get("name").and_then(Value::as_str))
            .collect();
        if !names.contains(&r.part.as_str()) {
            let list = names
                .iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            let list = if list.is_empty() { "none".into() } else { list };
            let message = format!(
                "step {:?} cannot produce part {:?}: its contract {contract} declares the parts {list}",
                r.step, r.part
            );
            ctx.at(r.file, &r.at, message);
        }
    }
}

fn name_of(step: &Map<String, Value>) -> &str {
    step.get("name").and_then(Value::as_str).unwrap_or_default()
}

fn names_list(steps: &[&Map<String, Value>]) -> String {
    steps
        .iter()
        .map(|s| format!("{:?}", name_of(s)))
        .collect::<Vec<_>>()
        .join(", ")
}
