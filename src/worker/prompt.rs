//! The prompt a worker fetches, assembled at fetch time from the task, its
//! brief, the contract noun it pins and the current state of its upstream
//! tasks and children, so an upstream that finished after the claim shows
//! up. `steps[]` point at finished outputs (their files, hashes and the
//! output and evidence pins of their receipts), never their content; the
//! task itself is never among them. Fetching it also creates the task's
//! work dir (`area::make_work_dir`).
//!
//! A flow step's `consumes` are resolved here too ([`consumes`]): pointers
//! to the upstream outputs it reads, small ones inline.
//!
//! Everything is read as the claiming key: the brief (which that key sees
//! with the task), the contract (its directive for this task's step, its
//! schemas and expected parts, only when the key may read it) and the
//! [`shim`] of the pinned contract and input. The instruction (`prompt`)
//! is the step's own: `brief.directive`, else the contract's directive for
//! this step ([`Contract::directive_for`]), else the brief itself; a step
//! the contract does not address (a `verify_gate` reviewing a
//! `solve_draft`) never gets the solver's instruction.

use std::path::PathBuf;

use jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use super::contract::Contract;
use super::{Error, area, consumes, pins, shim};
use crate::auth::EffectClass;
use crate::auth::Principal;
use crate::queue::SpecRules;
use crate::queue::receipt::ProjectionStatus;
use crate::queue::{Queue, Receipt, Task, TaskId, TaskState, Traits, placement};
use crate::store::{Name, Pin, Sha256, Store};

/// `GET /v1/worker/prompt`: a claimed attempt's prompt, assembled at fetch
/// time.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Prompt {
    /// The task.
    pub task_id: TaskId,
    /// The attempt the credential is bound to.
    pub attempt: u32,
    /// The agent to run: the brief's `agent`, else the task's kind.
    pub agent: String,
    /// The contract's system prompt, when it has one the claimant may read.
    pub system: Option<String>,
    /// The instruction: the brief's directive, else the contract's for this
    /// step, else the brief itself as JSON text.
    pub prompt: String,
    /// The step's name (the brief's `step`, else from the kind).
    #[schema(value_type = String)]
    pub step: Name,
    /// The brief.
    #[schema(value_type = Object)]
    pub brief: Value,
    /// The pinned contract as the claimant sees it: `{pin, name,
    /// directive, input_schema, output_schema, parts}`, or `{pin,
    /// unavailable}` when it may not read it; `null` without a contract.
    #[schema(value_type = Option<Object>)]
    pub contract: Option<Value>,
    /// Each pin of the brief, as the claimant sees it: `{field, pin, ...}`.
    #[schema(value_type = Vec<Object>)]
    pub shim: Vec<Value>,
    /// The flow step's `consumes`, resolved: pointers to the upstream
    /// outputs it reads, small ones inline.
    #[schema(value_type = Vec<Object>)]
    pub consumes: Vec<Value>,
    /// Where it runs and what it follows.
    pub context: PromptContext,
}

/// Where an attempt runs, what it is, and the finished steps it follows.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct PromptContext {
    /// The namespace area, absolute.
    #[schema(value_type = String)]
    pub project_root: PathBuf,
    /// The task's work dir, absolute (made when the prompt is fetched).
    #[schema(value_type = String)]
    pub work_dir: PathBuf,
    /// The task's descriptive fields and its attempt.
    pub task_metadata: TaskMetadata,
    /// Pointers to the related tasks that have finished.
    pub steps: Vec<StepPointer>,
}

/// What a worker knows of the task it runs.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct TaskMetadata {
    /// The task.
    pub task_id: TaskId,
    /// Its namespace.
    #[schema(value_type = String)]
    pub namespace: Name,
    /// Its queue.
    #[schema(value_type = String)]
    pub queue: Name,
    /// Its kind.
    #[schema(value_type = String)]
    pub kind: Name,
    /// Its step's name.
    #[schema(value_type = String)]
    pub step: Name,
    /// Its effect class.
    pub effect_class: EffectClass,
    /// Its priority, labels and run settings (top-level fields).
    #[serde(flatten)]
    #[schema(inline)]
    pub traits: Traits,
    /// This attempt.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// The task it was split from.
    pub parent: Option<TaskId>,
    /// When the lease ends unless extended.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub lease_expires_at: Option<Timestamp>,
}

/// A pointer to a finished task's output, never its content.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct StepPointer {
    /// The step's name.
    pub name: String,
    /// The task.
    pub task_id: TaskId,
    /// Its state.
    pub state: TaskState,
    /// Whether it succeeded; `null` while it has not ended.
    pub ok: Option<bool>,
    /// Its projected file, when its output was written to one.
    #[schema(value_type = Option<String>)]
    pub file_path: Option<PathBuf>,
    /// Its final body's hash.
    pub sha256: Option<Sha256>,
    /// Its final body's size.
    pub size_bytes: Option<u64>,
    /// The output pins of its last receipt.
    pub outputs: Vec<Pin>,
    /// The evidence pins of its last receipt.
    pub evidence: Vec<Pin>,
}

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
    /// What the prompt needs of `task` (the session's copy): from the
    /// queue, its attempt limit and the related tasks the claiming key may
    /// see (a step never points at a task the worker's principal could not
    /// read itself).
    pub async fn gather(
        queue: &Queue,
        task: Task,
        holder: &Principal,
    ) -> Result<Facts, crate::queue::JournalError> {
        let (max_attempts, related) = queue.related(&task, &holder.viewer).await?;
        Ok(Facts {
            task,
            max_attempts,
            related,
        })
    }
}

/// Assembles `{task_id, attempt, agent, system, prompt, step, brief,
/// contract, shim, consumes, context}`, first
/// creating the task's work dir if it is missing. `context.project_root`
/// is the namespace area, `context.work_dir` the work dir (both absolute).
pub fn assemble(store: &Store, facts: &Facts, holder: &Principal) -> Result<Prompt, Error> {
    let t = &facts.task;
    let ns = &t.spec.namespace;
    let work_dir = area::make_work_dir(store, ns, t.id).map_err(|e| match e {
        area::Unplaced::Blocked(reason) => Error::WorkDirUnavailable {
            path: area::shown(ns, &placement::work_dir(t.id)),
            reason,
        },
        area::Unplaced::Storage(e) => Error::Store(e),
    })?;
    let brief = t.spec.brief();
    let step = t.spec.step_name();
    let readable = |pin| match pins::read_as(store, holder, pin, ns) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if pins::is_unreadable(&e) => Ok(None),
        Err(e) => Err(e),
    };
    let contract = match &brief.contract_ref {
        Some(pin) => readable(pin)?.map(|bytes| Contract::parse(&bytes)),
        None => None,
    };
    let step_directive = contract
        .as_ref()
        .and_then(|c| c.directive_for(step.as_str()));
    let prompt = brief
        .directive
        .clone()
        .or_else(|| step_directive.map(str::to_string))
        .unwrap_or_else(|| t.spec.brief.get().to_string());
    let system = contract.as_ref().and_then(|c| c.system_prompt.clone());
    let agent = brief
        .agent
        .clone()
        .unwrap_or_else(|| t.spec.kind.to_string());
    let contract_view = brief.contract_ref.as_ref().map(|pin| match &contract {
        Some(c) => json!({
            "pin": pin.qualified(ns),
            "name": c.doc.get("contract"),
            "directive": step_directive,
            "input_schema": c.input_schema,
            "output_schema": c.output_schema,
            "parts": c.parts.clone().unwrap_or_default(),
        }),
        None => json!({"pin": pin.qualified(ns), "unavailable": shim::UNREADABLE}),
    });
    let shim = brief
        .pins()
        .iter()
        .map(|(field, pin)| shim::entry(store, holder, field, pin, ns))
        .collect::<Result<Vec<Value>, Error>>()?;
    let consumed = consumes::resolve(store, t, &facts.related)?;
    let steps = facts
        .related
        .iter()
        .filter(|r| r.state.is_terminal())
        .map(|r| step_pointer(store, r, &store.root().absolute))
        .collect();
    Ok(Prompt {
        task_id: t.id,
        attempt: t.attempt.0,
        agent,
        system,
        prompt,
        step: step.clone(),
        brief: serde_json::from_str::<Value>(t.spec.brief.get()).unwrap_or(Value::Null),
        contract: contract_view,
        shim,
        consumes: consumed,
        context: PromptContext {
            project_root: area::absolute(store, ns, ""),
            work_dir,
            task_metadata: TaskMetadata {
                task_id: t.id,
                namespace: t.spec.namespace.clone(),
                queue: t.spec.queue.clone(),
                kind: t.spec.kind.clone(),
                step,
                effect_class: t.spec.effect_class,
                traits: t.spec.traits.clone(),
                attempt: t.attempt.0,
                max_attempts: facts.max_attempts,
                parent: t.parent,
                lease_expires_at: t.lease.as_ref().map(|l| l.expires_at),
            },
            steps,
        },
    })
}

/// A pointer to a finished task's output.
fn step_pointer(store: &Store, r: &Task, root: &std::path::Path) -> StepPointer {
    let receipt = r
        .receipts
        .last()
        .and_then(|sha| Receipt::read(store, sha).ok());
    let name = receipt
        .as_ref()
        .and_then(|rc| rc.step.clone())
        .unwrap_or_else(|| r.spec.step_name().to_string());
    if let Some(rc) = &receipt {
        super::audit::ensure_ctx(store, &r.spec.namespace, rc);
    }
    let projection = receipt.as_ref().and_then(|rc| rc.projection.as_ref());
    let file_path = projection
        .filter(|p| p.status == ProjectionStatus::Written)
        .map(|p| root.join(&p.path).join(format!("{name}.md")));
    let out = receipt.as_ref().and_then(|rc| rc.out);
    let pins = |f: fn(&Receipt) -> &Vec<Pin>| receipt.as_ref().map(f).cloned().unwrap_or_default();
    StepPointer {
        task_id: r.id,
        state: r.state,
        ok: r.ok(),
        file_path,
        sha256: out.map(|o| o.sha256),
        size_bytes: out.map(|o| o.size),
        outputs: pins(|rc| &rc.outputs),
        evidence: pins(|rc| &rc.evidence),
        name,
    }
}
