//! Ctx-dirs against the receipts that name them: `tessera fsck` reports a
//! ctx-dir whose files are not exactly the result of the latest receipt
//! that wrote it, and after a restart [`settle`] makes sure no ctx-dir
//! holds a result no receipt records.

use cap_std::fs::Dir;

use super::area::{self, Entry, Kind};
use super::front_matter;
use super::projection::{self, Projection};
use crate::queue::SpecRules;
use crate::queue::receipt::ProjectionStatus;
use crate::queue::{Receipt, TaskId, Walk, placement};
use crate::store::{Name, Sha256, Store};

/// The receipts whose result a ctx-dir should hold: for each path the
/// task's projections wrote, the latest receipt that wrote it. A receipt
/// that projected nothing (the key route's, or one whose projection was
/// skipped) leaves the directory as the one before it left it, so it is
/// never the one a directory is held to. `receipts` are oldest first.
pub fn latest_written(receipts: impl IntoIterator<Item = Receipt>) -> Vec<Receipt> {
    let mut latest: Vec<Receipt> = Vec::new();
    for r in receipts {
        let Some(path) = written_path(&r) else {
            continue;
        };
        latest.retain(|l| written_path(l) != Some(path));
        latest.push(r);
    }
    latest
}

/// The ctx-dir a receipt's projection wrote, if it wrote one.
fn written_path(r: &Receipt) -> Option<&str> {
    r.projection
        .as_ref()
        .filter(|p| p.status == ProjectionStatus::Written)
        .map(|p| p.path.as_str())
}

/// Whether the ctx-dir the receipt says was written holds exactly its
/// result: `<step>.md` with this task, attempt and body hash, and each
/// part with its hash. `Ok` when the receipt projected nothing.
pub fn check_ctx(store: &Store, receipt: &Receipt) -> Result<(), String> {
    let Some(path) = written_path(receipt) else {
        return Ok(());
    };
    let rel = path
        .strip_prefix("workspace/")
        .ok_or_else(|| format!("the receipt names {path} outside workspace/"))?;
    let dir = store
        .root()
        .workspace
        .open_dir(rel)
        .map_err(|e| format!("the ctx-dir cannot be opened: {e}"))?;
    holds(&dir, receipt)
}

/// Whether `dir` holds exactly the result `receipt` recorded.
fn holds(dir: &Dir, receipt: &Receipt) -> Result<(), String> {
    let (Some(step), Some(out)) = (&receipt.step, &receipt.out) else {
        return Err("the receipt names no step or body".into());
    };
    let file = format!("{step}.md");
    let bytes = dir
        .read(&file)
        .map_err(|e| format!("{file} cannot be read: {e}"))?;
    let (header, body) =
        front_matter::decode(&bytes).ok_or_else(|| format!("{file} has no front matter"))?;
    if header.task_id != receipt.task_id.to_string() || header.attempt != receipt.attempt.0 {
        return Err(format!(
            "{file} is from {} attempt {}, the receipt from {} attempt {}",
            header.task_id, header.attempt, receipt.task_id, receipt.attempt.0
        ));
    }
    if Sha256::of(body) != out.sha256 {
        return Err(format!("{file}'s body does not hash to the receipt's out"));
    }
    if header.step != *step
        || header.ok != receipt.ok
        || header.sha256 != out.sha256.hex()
        || header.size != out.size
    {
        return Err(format!(
            "{file}'s front matter (step, ok, sha256, size) differs from its receipt's"
        ));
    }
    for (name, sha) in receipt.parts.iter().flatten() {
        let part = dir
            .read(name)
            .map_err(|e| format!("part {name} cannot be read: {e}"))?;
        if Sha256::of(&part) != *sha {
            return Err(format!("part {name} does not hash to the receipt's"));
        }
    }
    Ok(())
}

/// An unfinished task whose ctx-dir a crash may have left ahead of the
/// journal (a submit projected, then the daemon died before the record).
#[derive(Clone, Debug)]
pub struct Unsettled {
    /// The task.
    pub id: TaskId,
    /// Its namespace.
    pub namespace: Name,
    /// Its ctx-dir template.
    pub template: String,
    /// Its step name.
    pub step: String,
    /// Its receipts, oldest first.
    pub receipts: Vec<Sha256>,
}

impl Unsettled {
    /// The unfinished tasks that have been claimed at least once.
    pub fn of(tasks: Walk<'_>) -> Vec<Unsettled> {
        tasks
            .tasks()
            .filter(|t| !t.state.is_terminal() && t.attempt.0 > 0)
            .map(|t| Unsettled {
                id: t.id,
                namespace: t.spec.namespace.clone(),
                template: tasks.template_of(&t.spec),
                step: t.spec.step_name().to_string(),
                receipts: t.receipts.clone(),
            })
            .collect()
    }
}

/// After a restart, makes each unsettled task's ctx-dir hold exactly what
/// the journal recorded there: the result of the latest receipt whose
/// projection wrote that directory ([`latest_written`]; projected again
/// from the receipt's objects when the directory says otherwise), or no
/// result when no receipt wrote it (a projection whose submit was never
/// recorded is removed). A receipt that projected nothing (the key
/// route's, a skipped projection's) changes nothing here, as it changed
/// nothing when it was written. Only directories carrying the task's own
/// ctx mark are touched, and nothing is removed while a receipt cannot be
/// read. Returns one line per directory changed or left in doubt.
pub fn settle(store: &Store, tasks: &[Unsettled]) -> Vec<String> {
    tasks.iter().filter_map(|t| settle_one(store, t)).collect()
}

fn settle_one(store: &Store, t: &Unsettled) -> Option<String> {
    let rel = placement::resolve(&t.template, t.id);
    let (parent_rel, name) = rel.rsplit_once('/').unwrap_or(("", rel.as_str()));
    let segs: Vec<&str> = parent_rel.split('/').filter(|s| !s.is_empty()).collect();
    let parent = area::walk(store, &t.namespace, &segs, false).ok()??;
    let at = area::shown(&t.namespace, &rel);
    match area::entry(&parent, name, &at) {
        Ok(Entry::Owned(mark)) if mark.task == t.id && mark.kind == Kind::Ctx => {}
        _ => return None,
    }
    let dir = parent.open_dir(name).ok()?;
    let mut receipts = Vec::with_capacity(t.receipts.len());
    for sha in &t.receipts {
        match Receipt::read(store, sha) {
            Ok(r) => receipts.push(r),
            Err(e) => {
                return Some(format!(
                    "{at}: left as it is: task {}'s receipt {sha} cannot be read ({e}), so what the directory should hold is unknown",
                    t.id
                ));
            }
        }
    }
    let recorded = latest_written(receipts)
        .into_iter()
        .find(|r| written_path(r) == Some(at.as_str()));
    match recorded {
        Some(r) if holds(&dir, &r).is_ok() => None,
        Some(r) => Some(reproject(store, t, &r).map_or_else(
            |e| format!("{at}: does not hold task {}'s recorded result and could not be projected again: {e}", t.id),
            |()| format!("{at}: projected task {}'s recorded result (attempt {}) again", t.id, r.attempt.0),
        )),
        None if dir.metadata(format!("{}.md", t.step)).is_err() => None,
        None => Some(match parent.remove_dir_all(name) {
            Ok(()) => format!(
                "{at}: removed a result the journal does not have (a submit of task {} interrupted before its record)",
                t.id
            ),
            Err(e) => format!("{at}: holds a result the journal does not have and could not be removed: {e}"),
        }),
    }
}

/// The workspace as a cache, for daemons that share their nouns: when
/// the ctx-dir `receipt` says its projection wrote is missing under this
/// daemon's root (another daemon worked the task), it is projected here
/// from the receipt's objects, so a worker served by this daemon finds
/// its upstream's files. A ctx-dir that is there is left as it is (a later
/// task may have written it); on a root of its own, a missing one is
/// `tessera fsck`'s to report, not this.
pub fn ensure_ctx(store: &Store, namespace: &Name, receipt: &Receipt) {
    let Some(path) = written_path(receipt) else {
        return;
    };
    if store.ref_table().is_none() {
        return;
    }
    let prefix = format!("workspace/{namespace}/");
    let (Some(rel), Some(step)) = (path.strip_prefix(&prefix), &receipt.step) else {
        return;
    };
    if store
        .root()
        .workspace
        .exists(path.trim_start_matches("workspace/"))
    {
        return;
    }
    let t = Unsettled {
        id: receipt.task_id,
        namespace: namespace.clone(),
        // The placement it was resolved from: the task's id segment back
        // to its placeholder.
        template: rel
            .split('/')
            .map(|seg| match seg == receipt.task_id.to_string() {
                true => placement::TASK_ID,
                false => seg,
            })
            .collect::<Vec<_>>()
            .join("/"),
        step: step.clone(),
        receipts: Vec::new(),
    };
    match reproject(store, &t, receipt) {
        Ok(()) => {
            tracing::info!(path, task = %receipt.task_id, "projected a ctx-dir another daemon wrote, from its receipt")
        }
        Err(e) => {
            tracing::warn!(path, task = %receipt.task_id, error = %e, "cannot project a ctx-dir another daemon wrote")
        }
    }
}

fn reproject(store: &Store, t: &Unsettled, r: &Receipt) -> Result<(), String> {
    let out = r.out.ok_or("the receipt names no body")?;
    let body = store.get_object(&out.sha256).map_err(|e| e.to_string())?;
    let mut parts = Vec::new();
    for (name, sha) in r.parts.iter().flatten() {
        parts.push((
            name.clone(),
            store.get_object(sha).map_err(|e| e.to_string())?,
        ));
    }
    let p = Projection {
        template: &t.template,
        namespace: &t.namespace,
        task_id: t.id,
        step: &t.step,
        attempt: r.attempt.0,
        ok: r.ok,
        body: &body,
        parts: &parts,
    };
    projection::project(store, &p)
        .map_err(|e| match e {
            projection::Unplaced::Blocked(why) => why,
            projection::Unplaced::Storage(e) => e.to_string(),
        })?
        .finish();
    Ok(())
}
