//! `objects/sha256/<2 hex>/<62 hex>`: immutable bytes named by their
//! sha256. `put` stores identical bytes once; `get` re-hashes what it reads
//! and never returns bytes whose hash differs from their name.

use std::io::Read;
use std::sync::OnceLock;

use cap_std::fs::Dir;

use super::atomic::{AtomicWriter, Durability, sync_dir};
use super::bucket::Bucket;
use super::{Error, Sha256, io_err};

/// The object area, with its 256 fan-out directories opened lazily and
/// kept; or, once [`Objects::use_bucket`] names one, the bucket that holds
/// the objects of several daemons (objects already under the root stay
/// readable).
#[derive(Debug)]
pub struct Objects {
    dir: Dir,
    fanout: Box<[OnceLock<Dir>]>,
    bucket: OnceLock<Bucket>,
}

/// The path of an object relative to the root, for messages and fsck.
pub fn object_path(sha: &Sha256) -> String {
    let hex = sha.hex();
    format!("objects/sha256/{}/{}", &hex[..2], &hex[2..])
}

impl Objects {
    /// The object area rooted at `objects/sha256`.
    pub fn new(dir: Dir) -> Objects {
        Objects {
            dir,
            fanout: (0..256).map(|_| OnceLock::new()).collect(),
            bucket: OnceLock::new(),
        }
    }

    /// Puts objects in `bucket` from now on, and reads there what the
    /// root lacks (set once, before serving).
    pub fn use_bucket(&self, bucket: Bucket) {
        let _ = self.bucket.set(bucket);
    }

    /// The bucket objects go to, when there is one.
    pub fn bucket(&self) -> Option<&Bucket> {
        self.bucket.get()
    }

    /// The fan-out directory of `sha`, created through `writer` when given.
    fn fanout_dir(
        &self,
        sha: &Sha256,
        writer: Option<&AtomicWriter>,
    ) -> Result<Option<&Dir>, Error> {
        let slot = &self.fanout[sha.as_bytes()[0] as usize];
        if let Some(dir) = slot.get() {
            return Ok(Some(dir));
        }
        let name = &sha.hex()[..2];
        if let Some(writer) = writer {
            writer.create_dir(&self.dir, name)?;
        }
        match self.dir.open_dir(name) {
            Ok(dir) => Ok(Some(slot.get_or_init(|| dir))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && writer.is_none() => Ok(None),
            Err(e) => Err(io_err(format!("opening objects/sha256/{name}"), e)),
        }
    }

    /// Stores `bytes` unless an object with their hash exists, and returns
    /// the hash. With `Durability::Synced`, an existing file is fsynced too,
    /// since it may have been written journaled; with `Durability::Journaled`
    /// its bytes are compared, since a power loss may have left an earlier
    /// journaled write in place with its bytes missing.
    pub fn put(
        &self,
        writer: &AtomicWriter,
        bytes: &[u8],
        durability: Durability,
    ) -> Result<Sha256, Error> {
        let sha = Sha256::of(bytes);
        if let Some(bucket) = self.bucket() {
            bucket.put(&sha, bytes)?;
            return Ok(sha);
        }
        let dir = self.fanout_dir(&sha, Some(writer))?.expect("created above");
        let name = &sha.hex()[2..];
        if self.present(dir, &sha, writer, bytes, durability)? {
            return Ok(sha);
        }
        writer.write(dir, name, bytes, durability)?;
        Ok(sha)
    }

    /// Stores `bytes` in two steps (a put whose durable copy is a log
    /// record): here they are written into `tmp/`, and the returned
    /// [`StagedObject`] puts them in place once the record is durable, so
    /// an object is never left by a record that was never written. `None`
    /// when an object with these bytes is already in place.
    pub fn stage<'a>(
        &'a self,
        writer: &'a AtomicWriter,
        bytes: &[u8],
    ) -> Result<Option<StagedObject<'a>>, Error> {
        let sha = Sha256::of(bytes);
        let dir = self.fanout_dir(&sha, Some(writer))?.expect("created above");
        if self.present(dir, &sha, writer, bytes, Durability::Journaled)? {
            return Ok(None);
        }
        Ok(Some(StagedObject {
            staged: writer.stage(bytes)?,
            dir,
            name: sha.hex()[2..].to_string(),
        }))
    }

    /// Whether the object of `sha` is in `dir` with `bytes` (fsynced again
    /// for a synced put, since it may have been written journaled).
    fn present(
        &self,
        dir: &Dir,
        sha: &Sha256,
        writer: &AtomicWriter,
        bytes: &[u8],
        durability: Durability,
    ) -> Result<bool, Error> {
        let name = &sha.hex()[2..];
        match dir.open(name) {
            Ok(mut existing) => {
                let len = existing
                    .metadata()
                    .map_err(|e| io_err("reading object metadata", e))?
                    .len();
                if len == bytes.len() as u64 && holds(durability, &mut existing, bytes)? {
                    if durability == Durability::Synced {
                        writer.fsync(|| existing.sync_all().and_then(|()| sync_dir(dir)))?;
                    }
                    return Ok(true);
                }
                tracing::warn!(path = %object_path(sha), "object has the wrong size or bytes; rewriting it");
                Ok(false)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err(format!("opening {}", object_path(sha)), e)),
        }
    }

    /// Whether a file stands at `sha`'s place under the root (its bytes
    /// unchecked; the bucket is not asked).
    pub fn has(&self, sha: &Sha256) -> bool {
        self.fanout_dir(sha, None)
            .ok()
            .flatten()
            .is_some_and(|dir| dir.exists(&sha.hex()[2..]))
    }

    /// Reads an object and verifies its hash: from the root, else from
    /// the bucket.
    pub fn get(&self, sha: &Sha256) -> Result<Vec<u8>, Error> {
        match (self.get_here(sha), self.bucket()) {
            (Err(Error::ObjectMissing { .. }), Some(bucket)) => bucket
                .get(sha)?
                .ok_or(Error::ObjectMissing { sha256: *sha }),
            (got, _) => got,
        }
    }

    /// Reads an object under the root and verifies its hash.
    pub(super) fn get_here(&self, sha: &Sha256) -> Result<Vec<u8>, Error> {
        let missing = || Error::ObjectMissing { sha256: *sha };
        let dir = self.fanout_dir(sha, None)?.ok_or_else(missing)?;
        let mut file = match dir.open(&sha.hex()[2..]) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
            Err(e) => return Err(io_err(format!("opening {}", object_path(sha)), e)),
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| io_err(format!("reading {}", object_path(sha)), e))?;
        if Sha256::of(&bytes) != *sha {
            return Err(Error::CorruptObject {
                path: object_path(sha),
            });
        }
        Ok(bytes)
    }

    /// The object area's directory, for fsck's walk.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }
}

/// An object's bytes written into `tmp/`, to be put in place.
#[derive(Debug)]
pub struct StagedObject<'a> {
    staged: super::atomic::Staged<'a>,
    dir: &'a Dir,
    name: String,
}

impl StagedObject<'_> {
    /// Renames the object into place, without fsync (its durable copy is
    /// the record logged before this).
    pub fn place(self) -> Result<(), Error> {
        self.staged.place(self.dir, &self.name)
    }
}

/// Whether an existing object of the right size can be trusted: always,
/// except for a journaled write, which compares the bytes.
fn holds(
    durability: Durability,
    file: &mut cap_std::fs::File,
    bytes: &[u8],
) -> Result<bool, Error> {
    if durability != Durability::Journaled {
        return Ok(true);
    }
    let mut on_disk = Vec::with_capacity(bytes.len());
    file.read_to_end(&mut on_disk)
        .map_err(|e| io_err("reading an existing object", e))?;
    Ok(on_disk == bytes)
}
