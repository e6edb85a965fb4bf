//! Packs: objects whose durable copy is elsewhere (receipts, held by their
//! journal records) appended to `objects/packs/<20 digits>.pack` instead of
//! one file each, so a submit costs no inode. Each record is
//! `len: u32 LE | sha256: 32 bytes | bytes`; an in-memory index maps a hash
//! to its place, rebuilt at open. Every read re-hashes the bytes, as for
//! loose objects.
//!
//! A pack from an earlier run is closed (each run appends to a new one).
//! The first open that finds it without an index reads it, re-hashing each
//! record, and writes `<20 digits>.idx` beside it:
//!
//! ```text
//! "tessera-pack-index-1\n" | pack length: u64 LE | count: u64 LE
//! count × (sha256: 32 bytes | offset: u64 LE | len: u32 LE)
//! sha256 of every byte before it: 32 bytes
//! ```
//!
//! Later opens load the index instead of the pack when its checksum holds
//! and it names the pack's current length; otherwise they read the pack
//! again. Indexes are derived data, written without fsync (a torn one
//! fails its checksum); a pack with a damaged record gets none, so each
//! open finds the damage again (and fsck reports it).
//!
//! Packs are written without fsync: a crash may cut the newest pack's tail,
//! and replay hands the lost receipts over again. Each run appends to a new
//! pack (a torn tail is never written after), and a pack is closed at
//! 64 MiB.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, PoisonError};

use cap_std::fs::{Dir, OpenOptions};
use hashbrown::HashMap;

use super::{Error, Sha256, io_err};

/// The folder under `objects/`.
pub const DIR: &str = "packs";

const HEADER: usize = 4 + 32;
const PACK_LIMIT: u64 = 64 << 20;

#[derive(Clone, Copy, Debug)]
struct Loc {
    pack: u64,
    offset: u64,
    len: u32,
}

#[derive(Debug, Default)]
struct State {
    index: HashMap<Sha256, Loc>,
    files: HashMap<u64, File>,
    open: Option<(u64, u64)>,
    next: u64,
}

/// The packs of a root (none when the root has no `objects/packs/` and is
/// opened read-only).
#[derive(Debug)]
pub struct Packs {
    dir: Option<Dir>,
    state: Mutex<State>,
}

fn pack_name(n: u64) -> String {
    format!("{n:020}.pack")
}

fn pack_number(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".pack")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// A pack's whole records: `(sha, offset, len)`.
type Records = Vec<(Sha256, u64, u32)>;

/// Reads one pack from its start: its whole records, and whether a
/// damaged record (not a cut tail) was met.
fn scan(file: &File) -> std::io::Result<(Records, bool)> {
    let mut file = file.try_clone()?;
    file.seek(SeekFrom::Start(0))?;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let (mut out, mut at) = (Vec::new(), 0u64);
    let mut header = [0u8; HEADER];
    loop {
        if let Err(e) = r.read_exact(&mut header) {
            return match e.kind() {
                std::io::ErrorKind::UnexpectedEof => Ok((out, false)),
                _ => Err(e),
            };
        }
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
        let sha = Sha256::from_bytes(header[4..].try_into().expect("32 bytes"));
        let mut bytes = vec![0u8; len as usize];
        if let Err(e) = r.read_exact(&mut bytes) {
            return match e.kind() {
                std::io::ErrorKind::UnexpectedEof => Ok((out, false)),
                _ => Err(e),
            };
        }
        if Sha256::of(&bytes) != sha {
            return Ok((out, true));
        }
        out.push((sha, at + HEADER as u64, len));
        at += HEADER as u64 + u64::from(len);
    }
}

const INDEX_MAGIC: &[u8] = b"tessera-pack-index-1\n";
const INDEX_ENTRY: usize = 32 + 8 + 4;

fn index_name(n: u64) -> String {
    format!("{n:020}.idx")
}

/// The index of a pack `pack_len` bytes long.
fn encode_index(pack_len: u64, records: &Records) -> Vec<u8> {
    let mut out = Vec::with_capacity(INDEX_MAGIC.len() + 16 + records.len() * INDEX_ENTRY + 32);
    out.extend_from_slice(INDEX_MAGIC);
    out.extend_from_slice(&pack_len.to_le_bytes());
    out.extend_from_slice(&(records.len() as u64).to_le_bytes());
    for (sha, offset, len) in records {
        out.extend_from_slice(sha.as_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
    }
    let sum = Sha256::of(&out);
    out.extend_from_slice(sum.as_bytes());
    out
}

/// The records an index lists, if its checksum holds and it is the index
/// of a pack `pack_len` bytes long.
fn decode_index(bytes: &[u8], pack_len: u64) -> Option<Records> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    if Sha256::of(body).as_bytes() != sum {
        return None;
    }
    let rest = body.strip_prefix(INDEX_MAGIC)?;
    let (head, entries) = rest.split_at_checked(16)?;
    let u64_at = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let count = usize::try_from(u64_at(&head[8..])).ok()?;
    if u64_at(&head[..8]) != pack_len || entries.len() != count.checked_mul(INDEX_ENTRY)? {
        return None;
    }
    let records = entries
        .chunks_exact(INDEX_ENTRY)
        .map(|e| {
            let sha = Sha256::from_bytes(e[..32].try_into().expect("32 bytes"));
            let len = u32::from_le_bytes(e[40..].try_into().expect("4 bytes"));
            (sha, u64_at(&e[32..40]), len)
        })
        .collect::<Records>();
    records
        .iter()
        .all(|(_, offset, len)| offset + u64::from(*len) <= pack_len)
        .then_some(records)
}

/// A closed pack's records: from its index when that holds, else read
/// (and re-hashed) from the pack, writing the index for the next open
/// when `write`.
fn records_of(dir: &Dir, n: u64, file: &File, write: bool) -> std::io::Result<Records> {
    let pack_len = file.metadata()?.len();
    if let Ok(bytes) = dir.read(index_name(n))
        && let Some(records) = decode_index(&bytes, pack_len)
    {
        return Ok(records);
    }
    let (records, damaged) = scan(file)?;
    if write && !damaged {
        let tmp = format!("{}.tmp", index_name(n));
        let written = dir
            .write(&tmp, encode_index(pack_len, &records))
            .and_then(|()| dir.rename(&tmp, dir, index_name(n)));
        if let Err(e) = written {
            let _ = dir.remove_file(&tmp);
            tracing::warn!(pack = %pack_name(n), error = %e, "could not write a pack index; the next start reads the pack again");
        }
    }
    Ok(records)
}

impl Packs {
    /// Opens the packs in `dir` and indexes their records; `write` lets it
    /// write the pack indexes it lacks (not on a read-only open).
    pub fn open(dir: Option<Dir>, write: bool) -> Result<Packs, Error> {
        let mut state = State::default();
        if let Some(d) = &dir {
            for entry in d
                .entries()
                .map_err(|e| io_err("listing objects/packs", e))?
            {
                let entry = entry.map_err(|e| io_err("listing objects/packs", e))?;
                let Some(n) = pack_number(&entry.file_name().to_string_lossy()) else {
                    continue;
                };
                let file = d
                    .open(pack_name(n))
                    .map_err(|e| io_err(format!("opening objects/packs/{}", pack_name(n)), e))?
                    .into_std();
                let records = records_of(d, n, &file, write)
                    .map_err(|e| io_err(format!("reading objects/packs/{}", pack_name(n)), e))?;
                for (sha, offset, len) in records {
                    state.index.entry(sha).or_insert(Loc {
                        pack: n,
                        offset,
                        len,
                    });
                }
                state.files.insert(n, file);
                state.next = state.next.max(n + 1);
            }
        }
        Ok(Packs {
            dir,
            state: Mutex::new(state),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a pack holds `sha`.
    pub fn contains(&self, sha: &Sha256) -> bool {
        self.state().index.contains_key(sha)
    }

    /// The bytes of `sha` from its pack, re-hashed; `None` when no pack
    /// holds it.
    pub fn get(&self, sha: &Sha256) -> Result<Option<Vec<u8>>, Error> {
        let st = self.state();
        let Some(loc) = st.index.get(sha).copied() else {
            return Ok(None);
        };
        let file = st.files.get(&loc.pack).expect("an indexed pack is open");
        let mut bytes = vec![0u8; loc.len as usize];
        file.read_exact_at(&mut bytes, loc.offset)
            .map_err(|e| io_err(format!("reading objects/packs/{}", pack_name(loc.pack)), e))?;
        if Sha256::of(&bytes) != *sha {
            return Err(Error::CorruptObject {
                path: format!(
                    "objects/packs/{} at byte {}",
                    pack_name(loc.pack),
                    loc.offset
                ),
            });
        }
        Ok(Some(bytes))
    }

    /// Appends objects not yet packed, in one write (no fsync: their
    /// durable copy is elsewhere).
    pub fn append(&self, items: &[(Sha256, &[u8])]) -> Result<(), Error> {
        let Some(dir) = &self.dir else {
            return Err(io_err(
                "writing objects/packs",
                std::io::Error::from(std::io::ErrorKind::ReadOnlyFilesystem),
            ));
        };
        let mut st = self.state();
        let fresh: Vec<&(Sha256, &[u8])> = items
            .iter()
            .filter(|(sha, _)| !st.index.contains_key(sha))
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let (n, at) = match st.open {
            Some((n, len)) if len < PACK_LIMIT => (n, len),
            _ => {
                let n = st.next;
                let file = dir
                    .open_with(
                        pack_name(n),
                        OpenOptions::new().append(true).read(true).create_new(true),
                    )
                    .map_err(|e| io_err(format!("creating objects/packs/{}", pack_name(n)), e))?
                    .into_std();
                st.files.insert(n, file);
                st.next = n + 1;
                st.open = Some((n, 0));
                (n, 0)
            }
        };
        let mut buf = Vec::new();
        let mut locs = Vec::with_capacity(fresh.len());
        for (sha, bytes) in fresh {
            let len = u32::try_from(bytes.len()).expect("packed objects are small");
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(sha.as_bytes());
            locs.push((*sha, at + (buf.len() as u64), len));
            buf.extend_from_slice(bytes);
        }
        let mut file = st
            .files
            .get(&n)
            .expect("the open pack")
            .try_clone()
            .map_err(|e| io_err(format!("writing objects/packs/{}", pack_name(n)), e))?;
        if let Err(e) = file.write_all(&buf) {
            let _ = file.set_len(at);
            return Err(io_err(format!("writing objects/packs/{}", pack_name(n)), e));
        }
        st.open = Some((n, at + buf.len() as u64));
        for (sha, offset, len) in locs {
            st.index.insert(
                sha,
                Loc {
                    pack: n,
                    offset,
                    len,
                },
            );
        }
        Ok(())
    }

    /// fsck: each pack's damaged records (a cut tail is not damage: its
    /// objects are journaled and handed over again at start).
    pub fn check(&self) -> Vec<super::fsck::Problem> {
        let st = self.state();
        let mut out = Vec::new();
        let mut packs: Vec<&u64> = st.files.keys().collect();
        packs.sort();
        for n in packs {
            match scan(&st.files[n]) {
                Ok((_, false)) => {}
                Ok((records, true)) => out.push(super::fsck::Problem {
                    path: format!("objects/packs/{}", pack_name(*n)),
                    message: format!(
                        "the record after the first {} does not hash to its name",
                        records.len()
                    ),
                }),
                Err(e) => out.push(super::fsck::Problem {
                    path: format!("objects/packs/{}", pack_name(*n)),
                    message: e.to_string(),
                }),
            }
        }
        out
    }

    /// How many objects the packs hold.
    pub fn len(&self) -> usize {
        self.state().index.len()
    }

    /// Whether the packs hold no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(path: &std::path::Path) -> Dir {
        Dir::open_ambient_dir(path, cap_std::ambient_authority()).unwrap()
    }

    #[test]
    fn packed_objects_read_back_survive_a_reopen_and_a_cut_tail() {
        let tmp = tempfile::tempdir().unwrap();
        let packs = Packs::open(Some(dir(tmp.path())), true).unwrap();
        let items: Vec<(Sha256, Vec<u8>)> = (0..5)
            .map(|i| format!("{{\"receipt\":{i}}}").into_bytes())
            .map(|b| (Sha256::of(&b), b))
            .collect();
        let refs: Vec<(Sha256, &[u8])> = items.iter().map(|(s, b)| (*s, b.as_slice())).collect();
        packs.append(&refs[..3]).unwrap();
        packs.append(&refs).unwrap();
        assert_eq!(packs.len(), 5, "an object is packed once");
        for (sha, bytes) in &items {
            assert_eq!(packs.get(sha).unwrap().as_deref(), Some(bytes.as_slice()));
        }
        assert!(packs.check().is_empty());
        drop(packs);
        let name = tmp.path().join(pack_name(0));
        let len = std::fs::metadata(&name).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&name)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let packs = Packs::open(Some(dir(tmp.path())), true).unwrap();
        assert_eq!(packs.len(), 4, "a cut tail loses only the last record");
        assert!(packs.check().is_empty(), "a cut tail is not damage");
        packs.append(&refs[4..]).unwrap();
        assert_eq!(packs.len(), 5);
        assert!(
            tmp.path().join(pack_name(1)).exists(),
            "a new run appends to a new pack"
        );
        let mut bytes = std::fs::read(&name).unwrap();
        bytes[HEADER + 2] ^= 1;
        std::fs::write(&name, bytes).unwrap();
        let packs = Packs::open(Some(dir(tmp.path())), true).unwrap();
        assert_eq!(packs.check().len(), 1, "a flipped byte is damage");
        assert!(
            packs.get(&items[0].0).is_err(),
            "its object is listed by the pack's index but not served"
        );
        std::fs::remove_file(tmp.path().join(index_name(0))).unwrap();
        let packs = Packs::open(Some(dir(tmp.path())), true).unwrap();
        assert!(
            packs.get(&items[0].0).unwrap().is_none(),
            "read again, the pack stops at the damage"
        );
        assert!(
            !tmp.path().join(index_name(0)).exists(),
            "a damaged pack gets no index"
        );
    }

    #[test]
    fn a_closed_pack_is_indexed_once_and_a_bad_or_stale_index_is_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let items: Vec<(Sha256, Vec<u8>)> = (0..50)
            .map(|i| format!("{{\"receipt\":{i}}}").into_bytes())
            .map(|b| (Sha256::of(&b), b))
            .collect();
        let refs: Vec<(Sha256, &[u8])> = items.iter().map(|(s, b)| (*s, b.as_slice())).collect();
        Packs::open(Some(dir(tmp.path())), true)
            .unwrap()
            .append(&refs[..40])
            .unwrap();
        let idx = tmp.path().join(index_name(0));
        assert!(!idx.exists(), "the pack is still open");
        let read_only = Packs::open(Some(dir(tmp.path())), false).unwrap();
        assert_eq!(read_only.len(), 40);
        assert!(!idx.exists(), "a read-only open writes nothing");
        let packs = Packs::open(Some(dir(tmp.path())), true).unwrap();
        assert_eq!(packs.len(), 40);
        let good = std::fs::read(&idx).expect("the first open indexes the closed pack");
        let records = scan(&File::open(tmp.path().join(pack_name(0))).unwrap())
            .unwrap()
            .0;
        let pack_len = std::fs::metadata(tmp.path().join(pack_name(0)))
            .unwrap()
            .len();
        assert_eq!(decode_index(&good, pack_len), Some(records.clone()));
        assert_eq!(decode_index(&good, pack_len + 1), None, "stale");
        for at in [0, INDEX_MAGIC.len() + 3, good.len() / 2, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 1;
            assert_eq!(decode_index(&bad, pack_len), None, "a flipped byte at {at}");
        }
        assert_eq!(
            decode_index(&good[..good.len() - 5], pack_len),
            None,
            "torn"
        );

        std::fs::write(&idx, &good[..20]).unwrap();
        let packs = Packs::open(Some(dir(tmp.path())), true).unwrap();
        assert_eq!(packs.len(), 40, "a bad index is ignored and the pack read");
        assert_eq!(
            std::fs::read(&idx).unwrap(),
            good,
            "and its index written again"
        );
        for (sha, bytes) in &items[..40] {
            assert_eq!(packs.get(sha).unwrap().as_deref(), Some(bytes.as_slice()));
        }
    }
}
