//! Orphans and shared nouns: what an earlier import of this pack created
//! that the pack no longer has, and nouns another pack writes too.
//!
//! The daemon records the seed pack behind every noun version and task an
//! import writes (`?source_pack=` on the batch routes). After the items,
//! this module asks it for the pack's records in the pack's namespace
//! (`GET /v1/tasks?source_pack=`, `GET /v1/nouns?source_pack=`) and keeps
//! those the pack no longer names: tasks by idempotency key, nouns by
//! store and key.
//!
//! The label is only a label: any key that may enqueue in the namespace
//! can put `?source_pack=` on its own tasks. So an orphan task is one the
//! importing key requested (the task view's `requester`); a task another
//! key labelled with the pack is never this import's orphan, whoever
//! imports (an admin too): it gets one note per requesting key, is never
//! cancelled, and leaves the exit code alone, so no other key can make a
//! plan or a prune of this pack fail. With `--prune`, an apply cancels
//! each orphan task still
//! pending, queued or parked (`cancel?if_state=...`, decided under the
//! queue's lock, so a task a worker claimed meanwhile is left running);
//! running and finished tasks are never touched, and nouns are reported,
//! never deleted. A noun of this pack that another pack also wrote gets a
//! warning (the two imports would keep replacing each other's version).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::process::ExitCode;

use anyhow::Context;
use tessera_importer::Plan;

use super::Mode;
use crate::auth::keyring::key_id_of;
use crate::client::Client;
use crate::http::wire::{NounList, NounSummary, TaskList, TaskView};
use crate::queue::{TaskId, TaskState};
use crate::store::Name;

/// The states a prune cancels: the task has not started, or waits for input.
const PRUNABLE: [TaskState; 3] = [TaskState::Pending, TaskState::Queued, TaskState::Parked];

/// A page size for the listings.
const PAGE: usize = 1000;

/// A note about another key's labelled tasks names at most this many.
const NOTE_IDS: usize = 5;

/// What was found besides the pack's own items.
#[derive(Debug, Default)]
struct Found {
    /// Orphan tasks that have not ended, in id order.
    tasks: Vec<TaskView>,
    /// Orphan tasks that ended (left as they are, counted).
    finished: usize,
    /// Orphan nouns, in (store, key) order.
    nouns: Vec<NounSummary>,
    /// Nouns of this pack that other packs wrote too.
    shared: Vec<NounSummary>,
    /// The key may not list nouns, so none were checked.
    nouns_unchecked: bool,
    /// Tasks other keys labelled with this pack that have not ended, by
    /// requesting key, in id order: noted, never orphans.
    others: BTreeMap<Name, Vec<TaskId>>,
}

/// What a prune did to one orphan task.
#[derive(Debug)]
enum Pruned {
    /// Cancelled.
    Cancelled,
    /// Left alone: it was running or had ended when the cancel came.
    Left(String),
    /// The daemon refused the cancel.
    Failed(String),
}

/// The findings besides the pack's own items, each as a text line and as
/// a JSON entry, and the exit code.
#[derive(Debug)]
pub(super) struct Report {
    /// `items` (the import's), or 2 for a plan in which `--prune` would
    /// cancel something, or 1 when a cancel was refused.
    pub code: ExitCode,
    /// One per orphan, shared noun or note, in print order.
    pub entries: Vec<Entry>,
    /// The closing count line, when there are orphans.
    pub summary: Option<String>,
}

/// One finding: what `-o json` lists beside the pack's own entries.
#[derive(Debug, serde::Serialize)]
pub(super) struct Entry {
    /// `orphan_task`, `orphan_noun`, `shared_noun`, `other_key_tasks`
    /// or `note`.
    pub kind: &'static str,
    /// The pack's id of the task, `store/key` of the noun, or the key id
    /// that enqueued other labelled tasks.
    pub id: String,
    /// `orphan`, `cancelled`, `error`, `warning` or `note`.
    pub outcome: &'static str,
    /// The line as text prints it.
    #[serde(skip)]
    pub text: String,
}

impl Report {
    /// Prints the findings after the import's own lines.
    pub fn print(&self) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for e in &self.entries {
            let _ = writeln!(out, "{}", e.text);
        }
        if let Some(summary) = &self.summary {
            let _ = writeln!(out, "{summary}");
        }
    }
}

/// Finds, and with `prune` in an apply that went through, prunes.
pub(super) async fn run(
    client: &Client,
    plan: &Plan,
    mode: Mode,
    prune: bool,
    items: ExitCode,
) -> anyhow::Result<Report> {
    let me = client
        .bearer()
        .and_then(key_id_of)
        .context("the key given is not a Tessera key (tsk_...)")?;
    let found = find(client, plan, me).await?;
    let pruning = prune && mode == Mode::Apply && items == ExitCode::SUCCESS;
    let mut pruned = Vec::new();
    if pruning {
        for t in found.tasks.iter().filter(|t| PRUNABLE.contains(&t.state)) {
            pruned.push((t.task_id, cancel(client, t).await?));
        }
    }
    let (entries, summary) = report(plan, &found, prune, &pruned);
    let would_cancel = found.tasks.iter().any(|t| PRUNABLE.contains(&t.state));
    let code = if pruned.iter().any(|(_, p)| matches!(p, Pruned::Failed(_))) {
        ExitCode::FAILURE
    } else if mode == Mode::Plan && prune && would_cancel && items == ExitCode::SUCCESS {
        ExitCode::from(2)
    } else {
        items
    };
    Ok(Report {
        code,
        entries,
        summary,
    })
}

/// Lists the pack's records in its namespace and keeps the orphans (tasks
/// only of key `me`), the shared nouns, and the other keys' labelled tasks.
async fn find(client: &Client, plan: &Plan, me: &str) -> anyhow::Result<Found> {
    let (ns, pack) = (&plan.pack.namespace, &plan.pack.name);
    let keys: HashSet<&str> = plan
        .tasks
        .iter()
        .map(|t| t.idempotency_key.as_str())
        .collect();
    let nouns: HashSet<(&str, &str)> = plan
        .nouns
        .iter()
        .map(|n| (n.store.as_str(), n.key.as_str()))
        .collect();
    let mut found = Found::default();
    for t in tasks(client, &format!("namespace={ns}&source_pack={pack}")).await? {
        if t.requester.as_str() != me {
            if !t.state.is_terminal() {
                found.others.entry(t.requester).or_default().push(t.task_id);
            }
            continue;
        }
        if t.idempotency_key
            .as_deref()
            .is_some_and(|k| keys.contains(k))
        {
            continue;
        }
        if t.state.is_terminal() {
            found.finished += 1;
        } else {
            found.tasks.push(t);
        }
    }
    let Some(written) = listed(client, &format!("namespace={ns}&source_pack={pack}")).await? else {
        found.nouns_unchecked = true;
        return Ok(found);
    };
    found.nouns = written
        .into_iter()
        .filter(|n| !nouns.contains(&(n.store.as_str(), n.key.as_str())))
        .collect();
    let stores: BTreeSet<&str> = nouns.iter().map(|(store, _)| *store).collect();
    for store in stores {
        let in_store = listed(client, &format!("namespace={ns}&store={store}")).await?;
        found.shared.extend(
            in_store
                .unwrap_or_default()
                .into_iter()
                .filter(|n| nouns.contains(&(n.store.as_str(), n.key.as_str())))
                .filter(|n| n.source_packs.iter().any(|p| p.as_str() != pack)),
        );
    }
    Ok(found)
}

/// Every task `GET /v1/tasks?{query}` lists, page by page.
async fn tasks(client: &Client, query: &str) -> anyhow::Result<Vec<TaskView>> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let page: TaskList = client
            .get(&format!("/v1/tasks?{query}&limit={PAGE}{cursor}"))
            .await?
            .success()
            .context("listing the tasks this pack created")?
            .json()?;
        out.extend(page.tasks);
        match page.next_cursor {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return Ok(out),
        }
    }
}

/// Every noun `GET /v1/nouns?{query}` lists, page by page; `None` when
/// the key may not list nouns (no `nouns:read`).
async fn listed(client: &Client, query: &str) -> anyhow::Result<Option<Vec<NounSummary>>> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let reply = client
            .get(&format!("/v1/nouns?{query}&limit={PAGE}{cursor}"))
            .await?;
        if reply.status == http::StatusCode::FORBIDDEN {
            return Ok(None);
        }
        let page: NounList = reply
            .success()
            .context("listing the nouns of this pack's namespace")?
            .json()?;
        out.extend(page.nouns);
        match page.next_cursor {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return Ok(Some(out)),
        }
    }
}

/// Cancels one orphan task unless it started or ended meanwhile.
async fn cancel(client: &Client, t: &TaskView) -> anyhow::Result<Pruned> {
    let states: Vec<&str> = PRUNABLE.iter().map(|s| s.as_str()).collect();
    let path = format!(
        "/v1/tasks/{}/cancel?if_state={}",
        t.task_id,
        states.join(",")
    );
    let reply = client.send(http::Method::POST, &path, None, &[]).await?;
    Ok(match reply.status.as_u16() {
        200 => Pruned::Cancelled,
        409 if reply.error_code().as_deref() == Some("invalid_state") => {
            let state = reply.value()["error"]["details"]["state"]
                .as_str()
                .unwrap_or("changed")
                .to_string();
            Pruned::Left(format!(
                "it became {state} after it was listed; left as it is"
            ))
        }
        _ => Pruned::Failed(match reply.success() {
            Ok(_) => "the daemon answered without cancelling".into(),
            Err(e) => format!("cancel refused: {e}"),
        }),
    })
}

/// The task's local id in the pack (`seed:<pack>:<id>`), else its key or id.
fn local_id(plan: &Plan, t: &TaskView) -> String {
    let prefix = format!("seed:{}:", plan.pack.name);
    match t.idempotency_key.as_deref() {
        Some(k) => k.strip_prefix(&prefix).unwrap_or(k).to_string(),
        None => t.task_id.to_string(),
    }
}

/// The orphan section: a line per finding, and the count line when there
/// are orphans.
fn report(
    plan: &Plan,
    found: &Found,
    prune: bool,
    pruned: &[(TaskId, Pruned)],
) -> (Vec<Entry>, Option<String>) {
    let mut entries = Vec::new();
    let mut line = |kind: &'static str, id: String, outcome: &'static str, text: String| {
        entries.push(Entry {
            kind,
            id,
            outcome,
            text,
        });
    };
    for t in &found.tasks {
        let id = local_id(plan, t);
        let head = format!("task  {id}  ({}, {})", t.task_id, t.state.as_str());
        let done = pruned.iter().find(|(i, _)| *i == t.task_id).map(|(_, p)| p);
        let (outcome, tail) = match (done, PRUNABLE.contains(&t.state)) {
            (Some(Pruned::Cancelled), _) => ("cancelled", String::new()),
            (Some(Pruned::Left(why)), _) => ("orphan", format!("; {why}")),
            (Some(Pruned::Failed(why)), _) => ("error", format!("; {why}")),
            (None, true) if prune => ("orphan", "; an import with --prune cancels it".to_string()),
            (None, true) => ("orphan", "; --prune would cancel it".to_string()),
            (None, false) => ("orphan", "; running, so --prune leaves it".to_string()),
        };
        line(
            "orphan_task",
            id.to_string(),
            outcome,
            format!("{outcome:<11}  {head}: no longer in the pack{tail}"),
        );
    }
    for n in &found.nouns {
        line(
            "orphan_noun",
            format!("{}/{}", n.store, n.key),
            "orphan",
            format!(
                "{:<11}  noun  {}/{}  (version {}): no longer in the pack; nouns are never deleted",
                "orphan", n.store, n.key, n.latest.version
            ),
        );
    }
    for n in &found.shared {
        let others: Vec<&str> = n
            .source_packs
            .iter()
            .map(|p| p.as_str())
            .filter(|p| *p != plan.pack.name)
            .collect();
        let latest = match &n.latest.source_pack {
            Some(p) if p.as_str() != plan.pack.name => {
                format!("; pack {p} wrote the latest version ({})", n.latest.version)
            }
            _ => String::new(),
        };
        line(
            "shared_noun",
            format!("{}/{}", n.store, n.key),
            "warning",
            format!(
                "{:<11}  noun  {}/{}: also written by pack {}{latest}; two packs writing one noun replace each other's versions",
                "warning",
                n.store,
                n.key,
                others.join(", ")
            ),
        );
    }
    for (key, ids) in &found.others {
        line(
            "other_key_tasks",
            key.to_string(),
            "note",
            format!(
                "{:<11}  {}: labelled with pack {} by key {key}, not by this key; not orphans of this import, so --prune leaves them",
                "note",
                task_ids(ids),
                plan.pack.name
            ),
        );
    }
    if found.nouns_unchecked {
        line(
            "note",
            String::new(),
            "note",
            format!(
                "{:<11}  nouns were not checked for orphans or other packs: listing them needs nouns:read",
                "note"
            ),
        );
    }
    if found.tasks.is_empty() && found.nouns.is_empty() {
        return (entries, None);
    }
    let cancelled = pruned
        .iter()
        .filter(|(_, p)| matches!(p, Pruned::Cancelled))
        .count();
    let finished = match found.finished {
        0 => String::new(),
        n => format!(" ({n} more ended and are left as they are)"),
    };
    let summary = format!(
        "orphans: {} tasks{finished}, {} nouns no longer in the pack{}",
        found.tasks.len(),
        found.nouns.len(),
        if pruned.is_empty() {
            String::new()
        } else {
            format!("; {cancelled} tasks cancelled")
        }
    );
    (entries, Some(summary))
}

/// `task t7` or `tasks t7, t9, ... and 3 more`.
fn task_ids(ids: &[TaskId]) -> String {
    let shown: Vec<String> = ids.iter().take(NOTE_IDS).map(|id| id.to_string()).collect();
    let more = match ids.len().saturating_sub(NOTE_IDS) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    match ids.len() {
        1 => format!("task {}", shown[0]),
        _ => format!("tasks {}{more}", shown.join(", ")),
    }
}
