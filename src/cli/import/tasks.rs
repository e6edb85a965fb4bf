//! The tasks of a pack, enqueued in dependency layers (each layer one batch
//! through `POST /v1/batch/tasks`) with their `depends_on` local ids
//! resolved to the task ids the daemon gave the layers before, and their
//! `{noun: store/key}` brief refs resolved to the pins the nouns got.
//!
//! In a plan nothing is created, so a task whose upstream would be created
//! has no id to depend on yet, and a pin to a noun version the plan would
//! write names nothing the daemon can read yet (the daemon refuses a pin to
//! a missing noun). The spec sent leaves both out; its real spec will name
//! the new task or version, so it cannot equal an existing one: it would be
//! created when its idempotency key is free, and conflict when a task
//! already holds the key.

use std::collections::HashMap;

use serde_json::Value;
use tessera_importer::{Plan, TaskItem};

use super::Mode;
use super::diff::{self, Change};
use super::nouns::Pins;
use super::outcome::{Kind, Line, Outcome, Progress};
use super::send;
use crate::client::Client;
use crate::paths;
use crate::queue::TaskId;
use crate::wire::{ItemReply, TaskOutcome};

/// What a task's dependents can know of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Upstream {
    /// It exists (or, in a plan, already exists) with this id.
    Known(TaskId),
    /// A plan would create it: no id yet.
    New,
    /// It was not enqueued (or would not be).
    Failed,
}

/// Enqueues (or, in a plan, dry-runs) every task of the plan, layer by layer.
pub(super) async fn enqueue_all(
    client: &Client,
    plan: &Plan,
    pins: &Pins,
    mode: Mode,
    explain: bool,
    progress: &Progress,
) -> anyhow::Result<Vec<Line>> {
    let path = format!(
        "{}?dry_run={}&source_pack={}",
        paths::BATCH_TASKS.at(&[]),
        mode == Mode::Plan,
        plan.pack.name
    );
    let mut lines: Vec<Option<Line>> = vec![None; plan.tasks.len()];
    let mut known: HashMap<&str, Upstream> = HashMap::new();
    let purpose = match mode {
        Mode::Plan => Purpose::Plan,
        Mode::Apply => Purpose::Apply,
    };
    for layer in layers(&plan.tasks) {
        let (mut specs, mut sent) = (Vec::new(), Vec::new());
        for i in layer {
            let task = &plan.tasks[i];
            match spec(task, pins, &known, purpose) {
                Ok((spec, partial)) => {
                    specs.push(spec);
                    sent.push((i, partial));
                }
                Err(note) => {
                    known.insert(&task.id, Upstream::Failed);
                    lines[i] = Some(line(task, Outcome::Error).because(note));
                }
            }
        }
        let answers = send::batch::<_, TaskOutcome>(client, &path, &specs, progress).await?;
        for ((i, partial), answer) in sent.into_iter().zip(answers) {
            let task = &plan.tasks[i];
            let holder = holder(&answer);
            let (mut l, upstream) = judge(task, answer, partial);
            if explain
                && l.outcome == Outcome::Conflict
                && let Some(holder) = holder
                && let Ok((shown, _)) = spec(task, pins, &known, Purpose::Explain)
            {
                l.changes = differs(client, &holder, &shown).await;
            }
            known.insert(&task.id, upstream);
            lines[i] = Some(l);
        }
    }
    Ok(lines.into_iter().flatten().collect())
}

/// The tasks' indices grouped into layers: a task's upstreams are all in
/// earlier layers. `tasks` lists every upstream before its dependents.
fn layers(tasks: &[TaskItem]) -> Vec<Vec<usize>> {
    let mut depth: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, t) in tasks.iter().enumerate() {
        let d = t
            .depends_on
            .iter()
            .filter_map(|u| depth.get(u.as_str()))
            .map(|d| d + 1)
            .max()
            .unwrap_or(0);
        depth.insert(&t.id, d);
        if out.len() <= d {
            out.resize_with(d + 1, Vec::new);
        }
        out[d].push(i);
    }
    out
}

/// What a task's spec is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    /// A dry run's: what the plan would write has no id or pin yet, so it
    /// is left out.
    Plan,
    /// An apply's: every pin and upstream is known.
    Apply,
    /// To show how it differs from the task holding its key: a noun version
    /// the plan would write is the pin its dry run reported, and an
    /// upstream the plan would create is `"(new task <id>)"`, so a
    /// re-pinned noun reads as its new version, not as null.
    Explain,
}

/// The spec: refs resolved to pins, `depends_on` to task ids. True when an
/// upstream has no id yet or, in a [`Purpose::Plan`], a pinned version is
/// not written yet, so the spec lacks it. Err when a noun or an upstream
/// failed.
fn spec(
    task: &TaskItem,
    pins: &Pins,
    known: &HashMap<&str, Upstream>,
    purpose: Purpose,
) -> Result<(Value, bool), String> {
    let mut spec = task.spec.full_json();
    let mut partial = false;
    for r in &task.noun_refs {
        let (pin, new) = pins.get(&(r.store.clone(), r.key.clone())).ok_or_else(|| {
            format!(
                "not enqueued: its noun {}/{} was not written",
                r.store, r.key
            )
        })?;
        if let Some(slot) = spec
            .get_mut("brief")
            .and_then(|brief| brief.pointer_mut(&r.pointer))
        {
            if purpose == Purpose::Plan && *new {
                *slot = Value::Null;
                partial = true;
            } else {
                *slot = pin.clone();
            }
        }
    }
    let mut ids = Vec::new();
    for u in &task.depends_on {
        match known.get(u.as_str()) {
            Some(Upstream::Known(id)) => ids.push(Value::String(id.to_string())),
            Some(Upstream::New) if purpose == Purpose::Explain => {
                ids.push(Value::String(format!("(new task {u})")));
            }
            Some(Upstream::New) => partial = true,
            Some(Upstream::Failed) | None => {
                return Err(format!("not enqueued: its upstream task {u:?} was not"));
            }
        }
    }
    spec.insert("depends_on".into(), Value::Array(ids));
    Ok((Value::Object(spec), partial))
}

/// One answer as a line, and what dependents learn.
fn judge(task: &TaskItem, answer: ItemReply<TaskOutcome>, partial: bool) -> (Line, Upstream) {
    let Some(result) = answer.result else {
        let Some(error) = answer.error else {
            let note = format!("the daemon answered {} without a reason", answer.status);
            return (line(task, Outcome::Error).because(note), Upstream::Failed);
        };
        let l = if error.code == "idempotency_conflict" {
            let holder = error.details["task_id"].as_str().unwrap_or("a task");
            line(task, Outcome::Conflict).because(taken(holder, task))
        } else {
            let note = format!("{} {}: {}", answer.status, error.code, error.message);
            line(task, Outcome::Error).because(note)
        };
        return (l, Upstream::Failed);
    };
    let existing = result.task_id.map_or(Upstream::New, Upstream::Known);
    let holder = result
        .task_id
        .map_or_else(|| "a task".into(), |id| id.to_string());
    match (result.outcome.as_str(), partial) {
        ("create", _) => (line(task, Outcome::Create), existing),
        ("unchanged", false) => (line(task, Outcome::Unchanged), existing),
        ("unchanged" | "conflict", true) => (
            line(task, Outcome::Conflict).because(format!(
                "{}; an upstream task or a pinned noun version would be created, which changes its spec",
                taken(&holder, task)
            )),
            existing,
        ),
        _ => (
            line(task, Outcome::Conflict).because(taken(&holder, task)),
            existing,
        ),
    }
}

/// The id of the task holding the idempotency key, from either answer.
fn holder(answer: &ItemReply<TaskOutcome>) -> Option<String> {
    match (&answer.result, &answer.error) {
        (Some(result), _) => result.task_id.map(|id| id.to_string()),
        (None, Some(error)) => error.details["task_id"].as_str().map(str::to_owned),
        (None, None) => None,
    }
}

/// The spec fields in which `sent` differs from the task `holder` as the
/// daemon shows it (fields the daemon does not show are left out; sets
/// are sorted on both sides already). The daemon shows `depends_on` as
/// `upstream`, each `{task_id, ...}`; both sides' ids are compared as
/// sorted text. Empty when it cannot be read.
async fn differs(client: &Client, holder: &str, sent: &Value) -> Vec<Change> {
    let Some(view) = async {
        let reply = client.get(&paths::TASK_GET.at(&[holder])).await.ok()?;
        reply.success().ok()?.json::<Value>().ok()
    }
    .await
    else {
        return Vec::new();
    };
    let (Some(sent), Some(view)) = (sent.as_object(), view.as_object()) else {
        return Vec::new();
    };
    let upstream = view.get("upstream").and_then(Value::as_array).map(|list| {
        let ids = list.iter().map(|u| u["task_id"].clone()).collect();
        sorted_text(ids)
    });
    let held: serde_json::Map<String, Value> = sent
        .keys()
        .filter_map(|k| match (k.as_str(), &upstream) {
            ("depends_on", Some(ids)) => Some((k.clone(), ids.clone())),
            _ => Some((k.clone(), view.get(k)?.clone())),
        })
        .collect();
    let sent: serde_json::Map<String, Value> = sent
        .iter()
        .filter(|(k, _)| held.contains_key(*k))
        .map(|(k, v)| match (k.as_str(), v) {
            ("depends_on", Value::Array(ids)) => (k.clone(), sorted_text(ids.clone())),
            _ => (k.clone(), v.clone()),
        })
        .collect();
    diff::changes(&Value::Object(held), &Value::Object(sent))
}

/// `ids` sorted by their JSON text.
fn sorted_text(mut ids: Vec<Value>) -> Value {
    ids.sort_by_cached_key(Value::to_string);
    Value::Array(ids)
}

/// Why a task conflicts, and what to do about it.
fn taken(holder: &str, task: &TaskItem) -> String {
    format!(
        "{holder} already holds the idempotency key {} with another spec; an enqueued task never changes, so give the changed task a new id",
        task.idempotency_key
    )
}

fn line(task: &TaskItem, outcome: Outcome) -> Line {
    Line::new(outcome, Kind::Task, &task.id, &task.source)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tessera_importer::{NounRef, Source};

    fn task(id: &str, depends_on: &[&str]) -> TaskItem {
        TaskItem {
            id: id.into(),
            idempotency_key: format!("seed:p:{id}"),
            spec: serde_json::from_value(json!({
                "namespace": "ns", "queue": "q", "kind": "k", "effect_class": "read",
                "brief": {"a": {"noun": "s/k"}, "b": [1, {"noun": "s/k"}]},
            }))
            .unwrap(),
            depends_on: depends_on.iter().map(|s| s.to_string()).collect(),
            noun_refs: vec![
                NounRef {
                    pointer: "/a".into(),
                    store: "s".into(),
                    key: "k".into(),
                },
                NounRef {
                    pointer: "/b/1".into(),
                    store: "s".into(),
                    key: "k".into(),
                },
            ],
            source: Source::default(),
        }
    }

    #[test]
    fn layers_put_every_upstream_in_an_earlier_layer() {
        let tasks = [
            task("a", &[]),
            task("b", &["a"]),
            task("c", &[]),
            task("d", &["b", "c"]),
            task("e", &["a"]),
        ];
        assert_eq!(layers(&tasks), vec![vec![0, 2], vec![1, 4], vec![3]]);
    }

    #[test]
    fn spec_resolves_refs_and_upstreams_or_says_why_not() {
        let pin = json!({"store": "s", "key": "k", "version": 2, "sha256": "ab"});
        let pins: Pins = [(("s".to_string(), "k".to_string()), (pin.clone(), false))].into();
        let mut known = HashMap::new();
        known.insert("a", Upstream::Known(TaskId(7)));
        let (spec, partial) = spec(&task("b", &["a"]), &pins, &known, Purpose::Plan).unwrap();
        assert!(!partial);
        assert_eq!(
            (&spec["brief"], &spec["depends_on"]),
            (&json!({"a": pin, "b": [1, pin]}), &json!(["t7"]))
        );
        assert_eq!(
            (&spec["check_policy"], &spec["tags"]),
            (&json!("warn"), &json!([])),
            "every trait is sent, set or not"
        );
        known.insert("n", Upstream::New);
        let (spec, partial) =
            super::spec(&task("c", &["a", "n"]), &pins, &known, Purpose::Plan).unwrap();
        assert!(partial);
        assert_eq!(spec["depends_on"], json!(["t7"]));
        known.insert("f", Upstream::Failed);
        let err = super::spec(&task("d", &["f"]), &pins, &known, Purpose::Plan).unwrap_err();
        assert_eq!(err, "not enqueued: its upstream task \"f\" was not");
        let new: Pins = [(("s".to_string(), "k".to_string()), (pin.clone(), true))].into();
        let (spec, partial) = super::spec(&task("g", &[]), &new, &known, Purpose::Plan).unwrap();
        assert!(partial, "a pinned version a plan would write is left out");
        assert_eq!(spec["brief"], json!({"a": null, "b": [1, null]}));
        let (spec, partial) = super::spec(&task("g", &[]), &new, &known, Purpose::Apply).unwrap();
        assert!(!partial);
        assert_eq!(spec["brief"]["a"], pin);
        let err = super::spec(&task("e", &[]), &Pins::new(), &known, Purpose::Plan).unwrap_err();
        assert_eq!(err, "not enqueued: its noun s/k was not written");
        let (spec, _) =
            super::spec(&task("h", &["a", "n"]), &new, &known, Purpose::Explain).unwrap();
        assert_eq!(
            (&spec["brief"], &spec["depends_on"]),
            (
                &json!({"a": pin, "b": [1, pin]}),
                &json!(["t7", "(new task n)"])
            ),
            "an explanation shows the pin and the upstream a plan would write"
        );
    }
}
