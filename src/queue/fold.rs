//! Folding: while the queue runs, a background thread writes the live
//! state into a new snapshot and deletes the journal segments it covers,
//! so the journal does not grow without bound and a start is a snapshot
//! load and a short tail.
//!
//! A fold takes an [`Image`] of the live state: under the queue's lock it
//! cuts the journal (later records go to a new segment, see
//! `Committer::cut`) and clones the task table, which shares the tasks'
//! chunks instead of copying them (see `table.rs`). The queue goes on at
//! once; a chunk it changes while the fold writes is copied then, so the
//! image keeps what it saw. The image holds exactly the records below the
//! cut: every change to a task is a journaled event applied under that
//! lock, right after its record is appended. The fold waits until those
//! records are durable, then writes the snapshot and deletes the segments
//! below the cut ([`recover::compact`]). Nothing is replayed, and a fold
//! costs the chunks changed while it runs, not a second state.
//!
//! Invariants:
//! 1. One fold at a time: only this module's one thread folds.
//! 2. The image covers every record in the segments below the cut and no
//!    other: the cut and the clone happen under the queue's lock, which
//!    every append and apply holds.
//! 3. Every receipt those segments carry is written as an object and the
//!    filesystem synced before the new snapshot is written, and the
//!    snapshot is durable before the first segment is deleted: the
//!    segments were the receipts' durable copy. A submit hands its receipt
//!    to the later-writer (which does not fsync) under the queue's lock,
//!    with its record, so every receipt below the cut is there when the
//!    fold flushes it.
//!
//! A crash at any point leaves a root that starts with nothing
//! acknowledged lost: before the snapshot's rename, the old snapshot and
//! every segment; after it, the new snapshot and the segments from its
//! `next_segment` on, plus perhaps folded segments not yet deleted, which
//! the start skips and deletes (they are below `next_segment`). A stop
//! during a fold gives it up the same way, at the next chunk it writes.
//!
//! Failures: a full disk skips the fold with a warning, and any other
//! failure is logged as an error with what to do; the daemon keeps serving
//! and the fold is tried again after [`RETRY`]. After a journal failure
//! (the daemon refuses writes until restart) nothing is folded.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::snapshot::Image;
use super::{Error, Inner, recover};
use crate::store::log::segment::segment_number;
use crate::store::{self, Store};

/// Closed journal bytes (segment file sizes) after the snapshot past which
/// a fold runs unless configured otherwise (`[queue] fold_journal_mib`),
/// or half the snapshot's size when that is more.
pub const FOLD_BYTES: u64 = 64 * 1024 * 1024;
/// Closed segments after the snapshot past which a fold runs.
pub const FOLD_SEGMENTS: usize = 8;
/// How often the thread looks at the journal.
const CHECK: Duration = Duration::from_secs(1);
/// How long after a failed fold the next is tried.
pub const RETRY: Duration = Duration::from_secs(60);

/// When a fold is due: closed segments after the snapshot past either bound.
#[derive(Clone, Copy, Debug)]
pub struct FoldAfter {
    /// Their bytes on disk.
    pub bytes: u64,
    /// Their count.
    pub segments: usize,
}

impl Default for FoldAfter {
    fn default() -> FoldAfter {
        FoldAfter {
            bytes: FOLD_BYTES,
            segments: FOLD_SEGMENTS,
        }
    }
}

/// What the folds of this run did, for the log, benches and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Folds {
    /// Looks at the journal so far (one a second).
    pub looks: u64,
    /// Whether the last look found a fold due that has not yet been
    /// written (see [`FoldAfter`]).
    pub due: bool,
    /// Folds that wrote a snapshot.
    pub done: u64,
    /// Folds that failed (a full disk included).
    pub failed: u64,
    /// Segments folded and deleted, in all.
    pub segments: u64,
    /// Tasks in the last snapshot written.
    pub last_tasks: usize,
    /// The last fold's time, in milliseconds.
    pub last_ms: u64,
    /// Every fold's time, in milliseconds.
    pub total_ms: u64,
}

/// The fold thread's handle, owned by the queue.
#[derive(Debug)]
pub(super) struct Folder {
    control: Arc<Control>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug, Default)]
struct Control {
    /// Set by [`Folder::stop`]; the thread ends at its next check.
    stopped: Mutex<bool>,
    /// Signalled on stop.
    wake: Condvar,
    folds: Mutex<Folds>,
}

impl Control {
    fn stopped(&self) -> MutexGuard<'_, bool> {
        self.stopped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps for `d` or until stopped; true when stopped.
    fn sleep(&self, d: Duration) -> bool {
        let guard = self.stopped();
        let (guard, _) = self
            .wake
            .wait_timeout_while(guard, d, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner);
        *guard
    }

    fn folds(&self) -> MutexGuard<'_, Folds> {
        self.folds.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Folder {
    /// A folder whose thread is not started yet.
    pub(super) fn new() -> Folder {
        Folder {
            control: Arc::default(),
            thread: Mutex::new(None),
        }
    }

    /// Starts the thread for the queue `queue` (held weakly: the thread
    /// ends when the queue is gone). Its first look, a second after the
    /// start, folds what the last run left if that is past `after`.
    pub(super) fn start(&self, queue: Weak<Inner>, after: FoldAfter) {
        let control = self.control.clone();
        let spawned = std::thread::Builder::new()
            .name("tessera-fold".into())
            .spawn(move || run(&queue, &control, after));
        match spawned {
            Ok(t) => {
                *self.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(t);
            }
            Err(e) => {
                tracing::error!(error = %e, "could not start the journal fold thread; the journal grows until the next start, which replays it all: restart when the system has threads to spare");
            }
        }
    }

    /// Stops the thread. A fold under way gives up at its next chunk of
    /// the snapshot (1,024 tasks) and leaves the root as it was: the old
    /// snapshot and every segment.
    pub(super) fn stop(&self) {
        *self.control.stopped() = true;
        self.control.wake.notify_all();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }

    /// What the folds so far did.
    pub(super) fn folds(&self) -> Folds {
        self.control.folds().clone()
    }
}

fn run(queue: &Weak<Inner>, control: &Control, after: FoldAfter) {
    // Serving comes first: a fold is catching up, not answering anyone.
    // Threads the fold starts (the snapshot writer's helpers) inherit this.
    let _ = rustix::process::setpriority_process(None, 10);
    let mut wait = CHECK;
    let rt = tokio::runtime::Builder::new_current_thread().build();
    loop {
        if control.sleep(wait) {
            return;
        }
        wait = CHECK;
        let Some(inner) = queue.upgrade() else { return };
        let store = inner.store.clone();
        let Some(below) = inner.committer.open_segment() else {
            continue;
        };
        let looked = due(&store, below, after);
        {
            let mut f = control.folds();
            f.looks += 1;
            f.due = matches!(looked, Ok(true));
        }
        match looked {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "could not list journal/ to see whether a fold is due; trying again later");
                wait = RETRY;
                continue;
            }
        }
        // The image and the cut, under the queue's lock: no record falls
        // between them.
        let taken = {
            let st = super::held::Held::lock(&inner, super::Op::Fold);
            inner
                .committer
                .cut()
                .map(|cut| cut.map(|(next, seq)| (Image::of(&st), next, seq)))
        };
        let (image, next, seq) = match taken {
            Ok(Some(taken)) => taken,
            // A spare segment is being made: look again in a second.
            Ok(None) => continue,
            Err(e) => {
                control.folds().failed += 1;
                wait = RETRY;
                tracing::warn!(error = %e, retry_s = RETRY.as_secs(), "could not start a new journal segment to fold the journal; nothing is lost, the journal keeps growing until this works");
                continue;
            }
        };
        let durable = match &rt {
            Ok(rt) => rt.block_on(inner.committer.wait(seq)).is_ok(),
            Err(_) => false,
        };
        drop(inner);
        if !durable {
            // The journal failed (or no runtime could be made to wait on
            // it): nothing more becomes durable, so nothing is folded.
            wait = RETRY;
            continue;
        }
        let started = Instant::now();
        match fold(&store, &image, next, control) {
            Ok(None) => wait = RETRY,
            Ok(Some((segments, tasks))) => {
                let ms = started.elapsed().as_millis() as u64;
                let mut f = control.folds();
                f.due = false;
                f.done += 1;
                f.segments += segments as u64;
                f.last_tasks = tasks;
                f.last_ms = ms;
                f.total_ms += ms;
                drop(f);
                tracing::info!(
                    segments,
                    tasks,
                    ms,
                    "folded the journal into a new snapshot"
                );
            }
            Err(e) => {
                control.folds().failed += 1;
                wait = RETRY;
                if let Error::Store(store::Error::OutOfSpace { .. }) = &e {
                    tracing::warn!(error = %e, retry_s = RETRY.as_secs(), "skipped folding the journal: the disk is full; nothing is lost, the journal keeps growing until space is freed");
                } else {
                    tracing::error!(error = %e, retry_s = RETRY.as_secs(), "could not fold the journal; the daemon keeps serving and nothing is lost, but the journal grows and the next start replays it: check the disk and the log above, and run `tessera recover --root <root>` with the daemon stopped if this repeats");
                }
            }
        }
    }
}

/// Whether the closed segments (below `below`) are past `after`, read
/// from journal/ (see [`Journal::due`]).
fn due(store: &Store, below: u64, after: FoldAfter) -> std::io::Result<bool> {
    let mut journal = Journal::default();
    for entry in store.root().journal.entries()? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == super::snapshot::FILE {
            journal.snapshot_bytes = entry.metadata()?.len();
        } else if segment_number(&name).is_some_and(|n| n < below) {
            journal.segments += 1;
            journal.bytes += entry.metadata()?.len();
        }
    }
    Ok(journal.due(after))
}

/// What journal/ holds besides the open segment.
#[derive(Clone, Copy, Debug, Default)]
struct Journal {
    /// Closed segments after the snapshot.
    segments: usize,
    /// Their bytes.
    bytes: u64,
    /// The snapshot's bytes.
    snapshot_bytes: u64,
}

impl Journal {
    /// A fold is due once the closed segments pass `after`'s count, or
    /// their bytes pass both `after`'s bytes and half the snapshot. A fold
    /// rewrites the whole snapshot, so with the second bound its cost per
    /// journal byte stays the same however many tasks the queue holds (a
    /// fold of 1,000,000 tasks takes about 2 s), and a start still replays
    /// at most half a snapshot's worth of records.
    fn due(&self, after: FoldAfter) -> bool {
        let bytes = after.bytes.max(self.snapshot_bytes / 2);
        self.segments > 0 && (self.bytes >= bytes || self.segments > after.segments)
    }
}

/// Writes `image` as the snapshot covering the segments below `next` and
/// deletes them: the segments deleted and the tasks written, or `None`
/// when the queue is stopping.
fn fold(
    store: &Store,
    image: &Image,
    next: u64,
    control: &Control,
) -> Result<Option<(usize, usize)>, Error> {
    match recover::compact(store, image, next, &|| *control.stopped()) {
        Ok(segments) => Ok(Some((segments, image.tasks()))),
        Err(Error::Stopping) => {
            tracing::info!(
                "gave up the journal fold under way to stop; nothing was changed, and the next start replays those segments"
            );
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn journal(segments: usize, bytes: u64, snapshot_bytes: u64) -> Journal {
        Journal {
            segments,
            bytes,
            snapshot_bytes,
        }
    }

    #[test]
    fn a_fold_waits_for_the_bytes_or_half_the_snapshot_whichever_is_more() {
        let after = FoldAfter::default();
        assert!(!journal(0, 0, 0).due(after), "nothing closed");
        assert!(!journal(1, 63 * MIB, 10 * MIB).due(after));
        assert!(
            journal(1, 64 * MIB, 10 * MIB).due(after),
            "a small snapshot"
        );
        assert!(!journal(2, 128 * MIB, 600 * MIB).due(after), "a large one");
        assert!(journal(5, 300 * MIB, 600 * MIB).due(after));
        assert!(
            journal(9, 9 * MIB, 600 * MIB).due(after),
            "more segments than the bound fold whatever their bytes"
        );
    }
}
