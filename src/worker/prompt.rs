//! The prompt a worker fetches, assembled at fetch time from the task, its
//! brief, the contract noun it pins and the current state of its upstream
//! tasks and children, so an upstream that finished after the claim shows
//! up. `steps[]` point at finished outputs (their files and hashes), never
//! their content; the task itself is never among them. Fetching it also
//! creates the task's work dir (`area::make_work_dir`).

use serde_json::{Value, json};

use super::output::read_receipt;
use super::{Error, area, step_name};
use crate::auth::{Principal, access};
use crate::queue::{State, Task, placement};
use crate::store::{Pin, Store};

/// What the prompt needs from the queue, copied out under its lock.
#[derive(Clone, Debug)]
pub struct Facts {
    /// The task.
    pub task: Task,
    /// Its attempt limit.
    pub max_attempts: u32,
    /// Upstream tasks, then children, as they are now.
    pub related: Vec<Task>,
}

impl Facts {
    /// Copies what the prompt needs out of the queue state: the related
    /// tasks the claiming key may see (a step never points at a task the
    /// worker's principal could not read itself).
    pub fn gather(st: &State, task: &Task, holder: &Principal) -> Facts {
        let related = task
            .spec
            .depends_on
            .iter()
            .chain(&task.children)
            .filter(|id| **id != task.id)
            .filter_map(|id| st.tasks.get(id))
            .filter(|r| access::sees_task(holder, &st.facts(r)))
            .cloned()
            .collect();
        Facts {
            task: task.clone(),
            max_attempts: st.max_attempts(task),
            related,
        }
    }
}

/// Assembles `{task_id, attempt, agent, system, prompt, context}`, first
/// creating the task's work dir if it is missing. `context.project_root`
/// is the namespace area, `context.work_dir` the work dir (both absolute).
pub fn assemble(store: &Store, facts: &Facts, holder: &Principal) -> Result<Value, Error> {
    let t = &facts.task;
    let ns = &t.spec.namespace;
    let work_dir =
        area::make_work_dir(store, ns, t.id).map_err(|reason| Error::WorkDirUnavailable {
            path: area::shown(ns, &placement::work_dir(t.id)),
            reason,
        })?;
    let brief = t.spec.brief_value();
    let contract = brief
        .get("contract_ref")
        .and_then(|v| serde_json::from_value::<Pin>(v.clone()).ok())
        .and_then(|pin| read_contract(store, &pin, t, holder));
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let prompt = text(brief.get("directive"))
        .or_else(|| text(contract.as_ref().and_then(|c| c.get("directive"))))
        .unwrap_or_else(|| serde_json::to_string_pretty(&brief).expect("briefs serialize"));
    let system = text(contract.as_ref().and_then(|c| c.get("system_prompt")));
    let agent = text(brief.get("agent")).unwrap_or_else(|| t.spec.kind.to_string());
    let steps: Vec<Value> = facts
        .related
        .iter()
        .filter(|r| r.state.is_terminal())
        .map(|r| step_pointer(store, r, &store.root().absolute))
        .collect();
    Ok(json!({
        "task_id": t.id,
        "attempt": t.attempt.0,
        "agent": agent,
        "system": system,
        "prompt": prompt,
        "context": {
            "project_root": area::absolute(store, ns, ""),
            "work_dir": work_dir,
            "task_metadata": {
                "task_id": t.id,
                "namespace": t.spec.namespace,
                "queue": t.spec.queue,
                "kind": t.spec.kind,
                "step": step_name(t.spec.kind.as_str(), &brief).ok(),
                "effect_class": t.spec.effect_class,
                "tags": t.spec.tags,
                "target_cohorts": t.spec.target_cohorts,
                "priority": t.spec.priority,
                "attempt": t.attempt.0,
                "max_attempts": facts.max_attempts,
                "parent": t.parent,
                "lease_expires_at": t.lease.as_ref().map(|l| l.expires_at),
            },
            "steps": steps,
        },
    }))
}

fn read_contract(store: &Store, pin: &Pin, t: &Task, holder: &Principal) -> Option<Value> {
    let ns = pin
        .namespace
        .clone()
        .unwrap_or_else(|| t.spec.namespace.clone());
    let bytes = store
        .read_pin::<super::Error>(pin, &t.spec.namespace, |entry| {
            access::may_read_nouns(holder, &ns)?;
            Ok(access::read_noun(holder, entry)?)
        })
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A pointer to a finished task's output.
fn step_pointer(store: &Store, r: &Task, root: &std::path::Path) -> Value {
    let receipt = r
        .receipts
        .last()
        .and_then(|sha| read_receipt(store, sha).ok());
    let get = |k: &str| {
        receipt
            .as_ref()
            .map(|rc| rc[k].clone())
            .unwrap_or(Value::Null)
    };
    let name = get("step")
        .as_str()
        .map(str::to_string)
        .or_else(|| step_name(r.spec.kind.as_str(), &r.spec.brief_value()).ok())
        .unwrap_or_else(|| r.spec.kind.to_string());
    let projection = get("projection");
    let file_path = (projection["status"] == "written")
        .then(|| {
            projection["path"]
                .as_str()
                .map(|p| root.join(p).join(format!("{name}.md")))
        })
        .flatten();
    let out = get("out");
    json!({
        "name": name,
        "task_id": r.id,
        "state": r.state,
        "ok": r.ok(),
        "file_path": file_path,
        "sha256": out["sha256"],
        "size_bytes": out["size"],
    })
}
