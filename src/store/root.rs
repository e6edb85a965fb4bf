//! The one ambient open: the root directory is opened here, by path, and
//! every other file access in the daemon goes through the `Dir` handles this
//! module hands out. It also takes the one-daemon-per-root lock and creates
//! the layout on first start.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};

use super::{Error, io_err};

/// The lock file that names the pid of the daemon serving this root.
const LOCK_FILE: &str = "daemon.lock";

/// The areas under the root, created on first start.
const AREAS: [&str; 6] = ["objects", "nouns", "workspace", "journal", "auth", "tmp"];

/// What the `.gitignore` at the root keeps out of git: runtime state,
/// secrets, per-task worker output (`workspace/`, rewritten by every
/// projection) and the receipt packs (appended to, their durable copy is
/// the journal). Noun ref files and body objects stay; reviewers read
/// `tessera export` instead (README, "Reviewing in git").
/// Ref files' hidden shadows (`noun.rs`) are kept out too, and added to
/// the `.gitignore` of a root made before them.
const GITIGNORE: &str =
    "journal/\nauth/\ntmp/\ndaemon.lock\nworkspace/\nobjects/packs/\nnouns/**/.*.swap\n";

/// The `.gitignore` line for the shadows.
const SHADOWS: &str = "nouns/**/.*.swap";

/// How a root is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// For the daemon: create the layout if needed and hold the exclusive lock.
    Exclusive,
    /// For offline readers such as `fsck`: the root must exist; no lock, no writes.
    ReadOnly,
}

/// An opened root: one `Dir` per area, plus the lock while serving.
#[derive(Debug)]
pub struct Root {
    /// The path the root was opened from, for messages only.
    pub path: PathBuf,
    /// The root's absolute path, for the paths shown to workers (prompt
    /// context, ctx-dir files) and for reading `@file:` references back.
    pub absolute: PathBuf,
    /// `objects/`, the parent of the object and pack areas (where
    /// `tessera recover --accept-loss` sets unreferenced objects aside).
    pub object_area: Dir,
    /// `objects/sha256`.
    pub objects: Dir,
    /// `objects/packs` (absent on a read-only open of a root that has none).
    pub packs: Option<Dir>,
    /// `nouns/`.
    pub nouns: Dir,
    /// `workspace/`.
    pub workspace: Dir,
    /// `journal/`.
    pub journal: Dir,
    /// `auth/`.
    pub auth: Dir,
    /// `tmp/`: staging for atomic writes, emptied at every exclusive open.
    pub tmp: Dir,
    _lock: Option<std::fs::File>,
}

impl Root {
    /// Whether the root was opened exclusively (it holds the lock).
    pub fn is_exclusive(&self) -> bool {
        self._lock.is_some()
    }

    /// Opens (and with `Exclusive`, creates and locks) the root at `path`.
    pub fn open(path: &Path, access: Access) -> Result<Root, Error> {
        if access == Access::Exclusive {
            std::fs::create_dir_all(path)
                .map_err(|e| io_err(format!("creating root {}", path.display()), e))?;
        }
        let dir = Dir::open_ambient_dir(path, ambient_authority())
            .map_err(|e| io_err(format!("opening root {}", path.display()), e))?;
        let lock = match access {
            Access::Exclusive => Some(take_lock(&dir, path)?),
            Access::ReadOnly => None,
        };
        if access == Access::Exclusive {
            for area in AREAS {
                create_dir_if_missing(&dir, area)?;
            }
            create_dir_if_missing(&dir, "objects/sha256")?;
            create_dir_if_missing(&dir, "objects/packs")?;
            ignore_shadows(&dir)?;
        }
        let open = |area: &str| {
            dir.open_dir(area)
                .map_err(|e| io_err(format!("opening {}/{area}", path.display()), e))
        };
        let absolute = std::fs::canonicalize(path)
            .map_err(|e| io_err(format!("resolving {}", path.display()), e))?;
        let root = Root {
            path: path.to_path_buf(),
            absolute,
            object_area: open("objects")?,
            objects: open("objects/sha256")?,
            packs: match access {
                Access::Exclusive => Some(open("objects/packs")?),
                Access::ReadOnly => dir.open_dir("objects/packs").ok(),
            },
            nouns: open("nouns")?,
            workspace: open("workspace")?,
            journal: open("journal")?,
            auth: open("auth")?,
            tmp: open("tmp")?,
            _lock: lock,
        };
        if access == Access::Exclusive {
            clear_tmp(&root.tmp)?;
        }
        Ok(root)
    }
}

/// Creates `name` under `dir` unless it exists, then syncs `dir` so the new
/// entry survives a crash.
pub(crate) fn create_dir_if_missing(dir: &Dir, name: &str) -> Result<bool, Error> {
    match dir.create_dir(name) {
        Ok(()) => {
            super::atomic::sync_dir(dir).map_err(|e| io_err("syncing a directory", e))?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_err(format!("creating {name}"), e)),
    }
}

/// Writes the root's `.gitignore`, or adds the shadows' line to one
/// written before shadows existed.
fn ignore_shadows(dir: &Dir) -> Result<(), Error> {
    let text = match dir.read_to_string(".gitignore") {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return dir
                .write(".gitignore", GITIGNORE)
                .map_err(|e| io_err("writing .gitignore", e));
        }
        Err(e) => return Err(io_err("reading .gitignore", e)),
    };
    if text.lines().any(|l| l.trim() == SHADOWS) {
        return Ok(());
    }
    let sep = if text.is_empty() || text.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    dir.write(".gitignore", format!("{text}{sep}{SHADOWS}\n"))
        .map_err(|e| io_err("adding the shadows to .gitignore", e))
}

/// Takes the exclusive lock, or names the pid that holds it.
fn take_lock(dir: &Dir, path: &Path) -> Result<std::fs::File, Error> {
    let file = dir
        .open_with(
            LOCK_FILE,
            OpenOptions::new().read(true).write(true).create(true),
        )
        .map_err(|e| io_err("opening the lock file", e))?;
    let mut file = file.into_std();
    match file.try_lock() {
        Ok(()) => {
            file.set_len(0)
                .and_then(|()| file.rewind())
                .and_then(|()| writeln!(file, "{}", std::process::id()))
                .and_then(|()| file.sync_all())
                .map_err(|e| io_err("writing the lock file", e))?;
            Ok(file)
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            Err(Error::Locked {
                path: path.display().to_string(),
                pid: text.trim().parse().ok(),
            })
        }
        Err(std::fs::TryLockError::Error(e)) => Err(io_err("locking the root", e)),
    }
}

/// Removes leftovers of writes that a crash interrupted.
fn clear_tmp(tmp: &Dir) -> Result<(), Error> {
    let entries = tmp.entries().map_err(|e| io_err("listing tmp/", e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_err("listing tmp/", e))?;
        let name = entry.file_name();
        let removed = match entry.file_type() {
            Ok(t) if t.is_dir() => tmp.remove_dir_all(&name),
            _ => tmp.remove_file(&name),
        };
        removed.map_err(|e| io_err("clearing tmp/", e))?;
    }
    Ok(())
}
