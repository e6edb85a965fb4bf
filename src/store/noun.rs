//! Noun ref files: `nouns/<ns>/<store>/<key>.json`, the ordered version list
//! of one noun, and the compare-and-swap that appends to it.
//!
//! Beside each ref file the daemon keeps a hidden shadow,
//! `nouns/<ns>/<store>/.<key>.swap`: a change writes the new ref into the
//! shadow, logs it (`noun_log`), and swaps the two names with
//! `renameat2(RENAME_EXCHANGE)`, so the shadow then holds the previous
//! ref. A reader opening the ref file gets the old bytes or the new ones,
//! never a mix, and no inode is freed per put (a freed inode slows every
//! later file creation on ext4). Shadows are not nouns: listing, fsck and
//! git (the root's `.gitignore`) skip them.
//!
//! Invariants:
//! 1. Versions start at 1 and each entry is the previous plus one.
//! 2. An entry's object exists (it is written before the entry's record
//!    is logged, and replay writes it again from the record).
//! 3. Entries are never rewritten, except the `quarantined` flag, which
//!    quarantine sets and clears on every entry at once.
//! 4. One writer per key at a time (a striped lock held from the read of
//!    the ref to its swap), so each version has exactly one winner, none
//!    is lost, and log order per noun is ref order.
//! 5. A ref file names a version only once its record is durable.
//! 6. A shadow is rewritten only under its stripe's write lock, which
//!    readers of the ref file hold (shared) from open to last byte: the
//!    inode a reader opened as the ref may be the next change's shadow.

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};

use cap_std::fs::Dir;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::health::Writer;
use super::refs::RefChange;
use super::{Error, Name, NounPath, Sha256, Store, Visibility, io_err, noun_log};

/// One version of a noun, as listed in its ref file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct VersionEntry {
    /// 1, 2, 3, ...
    pub version: u64,
    /// The hash of the body object.
    pub sha256: Sha256,
    /// Body size in bytes.
    pub size: u64,
    /// Media type of the body.
    pub media_type: String,
    /// The noun's type, such as `noun.skill_pack`.
    #[serde(rename = "type")]
    pub noun_type: Option<String>,
    /// When the version was written.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// The key id that wrote it.
    pub created_by: String,
    /// The surface that produced the noun.
    pub producer_surface: Option<Name>,
    /// Who may read this version.
    pub visibility: Visibility,
    /// Extra surfaces for `allowlist_surfaces`.
    pub allowed_surfaces: Vec<Name>,
    /// The owning key id.
    pub owner: Option<String>,
    /// Readable by admin only while set.
    pub quarantined: bool,
    /// The seed pack whose import wrote this version (a label that grants
    /// nothing); absent for other writes and in ref files older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_pack: Option<Name>,
}

/// A noun's ref file: where it lives and its versions in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct NounRef {
    /// The namespace.
    pub namespace: Name,
    /// The store.
    pub store: Name,
    /// The key.
    pub key: Name,
    /// Versions in order, the latest last; never empty.
    pub versions: Vec<VersionEntry>,
}

impl NounRef {
    /// The latest version.
    pub fn latest(&self) -> &VersionEntry {
        self.versions
            .last()
            .expect("a ref file has at least one version")
    }

    /// The entry of `version`, if it is listed.
    pub fn version(&self, version: u64) -> Option<&VersionEntry> {
        let i = self
            .versions
            .binary_search_by_key(&version, |e| e.version)
            .ok()?;
        self.versions.get(i)
    }

    /// Where it lives.
    pub fn path(&self) -> NounPath {
        NounPath {
            namespace: self.namespace.clone(),
            store: self.store.clone(),
            key: self.key.clone(),
        }
    }

    /// A ref with no versions yet, for the first put of `path`.
    fn empty(path: &NounPath) -> NounRef {
        NounRef {
            namespace: path.namespace.clone(),
            store: path.store.clone(),
            key: path.key.clone(),
            versions: Vec::new(),
        }
    }

    /// The noun as one reader sees it: only the versions `sees` accepts,
    /// `None` when it accepts none. Hidden means missing: every answer
    /// about a noun's versions (a read, a version list, a listing's
    /// latest, a pin) is computed from this view, so a version the reader
    /// may not see answers exactly as one that was never written.
    pub fn seen_by(mut self, sees: impl Fn(&VersionEntry) -> bool) -> Option<NounRef> {
        self.versions.retain(|e| sees(e));
        (!self.versions.is_empty()).then_some(self)
    }
}

/// The metadata the caller decides for a new version (after its access check).
#[derive(Clone, Debug)]
pub struct VersionMeta {
    /// The writing key id.
    pub created_by: String,
    /// The noun's producer surface.
    pub producer_surface: Option<Name>,
    /// Visibility of the new version.
    pub visibility: Visibility,
    /// Allowlisted surfaces of the new version.
    pub allowed_surfaces: Vec<Name>,
    /// The owning key id.
    pub owner: Option<String>,
}

/// What a put asks for besides the body.
#[derive(Clone, Debug)]
pub struct PutRequest {
    /// The version the write follows (0 = create); `None` means "after
    /// whatever is latest" (the importer's declarative put, which the HTTP
    /// layer allows only with `skip_unchanged`, and promotion).
    pub expected_version: Option<u64>,
    /// Equal bytes to the latest version write nothing.
    pub skip_unchanged: bool,
    /// Decide, report, write nothing.
    pub dry_run: bool,
    /// Media type of the body.
    pub media_type: String,
    /// The noun's type.
    pub noun_type: Option<String>,
    /// The seed pack the write comes from (recorded on the new version).
    pub source_pack: Option<Name>,
}

/// What a put did (or, for a dry run, would do).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum PutOutcome {
    /// Version 1 of a new noun.
    Create {
        /// The new (or would-be) entry.
        entry: VersionEntry,
    },
    /// A version after the latest.
    NewVersion {
        /// The new (or would-be) entry.
        entry: VersionEntry,
    },
    /// `skip_unchanged` and the latest version holds these bytes with the
    /// same metadata.
    Unchanged {
        /// The latest entry.
        entry: VersionEntry,
    },
    /// Dry run only: the expected version is not the current one.
    Conflict {
        /// The version the caller expected.
        expected: u64,
        /// The current version (0 when the noun does not exist).
        current: u64,
    },
}

/// Stripes of the per-key write lock.
const LOCK_STRIPES: usize = 1024;

/// Per-key locks by striping: `write` serializes a key's writers (held
/// across the log wait); `shadow` keeps readers of the ref file and the
/// rewrite of its shadow apart (invariant 6), held only for the I/O.
#[derive(Debug, Default)]
struct Stripe {
    write: Mutex<()>,
    shadow: RwLock<()>,
}

/// The stripes of the per-key locks.
#[derive(Debug)]
pub(super) struct KeyLocks(Box<[Stripe]>);

impl KeyLocks {
    pub(super) fn new() -> KeyLocks {
        KeyLocks((0..LOCK_STRIPES).map(|_| Stripe::default()).collect())
    }

    fn stripe(&self, path: &NounPath) -> &Stripe {
        let h = BuildHasherDefault::<DefaultHasher>::default().hash_one(path);
        &self.0[(h % LOCK_STRIPES as u64) as usize]
    }

    fn writer(&self, path: &NounPath) -> MutexGuard<'_, ()> {
        self.stripe(path)
            .write
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Store {
    /// Reads a noun's ref (its file, or its rows in the ref table);
    /// `None` when the noun does not exist.
    pub fn read_ref(&self, path: &NounPath) -> Result<Option<NounRef>, Error> {
        if let Some(table) = self.ref_table() {
            return table.read(path);
        }
        let Some(bytes) = self.ref_bytes_on_disk(path)? else {
            return Ok(None);
        };
        let parsed: NounRef = serde_json::from_slice(&bytes).map_err(|e| Error::CorruptRef {
            path: format!("nouns/{path}.json"),
            message: e.to_string(),
        })?;
        if parsed.versions.is_empty() {
            return Err(Error::CorruptRef {
                path: format!("nouns/{path}.json"),
                message: "no versions".into(),
            });
        }
        Ok(Some(parsed))
    }

    /// The bytes of a noun's ref file, `None` when it has none.
    pub(super) fn ref_bytes_on_disk(&self, path: &NounPath) -> Result<Option<Vec<u8>>, Error> {
        let Some(dir) = self.store_dir(path, false)? else {
            return Ok(None);
        };
        let _reading = self
            .key_locks()
            .stripe(path)
            .shadow
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        match dir.read(ref_file_name(&path.key)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(format!("reading nouns/{path}.json"), e)),
        }
    }

    /// Reads the body of one version, verifying its hash and size.
    pub fn read_body(&self, entry: &VersionEntry) -> Result<Vec<u8>, Error> {
        let bytes = self.objects().get(&entry.sha256)?;
        if bytes.len() as u64 != entry.size {
            return Err(Error::CorruptObject {
                path: super::object::object_path(&entry.sha256),
            });
        }
        Ok(bytes)
    }

    /// Appends a version by compare-and-swap, as a writer that sees only
    /// the versions `sees` accepts. `decide` gets the latest of those
    /// (under the key's lock) and returns the new version's metadata or
    /// the caller's refusal; nothing is written when it refuses.
    ///
    /// Hidden means missing here too: `skip_unchanged` and the
    /// compare-and-swap look only at what the writer sees, so a conflict
    /// names the latest version it sees (0 for none) and a dry run answers
    /// as if the hidden versions did not exist. A real write cannot follow
    /// a version the writer does not see: when one comes after the latest
    /// it sees, the put that would otherwise write is `NounNotFound`, the
    /// answer a put to a noun it sees nothing of gets, and no hidden
    /// version's number or count is told.
    pub fn put_noun<E: From<Error>>(
        &self,
        path: &NounPath,
        body: &[u8],
        req: &PutRequest,
        sees: impl Fn(&VersionEntry) -> bool,
        decide: impl FnOnce(Option<&VersionEntry>) -> Result<VersionMeta, E>,
    ) -> Result<PutOutcome, E> {
        let Some(table) = self.ref_table() else {
            let _guard = self.key_locks().writer(path);
            let current = self.read_ref(path)?;
            let (outcome, entry) = plan_put(current.as_ref(), body, req, sees, decide)?;
            if let Some(entry) = entry {
                let mut next = current.unwrap_or_else(|| NounRef::empty(path));
                next.versions.push(entry.clone());
                self.change_ref(path, &next, Some(body))?;
                self.noun_written(path, &entry);
            }
            return Ok(outcome);
        };
        // A ref never names an object that is not there: the object goes
        // up beside the ref's change, which commits only once it is up
        // (one whose ref is refused is the garbage collector's). A put
        // that may change nothing (`skip_unchanged`, an import's) first
        // looks for a version naming these bytes: then they are in the
        // bucket for good (versions are never removed), and nothing goes up.
        let named = || -> Result<bool, Error> {
            let sha = Sha256::of(body);
            let current = table.read(path)?;
            Ok(current.is_some_and(|n| n.versions.iter().any(|e| e.sha256 == sha)))
        };
        let nothing_up = req.dry_run || (req.skip_unchanged && named()?);
        let upload = if nothing_up {
            None
        } else {
            self.upload_beside(body)?
        };
        let (mut decide, mut answer) = (Some(decide), None);
        table.change(
            path,
            &mut |current| {
                let decide = decide.take().expect("a ref change is decided once");
                match plan_put(current, body, req, &sees, decide) {
                    Ok((outcome, entry)) => {
                        answer = Some(Ok(outcome));
                        Ok(entry.map(|e| RefChange::Append(Box::new(e))))
                    }
                    Err(refused) => {
                        answer = Some(Err(refused));
                        Ok(None)
                    }
                }
            },
            upload,
        )?;
        // The table wrote the change's event: the stream tells of it.
        answer.expect("the change was decided")
    }

    /// `body`'s object, for a shared ref's change: counted on in the
    /// bucket's ledger now (before any connection is held for the change),
    /// and the upload to run beside the change. Stored at once, leaving
    /// nothing to run, when objects are the root's.
    fn upload_beside(&self, body: &[u8]) -> Result<Option<super::refs::Beside>, Error> {
        let Some(bucket) = self.objects().bucket() else {
            self.put_object(body, super::Durability::Synced)?;
            return Ok(None);
        };
        let sha = Sha256::of(body);
        bucket.count(&sha)?;
        let (bucket, bytes) = (bucket.clone(), body.to_vec());
        Ok(Some(Box::pin(
            async move { bucket.send(&sha, bytes).await },
        )))
    }

    /// Sets or clears the quarantine flag on every version of a noun.
    /// `decide` sees the latest entry first and may refuse.
    pub fn set_quarantine<E: From<Error>>(
        &self,
        path: &NounPath,
        quarantined: bool,
        decide: impl FnOnce(Option<&VersionEntry>) -> Result<(), E>,
    ) -> Result<NounRef, E> {
        let Some(table) = self.ref_table() else {
            let _guard = self.key_locks().writer(path);
            let current = self.read_ref(path)?;
            let (next, changes) = plan_quarantine(current.as_ref(), quarantined, decide)?;
            if changes {
                self.change_ref(path, &next, None)?;
                self.noun_written(path, next.latest());
            }
            return Ok(next);
        };
        let (mut decide, mut answer) = (Some(decide), None);
        table.change(
            path,
            &mut |current| {
                let decide = decide.take().expect("a ref change is decided once");
                match plan_quarantine(current, quarantined, decide) {
                    Ok((next, changes)) => {
                        answer = Some(Ok((next, changes)));
                        Ok(changes.then_some(RefChange::Quarantine(quarantined)))
                    }
                    Err(refused) => {
                        answer = Some(Err(refused));
                        Ok(None)
                    }
                }
            },
            None,
        )?;
        let (next, _) = answer.expect("the change was decided")?;
        Ok(next)
    }

    /// The one way a ref file changes (the caller holds the key's write
    /// lock): `body`'s object is staged in `tmp/` and the shadow written,
    /// the record is logged and waited for, the object is put in place
    /// and the shadow swapped in. Refused before anything is logged when
    /// the disk is full; after the record is durable, a failure fails the
    /// root's health (invariant 3 of `noun_log`), so the next start
    /// materializes it. A crash before the record leaves no object behind
    /// (`tessera fsck` reports an object nothing names).
    fn change_ref(
        &self,
        path: &NounPath,
        next: &NounRef,
        body: Option<&[u8]>,
    ) -> Result<(), Error> {
        let log = self.noun_log()?;
        let object = match body {
            Some(body) => self.inner.objects.stage(&self.inner.writer, body)?,
            None => None,
        };
        let bytes = ref_bytes(next);
        let dir = self.store_dir(path, true)?.expect("created");
        self.stage_ref(path, &dir, &bytes)?;
        let ticket = log.append(&noun_log::encode(&bytes, body))?;
        log.wait(ticket)?;
        object
            .map_or(Ok(()), |o| o.place())
            .and_then(|()| self.swap_ref(path, &dir))
            .map_err(|e| {
                Error::StorageFailed(self.health().report_failed(
                    Writer::NounLog,
                    format!("a logged change of nouns/{path}.json could not be put in place: {e}"),
                ))
            })?;
        log.done(ticket);
        Ok(())
    }

    /// Puts `bytes` in place as the ref file of `path` (replay, which
    /// holds no lock: nothing else runs yet).
    pub(super) fn place_ref(&self, path: &NounPath, bytes: &[u8]) -> Result<(), Error> {
        let dir = self.store_dir(path, true)?.expect("created");
        self.stage_ref(path, &dir, bytes)?;
        self.swap_ref(path, &dir)
    }

    /// Writes `bytes` into the shadow of `path`'s ref file.
    fn stage_ref(&self, path: &NounPath, dir: &Dir, bytes: &[u8]) -> Result<(), Error> {
        let _no_readers = self
            .key_locks()
            .stripe(path)
            .shadow
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        self.writer()
            .overwrite(dir, &shadow_file_name(&path.key), bytes)
    }

    /// Swaps the shadow of `path` in as its ref file.
    fn swap_ref(&self, path: &NounPath, dir: &Dir) -> Result<(), Error> {
        self.writer()
            .swap(dir, &shadow_file_name(&path.key), &ref_file_name(&path.key))
    }

    /// Opens `nouns/<ns>/<store>/`, creating it when `create`.
    fn store_dir(&self, path: &NounPath, create: bool) -> Result<Option<Dir>, Error> {
        let Some(ns) = self.sub_dir(self.nouns_dir(), &path.namespace, create, path)? else {
            return Ok(None);
        };
        self.sub_dir(&ns, &path.store, create, path)
    }

    /// Opens `parent/name`, creating it (durably) when `create`.
    fn sub_dir(
        &self,
        parent: &Dir,
        name: &Name,
        create: bool,
        path: &NounPath,
    ) -> Result<Option<Dir>, Error> {
        let opened = match parent.open_dir(name.as_str()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                self.writer().create_dir(parent, name.as_str())?;
                parent.open_dir(name.as_str())
            }
            opened => opened,
        };
        match opened {
            Ok(d) => Ok(Some(d)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => Ok(None),
            Err(e) => Err(io_err(format!("opening nouns/{path}"), e)),
        }
    }
}

fn ref_bytes(next: &NounRef) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(next).expect("ref files serialize");
    bytes.push(b'\n');
    bytes
}

fn ref_file_name(key: &Name) -> String {
    format!("{key}.json")
}

/// The hidden shadow of `key`'s ref file: one path component (a `Name`
/// has no `/`), and never a ref file name (a `Name` does not start with
/// a dot, and the shadow does not end in `.json`).
fn shadow_file_name(key: &Name) -> String {
    format!(".{key}.swap")
}

/// Whether `file`, in a store directory, is a ref file's shadow.
pub fn is_shadow(file: &str) -> bool {
    file.strip_prefix('.')
        .and_then(|f| f.strip_suffix(".swap"))
        .is_some_and(|key| Name::parse("key", key).is_ok())
}

/// What a put decides on a noun's ref as it is now (`current`), as a
/// writer that sees only the versions `sees` accepts: its outcome, and
/// the entry to append when something is to be written (see
/// [`Store::put_noun`]).
fn plan_put<E: From<Error>>(
    current: Option<&NounRef>,
    body: &[u8],
    req: &PutRequest,
    sees: impl Fn(&VersionEntry) -> bool,
    decide: impl FnOnce(Option<&VersionEntry>) -> Result<VersionMeta, E>,
) -> Result<(PutOutcome, Option<VersionEntry>), E> {
    let latest = current.and_then(|n| n.versions.iter().rev().find(|e| sees(e)));
    let hidden_after =
        current.is_some_and(|n| latest.is_none_or(|e| e.version != n.latest().version));
    let meta = decide(latest)?;
    let sha = Sha256::of(body);
    if let Some(latest) = latest
        && req.skip_unchanged
        && latest.sha256 == sha
        && same_meta(latest, req, &meta)
    {
        let entry = latest.clone();
        return Ok((PutOutcome::Unchanged { entry }, None));
    }
    let current_version = latest.map_or(0, |e| e.version);
    let expected = req.expected_version.unwrap_or(current_version);
    if expected != current_version {
        if req.dry_run {
            let current = current_version;
            return Ok((PutOutcome::Conflict { expected, current }, None));
        }
        return Err(Error::VersionConflict {
            expected,
            current: current_version,
        }
        .into());
    }
    let entry = VersionEntry {
        version: current_version + 1,
        sha256: sha,
        size: body.len() as u64,
        media_type: req.media_type.clone(),
        noun_type: req.noun_type.clone(),
        created_at: Timestamp::now(),
        created_by: meta.created_by,
        producer_surface: meta.producer_surface,
        visibility: meta.visibility,
        allowed_surfaces: meta.allowed_surfaces,
        owner: meta.owner,
        quarantined: latest.is_some_and(|e| e.quarantined),
        source_pack: req.source_pack.clone(),
    };
    if hidden_after && !req.dry_run {
        return Err(Error::NounNotFound.into());
    }
    let written = (!req.dry_run).then(|| entry.clone());
    Ok(if current_version == 0 {
        (PutOutcome::Create { entry }, written)
    } else {
        (PutOutcome::NewVersion { entry }, written)
    })
}

/// What a quarantine decides on a noun's ref as it is now: the ref with
/// every version flagged `quarantined`, and whether that changes it.
fn plan_quarantine<E: From<Error>>(
    current: Option<&NounRef>,
    quarantined: bool,
    decide: impl FnOnce(Option<&VersionEntry>) -> Result<(), E>,
) -> Result<(NounRef, bool), E> {
    decide(current.map(NounRef::latest))?;
    let mut next = current.cloned().ok_or(Error::NounNotFound)?;
    let changes = next.latest().quarantined != quarantined;
    for entry in &mut next.versions {
        entry.quarantined = quarantined;
    }
    Ok((next, changes))
}

/// Whether a put of the latest version's bytes would record the same
/// version: its media type, type, visibility and allowlist are unchanged.
/// A metadata edit with the same body is a new version, so an author can
/// tighten visibility by re-importing.
fn same_meta(latest: &VersionEntry, req: &PutRequest, meta: &VersionMeta) -> bool {
    latest.media_type == req.media_type
        && latest.noun_type == req.noun_type
        && latest.visibility == meta.visibility
        && latest.allowed_surfaces == meta.allowed_surfaces
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Access;

    /// A put of `body` after `expected` (`None`: the latest), as a writer
    /// that sees only versions whose owner is `seer` (all for `*`),
    /// recording `owner`.
    fn put(
        store: &Store,
        path: &NounPath,
        body: &[u8],
        expected: Option<u64>,
        dry_run: bool,
        (seer, owner): (&str, &str),
    ) -> Result<PutOutcome, Error> {
        let req = PutRequest {
            expected_version: expected,
            skip_unchanged: expected.is_none(),
            dry_run,
            media_type: "application/json".into(),
            noun_type: None,
            source_pack: None,
        };
        let sees = |e: &VersionEntry| seer == "*" || e.owner.as_deref() == Some(seer);
        store.put_noun::<Error>(path, body, &req, sees, |_| {
            Ok(VersionMeta {
                created_by: owner.into(),
                producer_surface: None,
                visibility: Visibility::Private,
                allowed_surfaces: Vec::new(),
                owner: Some(owner.into()),
            })
        })
    }

    /// What a put answers, as compared: the outcome without its time, or
    /// the error's text.
    fn said(got: Result<PutOutcome, Error>) -> String {
        let (name, mut entry) = match got {
            Ok(PutOutcome::Create { entry }) => ("create", entry),
            Ok(PutOutcome::NewVersion { entry }) => ("new version", entry),
            Ok(PutOutcome::Unchanged { entry }) => ("unchanged", entry),
            Ok(conflict) => return format!("{conflict:?}"),
            Err(e) => return e.to_string(),
        };
        entry.created_at = Timestamp::UNIX_EPOCH;
        format!("{name} {entry:?}")
    }

    #[test]
    fn a_writer_is_answered_from_the_versions_it_sees_and_never_follows_a_hidden_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Access::Exclusive).unwrap();
        let hidden = NounPath::parse("n", "s", "hidden").unwrap();
        let missing = NounPath::parse("n", "s", "missing").unwrap();
        // `a` writes v1 of both; `b` writes a v2 of `hidden` that `a` may not see.
        put(&store, &hidden, b"1", Some(0), false, ("a", "a")).unwrap();
        put(&store, &missing, b"1", Some(0), false, ("a", "a")).unwrap();
        put(&store, &hidden, b"2", None, false, ("*", "b")).unwrap();
        let as_a = ("a", "a");
        for (expected, dry_run) in [
            (Some(0), false),
            (Some(2), false),
            (Some(5), false),
            (Some(0), true),
            (Some(1), true),
            (Some(2), true),
            (None, true),
        ] {
            assert_eq!(
                said(put(&store, &hidden, b"3", expected, dry_run, as_a)),
                said(put(&store, &missing, b"3", expected, dry_run, as_a)),
                "expected {expected:?}, dry run {dry_run}"
            );
        }
        assert_eq!(
            said(put(&store, &hidden, b"1", None, false, as_a)),
            said(put(&store, &missing, b"1", None, false, as_a)),
            "unchanged, as far as `a` sees"
        );
        for expected in [Some(1), None] {
            assert!(matches!(
                put(&store, &hidden, b"3", expected, false, as_a),
                Err(Error::NounNotFound)
            ));
        }
        assert_eq!(store.read_ref(&hidden).unwrap().unwrap().versions.len(), 2);
    }

    #[test]
    fn a_version_the_reader_may_not_see_is_looked_up_as_one_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Access::Exclusive).unwrap();
        let hidden = NounPath::parse("n", "s", "hidden").unwrap();
        let missing = NounPath::parse("n", "s", "missing").unwrap();
        put(&store, &hidden, b"1", Some(0), false, ("a", "a")).unwrap();
        put(&store, &hidden, b"2", Some(1), false, ("*", "b")).unwrap();
        put(&store, &missing, b"1", Some(0), false, ("a", "a")).unwrap();
        let sees = |e: &VersionEntry| e.owner.as_deref() == Some("a");
        let v2 = store.read_ref(&hidden).unwrap().unwrap().versions[1].sha256;
        let look =
            |path: &NounPath, version, sha| match store.version_entry(path, version, sha, sees) {
                Ok(e) => format!("v{} {}", e.version, e.sha256),
                Err(e) => e.to_string(),
            };
        for (version, sha) in [
            (None, None),
            (Some(1), None),
            (Some(2), None),
            (Some(2), Some(v2)),
            (Some(1), Some(v2)),
            (Some(9), None),
        ] {
            assert_eq!(
                look(&hidden, version, sha),
                look(&missing, version, sha),
                "{version:?} {sha:?}"
            );
        }
        let nobody = |_: &VersionEntry| false;
        assert!(matches!(
            store.version_entry(&hidden, Some(1), None, nobody),
            Err(Error::NounNotFound)
        ));
    }

    #[test]
    fn a_ref_file_written_before_source_pack_reads_back_and_writes_the_same_bytes() {
        let old = r#"{
  "namespace": "n",
  "store": "s",
  "key": "k",
  "versions": [
    {
      "version": 1,
      "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
      "size": 0,
      "media_type": "application/json",
      "type": null,
      "created_at": "2026-01-01T00:00:00Z",
      "created_by": "k1",
      "producer_surface": null,
      "visibility": "public",
      "allowed_surfaces": [],
      "owner": null,
      "quarantined": false
    }
  ]
}
"#;
        let parsed: NounRef = serde_json::from_str(old).unwrap();
        assert_eq!(parsed.latest().source_pack, None);
        assert_eq!(String::from_utf8(ref_bytes(&parsed)).unwrap(), old);
    }
}
