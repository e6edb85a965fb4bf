//! Replaying the noun log at an exclusive open: materialize what a crash
//! may have left unwritten, make it durable, and empty the log.
//!
//! Segments are read in order with the shared reader. Each put record's
//! body is checked on disk and written again when missing or different;
//! the latest record of each noun is compared with its ref file, which is
//! written again when it differs. Then one `syncfs`, and the segments are
//! deleted. A bad record with nothing valid after it (in its segment or
//! any later one) is the torn write of a crash, never acknowledged, and is
//! dropped; with valid records after it, the open is refused and nothing
//! is changed, so no acknowledged put is lost silently.

use std::collections::HashMap;
use std::io::BufReader;

use cap_std::fs::Dir;

use super::super::atomic::{Durability, sync_dir};
use super::super::log::segment::{self, Damage, segment_name, segment_number};
use super::super::{Error, NounPath, Store, io_err};
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
    let segments = list(&dir)?;
    let mut out = Replayed {
        next: segments.last().map_or(0, |n| n + 1),
        ..Replayed::default()
    };
    if segments.is_empty() {
        return Ok((dir, out));
    }
    let mut latest: HashMap<NounPath, Vec<u8>> = HashMap::new();
    let walked = walk(&dir, &segments, |r| {
        if let Some(body) = r.body {
            store.put_object(body, Durability::Journaled)?;
        }
        latest.insert(r.path, r.ref_bytes.to_vec());
        Ok(())
    })?;
    if let Some(refusal) = walked.refusal {
        return Err(refusal);
    }
    if let Some(path) = &walked.torn_tail {
        tracing::warn!(segment = %path, "dropped a torn noun log tail: the final record, a write interrupted by a crash and never acknowledged");
    }
    out.records = walked.records;
    out.torn_tail = walked.torn_tail.is_some();
    for (path, bytes) in &latest {
        if store.ref_bytes_on_disk(path)?.as_deref() != Some(bytes.as_slice()) {
            store.place_ref(path, bytes)?;
            out.refs += 1;
        }
    }
    store.writer().fsync(|| super::syncfs(&dir))?;
    for n in &segments {
        let name = segment_name(*n);
        dir.remove_file(&name)
            .map_err(|e| io_err(format!("deleting journal/{DIR}/{name}"), e))?;
    }
    store.writer().fsync(|| sync_dir(&dir))?;
    Ok((dir, out))
}

/// Reads the log without changing anything (fsck): the records waiting
/// to be replayed, and the damage that would refuse the next start.
pub fn pending(journal: &Dir) -> Result<(u64, Option<Error>), Error> {
    let dir = match journal.open_dir(DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, None)),
        Err(e) => return Err(io_err("opening journal/nouns/", e)),
    };
    let walked = walk(&dir, &list(&dir)?, |_| Ok(()))?;
    Ok((walked.records, walked.refusal))
}

/// How a read of the log ended.
struct Walked {
    /// Valid records read.
    records: u64,
    /// The segment whose torn final record ended the read, if one did.
    torn_tail: Option<String>,
    /// Damage with valid records after it: why the log may not be replayed.
    refusal: Option<Error>,
}

/// Reads `segments` in order, handing each record to `each`, until the
/// end or the first bad record: with nothing valid after it (in its
/// segment or any later one) it is a torn tail, else the refusal.
fn walk(
    dir: &Dir,
    segments: &[u64],
    mut each: impl FnMut(record::Record<'_>) -> Result<(), Error>,
) -> Result<Walked, Error> {
    let mut walked = Walked {
        records: 0,
        torn_tail: None,
        refusal: None,
    };
    for (i, n) in segments.iter().enumerate() {
        let name = segment_name(*n);
        let path = format!("journal/{DIR}/{name}");
        let file = dir
            .open(&name)
            .map_err(|e| io_err(format!("opening {path}"), e))?;
        let end = segment::read(
            BufReader::with_capacity(1 << 20, file),
            |offset, payload| {
                let r = record::decode(payload).map_err(|what| Bad::Record(offset, what))?;
                each(r).map_err(Bad::Store)
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
        let following = match end.damage {
            None => continue,
            Some(Damage::Torn) => 0,
            Some(Damage::Corrupt { following }) => following,
        } + count(dir, &segments[i + 1..])?;
        if following > 0 {
            let what = format!(
                "a damaged record (its checksum or length does not match) with {following} valid record(s) after it"
            );
            walked.refusal = Some(refusal(&path, end.valid_len, &what));
        } else {
            walked.torn_tail = Some(path);
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

/// Valid records in the given segments.
fn count(dir: &Dir, segments: &[u64]) -> Result<u64, Error> {
    let mut total = 0;
    for n in segments {
        let name = segment_name(*n);
        let bytes = dir
            .read(&name)
            .map_err(|e| io_err(format!("reading journal/{DIR}/{name}"), e))?;
        total += segment::count_valid(&bytes);
    }
    Ok(total)
}
