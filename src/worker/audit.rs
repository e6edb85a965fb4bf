//! Ctx-dirs against the receipts that name them: `tessera fsck` reports a
//! ctx-dir whose files are not exactly its task's last written result, and
//! after a restart [`settle`] makes sure no ctx-dir holds a result the
//! journal does not have.

use super::area::{self, Entry, Kind};
use super::front_matter;
use super::projection::{self, Projection};
use crate::queue::receipt::ProjectionStatus;
use crate::queue::{Receipt, State, TaskId, placement};
use crate::store::{Name, Sha256, Store};

/// Whether the ctx-dir the receipt says was written holds exactly its
/// result: `<step>.md` with this task, attempt and body hash, and each
/// part with its hash. `Ok` when the receipt projected nothing.
pub fn check_ctx(store: &Store, receipt: &Receipt) -> Result<(), String> {
    let (Some(projection), Some(step), Some(out)) =
        (&receipt.projection, &receipt.step, &receipt.out)
    else {
        return Ok(());
    };
    if projection.status != ProjectionStatus::Written {
        return Ok(());
    }
    let rel = projection
        .path
        .strip_prefix("workspace/")
        .ok_or_else(|| format!("the receipt names {} outside workspace/", projection.path))?;
    let dir = store
        .root()
        .workspace
        .open_dir(rel)
        .map_err(|e| format!("the ctx-dir cannot be opened: {e}"))?;
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
    /// Its last receipt, if any.
    pub last_receipt: Option<Sha256>,
}

impl Unsettled {
    /// The unfinished tasks that have been claimed at least once.
    pub fn of(state: &State) -> Vec<Unsettled> {
        state
            .tasks
            .values()
            .filter(|t| !t.state.is_terminal() && t.attempt.0 > 0)
            .map(|t| Unsettled {
                id: t.id,
                namespace: t.spec.namespace.clone(),
                template: state.template_of(&t.spec),
                step: t.spec.step_name().to_string(),
                last_receipt: t.receipts.last().copied(),
            })
            .collect()
    }
}

/// After a restart, makes each unsettled task's ctx-dir hold exactly what
/// the journal recorded: its last written receipt's result (projected
/// again from the receipt's objects when the directory says otherwise),
/// or no result at all (a projection whose submit was never recorded is
/// removed). Only directories carrying the task's own ctx mark are
/// touched. Returns one line per directory changed.
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
    let file = format!("{}.md", t.step);
    let found = dir.read(&file).ok().and_then(|bytes| {
        front_matter::decode(&bytes).map(|(h, body)| (h.attempt, Sha256::of(body)))
    });
    let recorded = t
        .last_receipt
        .and_then(|sha| Receipt::read(store, &sha).ok())
        .filter(|r| {
            r.projection
                .as_ref()
                .is_some_and(|p| p.status == ProjectionStatus::Written)
        });
    let matches = |r: &Receipt| {
        found.is_some_and(|(attempt, sha)| {
            attempt == r.attempt.0 && r.out.is_some_and(|o| o.sha256 == sha)
        })
    };
    match recorded {
        Some(r) if matches(&r) => None,
        Some(r) => Some(reproject(store, t, &r).map_or_else(
            |e| format!("{at}: does not hold task {}'s recorded result and could not be projected again: {e}", t.id),
            |()| format!("{at}: projected task {}'s recorded result (attempt {}) again", t.id, r.attempt.0),
        )),
        None if found.is_none() => None,
        None => Some(match parent.remove_dir_all(name) {
            Ok(()) => format!(
                "{at}: removed a result the journal does not have (a submit of task {} interrupted before its record)",
                t.id
            ),
            Err(e) => format!("{at}: holds a result the journal does not have and could not be removed: {e}"),
        }),
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
