//! Projection: the final body lands as `<ctx-dir>/<step>.md` (front
//! matter, then the body byte for byte) and each staged part raw as
//! `<ctx-dir>/<name>`, so the next step (or a human) reads known paths.
//! The ctx-dir is the task's placement template resolved inside its
//! namespace area, `workspace/<namespace>/`.
//!
//! The new ctx-dir is built complete in `tmp/` (files and directory
//! fsynced, with this task's owner mark), then put in place with one
//! `renameat2`: `RENAME_NOREPLACE` when nothing is there, or
//! `RENAME_EXCHANGE` with a directory that holds this task's ctx-dir mark,
//! so readers see the previous attempt's directory or this one, never a
//! mix, and parts this attempt did not stage are gone with the old
//! directory. Anything else in the way (another task's directory above or
//! at the target, an unmarked directory, a file, a symlink) is a
//! projection failure and is left untouched (the rules are `area`'s).
//! The old directory is kept in `tmp/` until the submit commits, so a
//! submit that fails after projecting swaps it back ([`Swap::undo`]).
//! A full disk or a failed fsync is not a placement problem: it is
//! [`Unplaced::Storage`], which no check policy skips.
//!
//! The template is checked again before anything is created: one recorded
//! before a rule was added (a journal written by an older daemon, such as
//! `flows/t8/{task_id}`, whose fixed segment could be another task's
//! `{task_id}` directory) blocks its own projection and makes no
//! directory on another task's path.

use cap_std::fs::Dir;
use rustix::fs::RenameFlags;

pub use super::area::Unplaced;
use super::area::{self, Entry, Kind, Mark, io_failed, written};
use super::front_matter::{self, Header};
use crate::auth::keyring::random_hex;
use crate::queue::placement;
use crate::store::atomic::{Durability, sync_dir};
use crate::store::{Name, Sha256, Store};

/// What to project.
pub struct Projection<'a> {
    /// The ctx-dir template (relative to the namespace area).
    pub template: &'a str,
    /// The task's namespace.
    pub namespace: &'a Name,
    /// The task.
    pub task_id: crate::queue::TaskId,
    /// The step name.
    pub step: &'a str,
    /// The attempt.
    pub attempt: u32,
    /// The daemon's verdict (the receipt's `ok`).
    pub ok: bool,
    /// The final body.
    pub body: &'a [u8],
    /// Staged parts, by name.
    pub parts: &'a [(String, Vec<u8>)],
}

impl Projection<'_> {
    /// The ctx-dir, relative to the root (`workspace/<ns>/...`).
    pub fn path(&self) -> String {
        area::shown(
            self.namespace,
            &placement::resolve(self.template, self.task_id),
        )
    }
}

/// A projected ctx-dir, and the directory it replaced (kept until the
/// submit commits).
pub struct Swap {
    tmp: Dir,
    parent: Dir,
    name: String,
    old: Option<String>,
    /// The ctx-dir, relative to the root.
    pub path: String,
}

fn err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

/// Writes the ctx-dir; `Err` says why it was not written.
pub fn project(store: &Store, p: &Projection<'_>) -> Result<Swap, Unplaced> {
    placement::check_template(p.template).map_err(|why| {
        format!(
            "the placement {:?} is no longer accepted ({why}); nothing was created",
            p.template
        )
    })?;
    let rel = placement::resolve(p.template, p.task_id);
    let (parent_rel, name) = rel.rsplit_once('/').unwrap_or(("", rel.as_str()));
    let segs: Vec<&str> = parent_rel.split('/').filter(|s| !s.is_empty()).collect();
    let path = p.path();
    let parent = area::walk(store, p.namespace, &segs, true)?.ok_or_else(|| {
        format!(
            "{} could not be created",
            area::shown(p.namespace, parent_rel)
        )
    })?;
    let mine = Mark {
        task: p.task_id,
        kind: Kind::Ctx,
    };
    let exists = match area::entry(&parent, name, &path)? {
        Entry::Absent => false,
        Entry::Owned(mark) if mark == mine => true,
        Entry::Owned(mark) => {
            return Err(format!("{path} is {mark}; it is left as it is").into());
        }
        Entry::Unowned => {
            return Err(format!(
                "{path} is a directory no task owns (it holds no {}); it is left as it is",
                placement::OWNER_MARK
            )
            .into());
        }
    };
    let tmp = &store.root().tmp;
    let staged = format!("ctx-{}-{}-{}", p.task_id, p.attempt, random_hex(4));
    let built = build(store, tmp, &staged, p, mine);
    if let Err(e) = built {
        let _ = tmp.remove_dir_all(&staged);
        return Err(e);
    }
    let flags = if exists {
        RenameFlags::EXCHANGE
    } else {
        RenameFlags::NOREPLACE
    };
    if let Err(e) = rustix::fs::renameat_with(tmp, &staged, &parent, name, flags) {
        let _ = tmp.remove_dir_all(&staged);
        return Err(io_failed(&format!("placing {path}"), e.into()));
    }
    store
        .writer()
        .fsync(|| sync_dir(&parent).and_then(|()| sync_dir(tmp)))
        .map_err(Unplaced::Storage)?;
    Ok(Swap {
        tmp: tmp.try_clone().map_err(|e| err("opening tmp/", e))?,
        parent,
        name: name.to_string(),
        old: exists.then_some(staged),
        path,
    })
}

fn build(
    store: &Store,
    tmp: &Dir,
    staged: &str,
    p: &Projection<'_>,
    mark: Mark,
) -> Result<(), Unplaced> {
    tmp.create_dir(staged)
        .map_err(|e| io_failed("creating a staging dir", e))?;
    let dir = tmp
        .open_dir(staged)
        .map_err(|e| err("opening a staging dir", e))?;
    mark.write(store, &dir)
        .map_err(|e| written("writing the owner mark", e))?;
    let header = Header {
        task_id: p.task_id.to_string(),
        step: p.step.to_string(),
        attempt: p.attempt,
        ok: p.ok,
        sha256: Sha256::of(p.body).hex(),
        size: p.body.len() as u64,
    };
    let writer = store.writer();
    writer
        .write(
            &dir,
            &format!("{}.md", p.step),
            &front_matter::encode(&header, p.body),
            Durability::Synced,
        )
        .map_err(|e| written("writing the step file", e))?;
    for (name, bytes) in p.parts {
        writer
            .write(&dir, name, bytes, Durability::Synced)
            .map_err(|e| written(&format!("writing part {name}"), e))?;
    }
    Ok(())
}

impl Swap {
    /// The submit committed: the previous attempt's directory goes.
    pub fn finish(self) {
        if let Some(old) = &self.old {
            remove(&self.tmp, old);
        }
    }

    /// The submit failed: put the previous directory back (or remove the
    /// new one when there was none).
    pub fn undo(self) {
        match &self.old {
            Some(old) => {
                let back = rustix::fs::renameat_with(
                    &self.tmp,
                    old,
                    &self.parent,
                    &self.name,
                    RenameFlags::EXCHANGE,
                );
                if back.is_ok() {
                    remove(&self.tmp, old);
                }
            }
            None => remove(&self.parent, &self.name),
        }
    }
}

/// Removes a directory entry, without following a symlink.
fn remove(parent: &Dir, name: &str) {
    match parent.symlink_metadata(name) {
        Ok(m) if m.is_dir() => {
            let _ = parent.remove_dir_all(name);
        }
        Ok(_) => {
            let _ = parent.remove_file(name);
        }
        Err(_) => {}
    }
}

/// Whether a ctx-dir template can be placed in the namespace area of
/// `ns`: every existing directory before the `{task_id}` segment must be
/// a plain directory (no symlink, no file) that is no task's ctx-dir or
/// work dir (a missing one is created at projection).
pub fn check_placement(store: &Store, ns: &Name, template: &str) -> Result<(), String> {
    let fixed: Vec<&str> = template
        .split('/')
        .take_while(|seg| !seg.contains("{task_id}"))
        .collect();
    area::walk(store, ns, &fixed, false)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::TaskId;
    use crate::store::Access;

    #[test]
    fn a_recorded_template_the_rules_refuse_blocks_only_itself_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Access::Exclusive).unwrap();
        let ns = Name::parse("namespace", "team").unwrap();
        let at = |template| Projection {
            template,
            namespace: &ns,
            task_id: TaskId(5),
            step: "solve",
            attempt: 1,
            ok: true,
            body: b"out",
            parts: &[],
        };
        match project(&store, &at("flows/t8/{task_id}")) {
            Err(Unplaced::Blocked(why)) => assert!(why.contains("shape of a task id"), "{why}"),
            Err(Unplaced::Storage(e)) => panic!("{e}"),
            Ok(_) => panic!("projected"),
        }
        let area = dir.path().join("workspace").join("team");
        assert!(!area.join("flows").exists(), "nothing on t8's path");
        project(&store, &at("flows/{task_id}"))
            .map_err(|_| ())
            .unwrap()
            .finish();
        assert!(area.join("flows/t5/solve.md").is_file());
    }
}
