//! Makes an export folder hold exactly a given set of files: each file
//! whose bytes differ is replaced atomically (temp, fsync, rename,
//! directory fsync, through the store's [`AtomicWriter`]), an equal file
//! is not touched (its mtime stays), and the files of an earlier export
//! that are not in the set are removed, with folders left empty.
//!
//! The folder is reached through one `cap_std` `Dir`: a name can only
//! ever be a single path segment inside it. What the export owns, and so
//! may remove: regular files in `<namespace>/<store>/` and
//! `<namespace>/_tasks/<queue>/`, where each segment is a valid name.
//! Hidden entries (a `.git`, the marker) and anything else are left
//! alone. A folder that is neither empty nor marked by an earlier export
//! (`.tessera-export`) is refused, so an export never prunes a folder
//! that holds other work.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, bail};
use cap_std::fs::Dir;

use crate::store::atomic::{AtomicWriter, Durability};
use crate::store::{Health, name};

/// The marker an export leaves in its folder.
pub(super) const MARKER: &str = ".tessera-export";

/// Where temp files are staged, inside the folder (so renames stay on one
/// file system); removed at the end.
const STAGING: &str = ".tessera-export.tmp";

/// The folder of tasks beside a namespace's stores (a store name cannot
/// start with `_`).
pub(super) const TASKS: &str = "_tasks";

const MARKER_TEXT: &str = "This folder is written by `tessera export`: each run replaces its files \
with the daemon's current nouns and tasks and removes the rest.\n";

/// A file of the export: its path segments under the folder.
pub(super) type Files = BTreeMap<Vec<String>, Vec<u8>>;

/// What a mirror run changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Changes {
    /// Files written (new or changed).
    pub(super) written: usize,
    /// Files removed.
    pub(super) removed: usize,
    /// Files left as they were.
    pub(super) unchanged: usize,
}

/// Makes `folder` (created when missing) hold `files` and nothing else
/// of its own.
pub(super) fn mirror(folder: &Path, files: &Files) -> anyhow::Result<Changes> {
    std::fs::create_dir_all(folder)
        .with_context(|| format!("creating the export folder {}", folder.display()))?;
    let dir = Dir::open_ambient_dir(folder, cap_std::ambient_authority())
        .with_context(|| format!("opening the export folder {}", folder.display()))?;
    claim(&dir, folder)?;
    let _ = dir.remove_dir_all(STAGING);
    dir.create_dir(STAGING)
        .context("creating the staging folder")?;
    let writer = AtomicWriter::new(dir.open_dir(STAGING)?, Health::new());
    let result = write_all(&dir, &writer, files).and_then(|mut changes| {
        changes.removed = prune(&dir, files)?;
        Ok(changes)
    });
    let _ = dir.remove_dir_all(STAGING);
    result
}

/// Refuses a folder with files of its own; marks an empty one.
fn claim(dir: &Dir, folder: &Path) -> anyhow::Result<()> {
    if dir.exists(MARKER) {
        return Ok(());
    }
    if dir.entries()?.next().is_some() {
        bail!(
            "{} is not empty and holds no {MARKER} from an earlier export; export into an empty or new folder",
            folder.display()
        );
    }
    dir.write(MARKER, MARKER_TEXT)
        .context("writing the export marker")
}

fn write_all(dir: &Dir, writer: &AtomicWriter, files: &Files) -> anyhow::Result<Changes> {
    let mut changes = Changes::default();
    for (path, bytes) in files {
        let (name, folders) = path.split_last().context("an export path is never empty")?;
        let mut at = dir.try_clone()?;
        for seg in folders {
            if !at.exists(seg) {
                at.create_dir(seg)
                    .with_context(|| format!("creating {}", folders.join("/")))?;
            }
            at = at
                .open_dir(seg)
                .with_context(|| format!("opening {}", folders.join("/")))?;
        }
        if at.read(name).is_ok_and(|old| old == *bytes) {
            changes.unchanged += 1;
            continue;
        }
        writer
            .write(&at, name, bytes, Durability::Synced)
            .with_context(|| format!("writing {}", path.join("/")))?;
        changes.written += 1;
    }
    Ok(changes)
}

/// Removes the export's own files that `files` does not hold, and the
/// folders that leaves empty; returns how many files went.
fn prune(dir: &Dir, files: &Files) -> anyhow::Result<usize> {
    let keep: BTreeSet<&[String]> = files.keys().map(Vec::as_slice).collect();
    let mut removed = 0;
    for ns in subdirs(dir, name::is_valid)? {
        let ns_dir = dir.open_dir(&ns)?;
        for group in subdirs(&ns_dir, |n| name::is_valid(n) || n == TASKS)? {
            let group_dir = ns_dir.open_dir(&group)?;
            let leaves = if group == TASKS {
                subdirs(&group_dir, name::is_valid)?
            } else {
                vec![String::new()]
            };
            for leaf in &leaves {
                let leaf_dir = if leaf.is_empty() {
                    group_dir.try_clone()?
                } else {
                    group_dir.open_dir(leaf)?
                };
                for entry in leaf_dir.entries()? {
                    let entry = entry?;
                    let file = entry.file_name().to_string_lossy().into_owned();
                    if !entry.file_type()?.is_file() || file.starts_with('.') {
                        continue;
                    }
                    let mut path = vec![ns.clone(), group.clone()];
                    path.extend((!leaf.is_empty()).then(|| leaf.clone()));
                    path.push(file.clone());
                    if !keep.contains(path.as_slice()) {
                        leaf_dir
                            .remove_file(&file)
                            .with_context(|| format!("removing {}", path.join("/")))?;
                        removed += 1;
                    }
                }
                if !leaf.is_empty() {
                    let _ = group_dir.remove_dir(leaf);
                }
            }
            let _ = ns_dir.remove_dir(&group);
        }
        let _ = dir.remove_dir(&ns);
    }
    Ok(removed)
}

/// The names of `dir`'s subfolders that `wanted` accepts, sorted.
fn subdirs(dir: &Dir, wanted: impl Fn(&str) -> bool) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in dir.entries()? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() && wanted(&name) {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}
