//! The sandboxed root: content-addressed objects and noun ref files.
//!
//! ```text
//! <root>/
//!   objects/sha256/ab/cdef…        immutable bytes named by their sha256
//!   nouns/<ns>/<store>/<key>.json  a noun's version list (the only mutable noun file)
//!   workspace/<ns>/                a namespace's work dirs and ctx-dirs (the worker module)
//!   journal/                       the task journal (the queue module)
//!   journal/nouns/                 the noun log: ref changes not yet on disk by themselves
//!   auth/                          hashed keys, token secret (mode 0600)
//!   tmp/                           staging for atomic writes
//!   daemon.lock                    pid of the daemon holding the root
//! ```
//!
//! Write rules: every durable file write goes through [`atomic::AtomicWriter`]
//! (temp, fsync, rename, directory fsync) or a log ([`log`]: the task
//! journal, and the noun log that holds every noun ref change until its
//! files are on disk by themselves, see [`noun_log`]); all of them report
//! into the one [`Health`] state. A noun version's object is written
//! before its record is logged, and its ref entry only once the record is
//! durable; every object read re-hashes the bytes.
//! All access goes through `cap_std::fs::Dir` handles opened by
//! [`root::Root`], the one place that opens an ambient path, so a name or a
//! planted symlink cannot reach outside the root.

pub mod atomic;
pub mod bucket;
pub mod envelope;
pub mod fsck;
pub mod health;
mod later;
pub mod listing;
pub mod log;
pub mod noun;
pub mod noun_log;
pub mod object;
pub mod pack;
mod pin;
pub mod refs;
pub mod root;

use std::path::Path;
use std::sync::Arc;

use cap_std::fs::Dir;

pub use atomic::Durability;
pub use envelope::{EffectClass, Visibility};
pub use health::{Condition, Health, Incident, Writer};
pub use noun::{NounRef, PutOutcome, PutRequest, VersionEntry, VersionMeta};
pub use root::{Access, Root};
pub use tessera_core::canonical::{self, canonical_json, canonical_record, canonical_sorted};
pub use tessera_core::name::{self, BadName, Name};
pub use tessera_core::noun::{NounPath, Pin};
pub use tessera_core::sha256::{BadSha256, Sha256};

/// What can fail in the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A namespace, store, key or surface that breaks the name rule.
    #[error(transparent)]
    InvalidName(#[from] BadName),
    /// The noun does not exist.
    #[error("noun not found")]
    NounNotFound,
    /// The noun exists but not this version.
    #[error("version {version} not found; the latest is {latest}")]
    VersionNotFound {
        /// The version asked for.
        version: u64,
        /// The latest version.
        latest: u64,
    },
    /// Compare-and-swap failed.
    #[error("expected version {expected} but the current version is {current}; re-read and retry")]
    VersionConflict {
        /// The version the write named.
        expected: u64,
        /// The current version.
        current: u64,
    },
    /// A pin's sha256 does not match the version's recorded hash.
    #[error("pin mismatch: version {version} has sha256 {actual}, not {expected}")]
    PinMismatch {
        /// The version pinned.
        version: u64,
        /// The sha256 in the pin.
        expected: Sha256,
        /// The recorded sha256.
        actual: Sha256,
    },
    /// An object's bytes do not hash to its name.
    #[error("object {path} is corrupt (its bytes do not hash to its name); run `tessera fsck`")]
    CorruptObject {
        /// The object's path under the root.
        path: String,
    },
    /// An object named by a ref is missing.
    #[error("object {sha256} is missing; run `tessera fsck`")]
    ObjectMissing {
        /// The missing hash.
        sha256: Sha256,
    },
    /// A ref file cannot be parsed.
    #[error("ref file {path} is unreadable: {message}; run `tessera fsck`")]
    CorruptRef {
        /// The ref file's path under the root.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// The noun log holds a damaged record with valid records after it:
    /// acknowledged puts would be lost, so the root is not opened.
    #[error("{path}: {message}")]
    CorruptLog {
        /// The segment, under the root.
        path: String,
        /// Where and what, and what the operator can do.
        message: String,
    },
    /// Another daemon holds the root.
    #[error("root {path} is in use by another tessera daemon (pid {}); stop it or choose another --root", pid.map_or("unknown".to_string(), |p| p.to_string()))]
    Locked {
        /// The root path.
        path: String,
        /// The holder's pid, when readable.
        pid: Option<u32>,
    },
    /// The disk holding the root (or its quota) is full: nothing of this
    /// write was kept, and the next write tries again.
    #[error(
        "{context}: the disk holding the root is full (or its quota is reached); nothing was written; free space and retry (reads keep working)"
    )]
    OutOfSpace {
        /// What was being written.
        context: String,
    },
    /// An earlier fsync failed; every write is refused until restart.
    #[error(
        "writes are refused since a durable write failed: {0}; its data may be lost, so check the disk and restart the daemon"
    )]
    StorageFailed(Incident),
    /// The shared store (objects in the bucket of `--objects-url`, refs
    /// in the database of `--queue-url`) did not answer: nothing is
    /// known to be written, and a retry may succeed.
    #[error("{what}: {cause}; retry, and check that the bucket and the database are reachable")]
    Unavailable {
        /// What was being done, and where.
        what: String,
        /// Why it failed.
        cause: String,
    },
    /// Blocking work failed without an answer (it panicked: a bug).
    #[error("a blocking task failed: {0}")]
    TaskFailed(String),
    /// Any other I/O failure.
    #[error("{context}: {error}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error (shown in the message, so not also a `source`).
        error: std::io::Error,
    },
}

/// An I/O error with what was being done; a full disk becomes
/// [`Error::OutOfSpace`].
pub(crate) fn io_err(context: impl Into<String>, error: std::io::Error) -> Error {
    if health::is_out_of_space(&error) {
        return Error::OutOfSpace {
            context: format!("{}: {error}", context.into()),
        };
    }
    Error::Io {
        context: context.into(),
        error,
    }
}

/// The store handle: cheap to clone (an `Arc`), shared by every request.
/// Its methods do blocking file I/O; async callers run them on the blocking pool.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: Root,
    writer: Arc<atomic::AtomicWriter>,
    /// The reach of each log (see [`Store::reach`]).
    reaches: [std::sync::OnceLock<log::reach::Reach>; 2],
    objects: object::Objects,
    later: later::Later,
    packs: pack::Packs,
    locks: noun::KeyLocks,
    /// Started after replay at an exclusive open; absent read-only.
    noun_log: std::sync::OnceLock<noun_log::NounLog>,
    /// Where noun refs live instead of the root's ref files (set once,
    /// before serving, with `--objects-url`).
    refs: std::sync::OnceLock<Arc<dyn refs::RefTable>>,
    /// Where objects whose durable copy is a database row are read when
    /// the root lacks them ([`Store::get_row_object`]).
    rows: std::sync::OnceLock<Arc<dyn ObjectRows>>,
    /// Told of every noun version written or re-flagged (the event stream).
    watcher: std::sync::OnceLock<Arc<dyn NounWatcher>>,
}

/// Objects whose durable copy is a row of the shared database (a
/// receipt): read there when the root lacks them, so any daemon serves
/// what another one wrote ([`Store::get_row_object`]).
pub trait ObjectRows: Send + Sync + std::fmt::Debug {
    /// The bytes of the object `sha`, if a row holds it.
    fn fetch(&self, sha: &Sha256) -> Result<Option<Vec<u8>>, Error>;
}

/// Told of every noun change once it is on disk, whoever made it (a put,
/// a batch, an import, a promotion, a quarantine). Not told of changes
/// kept in a ref table: each writes its event row beside it, and every
/// daemon's event stream reads it from there.
pub trait NounWatcher: Send + Sync + std::fmt::Debug {
    /// `entry` is now the latest version of `path`.
    fn written(&self, path: &NounPath, entry: &VersionEntry);
}

impl Store {
    /// Opens the root at `path` (see [`Root::open`]). An exclusive open
    /// replays the noun log first (see [`noun_log`]), so every
    /// acknowledged noun change is in its files before anything is served.
    pub fn open(path: &Path, access: Access) -> Result<Store, Error> {
        Store::open_with(path, access, noun_log::SEGMENT_BYTES)
    }

    /// [`Store::open`] with noun log segments of `segment_bytes` (the
    /// daemon's `[queue] journal_segment_mib`, shared with the task journal).
    pub fn open_with(path: &Path, access: Access, segment_bytes: u64) -> Result<Store, Error> {
        let root = Root::open(path, access)?;
        let tmp = root
            .tmp
            .try_clone()
            .map_err(|e| io_err("cloning tmp/", e))?;
        let objects = root
            .objects
            .try_clone()
            .map_err(|e| io_err("cloning objects/", e))?;
        let packs = pack::Packs::open(
            root.packs
                .as_ref()
                .map(|d| d.try_clone())
                .transpose()
                .map_err(|e| io_err("cloning objects/packs", e))?,
            access == Access::Exclusive,
        )?;
        let store = Store {
            inner: Arc::new(Inner {
                writer: Arc::new(atomic::AtomicWriter::new(tmp, Health::new())),
                reaches: Default::default(),
                objects: object::Objects::new(objects),
                later: later::Later::default(),
                packs,
                locks: noun::KeyLocks::new(),
                noun_log: std::sync::OnceLock::new(),
                refs: std::sync::OnceLock::new(),
                rows: std::sync::OnceLock::new(),
                watcher: std::sync::OnceLock::new(),
                root,
            }),
        };
        if access == Access::Exclusive {
            let (dir, replayed) = noun_log::replay(&store, &store.root().journal)?;
            if replayed.records > 0 {
                tracing::info!(
                    records = replayed.records,
                    refs_written = replayed.refs,
                    torn_tail = replayed.torn_tail,
                    "noun log replayed"
                );
            }
            let reach = store.reach(Writer::NounLog)?;
            let log = noun_log::NounLog::start(
                &dir,
                reach,
                replayed.next,
                segment_bytes,
                store.health(),
            )?;
            let _ = store.inner.noun_log.set(log);
        }
        Ok(store)
    }

    /// The opened root and its area handles.
    pub fn root(&self) -> &Root {
        &self.inner.root
    }

    /// The durable writer, for modules that keep their own files under the root.
    pub fn writer(&self) -> &atomic::AtomicWriter {
        &self.inner.writer
    }

    /// The reach of one of the root's logs, `Writer::Journal` (`journal/`)
    /// or `Writer::NounLog` (`journal/nouns/`): one instance per log, so
    /// its committer and whoever lets segments go keep one list. Kept up
    /// to date on an exclusive open; only read on a read-only one.
    pub fn reach(&self, log: Writer) -> Result<log::reach::Reach, Error> {
        let (slot, path) = match log {
            Writer::NounLog => (&self.inner.reaches[1], "journal/nouns"),
            _ => (&self.inner.reaches[0], "journal"),
        };
        if let Some(r) = slot.get() {
            return Ok(r.clone());
        }
        let journal = &self.root().journal;
        let dir = match log {
            Writer::NounLog => journal.open_dir(noun_log::DIR),
            _ => journal.try_clone(),
        };
        let dir = match dir {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return log::reach::Reach::load_none(path);
            }
            Err(e) => return Err(io_err(format!("opening {path}/"), e)),
        };
        let writer = self
            .root()
            .is_exclusive()
            .then(|| self.inner.writer.clone());
        let loaded = log::reach::Reach::load(dir, path, writer)?;
        let _ = slot.set(loaded);
        Ok(slot.get().expect("set").clone())
    }

    /// The health state every durable writer under this root reports into.
    pub fn health(&self) -> &Health {
        self.inner.writer.health()
    }

    /// The health state after the periodic check of a full disk: while a
    /// writer is out of space, the root's free space is read and each
    /// episode whose refused write now fits is over ([`Health::recheck`]).
    /// Returns the free bytes when they were read.
    pub fn recheck_space(&self) -> Option<u64> {
        let health = self.health();
        if !health.out_of_space() {
            return None;
        }
        let free = health::free_bytes(&self.inner.root.journal).ok()?;
        health.recheck(free);
        Some(free)
    }

    /// The object area.
    pub fn objects(&self) -> &object::Objects {
        &self.inner.objects
    }

    /// Stores bytes as an object and returns their hash.
    pub fn put_object(&self, bytes: &[u8], durability: Durability) -> Result<Sha256, Error> {
        self.inner
            .objects
            .put(&self.inner.writer, bytes, durability)
    }

    /// Has `watcher` told of every noun change from now on (set once).
    pub fn watch_nouns(&self, watcher: Arc<dyn NounWatcher>) {
        let _ = self.inner.watcher.set(watcher);
    }

    /// Keeps noun refs in `table` from now on instead of the root's ref
    /// files (set once, before serving).
    pub fn use_ref_table(&self, table: Arc<dyn refs::RefTable>) {
        let _ = self.inner.refs.set(table);
    }

    /// The ref table, when refs are not the root's files.
    pub fn ref_table(&self) -> Option<&dyn refs::RefTable> {
        self.inner.refs.get().map(|t| &**t)
    }

    /// Reads objects the root and the bucket lack from `rows` (set once).
    pub fn read_rows(&self, rows: Arc<dyn ObjectRows>) {
        let _ = self.inner.rows.set(rows);
    }

    fn noun_written(&self, path: &NounPath, entry: &VersionEntry) {
        if let Some(w) = self.inner.watcher.get() {
            w.written(path, entry);
        }
    }

    /// Stores bytes as an object later, off the caller's path: for bytes
    /// whose durable copy is elsewhere (a journal record), written by a
    /// background thread and retried until it lands.
    /// Readable at once by [`Store::get_object`]. `sha` is the sha256 of
    /// `bytes`, which the caller has just computed (it is checked again
    /// whenever the object is read).
    pub fn put_object_later(&self, sha: Sha256, bytes: Vec<u8>) {
        debug_assert_eq!(Sha256::of(&bytes), sha);
        if !self.inner.packs.contains(&sha) {
            self.inner.later.put(&self.inner, sha, bytes);
        }
    }

    /// Writes every object handed to [`Store::put_object_later`] that is
    /// still waiting, now, on this thread (before journal segments that
    /// hold their durable copies are deleted).
    pub fn flush_later(&self) -> Result<(), Error> {
        self.inner.later.flush(&self.inner)
    }

    /// Closes the noun log at a graceful stop, emptying it when every
    /// change is in its files (see [`noun_log::NounLog::close`]); noun
    /// changes are refused from then on.
    pub fn close_noun_log(&self) {
        if let Some(log) = self.inner.noun_log.get() {
            log.close();
        }
    }

    /// The packs (objects written later), for fsck.
    pub fn packs(&self) -> &pack::Packs {
        &self.inner.packs
    }

    /// Runs blocking store work on the runtime's blocking pool (file I/O
    /// and fsyncs must not hold up the async workers).
    pub async fn blocking<T, E>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| E::from(Error::TaskFailed(e.to_string())))?
    }

    /// Reads and verifies an object: from memory, a pack, the root, else
    /// the bucket.
    pub fn get_object(&self, sha: &Sha256) -> Result<Vec<u8>, Error> {
        match self.held(sha)? {
            Some(bytes) => Ok(bytes),
            None => self.inner.objects.get(sha),
        }
    }

    /// Reads and verifies an object whose durable copy is a row of the
    /// shared database (a receipt): from memory, a pack or the root, else
    /// from its row (then kept under the root). The bucket, which holds
    /// no such object, is not asked.
    pub fn get_row_object(&self, sha: &Sha256) -> Result<Vec<u8>, Error> {
        if let Some(bytes) = self.held(sha)? {
            return Ok(bytes);
        }
        match (self.inner.objects.get_here(sha), self.inner.rows.get()) {
            (Err(Error::ObjectMissing { .. }), Some(rows)) => {
                let bytes = rows
                    .fetch(sha)?
                    .ok_or(Error::ObjectMissing { sha256: *sha })?;
                if Sha256::of(&bytes) != *sha {
                    return Err(Error::CorruptObject {
                        path: format!("the database row of {}", object::object_path(sha)),
                    });
                }
                self.put_object_later(*sha, bytes.clone());
                Ok(bytes)
            }
            (got, _) => got,
        }
    }

    /// An object handed over to be written later, or in a pack.
    fn held(&self, sha: &Sha256) -> Result<Option<Vec<u8>>, Error> {
        if let Some(bytes) = self.inner.later.get(sha) {
            return Ok(Some(bytes.to_vec()));
        }
        self.inner.packs.get(sha)
    }

    fn nouns_dir(&self) -> &Dir {
        &self.inner.root.nouns
    }

    fn key_locks(&self) -> &noun::KeyLocks {
        &self.inner.locks
    }

    fn noun_log(&self) -> Result<&noun_log::NounLog, Error> {
        self.inner.noun_log.get().ok_or_else(|| Error::Io {
            context: "changing a noun".into(),
            error: std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the root is open read-only",
            ),
        })
    }
}
