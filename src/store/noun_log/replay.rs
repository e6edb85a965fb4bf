//! Replaying the noun log at an exclusive open: materialize what a crash
//! may have left unwritten, make it durable, and empty the log.
//!
//! Segments are read in order with the shared reader. Each put record's
//! body is checked on disk and written again when missing or different;
//! the latest record of each noun is compared with its ref file, which is
//! written again when it lags (never when it is ahead: see below). Then
//! one `syncfs`, and the segments are let go from the log's reach and
//! deleted. A bad record with nothing valid after it (in its segment or
//! any later one) is the torn write of a crash, never acknowledged, and is
//! dropped; with valid records after it, the open is refused and nothing
//! is changed, so no acknowledged put is lost silently.
//!
//! The open is refused too when the log's reach (`store::log::reach`)
//! says records are gone (a segment it made is missing, a sealed one is
//! short, an open one was cut), and when a ref file names more versions
//! than the log's last record of that noun: a ref names a version only
//! once its record is durable, and the log keeps every record after the
//! oldest it holds, so the log lost records whose effects are on disk.

use std::collections::HashMap;
use std::io::BufReader;

use cap_std::fs::Dir;

use super::super::atomic::{Durability, sync_dir};
use super::super::log::reach::Reach;
use super::super::log::segment::{self, Damage, segment_name, segment_number};
use super::super::noun::NounRef;
use super::super::{Error, NounPath, Store, Writer, io_err};
use super::{DIR, record};

/// What replay did, for the start-up log line.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Records read.
    pub records: u64,
    /// Ref files written again.
    pub refs: u64,
    /// Whether a torn final record was dropped.
    pub torn_tail: bool,
    /// The number the next segment gets.
    pub next: u64,
}

/// Replays and empties `journal/nouns/` (created when missing).
pub fn replay(store: &Store, journal: &Dir) -> Result<(Dir, Replayed), Error> {
    crate::store::root::create_dir_if_missing(journal, DIR)?;
    let dir = journal
        .open_dir(DIR)
        .map_err(|e| io_err("opening journal/nouns/", e))?;
    let reach = store.reach(Writer::NounLog)?;
    let segments = list(&dir)?;
    let mut wanted = segments.clone();
    wanted.extend(reach.missing(0, &segments));
    wanted.sort_unstable();
    let mut out = Replayed {
        next: wanted.last().map_or(0, |n| n + 1),
        ..Replayed::default()
    };
    if wanted.is_empty() {
        return Ok((dir, out));
    }
    // Each noun's last record: its ref file's bytes, and where it lies.
    let mut latest: HashMap<NounPath, (Vec<u8>, String)> = HashMap::new();
    let walked = walk(&dir, &reach, &wanted, |r, at| {
        if let Some(body) = r.body {
            store.put_object(body, Durability::Journaled)?;
        }
        latest.insert(r.path, (r.ref_bytes.to_vec(), at));
        Ok(())
    })?;
    if let Some(refusal) = walked.refusal {
        return Err(refusal);
    }
    if let Some((path, offset, bytes)) = &walked.torn_tail {
        tracing::warn!(segment = %path, offset, bytes, "dropped a torn noun log tail: one partial record, the last group commit's write, interrupted by a crash and never acknowledged; nothing before it was touched");
    }
    out.records = walked.records;
    out.torn_tail = walked.torn_tail.is_some();
    for (path, bytes) in lagging(store, &latest)? {
        store.place_ref(path, bytes)?;
        out.refs += 1;
    }
    store.writer().fsync(|| super::syncfs(&dir))?;
    // Let go of the segments, then delete them.
    reach.forget(|_| true)?;
    for n in &segments {
        let name = segment_name(*n);
        dir.remove_file(&name)
            .map_err(|e| io_err(format!("deleting journal/{DIR}/{name}"), e))?;
    }
    store.writer().fsync(|| sync_dir(&dir))?;
    Ok((dir, out))
}

/// The ref files that lag the log's last record of their noun, with the
/// bytes to write; refused when one is ahead of it (see the module doc).
fn lagging<'a>(
    store: &Store,
    latest: &'a HashMap<NounPath, (Vec<u8>, String)>,
) -> Result<Vec<(&'a NounPath, &'a Vec<u8>)>, Error> {
    let mut out = Vec::new();
    for (path, (bytes, at)) in latest {
        let on_disk = store.ref_bytes_on_disk(path)?;
        match ahead(on_disk.as_deref(), bytes) {
            Order::Same => {}
            Order::Behind => out.push((path, bytes)),
            Order::Ahead { disk, logged } => {
                return Err(refusal(
                    at,
                    0,
                    &format!(
                        "nouns/{path}.json names version {disk}, but the log's last record of that noun names version {logged}: a ref file names a version only once its record is durable, so the log lost acknowledged records (it was cut or replaced), and replaying it would move the noun back"
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// How a ref file on disk stands to the log's last record of its noun.
enum Order {
    /// The same bytes.
    Same,
    /// The log's record is newer (or the file is missing, or they differ
    /// in what only the record can say, such as a quarantine flag).
    Behind,
    /// The file names more versions than the record, which it begins
    /// with: the file is ahead of what the log still holds.
    Ahead {
        /// The file's latest version.
        disk: u64,
        /// The record's latest version.
        logged: u64,
    },
}

fn ahead(on_disk: Option<&[u8]>, logged: &[u8]) -> Order {
    let Some(on_disk) = on_disk else {
        return Order::Behind;
    };
    if on_disk == logged {
        return Order::Same;
    }
    let parse = |b: &[u8]| serde_json::from_slice::<NounRef>(b).ok();
    let (Some(disk), Some(record)) = (parse(on_disk), parse(logged)) else {
        return Order::Behind;
    };
    let begins_with = disk.versions.len() > record.versions.len()
        && disk
            .versions
            .iter()
            .zip(&record.versions)
            .all(|(d, r)| (d.version, d.sha256) == (r.version, r.sha256));
    if begins_with {
        Order::Ahead {
            disk: disk.latest().version,
            logged: record.latest().version,
        }
    } else {
        Order::Behind
    }
}

/// What a read of the log for fsck found.
#[derive(Debug, Default)]
pub struct Pending {
    /// Records waiting to be replayed.
    pub records: u64,
    /// The versions the latest records name, as `(namespace/store/key,
    /// version, sha256)`: what their ref files hold once replayed.
    pub versions: Vec<(String, u64, crate::store::Sha256)>,
    /// The damage that would refuse the next start.
    pub refusal: Option<Error>,
}

/// Reads the log without changing anything (fsck): see [`Pending`].
pub fn pending(store: &Store) -> Result<Pending, Error> {
    let dir = match store.root().journal.open_dir(DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Pending::default()),
        Err(e) => return Err(io_err("opening journal/nouns/", e)),
    };
    let reach = Reach::load(
        dir.try_clone()
            .map_err(|e| io_err("cloning journal/nouns/", e))?,
        "journal/nouns",
        None,
    )?;
    let segments = list(&dir)?;
    let mut wanted = segments.clone();
    wanted.extend(reach.missing(0, &segments));
    wanted.sort_unstable();
    let mut latest: HashMap<NounPath, (Vec<u8>, String)> = HashMap::new();
    let walked = walk(&dir, &reach, &wanted, |r, at| {
        latest.insert(r.path, (r.ref_bytes.to_vec(), at));
        Ok(())
    })?;
    let refusal = match walked.refusal {
        Some(r) => Some(r),
        None => lagging(store, &latest).err(),
    };
    let mut versions = Vec::new();
    for (path, (bytes, _)) in &latest {
        if let Ok(noun) = serde_json::from_slice::<NounRef>(bytes) {
            versions.extend(
                noun.versions
                    .iter()
                    .map(|v| (path.to_string(), v.version, v.sha256)),
            );
        }
    }
    Ok(Pending {
        records: walked.records,
        versions,
        refusal,
    })
}

/// How a read of the log ended.
struct Walked {
    /// Valid records read.
    records: u64,
    /// Where a torn final record ended the read, if one did: the segment,
    /// the record's offset and the bytes dropped.
    torn_tail: Option<(String, u64, u64)>,
    /// Damage the log may not be replayed past (valid records after a bad
    /// one, or what its reach says is gone).
    refusal: Option<Error>,
}

/// Reads `wanted` segments in order (those there and those the reach
/// lists), handing each record and where it lies to `each`, until the end
/// or the first bad record: with nothing valid after it (in its segment
/// or any later one) it is a torn tail, else the refusal. A listed
/// segment that is missing, or one its reach says is short, refuses.
fn walk(
    dir: &Dir,
    reach: &Reach,
    wanted: &[u64],
    mut each: impl FnMut(record::Record<'_>, String) -> Result<(), Error>,
) -> Result<Walked, Error> {
    let mut walked = Walked {
        records: 0,
        torn_tail: None,
        refusal: None,
    };
    for (i, n) in wanted.iter().enumerate() {
        let name = segment_name(*n);
        let path = format!("journal/{DIR}/{name}");
        let file = match dir.open(&name) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                walked.refusal = Some(refusal(&path, 0, &reach.missing_message(*n)));
                return Ok(walked);
            }
            Err(e) => return Err(io_err(format!("opening {path}"), e)),
        };
        let file_len = file
            .metadata()
            .map_err(|e| io_err(format!("reading {path}'s size"), e))?
            .len();
        let end = segment::read(
            BufReader::with_capacity(1 << 20, file),
            |offset, payload| {
                let r = record::decode(payload).map_err(|what| Bad::Record(offset, what))?;
                each(r, format!("{path} at byte {offset}")).map_err(Bad::Store)
            },
        );
        let end = match end {
            Ok(end) => end,
            Err(Bad::Record(offset, what)) => {
                walked.refusal = Some(refusal(&path, offset, &what));
                return Ok(walked);
            }
            Err(Bad::Store(e)) => return Err(e),
        };
        walked.records += end.records;
        let judged = if end.header.is_some() && !reach.known() {
            Some(reach.lost_message())
        } else {
            reach.judge(*n, file_len, &end)
        };
        if let Some(what) = judged {
            walked.refusal = Some(refusal(&path, end.valid_len, &what));
            return Ok(walked);
        }
        let later: Vec<u64> = wanted[i + 1..].to_vec();
        let following = match end.damage {
            None => continue,
            Some(Damage::Altered) => {
                let what = "the final record was written whole and has changed since (its checksum does not match): it was acknowledged, and a crash cannot leave it so";
                walked.refusal = Some(refusal(&path, end.valid_len, what));
                return Ok(walked);
            }
            Some(Damage::Torn) => 0,
            Some(Damage::Corrupt { following }) => following,
        } + count(dir, &later)?;
        if following > 0 {
            let what = format!(
                "a damaged record (its checksum or length does not match) with {following} valid record(s) after it"
            );
            walked.refusal = Some(refusal(&path, end.valid_len, &what));
        } else {
            let written = segment::written_len(
                &dir.read(&name)
                    .map_err(|e| io_err(format!("reading {path}"), e))?,
            ) as u64;
            walked.torn_tail = Some((path, end.valid_len, written.saturating_sub(end.valid_len)));
        }
        break;
    }
    Ok(walked)
}

/// Why reading a segment stopped.
enum Bad {
    /// A record that passed its checksum but is not a noun log record.
    Record(u64, String),
    Store(Error),
}

impl From<std::io::Error> for Bad {
    fn from(e: std::io::Error) -> Bad {
        Bad::Store(io_err("reading the noun log", e))
    }
}

impl From<Error> for Bad {
    fn from(e: Error) -> Bad {
        Bad::Store(e)
    }
}

fn refusal(path: &str, offset: u64, what: &str) -> Error {
    Error::CorruptLog {
        path: path.to_string(),
        message: format!(
            "at byte {offset}: {what}; acknowledged noun puts would be lost, so the root was not opened and nothing was changed. Restore the file from a backup, or move it aside to give up the puts it holds (their nouns keep the versions already in their ref files)"
        ),
    }
}

/// The segment numbers in `dir`, in order.
fn list(dir: &Dir) -> Result<Vec<u64>, Error> {
    let mut out = Vec::new();
    for entry in dir
        .entries()
        .map_err(|e| io_err("listing journal/nouns/", e))?
    {
        let entry = entry.map_err(|e| io_err("listing journal/nouns/", e))?;
        if let Some(n) = segment_number(&entry.file_name().to_string_lossy()) {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Valid records in the given segments (those that are there).
fn count(dir: &Dir, segments: &[u64]) -> Result<u64, Error> {
    let mut total = 0;
    for n in segments {
        let name = segment_name(*n);
        let bytes = match dir.read(&name) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(format!("reading journal/{DIR}/{name}"), e)),
        };
        total += segment::count_valid(&bytes);
    }
    Ok(total)
}
