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
//! plan or a prune of this pack fail.
//!
//! With `--prune`, an apply cancels each orphan task still pending,
//! queued or parked (`cancel?if_state=...`, decided under the queue's
//! lock, so a task a worker claimed meanwhile is left running); running
//! and finished tasks are never touched, and nouns are reported, never
//! deleted. A noun of this pack that another pack also wrote gets a
//! warning (the two imports would keep replacing each other's version).
//! `report` writes the findings as lines and JSON entries.

mod report;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::process::ExitCode;

use anyhow::Context;
use tessera_importer::Plan;

use super::Mode;
use crate::auth::keyring::key_id_of;
use crate::client::Client;
use crate::paths;
use crate::queue::{TaskId, TaskState};
use crate::store::Name;
use crate::wire::{NounList, NounSummary, TaskList, TaskView};
pub(super) use report::Report;

/// The states a prune cancels: the task has not started, or waits for input.
const PRUNABLE: [TaskState; 3] = [TaskState::Pending, TaskState::Queued, TaskState::Parked];

/// A page size for the listings.
const PAGE: usize = 1000;

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
    let (entries, summary) = report::lines(plan, &found, prune, &pruned);
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
            .get(&format!(
                "{}?{query}&limit={PAGE}{cursor}",
                paths::TASK_LIST.at(&[])
            ))
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
            .get(&format!(
                "{}?{query}&limit={PAGE}{cursor}",
                paths::NOUN_LIST.at(&[])
            ))
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
        "{}?if_state={}",
        paths::TASK_CANCEL.at(&[&t.task_id.to_string()]),
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
