//! Projection: the final body lands as `<ctx-dir>/<step>.md` (front
//! matter, then the body byte for byte) and each staged part raw as
//! `<ctx-dir>/<name>`, so the next step (or a human) reads known paths.
//!
//! The new ctx-dir is built complete in `tmp/` (files and directory
//! fsynced), then swapped in with one `renameat2(RENAME_EXCHANGE)`: readers
//! see the previous attempt's directory or this one, never a mix, and parts
//! this attempt did not stage are gone with the old directory. The old one
//! is kept in `tmp/` until the submit commits, so a submit that fails after
//! projecting swaps it back ([`Swap::undo`]).

use cap_std::fs::Dir;
use rustix::fs::RenameFlags;

use super::front_matter::{self, Header};
use crate::auth::keyring::random_hex;
use crate::queue::placement;
use crate::store::atomic::{Durability, sync_dir};
use crate::store::{Sha256, Store};

/// What to project.
pub struct Projection<'a> {
    /// The ctx-dir template (relative to `workspace/`).
    pub template: &'a str,
    /// The task.
    pub task_id: crate::queue::TaskId,
    /// The step name.
    pub step: &'a str,
    /// The attempt.
    pub attempt: u32,
    /// The submit's `ok`.
    pub ok: bool,
    /// The final body.
    pub body: &'a [u8],
    /// Staged parts, by name.
    pub parts: &'a [(String, Vec<u8>)],
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

/// Writes the ctx-dir; `Err` says why the placement cannot be written.
pub fn project(store: &Store, p: &Projection<'_>) -> Result<Swap, String> {
    let rel = placement::resolve(p.template, p.task_id);
    let (parent_rel, name) = rel
        .rsplit_once('/')
        .map_or(("", rel.as_str()), |(a, b)| (a, b));
    let workspace = &store.root().workspace;
    let parent = if parent_rel.is_empty() {
        workspace
            .try_clone()
            .map_err(|e| err("opening workspace/", e))?
    } else {
        workspace
            .create_dir_all(parent_rel)
            .map_err(|e| err(&format!("creating workspace/{parent_rel}"), e))?;
        workspace
            .open_dir(parent_rel)
            .map_err(|e| err(&format!("opening workspace/{parent_rel}"), e))?
    };
    let tmp = &store.root().tmp;
    let staged = format!("ctx-{}-{}-{}", p.task_id, p.attempt, random_hex(4));
    let built = build(store, tmp, &staged, p);
    if let Err(e) = built {
        let _ = tmp.remove_dir_all(&staged);
        return Err(e);
    }
    let exists = parent.symlink_metadata(name).is_ok();
    let swapped = if exists {
        rustix::fs::renameat_with(tmp, &staged, &parent, name, RenameFlags::EXCHANGE)
    } else {
        rustix::fs::renameat_with(tmp, &staged, &parent, name, RenameFlags::NOREPLACE)
    };
    if let Err(e) = swapped {
        let _ = tmp.remove_dir_all(&staged);
        return Err(err(&format!("placing workspace/{rel}"), e));
    }
    store
        .writer()
        .fsync(|| sync_dir(&parent).and_then(|()| sync_dir(tmp)))
        .map_err(|e| err("syncing the ctx-dir", e))?;
    Ok(Swap {
        tmp: tmp.try_clone().map_err(|e| err("opening tmp/", e))?,
        parent,
        name: name.to_string(),
        old: exists.then_some(staged),
        path: format!("workspace/{rel}"),
    })
}

fn build(store: &Store, tmp: &Dir, staged: &str, p: &Projection<'_>) -> Result<(), String> {
    tmp.create_dir(staged)
        .map_err(|e| err("creating a staging dir", e))?;
    let dir = tmp
        .open_dir(staged)
        .map_err(|e| err("opening a staging dir", e))?;
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
        .map_err(|e| err("writing the step file", e))?;
    for (name, bytes) in p.parts {
        writer
            .write(&dir, name, bytes, Durability::Synced)
            .map_err(|e| err(&format!("writing part {name}"), e))?;
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

/// Whether a ctx-dir template can be placed under `workspace/`: every
/// existing directory before the `{task_id}` segment must be a directory
/// reachable inside the root (a missing one is created at projection).
pub fn check_placement(store: &Store, template: &str) -> Result<(), String> {
    let fixed: Vec<&str> = template
        .split('/')
        .take_while(|seg| !seg.contains("{task_id}"))
        .collect();
    let mut dir = store
        .root()
        .workspace
        .try_clone()
        .map_err(|e| err("opening workspace/", e))?;
    for (i, seg) in fixed.iter().enumerate() {
        dir = match dir.open_dir(seg) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(err(
                    &format!("workspace/{} cannot hold ctx-dirs", fixed[..=i].join("/")),
                    e,
                ));
            }
        };
    }
    Ok(())
}
