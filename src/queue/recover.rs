//! Opening the queue: load the snapshot, replay the journal segments after
//! it (cutting a torn tail off the last one), re-materialize receipt
//! objects the crash may have lost, compact when the journal has grown,
//! and start a fresh segment for this run.

use std::io::BufReader;

use cap_std::fs::OpenOptions;

use super::commit::Committer;
use super::event::Event;
use super::journal::{self, segment_name, segment_number};
use super::machine::{SplitLimits, State};
use super::{Error, snapshot};
use crate::store::atomic::sync_dir;
use crate::store::{self, Durability, Store};

/// Replayed journal bytes past which the start compacts into a snapshot.
const COMPACT_BYTES: u64 = 64 * 1024 * 1024;
/// Replayed segments past which the start compacts into a snapshot.
const COMPACT_SEGMENTS: usize = 8;

/// What recovery found, for the start-up log line.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Tasks in the snapshot.
    pub snapshot_tasks: usize,
    /// Journal records replayed after it.
    pub records: u64,
    /// Whether a torn tail was cut.
    pub torn_tail: bool,
    /// Whether the start compacted the journal.
    pub compacted: bool,
    /// Time spent loading the snapshot and replaying, in milliseconds.
    pub replay_ms: u64,
    /// Time spent compacting, in milliseconds.
    pub compact_ms: u64,
}

fn corrupt(name: &str, message: impl Into<String>) -> Error {
    Error::CorruptJournal {
        path: format!("journal/{name}"),
        message: message.into(),
    }
}

/// Recovers the state and starts the committer on a new segment.
pub fn open(store: &Store, limits: SplitLimits) -> Result<(State, Committer, Recovery), Error> {
    let dir = &store.root().journal;
    let started = std::time::Instant::now();
    let (mut state, first) = snapshot::load(store, limits)?.unwrap_or((State::new(limits), 0));
    let mut rec = Recovery {
        snapshot_tasks: state.tasks.len(),
        ..Recovery::default()
    };
    let mut segments: Vec<u64> = Vec::new();
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
    for stale in segments.iter().filter(|n| **n < first) {
        let _ = dir.remove_file(segment_name(*stale));
    }
    segments.retain(|n| *n >= first);

    let mut replayed_bytes = 0;
    for (i, n) in segments.iter().enumerate() {
        let name = segment_name(*n);
        let file = dir
            .open(&name)
            .map_err(|e| store::io_err(format!("opening journal/{name}"), e))?;
        let end = journal::read(BufReader::with_capacity(1 << 20, file), |payload| {
            let ev: Event =
                serde_json::from_slice(payload).map_err(|e| corrupt(&name, e.to_string()))?;
            if let Event::Submitted {
                receipt,
                receipt_sha256,
                ..
            } = &ev
            {
                let sha = store.put_object(&receipt.bytes(), Durability::Journaled)?;
                if sha != *receipt_sha256 {
                    return Err(corrupt(
                        &name,
                        format!("receipt {receipt_sha256} does not hash to its name"),
                    ));
                }
            }
            state.apply(&ev);
            Ok::<(), Error>(())
        })?;
        rec.records += end.records;
        replayed_bytes += end.valid_len;
        if end.torn {
            if i + 1 < segments.len() {
                return Err(corrupt(
                    &name,
                    format!(
                        "a bad record at byte {} of a closed segment; acknowledged data may be damaged, so the daemon will not start (restore the journal or contact the maintainers)",
                        end.valid_len
                    ),
                ));
            }
            let f = dir
                .open_with(&name, OpenOptions::new().write(true))
                .map_err(|e| store::io_err(format!("opening journal/{name}"), e))?;
            f.set_len(end.valid_len)
                .and_then(|()| f.sync_all())
                .map_err(|e| store::io_err(format!("truncating journal/{name}"), e))?;
            tracing::warn!(segment = %name, kept_bytes = end.valid_len, "cut a torn journal tail (an unacknowledged write interrupted by a crash)");
            rec.torn_tail = true;
        }
    }

    let mut next = segments.last().map_or(first, |n| n + 1);
    rec.replay_ms = started.elapsed().as_millis() as u64;
    if replayed_bytes > COMPACT_BYTES || segments.len() > COMPACT_SEGMENTS {
        let started = std::time::Instant::now();
        compact(store, &state, next)?;
        rec.compacted = true;
        rec.compact_ms = started.elapsed().as_millis() as u64;
    }
    while dir.exists(segment_name(next)) {
        next += 1;
    }
    let name = segment_name(next);
    let file = dir
        .open_with(&name, OpenOptions::new().append(true).create_new(true))
        .map_err(|e| store::io_err(format!("creating journal/{name}"), e))?;
    sync_dir(dir).map_err(|e| store::io_err("syncing journal/", e))?;
    Ok((state, Committer::start(file.into_std()), rec))
}

/// Writes a snapshot covering segments below `next` and deletes them.
/// Receipt objects were written journaled; syncfs makes them durable on
/// their own before the segments that held them go.
pub fn compact(store: &Store, state: &State, next: u64) -> Result<(), Error> {
    let dir = &store.root().journal;
    let fd = dir
        .open(".")
        .map_err(|e| store::io_err("opening journal/", e))?;
    rustix::fs::syncfs(&fd).map_err(|e| store::io_err("syncfs", e.into()))?;
    snapshot::write(store, state, next)?;
    for entry in dir
        .entries()
        .map_err(|e| store::io_err("listing journal/", e))?
    {
        let entry = entry.map_err(|e| store::io_err("listing journal/", e))?;
        if segment_number(&entry.file_name().to_string_lossy()).is_some_and(|n| n < next) {
            dir.remove_file(entry.file_name())
                .map_err(|e| store::io_err("removing a compacted segment", e))?;
        }
    }
    sync_dir(dir).map_err(|e| store::io_err("syncing journal/", e))?;
    Ok(())
}
