//! How the orphan section reads: one line per orphan task, orphan noun,
//! shared noun and note, in text and as `-o json` entries, and the count
//! line. What is found, and what a prune does, is the parent module's.

use std::process::ExitCode;

use tessera_importer::Plan;

use super::{Found, PRUNABLE, Pruned};
use crate::queue::TaskId;
use crate::wire::TaskView;

/// A note about another key's labelled tasks names at most this many.
const NOTE_IDS: usize = 5;

/// The findings besides the pack's own items, each as a text line and as
/// a JSON entry, and the exit code.
#[derive(Debug)]
pub(in crate::cli::import) struct Report {
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
pub(in crate::cli::import) struct Entry {
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
    pub(in crate::cli::import) fn print(&self) {
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
pub(super) fn lines(
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
