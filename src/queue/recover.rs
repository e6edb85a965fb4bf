//! Opening the queue: load the snapshot, replay the journal segments after
//! it (cutting a torn tail off the last one and the unused preallocated
//! zeros off any), re-materialize receipt objects the crash may have lost,
//! and start a fresh preallocated segment for this run (a full disk leaves
//! it to the first change that can make it). The start does not compact:
//! the queue's fold thread (`fold.rs`) folds the replayed segments into a
//! new snapshot in the background once they are long enough, so a start
//! serves after the snapshot load and a short tail.
//!
//! Anything else that is wrong is a [`Finding`], and the daemon refuses to
//! start rather than drop acknowledged records: a bad record with valid
//! ones after it, a bad record in a closed segment, a record that is not
//! an event or that the state cannot take, a missing or damaged snapshot,
//! and whatever the journal's reach (`store::log::reach`) says is gone: a
//! segment it made that is missing, a sealed one that holds fewer records
//! or bytes than it was sealed with, an open one shorter than it was
//! made, a missing `journal/reach.json` beside segments with headers. `tessera recover --root DIR` shows the finding and
//! what salvaging would drop; `--salvage` keeps everything before it and
//! moves the rest aside to `journal/salvaged/` (never deleting it).

use std::io::BufReader;

use cap_std::fs::{Dir, OpenOptions};

use super::machine::{SplitLimits, State};
use super::snapshot::{self, Image};
use super::{Error, JournalError, Stopping, pipeline, records};
use crate::store::atomic::sync_dir;
use crate::store::log::Committer;
use crate::store::log::reach::{Reach, Sealed};
use crate::store::log::segment::{self as journal, Damage, ReadEnd, segment_name, segment_number};
use crate::store::{self, Durability, Store, Writer};

/// Where salvaging moves what it drops, under `journal/`.
pub const SALVAGED: &str = "salvaged";

/// What recovery found, for the start-up log line.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Tasks in the snapshot.
    pub snapshot_tasks: usize,
    /// Journal records replayed after it.
    pub records: u64,
    /// Whether a torn tail was cut.
    pub torn_tail: bool,
    /// Journal segments replayed after the snapshot.
    pub segments: usize,
    /// Time spent loading the snapshot, in milliseconds.
    pub snapshot_ms: u64,
    /// Time spent loading the snapshot and replaying, in milliseconds.
    pub replay_ms: u64,
    /// In a report: the receipts journal records carry (the daemon writes
    /// their objects again on start, so they need not exist yet).
    pub journal_receipts: hashbrown::HashSet<crate::store::Sha256>,
}

/// Damage that would lose acknowledged records if the daemon went on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The file, under the root.
    pub path: String,
    /// Byte offset in it (0 for a missing file).
    pub offset: u64,
    /// Valid records after the damage (in this file and later segments).
    pub following: u64,
    /// What is wrong.
    pub what: String,
    /// Whether `--salvage` can keep what precedes it (not for a snapshot).
    pub salvageable: bool,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at byte {}: {}; {} valid record(s) follow it",
            self.path, self.offset, self.what, self.following
        )
    }
}

impl Finding {
    fn refusal(self) -> Error {
        let advice = if self.salvageable {
            "nothing was changed; `tessera recover --root <root>` shows what salvaging would drop, and `--salvage` keeps every record before this one"
        } else {
            "nothing was changed; restore this file from a backup (`tessera recover --root <root>` shows the finding)"
        };
        Error::CorruptJournal {
            path: self.path.clone(),
            message: format!(
                "at byte {}: {}; {} valid record(s) follow it, so the daemon will not start and drop them: {advice}",
                self.offset, self.what, self.following
            ),
        }
    }
}

/// What to do about a finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFinding {
    /// Refuse to start (the daemon).
    Refuse,
    /// Report it and change nothing (`tessera recover`).
    Report,
    /// Keep what precedes it, move the rest aside (`tessera recover --salvage`).
    Salvage,
}

/// Recovers the state and starts the committer on a new segment of
/// `segment_bytes` preallocated bytes.
pub fn open(
    store: &Store,
    limits: SplitLimits,
    segment_bytes: u64,
) -> Result<(State, Committer, Recovery), Error> {
    let (state, mut next, rec, finding) = replay(store, limits, OnFinding::Refuse)?;
    debug_assert!(finding.is_none());
    let dir = &store.root().journal;
    while dir.exists(segment_name(next)) {
        next += 1;
    }
    let segments = journal::SegmentDir::new(
        dir.try_clone()
            .map_err(|e| store::io_err("cloning journal/", e))?,
        store.reach(Writer::Journal)?,
    );
    let committer = Committer::start(
        Box::new(segments),
        next,
        segment_bytes,
        store.health().clone(),
        store::Writer::Journal,
    )
    .map_err(JournalError::from_log)?;
    Ok((state, committer, rec))
}

/// Replays the journal: the state, the next segment number, what recovery
/// did, and the finding that stopped it, if `on` did not refuse.
pub fn replay(
    store: &Store,
    limits: SplitLimits,
    on: OnFinding,
) -> Result<(State, u64, Recovery, Option<Finding>), Error> {
    let dir = &store.root().journal;
    let started = std::time::Instant::now();
    let snapshot = snapshot::load(store, limits)?;
    let had_snapshot = snapshot.is_some();
    let (mut state, first) = snapshot.unwrap_or((State::new(limits), 0));
    let mut rec = Recovery {
        snapshot_tasks: state.tasks.len(),
        snapshot_ms: started.elapsed().as_millis() as u64,
        ..Recovery::default()
    };
    let edit = on != OnFinding::Report;
    let reach = store.reach(Writer::Journal)?;
    let mut segments = list_segments(dir)?;
    if edit {
        // Covered by the snapshot: let go of them first, then delete.
        reach.forget(|n| n < first)?;
        for stale in segments.iter().filter(|n| **n < first) {
            let _ = dir.remove_file(segment_name(*stale));
        }
    }
    segments.retain(|n| *n >= first);
    if let Some(finding) = missing_snapshot(dir, &segments, had_snapshot)? {
        return settle(store, on, finding, state, first, rec, &[]);
    }
    // Every segment there is, and every one the reach says there must be.
    let mut wanted = segments.clone();
    wanted.extend(reach.missing(first, &segments));
    wanted.sort_unstable();

    let mut segments_read = 0;
    // Segments read whole, to seal (before any is trimmed) once all are.
    let mut ends: Vec<(u64, u64, ReadEnd)> = Vec::new();
    // Buffers every segment's reader and parsers reuse.
    let (batches, vecs) = (pipeline::Pool::default(), pipeline::Pool::default());
    let start = if had_snapshot {
        first
    } else {
        wanted.first().copied().unwrap_or(first)
    };
    for (i, n) in wanted.iter().enumerate() {
        let expected = start + i as u64;
        let on_disk: Vec<u64> = wanted[i..]
            .iter()
            .copied()
            .filter(|w| segments.contains(w))
            .collect();
        let missing = if *n != expected {
            Some((expected, "this segment is missing".to_string()))
        } else if !segments.contains(n) {
            Some((*n, reach.missing_message(*n)))
        } else {
            None
        };
        if let Some((gone, what)) = missing {
            let finding = Finding {
                path: format!("journal/{}", segment_name(gone)),
                offset: 0,
                following: count_segments(dir, &on_disk)?,
                what,
                salvageable: true,
            };
            return settle(store, on, finding, state, gone, rec, &on_disk);
        }
        let name = segment_name(*n);
        let path = format!("journal/{name}");
        let file = dir
            .open(&name)
            .map_err(|e| store::io_err(format!("opening {path}"), e))?;
        let file_len = file
            .metadata()
            .map_err(|e| store::io_err(format!("reading {path}'s size"), e))?
            .len();
        let write = on != OnFinding::Report;
        segments_read += 1;
        // A reader thread hands batches over as it reads them; helpers
        // parse them; this thread applies them.
        let (read, applied) = std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel(4);
            let reader = scope.spawn(|| {
                let r = BufReader::with_capacity(1 << 20, file);
                records::read_segment(r, &batches, move |batch| tx.send(batch).is_ok())
            });
            let applied = pipeline::ordered_map(
                rx.into_iter().map(Ok),
                |batch| records::parse(batch, &batches, &vecs),
                |parsed| records::apply(store, write, &mut state, &mut rec, parsed, &vecs),
            );
            (reader.join(), applied)
        });
        let later: Vec<u64> = on_disk[1..].to_vec();
        if let Err((offset, what)) = applied {
            let following =
                count_from(dir, &name, offset)?.saturating_sub(1) + count_segments(dir, &later)?;
            let finding = Finding {
                path,
                offset,
                following,
                what,
                salvageable: true,
            };
            let next = n + 1;
            return settle_at(store, on, finding, state, next, rec, &name, &later);
        }
        let end = read
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?
            .expect("every batch was taken");
        rec.records += end.records;
        rec.segments = segments_read;
        if end.header.is_some() && !reach.known() && on != OnFinding::Salvage {
            // The segments are whole as far as can be seen, and nothing
            // tells how many there were or how long: salvaging takes them
            // as found and writes a new reach.
            let finding = Finding {
                path: format!("journal/{}", crate::store::log::reach::FILE),
                offset: 0,
                following: count_segments(dir, &on_disk)?,
                what: reach.lost_message(),
                salvageable: true,
            };
            return settle(store, on, finding, state, *n, rec, &[]);
        }
        if let Some(what) = reach.judge(*n, file_len, &end) {
            let finding = Finding {
                path,
                offset: end.valid_len,
                following: count_from(dir, &name, end.valid_len)? + count_segments(dir, &later)?,
                what,
                salvageable: true,
            };
            return settle_at(store, on, finding, state, n + 1, rec, &name, &later);
        }
        let damage = match end.damage {
            None => {
                ends.push((*n, file_len, end));
                continue;
            }
            Some(Damage::Torn) if later.is_empty() => {
                if edit {
                    let cut = journal::written_len(
                        &dir.read(&name)
                            .map_err(|e| store::io_err(format!("reading {path}"), e))?,
                    ) as u64;
                    tracing::warn!(
                        segment = %name,
                        offset = end.valid_len,
                        bytes = cut.saturating_sub(end.valid_len),
                        records_kept = end.records,
                        "cut a torn journal tail: one partial record, the last group commit's write, interrupted by a crash and never acknowledged (its task is unknown: the record is not readable); nothing before it was touched"
                    );
                }
                rec.torn_tail = true;
                ends.push((*n, file_len, end));
                continue;
            }
            Some(Damage::Torn) => 0,
            Some(Damage::Altered) => {
                let finding = Finding {
                    path,
                    offset: end.valid_len,
                    following: count_segments(dir, &later)?,
                    what: "the final record was written whole and has changed since (its checksum does not match): it was acknowledged, and a crash cannot leave it so".into(),
                    salvageable: true,
                };
                return settle_at(store, on, finding, state, n + 1, rec, &name, &later);
            }
            Some(Damage::Corrupt { following }) => following,
        };
        let finding = Finding {
            path,
            offset: end.valid_len,
            following: damage + count_segments(dir, &later)?,
            what: "a record is damaged (its checksum or length does not match) and acknowledged records follow it".into(),
            salvageable: true,
        };
        return settle_at(store, on, finding, state, n + 1, rec, &name, &later);
    }
    if edit {
        seal_all(dir, &reach, &ends)?;
    }
    let next = wanted.last().map_or(first, |n| n + 1);
    rec.replay_ms = started.elapsed().as_millis() as u64;
    Ok((state, next, rec, None))
}

/// Seals every segment read whole (each takes no more records: this run
/// writes a new one), then trims what follows its records.
fn seal_all(dir: &Dir, reach: &Reach, ends: &[(u64, u64, ReadEnd)]) -> Result<(), Error> {
    for (n, file_len, end) in ends {
        let sealed = Sealed {
            len: end.valid_len,
            records: end.records,
        };
        if reach.expected(*n).and_then(|e| e.sealed) != Some(sealed) {
            reach.sealed(*n, sealed)?;
        }
        if end.valid_len < *file_len {
            cut(dir, &segment_name(*n), end.valid_len)?;
        }
    }
    Ok(())
}

fn list_segments(dir: &Dir) -> Result<Vec<u64>, Error> {
    let mut segments = Vec::new();
    for entry in dir
        .entries()
        .map_err(|e| store::io_err("listing journal/", e))?
    {
        let entry = entry.map_err(|e| store::io_err("listing journal/", e))?;
        if let Some(n) = segment_number(&entry.file_name().to_string_lossy()) {
            segments.push(n);
        }
    }
    segments.sort_unstable();
    Ok(segments)
}

/// A missing snapshot: segments that do not start at 0 and no snapshot
/// to hold the records before them.
fn missing_snapshot(
    dir: &Dir,
    segments: &[u64],
    had_snapshot: bool,
) -> Result<Option<Finding>, Error> {
    match segments.first() {
        Some(lowest) if !had_snapshot && *lowest > 0 => Ok(Some(Finding {
            path: format!("journal/{}", snapshot::FILE),
            offset: 0,
            following: count_segments(dir, segments)?,
            what: format!(
                "the snapshot is missing, and the segments start at {} (the records before it are only in the snapshot)",
                segment_name(*lowest)
            ),
            salvageable: false,
        })),
        _ => Ok(None),
    }
}

/// Valid records in the segment `name` from `offset` on.
fn count_from(dir: &Dir, name: &str, offset: u64) -> Result<u64, Error> {
    let bytes = dir
        .read(name)
        .map_err(|e| store::io_err(format!("reading journal/{name}"), e))?;
    let from = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    Ok(journal::count_valid(&bytes[from..]))
}

/// Valid records in the given segments.
fn count_segments(dir: &Dir, segments: &[u64]) -> Result<u64, Error> {
    segments
        .iter()
        .map(|n| count_from(dir, &segment_name(*n), 0))
        .sum()
}

/// Cuts a segment at `len` bytes, durably.
fn cut(dir: &Dir, name: &str, len: u64) -> Result<(), Error> {
    let f = dir
        .open_with(name, OpenOptions::new().write(true))
        .map_err(|e| store::io_err(format!("opening journal/{name}"), e))?;
    f.set_len(len)
        .and_then(|()| f.sync_all())
        .map_err(|e| store::io_err(format!("truncating journal/{name}"), e))?;
    Ok(())
}

/// Handles a finding in segment `name` at its offset: refuse, report, or
/// salvage (copy the segment's tail and move the later segments aside,
/// then cut the segment there).
#[allow(clippy::too_many_arguments)]
fn settle_at(
    store: &Store,
    on: OnFinding,
    finding: Finding,
    state: State,
    next: u64,
    rec: Recovery,
    name: &str,
    later: &[u64],
) -> Result<(State, u64, Recovery, Option<Finding>), Error> {
    if on == OnFinding::Salvage {
        let dir = &store.root().journal;
        let aside = salvage_dir(dir)?;
        let bytes = dir
            .read(name)
            .map_err(|e| store::io_err(format!("reading journal/{name}"), e))?;
        let from = usize::try_from(finding.offset)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        let tail = &bytes[from..];
        store.writer().write(
            &aside,
            &format!("{name}.from-{}", finding.offset),
            &tail[..journal::written_len(tail)],
            Durability::Synced,
        )?;
        let kept = journal::read::<std::io::Error>(&bytes[..from], |_, _| Ok(()))?;
        let sealed = Sealed {
            len: kept.valid_len,
            records: kept.records,
        };
        store.reach(Writer::Journal)?.sealed(next - 1, sealed)?;
        cut(dir, name, finding.offset)?;
    }
    settle(store, on, finding, state, next, rec, later)
}

/// Handles a finding: refuse, report (the state so far), or salvage (move
/// the later segments aside and go on with the state so far).
fn settle(
    store: &Store,
    on: OnFinding,
    finding: Finding,
    state: State,
    next: u64,
    rec: Recovery,
    later: &[u64],
) -> Result<(State, u64, Recovery, Option<Finding>), Error> {
    match on {
        OnFinding::Refuse => Err(finding.refusal()),
        OnFinding::Salvage if !finding.salvageable => Err(finding.refusal()),
        OnFinding::Report => Ok((state, next, rec, Some(finding))),
        OnFinding::Salvage => {
            let dir = &store.root().journal;
            let aside = salvage_dir(dir)?;
            // What goes aside (and a segment that is gone) is let go first.
            store.reach(Writer::Journal)?.forget(|n| n >= next)?;
            for n in later {
                let name = segment_name(*n);
                dir.rename(&name, &aside, &name)
                    .map_err(|e| store::io_err(format!("moving journal/{name} aside"), e))?;
            }
            sync_dir(&aside)
                .and_then(|()| sync_dir(dir))
                .map_err(|e| store::io_err("syncing journal/", e))?;
            tracing::warn!(finding = %finding, "salvaged the journal: kept every record before the damage, moved the rest to journal/salvaged/");
            Ok((state, next, rec, Some(finding)))
        }
    }
}

fn salvage_dir(dir: &Dir) -> Result<Dir, Error> {
    crate::store::root::create_dir_if_missing(dir, SALVAGED)?;
    dir.open_dir(SALVAGED)
        .map_err(|e| store::io_err("opening journal/salvaged/", e).into())
}

/// Writes a snapshot of `image` covering segments below `next` and
/// deletes them (`tessera recover --salvage`, and each fold). Receipt
/// objects were handed to the later-writer while their segments were
/// replayed (or applied live); they are written and made durable on their
/// own (flush, syncfs) before the snapshot, so before the segments that
/// held them go. A crash at any step leaves the old snapshot with every
/// segment, or the new one with segments it covers (a start deletes
/// those: see [`replay`]). Once `stopping` says yes while the snapshot is
/// written, nothing is replaced or deleted ([`Error::Stopping`]). Answers
/// how many segments it deleted.
pub fn compact(
    store: &Store,
    image: &Image,
    next: u64,
    stopping: Stopping<'_>,
) -> Result<usize, Error> {
    let dir = &store.root().journal;
    store.flush_later()?;
    let fd = dir
        .open(".")
        .map_err(|e| store::io_err("opening journal/", e))?;
    rustix::fs::syncfs(&fd).map_err(|e| store::io_err("syncfs", e.into()))?;
    snapshot::write(store, image, next, stopping)?;
    // The snapshot covers them: let go of them, then delete them.
    store.reach(Writer::Journal)?.forget(|n| n < next)?;
    let mut removed = 0;
    for entry in dir
        .entries()
        .map_err(|e| store::io_err("listing journal/", e))?
    {
        let entry = entry.map_err(|e| store::io_err("listing journal/", e))?;
        if segment_number(&entry.file_name().to_string_lossy()).is_some_and(|n| n < next) {
            dir.remove_file(entry.file_name())
                .map_err(|e| store::io_err("removing a compacted segment", e))?;
            removed += 1;
        }
    }
    sync_dir(dir).map_err(|e| store::io_err("syncing journal/", e))?;
    Ok(removed)
}
