//! `tessera task enqueue|list|show|receipts|output|cancel|retry|release`:
//! thin clients of the task routes (`enqueue` builds its spec in
//! `cli/enqueue.rs`).

use std::process::ExitCode;

use anyhow::bail;
use clap::{Args, Subcommand};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::enqueue::{self, EnqueueArgs};
use super::remote::RemoteArgs;
use super::table::{self, Format, OutputArgs, Table};
use crate::client::Client;
use crate::paths;
use crate::queue::TaskState;
use crate::wire::{LeaseRef, StateReply, TaskList, TaskView};

/// Task subcommands.
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Enqueue a task from a TaskSpec file (JSON or YAML) and/or flags.
    Enqueue(Box<EnqueueArgs>),
    /// Tasks the key may see, oldest first, filtered.
    List(ListArgs),
    /// One task: state, attempt, envelope, lease, relations.
    Show(TaskArgs),
    /// A task's receipts, in order.
    Receipts(TaskArgs),
    /// A finished task's output: the final body and its named parts.
    Output(OutputCmd),
    /// Cancel a task and its live descendants (requester or admin).
    Cancel(TaskArgs),
    /// Queue a failed or cancelled task again, as a new attempt (requester or admin).
    Retry(TaskArgs),
    /// End a claimed task's lease and queue it again (its holder, or admin).
    Release(ReleaseArgs),
}

/// A command on one task.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// The task id (such as t7).
    id: String,
    #[command(flatten)]
    out: OutputArgs,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// Arguments of `task list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this queue.
    #[arg(long)]
    queue: Option<String>,
    /// Only this kind.
    #[arg(long)]
    kind: Option<String>,
    /// Only this state.
    #[arg(long, value_parser = parse_state)]
    state: Option<TaskState>,
    /// Only this namespace.
    #[arg(long)]
    namespace: Option<String>,
    /// At most this many tasks (pages are fetched until reached).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    #[command(flatten)]
    out: OutputArgs,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// Arguments of `task output`.
#[derive(Debug, Args)]
pub struct OutputCmd {
    #[command(flatten)]
    task: TaskArgs,
    /// Print only this part's value (`out` for the final body), raw.
    #[arg(long)]
    part: Option<String>,
}

/// Arguments of `task release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    task: TaskArgs,
    /// The lease to end; by default the task's current lease (its holder
    /// and admin keys can see it).
    #[arg(long)]
    lease_id: Option<String>,
}

/// The answer to a retry (`POST /v1/tasks/{id}/retry`).
#[derive(Debug, Serialize, Deserialize)]
struct Retried {
    task_id: String,
    state: TaskState,
    attempt: u32,
}

fn parse_state(s: &str) -> Result<TaskState, String> {
    s.parse()
}

fn task_path(id: &str, tail: &str) -> String {
    format!("{}{tail}", paths::TASK_GET.at(&[id]))
}

/// Runs a task subcommand.
pub async fn run(cmd: TaskCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        TaskCommand::Enqueue(a) => enqueue::run(*a).await?,
        TaskCommand::List(a) => list(a).await?,
        TaskCommand::Show(a) => {
            let v: TaskView = get(&a, "").await?;
            table::print(a.out.output, &v, |t| fields(t, Timestamp::now()));
        }
        TaskCommand::Receipts(a) => {
            let v: Value = get(&a, "/receipts").await?;
            table::print(a.out.output, &v, receipts);
        }
        TaskCommand::Output(a) => output(a).await?,
        TaskCommand::Cancel(a) => {
            let r: StateReply = post(&a, "/cancel", &json!({})).await?;
            said(
                a.out.output,
                &r,
                format!("{} {}", r.task_id, r.state.as_str()),
            );
        }
        TaskCommand::Retry(a) => {
            let r: Retried = post(&a, "/retry", &json!({})).await?;
            let line = format!("{} {} (attempt {})", r.task_id, r.state.as_str(), r.attempt);
            said(a.out.output, &r, line);
        }
        TaskCommand::Release(a) => {
            let lease_id = match a.lease_id {
                Some(l) => l,
                None => current_lease(&a.task).await?,
            };
            let r: StateReply = post(&a.task, "/release", &LeaseRef { lease_id }).await?;
            let line = format!("{} {} (lease released)", r.task_id, r.state.as_str());
            said(a.task.out.output, &r, line);
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn get<T: serde::de::DeserializeOwned>(a: &TaskArgs, tail: &str) -> anyhow::Result<T> {
    let client: Client = a.remote.client()?;
    Ok(client
        .get(&task_path(&a.id, tail))
        .await?
        .success()?
        .json()?)
}

async fn post<T: serde::de::DeserializeOwned>(
    a: &TaskArgs,
    tail: &str,
    body: &impl Serialize,
) -> anyhow::Result<T> {
    let client = a.remote.client()?;
    Ok(client
        .post_json(&task_path(&a.id, tail), body)
        .await?
        .success()?
        .json()?)
}

/// Prints a change's answer: the JSON, or one line for people.
fn said<T: Serialize>(format: Format, reply: &T, line: String) {
    match format {
        Format::Json => table::print(format, reply, |_| Table::new(&[""; 0])),
        Format::Table => println!("{line}"),
    }
}

/// The id of the task's live lease, as the key sees it.
async fn current_lease(a: &TaskArgs) -> anyhow::Result<String> {
    let v: TaskView = get(a, "").await?;
    match v.lease {
        Some(l) => match l.id {
            Some(id) => Ok(id),
            None => bail!(
                "{} is held by key {}, whose lease id this key may not see; use that key or an admin key, or pass --lease-id",
                v.task_id,
                l.holder
            ),
        },
        None => bail!(
            "{} is {}, not claimed: it holds no lease to release",
            v.task_id,
            v.state.as_str()
        ),
    }
}

async fn list(a: ListArgs) -> anyhow::Result<()> {
    let client = a.remote.client()?;
    let mut query: Vec<(&str, String)> = Vec::new();
    for (k, v) in [
        ("queue", a.queue),
        ("kind", a.kind),
        ("state", a.state.map(|s| s.as_str().to_string())),
        ("namespace", a.namespace),
    ] {
        if let Some(v) = v {
            query.push((k, v));
        }
    }
    let mut tasks: Vec<TaskView> = Vec::new();
    let mut cursor: Option<String> = None;
    while tasks.len() < a.limit {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in &query {
            q.append_pair(k, v);
        }
        q.append_pair("limit", &(a.limit - tasks.len()).min(1000).to_string());
        if let Some(c) = &cursor {
            q.append_pair("cursor", c);
        }
        let page: TaskList = client
            .get(&format!("{}?{}", paths::TASK_LIST.at(&[]), q.finish()))
            .await?
            .success()?
            .json()?;
        tasks.extend(page.tasks);
        match page.next_cursor {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let now = Timestamp::now();
    table::print(a.out.output, &tasks, |ts| {
        let mut t = Table::new(&[
            "TASK",
            "STATE",
            "QUEUE",
            "KIND",
            "NAMESPACE",
            "ATTEMPT",
            "PRIORITY",
            "UPDATED",
        ]);
        for v in ts {
            t.row(vec![
                v.task_id.to_string(),
                v.state.as_str().into(),
                v.queue
                    .as_ref()
                    .map_or_else(|| "-".into(), ToString::to_string),
                v.kind.to_string(),
                v.namespace.to_string(),
                format!("{}/{}", v.attempt, v.max_attempts),
                v.traits.priority.to_string(),
                format!("{} ago", table::ago(v.updated_at, now)),
            ]);
        }
        t
    });
    Ok(())
}

/// A task as FIELD / VALUE rows.
fn fields(v: &TaskView, now: Timestamp) -> Table {
    let mut t = Table::new(&["FIELD", "VALUE"]);
    let related = |r: &[crate::wire::Related]| {
        table::list(
            &r.iter()
                .map(|r| match r.state {
                    Some(s) => format!("{} ({})", r.task_id, s.as_str()),
                    None => r.task_id.to_string(),
                })
                .collect::<Vec<_>>(),
        )
    };
    let opt = |o: Option<String>| o.unwrap_or_else(|| "-".into());
    let rows = [
        ("task", v.task_id.to_string()),
        ("state", v.state.as_str().into()),
        ("attempt", format!("{} of {}", v.attempt, v.max_attempts)),
        ("namespace", v.namespace.to_string()),
        ("queue", opt(v.queue.as_ref().map(ToString::to_string))),
        ("kind", v.kind.to_string()),
        ("effect_class", table::word(&v.effect_class)),
        (
            "producer_surface",
            opt(v.producer_surface.as_ref().map(ToString::to_string)),
        ),
        ("visibility_scope", table::word(&v.visibility_scope)),
        ("allowed_surfaces", table::list(&v.allowed_surfaces)),
        ("priority", v.traits.priority.to_string()),
        ("tags", table::list(&v.traits.tags)),
        ("idempotency_key", opt(v.idempotency_key.clone())),
        ("requester", v.requester.to_string()),
        (
            "lease",
            opt(v.lease.as_ref().map(|l| {
                format!(
                    "held by {} until {} (fence {})",
                    l.holder, l.expires_at, l.fence
                )
            })),
        ),
        ("not_before", opt(v.not_before.map(|t| t.to_string()))),
        ("parent", opt(v.parent.map(|p| p.to_string()))),
        ("children", related(&v.children)),
        ("upstream", related(&v.upstream)),
        ("receipts", v.receipts.len().to_string()),
        ("reason", opt(v.reason.clone())),
        ("park", opt(v.park.as_ref().map(|p| p.reason.clone()))),
        (
            "created",
            format!("{} ({} ago)", v.created_at, table::ago(v.created_at, now)),
        ),
        (
            "updated",
            format!("{} ({} ago)", v.updated_at, table::ago(v.updated_at, now)),
        ),
        ("brief", v.brief.get().to_string()),
    ];
    for (k, val) in rows {
        t.row(vec![k.into(), val]);
    }
    t
}

/// Why a receipt's attempt failed: each failed check's name and detail
/// (the field, the rule and what was found), else the daemon's failure,
/// else the worker's note; `-` for a success.
fn why(rec: &Value) -> String {
    if rec["ok"] == Value::Bool(true) {
        return "-".into();
    }
    let failed: Vec<String> = rec["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["ok"] == Value::Bool(false))
        .map(|c| {
            format!(
                "{}: {}",
                c["name"].as_str().unwrap_or("?"),
                c["detail"].as_str().unwrap_or("")
            )
        })
        .collect();
    if !failed.is_empty() {
        return failed.join("; ");
    }
    [&rec["failure"], &rec["note"]]
        .into_iter()
        .find_map(Value::as_str)
        .map_or_else(
            || "the worker reported a failure, without a note".into(),
            str::to_string,
        )
}

/// `GET /v1/tasks/{id}/receipts` as rows.
fn receipts(v: &Value) -> Table {
    let mut t = Table::new(&[
        "ATTEMPT", "STATE", "OK", "BY_KEY", "AT", "OUTPUTS", "EVIDENCE", "SHA256", "WHY",
    ]);
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let count = |v: &Value| v.as_array().map_or(0, Vec::len).to_string();
    for r in v["receipts"].as_array().into_iter().flatten() {
        let rec = &r["receipt"];
        t.row(vec![
            text(&rec["attempt"]),
            text(&rec["state"]),
            text(&rec["ok"]),
            text(&rec["by_key"]),
            text(&rec["at"]),
            count(&rec["outputs"]),
            count(&rec["evidence"]),
            text(&r["sha256"]),
            why(rec),
        ]);
    }
    t
}

async fn output(a: OutputCmd) -> anyhow::Result<()> {
    let v: Value = get(&a.task, "/output").await?;
    if let Some(part) = &a.part {
        let value = if part == "out" {
            &v["out"]
        } else {
            match v["parts"].get(part) {
                Some(p) => p,
                None => bail!(
                    "{} has no part {part:?}; its parts: {}",
                    a.task.id,
                    table::list(&part_names(&v))
                ),
            }
        };
        match value {
            Value::String(s) => print!("{s}"),
            other => println!("{}", serde_json::to_string_pretty(other)?),
        }
        return Ok(());
    }
    table::print(a.task.out.output, &v, |v| {
        let mut t = Table::new(&["PART", "TYPE", "BYTES", "VALUE"]);
        let mut row = |name: &str, value: &Value| {
            let (kind, text) = match value {
                Value::String(s) => ("text", s.clone()),
                Value::Null => ("none", String::new()),
                other => ("json", other.to_string()),
            };
            let preview: String = text.replace('\n', "\\n").chars().take(60).collect();
            let more = if text.chars().count() > 60 { "…" } else { "" };
            t.row(vec![
                name.into(),
                kind.into(),
                text.len().to_string(),
                format!("{preview}{more}"),
            ]);
        };
        row("out", &v["out"]);
        for name in part_names(v) {
            row(&name, &v["parts"][&name]);
        }
        t
    });
    Ok(())
}

fn part_names(v: &Value) -> Vec<String> {
    v["parts"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}
