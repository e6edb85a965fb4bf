//! The namespace areas under `workspace/` and the directories the daemon
//! creates in them for a task: its ctx-dir (where a submit is projected)
//! and its work dir (`tasks/<task_id>/work`, the only place `@file:`
//! reads). Templates and their shape are `queue::placement`'s; the
//! projection itself is `projection`'s.
//!
//! Rules kept here:
//! 1. Each namespace has its own area, `workspace/<namespace>/`; every
//!    ctx-dir and work dir of a task lies inside its namespace's area.
//! 2. Every ctx-dir and work dir the daemon creates holds an owner mark,
//!    `.tessera-owner`, reading `<task_id> ctx` or `<task_id> work`.
//! 3. A walk from the namespace area to a target opens one segment at a
//!    time, never follows a symlink, and refuses any directory that holds
//!    a mark: no task's directory is ever inside another's.
//! 4. An existing target is reused only when it holds this task's mark for
//!    this kind of directory ([`Entry::Owned`]).
//!
//! A worker writes what it likes into its own work dir, marks included,
//! so a mark is read without blocking and only from a small regular file;
//! anything else counts as a mark nobody can use (the directory is refused).
//! Names joined here come from checked values only: a namespace `Name`, a
//! checked template, a task id.

use std::io::Read;
use std::path::PathBuf;

use cap_std::fs::Dir;
use rustix::fs::{FileType, Mode, OFlags};

use crate::queue::TaskId;
use crate::queue::placement::{self, OWNER_MARK};
use crate::store::{self, Durability, Name, Store};

/// Which of a task's directories a mark names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Where its result is projected.
    Ctx,
    /// Where its worker keeps files (`@file:` reads from here).
    Work,
}

/// An owner mark: the task that created a directory, and which one it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The task.
    pub task: TaskId,
    /// Which of its directories.
    pub kind: Kind,
}

/// Longest mark the daemon writes (`t<u64> work\n` fits well inside).
const MAX_MARK: u64 = 64;

impl Mark {
    fn encode(&self) -> String {
        let kind = match self.kind {
            Kind::Ctx => "ctx",
            Kind::Work => "work",
        };
        format!("{} {kind}\n", self.task)
    }

    fn parse(text: &str) -> Option<Mark> {
        let (task, kind) = text.trim_end_matches('\n').split_once(' ')?;
        let kind = match kind {
            "ctx" => Kind::Ctx,
            "work" => Kind::Work,
            _ => return None,
        };
        Some(Mark {
            task: task.parse().ok()?,
            kind,
        })
    }

    /// Writes the mark into `dir` (durably, through the store's writer).
    pub fn write(&self, store: &Store, dir: &Dir) -> Result<(), crate::store::Error> {
        store.writer().write(
            dir,
            OWNER_MARK,
            self.encode().as_bytes(),
            Durability::Synced,
        )
    }
}

impl std::fmt::Display for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Kind::Ctx => write!(f, "task {}'s ctx-dir", self.task),
            Kind::Work => write!(f, "task {}'s work dir", self.task),
        }
    }
}

/// What a directory entry is, to a placement.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    /// Nothing by that name.
    Absent,
    /// A directory with this owner mark.
    Owned(Mark),
    /// A directory with no owner mark (one the daemon made on the way).
    Unowned,
}

/// Why a directory the daemon makes for a task (a ctx-dir, a work dir)
/// is not ready.
#[derive(Debug)]
pub enum Unplaced {
    /// Something is in the way or cannot be written: for a projection,
    /// the task's check policy decides whether the attempt completes
    /// without it.
    Blocked(String),
    /// The store refused a write (a full disk, a failed fsync): not a
    /// placement problem, so no check policy skips it and the call is
    /// answered as the store's error (`507`, `503`).
    Storage(store::Error),
}

impl From<String> for Unplaced {
    fn from(why: String) -> Unplaced {
        Unplaced::Blocked(why)
    }
}

impl std::fmt::Display for Unplaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unplaced::Blocked(why) => f.write_str(why),
            Unplaced::Storage(e) => write!(f, "{e}"),
        }
    }
}

/// A store error while making a directory ready: a storage condition
/// stays typed, anything else blocks it.
pub(super) fn written(what: &str, e: store::Error) -> Unplaced {
    match e {
        store::Error::OutOfSpace { .. } | store::Error::StorageFailed(_) => Unplaced::Storage(e),
        other => Unplaced::Blocked(format!("{what}: {other}")),
    }
}

/// An I/O error while making a directory ready (a full disk stays typed).
pub(super) fn io_failed(what: &str, e: std::io::Error) -> Unplaced {
    match store::io_err(what, e) {
        e @ store::Error::OutOfSpace { .. } => Unplaced::Storage(e),
        other => Unplaced::Blocked(other.to_string()),
    }
}

/// `workspace/<namespace>/<rel>`, as shown in messages and receipts.
pub fn shown(ns: &Name, rel: &str) -> String {
    if rel.is_empty() {
        format!("workspace/{ns}")
    } else {
        format!("workspace/{ns}/{rel}")
    }
}

/// The absolute path of `workspace/<namespace>/<rel>`, for workers (never
/// opened by the daemon).
pub fn absolute(store: &Store, ns: &Name, rel: &str) -> PathBuf {
    let area = store.root().absolute.join("workspace").join(ns.as_str());
    if rel.is_empty() { area } else { area.join(rel) }
}

/// Opens the one directory `name` in `parent`, never following a symlink.
/// `name` is a single plain segment, so nothing else is resolved.
fn open_child(parent: &Dir, name: &str) -> std::io::Result<Dir> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    }
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(Dir::from_std_file(std::fs::File::from(fd)))
}

/// Reads the owner mark of `dir`, if it has one. A mark that is not a small
/// regular file holding a valid mark is an error: such a directory is
/// nobody's to use.
fn read_mark(dir: &Dir) -> Result<Option<Mark>, String> {
    let fd = match rustix::fs::openat(
        dir,
        OWNER_MARK,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(format!("its {OWNER_MARK} cannot be read: {e}")),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("its {OWNER_MARK}: {e}"))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_size as u64 > MAX_MARK
    {
        return Err(format!("its {OWNER_MARK} is not a mark the daemon wrote"));
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(MAX_MARK)
        .read_to_string(&mut text)
        .map_err(|e| format!("its {OWNER_MARK} cannot be read: {e}"))?;
    Mark::parse(&text)
        .map(Some)
        .ok_or_else(|| format!("its {OWNER_MARK} is not a mark the daemon wrote"))
}

/// What `name` in `parent` is; `at` is its path as shown in messages. A
/// symlink or a file there is an error.
pub fn entry(parent: &Dir, name: &str, at: &str) -> Result<Entry, String> {
    let dir = match open_child(parent, name) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Entry::Absent),
        Err(e) => return Err(format!("{at} is not a directory the daemon may use: {e}")),
    };
    match read_mark(&dir) {
        Ok(Some(mark)) => Ok(Entry::Owned(mark)),
        Ok(None) => Ok(Entry::Unowned),
        Err(why) => Err(format!("{at} is refused: {why}")),
    }
}

/// Opens `segs` under the namespace area of `ns`, one directory at a
/// time, creating missing ones when `create` (the area itself included).
/// `Ok(None)`: something on the way is missing and `create` is false.
/// Every directory on the way must be unmarked (rule 3).
pub fn walk(
    store: &Store,
    ns: &Name,
    segs: &[&str],
    create: bool,
) -> Result<Option<Dir>, Unplaced> {
    let mut dir = store
        .root()
        .workspace
        .try_clone()
        .map_err(|e| format!("opening workspace/: {e}"))?;
    let mut at = String::from("workspace");
    for seg in std::iter::once(ns.as_str()).chain(segs.iter().copied()) {
        at = format!("{at}/{seg}");
        let next = match open_child(&dir, seg) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                match dir.create_dir(seg) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io_failed(&format!("creating {at}"), e)),
                }
                open_child(&dir, seg).map_err(|e| format!("opening {at}: {e}"))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(format!("{at} is not a directory the daemon may use: {e}").into());
            }
        };
        match read_mark(&next) {
            Ok(None) => {}
            Ok(Some(mark)) => {
                return Err(format!("{at} is {mark}; nothing may be placed inside it").into());
            }
            Err(why) => return Err(format!("{at} is refused: {why}").into()),
        }
        dir = next;
    }
    Ok(Some(dir))
}

/// The task's work dir, created with its mark when missing (it is the
/// daemon's: `workspace/<ns>/tasks/<task_id>/work`). Returns its
/// absolute path, for the prompt.
pub fn make_work_dir(store: &Store, ns: &Name, id: TaskId) -> Result<PathBuf, Unplaced> {
    let rel = placement::work_dir(id);
    let (parent_rel, name) = rel.rsplit_once('/').unwrap_or(("", rel.as_str()));
    let segs: Vec<&str> = parent_rel.split('/').collect();
    let parent = walk(store, ns, &segs, true)?
        .ok_or_else(|| format!("{} could not be created", shown(ns, parent_rel)))?;
    let at = shown(ns, &rel);
    let mine = Mark {
        task: id,
        kind: Kind::Work,
    };
    match entry(&parent, name, &at)? {
        Entry::Owned(mark) if mark == mine => {}
        Entry::Owned(mark) => return Err(format!("{at} is {mark}").into()),
        Entry::Absent | Entry::Unowned => {
            match parent.create_dir(name) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_failed(&format!("creating {at}"), e)),
            }
            let dir = open_child(&parent, name).map_err(|e| format!("opening {at}: {e}"))?;
            mine.write(store, &dir)
                .map_err(|e| written("writing the owner mark", e))?;
        }
    }
    Ok(absolute(store, ns, &rel))
}

/// The task's work dir, if it exists; an error when something on the way
/// (or the work dir itself) is not the daemon's doing for this task.
pub fn open_work_dir(store: &Store, ns: &Name, id: TaskId) -> Result<Option<Dir>, String> {
    let rel = placement::work_dir(id);
    let (parent_rel, name) = rel.rsplit_once('/').unwrap_or(("", rel.as_str()));
    let segs: Vec<&str> = parent_rel.split('/').collect();
    let Some(parent) = walk(store, ns, &segs, false).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let at = shown(ns, &rel);
    match entry(&parent, name, &at)? {
        Entry::Absent => Ok(None),
        Entry::Owned(mark) if mark.task != id || mark.kind != Kind::Work => {
            Err(format!("{at} is {mark}"))
        }
        Entry::Owned(_) | Entry::Unowned => open_child(&parent, name)
            .map(Some)
            .map_err(|e| format!("opening {at}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_round_trip_and_nothing_else_parses() {
        for mark in [
            Mark {
                task: TaskId(7),
                kind: Kind::Ctx,
            },
            Mark {
                task: TaskId(9_999_999_999_999_999_999),
                kind: Kind::Work,
            },
        ] {
            assert!(mark.encode().len() as u64 <= MAX_MARK);
            assert_eq!(Mark::parse(&mark.encode()), Some(mark));
        }
        for bad in [
            "",
            "t7",
            "t7 ctx extra",
            "7 ctx",
            "t7  ctx",
            "t7 CTX",
            "t-1 work",
        ] {
            assert_eq!(Mark::parse(bad), None, "{bad:?}");
        }
    }
}
