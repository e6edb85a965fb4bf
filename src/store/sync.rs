//! Group sync: concurrent writers share their syncs. A writer that needs
//! what it has written so far on disk calls [`GroupSync::barrier`], which
//! returns once a `syncfs` of the root's filesystem that *began after the
//! call* has finished. One caller at a time runs the `syncfs`; callers that
//! arrive while it runs wait for the next one, which one of them runs for
//! all. So however many writers wait, each round costs one `syncfs` (one
//! journal commit and one device flush) instead of an fsync per file and
//! per directory of every writer.
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

use cap_std::fs::{Dir, File};

use super::atomic::AtomicWriter;
use super::{Error, io_err};

/// The shared sync rounds of one root.
#[derive(Debug)]
pub struct GroupSync {
    /// `tmp/` opened for reading (`syncfs` refuses an `O_PATH` handle).
    fs: File,
    rounds: Mutex<Rounds>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct Rounds {
    /// Rounds finished so far.
    finished: u64,
    /// A round is running (it is round `finished + 1`).
    running: bool,
}

impl GroupSync {
    /// Group sync for the filesystem holding `tmp`.
    pub fn new(tmp: &Dir) -> Result<GroupSync, Error> {
        Ok(GroupSync {
            fs: tmp.open(".").map_err(|e| io_err("opening tmp/", e))?,
            rounds: Mutex::new(Rounds::default()),
            done: Condvar::new(),
        })
    }

    fn rounds(&self) -> MutexGuard<'_, Rounds> {
        self.rounds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Returns once everything written on the root's filesystem before
    /// this call is on disk; `writer` records a failed sync.
    pub fn barrier(&self, writer: &AtomicWriter) -> Result<(), Error> {
        let mut rounds = self.rounds();
        // A running round may have begun before this call: wait for the next.
        let mine = rounds.finished + 1 + u64::from(rounds.running);
        while rounds.finished < mine {
            if rounds.running {
                rounds = self
                    .done
                    .wait(rounds)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            rounds.running = true;
            drop(rounds);
            // A failure is recorded in the writer's health, which every
            // waiter reads below, so the result itself is not needed here.
            let _ = writer.fsync(|| rustix::fs::syncfs(&self.fs).map_err(std::io::Error::from));
            rounds = self.rounds();
            rounds.finished += 1;
            rounds.running = false;
            self.done.notify_all();
        }
        drop(rounds);
        writer.check()
    }
}
