//! The only durable file writer: temp file in `tmp/`, fsync, rename into
//! place, fsync of the target directory. A reader sees the old bytes or the
//! new bytes, never a mix, and once `write` returns with `Durability::Synced`
//! the new bytes survive a crash.
//!
//! After any failed fsync the writer is poisoned and refuses all further
//! writes until the daemon restarts: the kernel may have dropped the dirty
//! pages, so retrying could acknowledge data that is not on disk.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

use super::{Error, io_err};

/// How far a write must reach before `write` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// File and directory are fsynced: the write survives a crash on its own.
    Synced,
    /// Renamed into place without fsync: the caller's journal already holds
    /// the bytes durably and can write them again after a crash.
    Journaled,
}

/// Writes files atomically through `tmp/`. Shared by every writer in the store.
#[derive(Debug)]
pub struct AtomicWriter {
    tmp: Dir,
    seq: AtomicU64,
    poisoned: AtomicBool,
}

impl AtomicWriter {
    /// A writer staging its temp files in `tmp`.
    pub fn new(tmp: Dir) -> AtomicWriter {
        AtomicWriter {
            tmp,
            seq: AtomicU64::new(0),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Replaces `dir/name` with `bytes` (mode 0644).
    pub fn write(&self, dir: &Dir, name: &str, bytes: &[u8], d: Durability) -> Result<(), Error> {
        self.write_mode(dir, name, bytes, d, 0o644)
    }

    /// Replaces `dir/name` with `bytes`, readable by the owner only (mode 0600).
    pub fn write_private(&self, dir: &Dir, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.write_mode(dir, name, bytes, Durability::Synced, 0o600)
    }

    /// Replaces `dir/name` with what `fill` writes (buffered, then synced):
    /// for files too large to build in memory first.
    pub fn write_with(
        &self,
        dir: &Dir,
        name: &str,
        fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), Error> {
        self.check()?;
        let tmp_name = self.temp_name();
        let file = self
            .tmp
            .open_with(
                &tmp_name,
                OpenOptions::new().write(true).create_new(true).mode(0o644),
            )
            .map_err(|e| io_err("creating a temp file", e))?;
        let mut buffered = std::io::BufWriter::with_capacity(1 << 20, file);
        let written = fill(&mut buffered).and_then(|()| buffered.flush());
        let file = match written.and_then(|()| buffered.into_inner().map_err(|e| e.into_error())) {
            Ok(f) => f,
            Err(e) => {
                let _ = self.tmp.remove_file(&tmp_name);
                return Err(io_err(format!("writing {name}"), e));
            }
        };
        self.fsync(|| file.sync_all())?;
        drop(file);
        self.tmp
            .rename(&tmp_name, dir, name)
            .map_err(|e| io_err(format!("renaming into place as {name}"), e))?;
        self.fsync(|| sync_dir(dir))
    }

    fn temp_name(&self) -> String {
        format!(
            "{}.{}.tmp",
            std::process::id(),
            self.seq.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn write_mode(
        &self,
        dir: &Dir,
        name: &str,
        bytes: &[u8],
        d: Durability,
        mode: u32,
    ) -> Result<(), Error> {
        self.check()?;
        let tmp_name = self.temp_name();
        let mut file = self
            .tmp
            .open_with(
                &tmp_name,
                OpenOptions::new().write(true).create_new(true).mode(mode),
            )
            .map_err(|e| io_err("creating a temp file", e))?;
        if let Err(e) = file.write_all(bytes) {
            let _ = self.tmp.remove_file(&tmp_name);
            return Err(io_err("writing a temp file", e));
        }
        if d == Durability::Synced {
            self.fsync(|| file.sync_all())?;
        }
        drop(file);
        if let Err(e) = self.tmp.rename(&tmp_name, dir, name) {
            let _ = self.tmp.remove_file(&tmp_name);
            return Err(io_err(format!("renaming into place as {name}"), e));
        }
        if d == Durability::Synced {
            self.fsync(|| sync_dir(dir))?;
        }
        Ok(())
    }

    /// Runs an fsync; a failure poisons the writer.
    pub fn fsync(&self, f: impl FnOnce() -> std::io::Result<()>) -> Result<(), Error> {
        f().map_err(|e| {
            self.poisoned.store(true, Ordering::SeqCst);
            tracing::error!(error = %e, "fsync failed; refusing writes until restart");
            io_err("fsync", e)
        })
    }

    /// Refuses work once poisoned.
    pub fn check(&self) -> Result<(), Error> {
        if self.poisoned.load(Ordering::SeqCst) {
            Err(Error::Poisoned)
        } else {
            Ok(())
        }
    }
}

/// Fsyncs a directory. `Dir` handles are `O_PATH`, so the directory is
/// reopened for reading first (a sync on the handle itself fails with EBADF).
pub fn sync_dir(dir: &Dir) -> std::io::Result<()> {
    dir.open(".")?.sync_all()
}
