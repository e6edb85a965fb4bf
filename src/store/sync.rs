//! Group sync: concurrent writers share their syncs. A writer that needs
//! what it has written so far on disk calls [`GroupSync::barrier`], which
//! returns once a `syncfs` of the root's filesystem that *began after the
//! call* has finished. One caller at a time runs the `syncfs`; callers that
//! arrive while it runs wait for the next one, which one of them runs for
//! all. So however many writers wait, each round costs one `syncfs` (one
//! journal commit and one device flush) instead of an fsync per file and
//! per directory of every writer.
//!
//! A round gathers first: its leader waits (at most [`GATHER`]) until every
//! writer that has begun ([`GroupSync::begin`]) is waiting too, so writers
//! woken by the last round, which only rename a file before they wait
//! again, are not left for the round after.
//!
//! A `syncfs` covers every file and directory change made on the
//! filesystem before it began, so a writer needs no list of what it
//! touched: file data, renames and new directories alike. Every area of
//! the root shares one filesystem with `tmp/` (writes rename out of it),
//! so a sync through `tmp/` covers them all. Since Linux 5.8 `syncfs`
//! reports writeback errors seen since the handle was opened; a failed
//! round is a failed fsync (see [`AtomicWriter::fsync`]): every waiter of
//! that round and every later write is refused until restart.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cap_std::fs::{Dir, File};

use super::atomic::AtomicWriter;
use super::{Error, io_err};

/// The longest a round waits for writers that have begun to reach it.
pub const GATHER: Duration = Duration::from_millis(1);

/// The shared sync rounds of one root.
#[derive(Debug)]
pub struct GroupSync {
    /// `tmp/` opened for reading (`syncfs` refuses an `O_PATH` handle).
    fs: File,
    rounds: Mutex<Rounds>,
    /// Signalled when a round ends and when a writer arrives or ends.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Rounds {
    /// Rounds finished so far.
    finished: u64,
    /// A round is running (it is round `finished + 1`).
    running: bool,
    /// Writers between [`GroupSync::begin`] and the end of their guard.
    active: usize,
    /// Writers waiting for the next round (not the running one).
    waiting: usize,
}

/// A writer that has begun: rounds wait for it (see [`GroupSync::begin`]).
#[derive(Debug)]
pub struct Writing<'a>(&'a GroupSync);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.rounds().active -= 1;
        self.0.changed.notify_all();
    }
}

impl GroupSync {
    /// Group sync for the filesystem holding `tmp`.
    pub fn new(tmp: &Dir) -> Result<GroupSync, Error> {
        Ok(GroupSync {
            fs: tmp.open(".").map_err(|e| io_err("opening tmp/", e))?,
            rounds: Mutex::new(Rounds::default()),
            changed: Condvar::new(),
        })
    }

    fn rounds(&self) -> MutexGuard<'_, Rounds> {
        self.rounds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks a writer that will call [`GroupSync::barrier`] soon, until the
    /// guard is dropped: a round about to start waits for it briefly.
    pub fn begin(&self) -> Writing<'_> {
        self.rounds().active += 1;
        Writing(self)
    }

    /// Returns once everything written on the root's filesystem before
    /// this call is on disk; `writer` records a failed sync.
    pub fn barrier(&self, writer: &AtomicWriter) -> Result<(), Error> {
        let mut rounds = self.rounds();
        // A running round may have begun before this call: wait for the next.
        let mine = rounds.finished + 1 + u64::from(rounds.running);
        rounds.waiting += 1;
        self.changed.notify_all();
        let mut gathering: Option<Instant> = None;
        while rounds.finished < mine {
            if rounds.running {
                rounds = self.wait(rounds, None);
                continue;
            }
            let since = *gathering.get_or_insert_with(Instant::now);
            let left = GATHER.saturating_sub(since.elapsed());
            if rounds.waiting < rounds.active && !left.is_zero() {
                rounds = self.wait(rounds, Some(left));
                continue;
            }
            rounds.running = true;
            rounds.waiting = 0;
            drop(rounds);
            // A failure is recorded in the writer's health, which every
            // waiter reads below, so the result itself is not needed here.
            let _ = writer.fsync(|| rustix::fs::syncfs(&self.fs).map_err(std::io::Error::from));
            rounds = self.rounds();
            rounds.finished += 1;
            rounds.running = false;
            self.changed.notify_all();
        }
        drop(rounds);
        writer.check()
    }

    fn wait<'a>(
        &self,
        rounds: MutexGuard<'a, Rounds>,
        timeout: Option<Duration>,
    ) -> MutexGuard<'a, Rounds> {
        match timeout {
            None => self
                .changed
                .wait(rounds)
                .unwrap_or_else(PoisonError::into_inner),
            Some(t) => {
                self.changed
                    .wait_timeout(rounds, t)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
        }
    }
}
