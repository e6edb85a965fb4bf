//! The only durable file writer: temp file in `tmp/`, fsync, rename into
//! place, fsync of the target directory. A reader sees the old bytes or the
//! new bytes, never a mix, and once `write` returns with `Durability::Synced`
//! the new bytes survive a crash. Noun ref files, whose durable copy is the
//! noun log, are changed in two steps without fsync: `overwrite` writes a
//! hidden shadow beside the file, `swap` exchanges the two names.
//!
//! Every outcome is reported into the root's [`Health`]:
//! 1. A full disk (ENOSPC, EDQUOT) while creating, writing, syncing or
//!    renaming the temp file removes the temp file and answers
//!    [`Error::OutOfSpace`]: nothing was kept and nothing is poisoned, so
//!    the next write simply tries again, and the first that succeeds ends
//!    the out-of-space condition.
//! 2. Any other failed fsync, and any failed fsync of a directory after a
//!    rename, is a failure: the kernel may have dropped the dirty pages,
//!    so retrying could acknowledge data that is not on disk. Every later
//!    write (here and in the task journal) is refused with
//!    [`Error::StorageFailed`] until the daemon restarts.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

use super::health::{self, Health, Writer};
use super::{Error, io_err};

/// A filesystem block: what a file needs besides its bytes, at most.
const BLOCK: u64 = 4096;

/// How far a write must reach before `write` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// File and directory are fsynced: the write survives a crash on its own.
    Synced,
    /// Renamed into place without fsync: the caller's log already holds
    /// the bytes durably (or will before it acknowledges) and writes them
    /// again after a crash.
    Journaled,
}

/// Writes files atomically through `tmp/`. Shared by every writer in the store.
#[derive(Debug)]
pub struct AtomicWriter {
    tmp: Dir,
    seq: AtomicU64,
    health: Health,
}

impl AtomicWriter {
    /// A writer staging its temp files in `tmp`, reporting into `health`.
    pub fn new(tmp: Dir, health: Health) -> AtomicWriter {
        AtomicWriter {
            tmp,
            seq: AtomicU64::new(0),
            health,
        }
    }

    /// The health state this writer reports into.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Replaces `dir/name` with `bytes` (mode 0644).
    pub fn write(&self, dir: &Dir, name: &str, bytes: &[u8], d: Durability) -> Result<(), Error> {
        self.noted(
            self.write_mode(dir, name, bytes, d, 0o644),
            Some(bytes.len()),
        )
    }

    /// Replaces `dir/name` with `bytes`, readable by the owner only (mode 0600).
    pub fn write_private(&self, dir: &Dir, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.noted(
            self.write_mode(dir, name, bytes, Durability::Synced, 0o600),
            Some(bytes.len()),
        )
    }

    /// Replaces `dir/name` with what `fill` writes (buffered, then synced):
    /// for files too large to build in memory first.
    pub fn write_with(
        &self,
        dir: &Dir,
        name: &str,
        fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), Error> {
        self.noted(self.write_filled(dir, name, fill), None)
    }

    /// Replaces the contents of `dir/name` in place (creating it, mode
    /// 0644), without fsync: for a ref file's hidden shadow, which no one
    /// reads while it is written and whose durable copy is the noun log.
    /// The new bytes go over the old ones and the file is then cut to
    /// their length: a file truncated to nothing and written again is
    /// flushed to disk as it is closed (ext4's `auto_da_alloc`), which
    /// would put a write out to the device on every noun put.
    pub fn overwrite(&self, dir: &Dir, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.noted(
            self.check().and_then(|()| {
                let mut file = dir
                    .open_with(
                        name,
                        OpenOptions::new().write(true).create(true).mode(0o644),
                    )
                    .map_err(|e| io_err(format!("opening {name}"), e))?;
                file.write_all(bytes)
                    .and_then(|()| file.set_len(bytes.len() as u64))
                    .map_err(|e| io_err(format!("writing {name}"), e))
            }),
            Some(bytes.len()),
        )
    }

    /// Swaps `dir/shadow` in as `dir/name`, without fsync: with
    /// `renameat2(RENAME_EXCHANGE)`, so `shadow` then holds what `name`
    /// held and no inode is freed; a plain rename when `name` does not
    /// exist yet. Both are single path components (checked names).
    pub fn swap(&self, dir: &Dir, shadow: &str, name: &str) -> Result<(), Error> {
        debug_assert!(!shadow.contains('/') && !name.contains('/'));
        let exchanged =
            rustix::fs::renameat_with(dir, shadow, dir, name, rustix::fs::RenameFlags::EXCHANGE);
        match exchanged {
            Ok(()) => Ok(()),
            // No `name` yet, or a filesystem without RENAME_EXCHANGE: a
            // rename replaces atomically too (the shadow is made again).
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
                dir.rename(shadow, dir, name)
                    .map_err(|e| io_err(format!("renaming {shadow} into place as {name}"), e))
            }
            Err(e) => Err(io_err(
                format!("swapping {shadow} in as {name}"),
                std::io::Error::from(e),
            )),
        }
    }

    /// Creates the directory `dir/name` unless it exists, durably (the
    /// parent is fsynced); true when it was created.
    pub fn create_dir(&self, dir: &Dir, name: &str) -> Result<bool, Error> {
        self.check()?;
        let created = match dir.create_dir(name) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return self.noted(Err(io_err(format!("creating {name}"), e)), None),
        };
        if created {
            self.fsync(|| sync_dir(dir))?;
            self.health.report_written(Writer::Files);
        }
        Ok(created)
    }

    fn write_filled(
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
        self.sync_temp(&tmp_name, &file)?;
        drop(file);
        self.place_temp(&tmp_name, dir, name)?;
        self.fsync(|| sync_dir(dir))
    }

    /// Writes `bytes` into a temp file in `tmp/` (mode 0644, not synced)
    /// to be put in place later with [`Staged::place`]: for a file whose
    /// durable copy is a log record, placed once the record is durable, so
    /// a crash before it leaves nothing but a temp file (which the next
    /// exclusive open clears). A full disk refuses here, before anything
    /// is logged.
    pub fn stage(&self, bytes: &[u8]) -> Result<Staged<'_>, Error> {
        self.noted(
            self.check().and_then(|()| {
                let tmp_name = self.temp_name();
                let mut file = self
                    .tmp
                    .open_with(
                        &tmp_name,
                        OpenOptions::new().write(true).create_new(true).mode(0o644),
                    )
                    .map_err(|e| io_err("creating a temp file", e))?;
                let staged = Staged {
                    writer: self,
                    tmp_name: Some(tmp_name),
                };
                file.write_all(bytes)
                    .map_err(|e| io_err("writing a staged file", e))?;
                Ok(staged)
            }),
            Some(bytes.len()),
        )
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
            return Err(io_err(format!("writing {name}"), e));
        }
        if d == Durability::Synced {
            self.sync_temp(&tmp_name, &file)?;
        }
        drop(file);
        self.place_temp(&tmp_name, dir, name)?;
        if d == Durability::Synced {
            self.fsync(|| sync_dir(dir))?;
        }
        Ok(())
    }

    /// Renames the temp file into place (removing it when that fails).
    fn place_temp(&self, tmp_name: &str, dir: &Dir, name: &str) -> Result<(), Error> {
        self.tmp.rename(tmp_name, dir, name).map_err(|e| {
            let _ = self.tmp.remove_file(tmp_name);
            io_err(format!("renaming into place as {name}"), e)
        })
    }

    /// Fsyncs a temp file not yet renamed: a full disk loses only this
    /// file, which is removed, so it is out of space, not a failure.
    fn sync_temp(&self, tmp_name: &str, file: &cap_std::fs::File) -> Result<(), Error> {
        match file.sync_all() {
            Ok(()) => Ok(()),
            Err(e) if health::is_out_of_space(&e) => {
                let _ = self.tmp.remove_file(tmp_name);
                Err(io_err("syncing a temp file", e))
            }
            Err(e) => {
                let _ = self.tmp.remove_file(tmp_name);
                Err(self.failed(e))
            }
        }
    }

    /// Runs an fsync; any failure refuses every later write until restart.
    pub fn fsync(&self, f: impl FnOnce() -> std::io::Result<()>) -> Result<(), Error> {
        f().map_err(|e| self.failed(e))
    }

    fn failed(&self, e: std::io::Error) -> Error {
        Error::StorageFailed(
            self.health
                .report_failed(Writer::Files, format!("fsync failed: {e}")),
        )
    }

    /// Refuses work once a durable write has failed.
    pub fn check(&self) -> Result<(), Error> {
        match self.health.failure() {
            Some(incident) => Err(Error::StorageFailed(incident)),
            None => Ok(()),
        }
    }

    /// Reports a write of `len` bytes (when known): out of space (with
    /// what it needed, a block more than its bytes), or written.
    fn noted<T>(&self, r: Result<T, Error>, len: Option<usize>) -> Result<T, Error> {
        match &r {
            Ok(_) => self.health.report_written(Writer::Files),
            Err(Error::OutOfSpace { context }) => {
                let needed = len.map(|n| n as u64 + BLOCK);
                self.health
                    .report_full(Writer::Files, context.clone(), needed);
            }
            Err(_) => {}
        }
        r
    }
}

/// A file written into `tmp/` and not yet in place ([`AtomicWriter::stage`]);
/// dropped unplaced, it is removed.
#[derive(Debug)]
pub struct Staged<'a> {
    writer: &'a AtomicWriter,
    tmp_name: Option<String>,
}

impl Staged<'_> {
    /// Renames the staged file into place as `dir/name`, without fsync.
    pub fn place(mut self, dir: &Dir, name: &str) -> Result<(), Error> {
        let tmp_name = self.tmp_name.take().expect("placed once");
        self.writer.place_temp(&tmp_name, dir, name)
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        if let Some(tmp_name) = self.tmp_name.take() {
            let _ = self.writer.tmp.remove_file(tmp_name);
        }
    }
}

/// Fsyncs a directory. `Dir` handles are `O_PATH`, so the directory is
/// reopened for reading first (a sync on the handle itself fails with EBADF).
pub fn sync_dir(dir: &Dir) -> std::io::Result<()> {
    dir.open(".")?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Condition;

    #[test]
    fn an_overwrite_leaves_exactly_the_new_bytes_longer_or_shorter() {
        let tmp = tempfile::tempdir().unwrap();
        let root = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        let writer = AtomicWriter::new(root.try_clone().unwrap(), Health::new());
        for bytes in [
            &b"a longer first version"[..],
            b"short",
            b"a longer third one",
        ] {
            writer.overwrite(&root, ".k.swap", bytes).unwrap();
            assert_eq!(root.read(".k.swap").unwrap(), bytes);
        }
    }

    #[test]
    fn a_failed_fsync_refuses_every_later_write_until_restart() {
        let tmp = tempfile::tempdir().unwrap();
        let root = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        let writer = AtomicWriter::new(root.try_clone().unwrap(), Health::new());
        writer
            .write(&root, "before", b"x", Durability::Synced)
            .unwrap();
        let failed = writer.fsync(|| Err(std::io::Error::from_raw_os_error(5)));
        assert!(matches!(failed, Err(Error::StorageFailed(_))), "{failed:?}");
        for _ in 0..2 {
            let refused = writer.write(&root, "after", b"y", Durability::Synced);
            assert!(
                matches!(&refused, Err(Error::StorageFailed(i)) if i.cause.contains("os error 5")),
                "{refused:?}"
            );
        }
        assert!(matches!(
            writer.create_dir(&root, "d"),
            Err(Error::StorageFailed(_))
        ));
        assert!(!root.exists("after") && !root.exists("d"));
        assert!(matches!(writer.health().condition(), Condition::Failed(_)));
    }
}
