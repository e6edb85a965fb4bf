//! The noun log, `journal/nouns/`: the durable copy of every noun ref
//! change (a put, a quarantine) until its files are on disk by themselves.
//! Segments and group commit are the shared ones (`store::log`); a record
//! is the noun's whole new ref file plus a put's body (`record.rs`).
//!
//! A ref change goes (in `noun.rs`, under the noun's stripe lock, so log
//! order per noun is ref order):
//! 1. the body object and the ref's hidden shadow file are written,
//!    without fsync (a full disk refuses here, before anything is logged);
//! 2. the record is appended and waited for: one fdatasync per batch of
//!    waiting puts, whoever they are;
//! 3. the shadow is swapped into place as the ref file, without fsync,
//!    and the record is marked materialized ([`NounLog::done`]).
//!
//! Invariants:
//! 1. A ref file names a version only once that version's record is
//!    durable (step 3 follows step 2).
//! 2. A segment is deleted only when every record in it and in every
//!    older segment is materialized, after a `syncfs` that began after
//!    the last of them: what it held is then on disk by itself. Segments
//!    go in order, so the log always holds a suffix of the changes.
//! 3. A record whose ref could not be swapped in after it was durable is
//!    never marked materialized, and the root's health fails (writes are
//!    refused until restart), so the next start replays it.
//!
//! Recovery (`replay.rs`, at every exclusive open, before anything else
//! writes): each record's body is checked on disk (written again when
//! missing or wrong), each noun's latest record is compared with its ref
//! file (written again when different), one `syncfs`, then every segment
//! is deleted. A torn final record is a crash's unacknowledged write and
//! is dropped; a damaged record with valid records after it refuses the
//! open ([`Error::CorruptLog`]).

mod record;
mod replay;

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, PoisonError};

use cap_std::fs::Dir;

pub use record::{Record, decode, encode};
pub(super) use replay::replay;
pub use replay::{Pending, Replayed, pending};

use super::atomic::sync_dir;
use super::health::{Health, Writer};
use super::log::Committer;
use super::log::reach::Reach;
use super::log::segment::{SegmentDir, segment_name};
use super::{Error, io_err};

/// The folder under `journal/`.
pub const DIR: &str = "nouns";

/// Preallocated bytes per segment: a retirement (one `syncfs`) per this
/// many bytes of records.
pub const SEGMENT_BYTES: u64 = super::log::segment::SEGMENT_BYTES;

/// An appended record, to wait for and then mark materialized.
#[derive(Clone, Copy, Debug)]
#[must_use = "wait for the record, then mark it done"]
pub struct Ticket {
    seq: u64,
    segment: u64,
}

/// Records appended to and materialized from one segment.
#[derive(Debug, Default)]
struct Count {
    appended: u64,
    done: u64,
}

#[derive(Debug, Default)]
struct Accounts {
    /// Segments not yet handed to the retirer, by number.
    segments: BTreeMap<u64, Count>,
    /// [`NounLog::close`] has begun: appends are refused.
    closed: bool,
}

/// The running noun log of an exclusively opened root.
#[derive(Debug)]
pub struct NounLog {
    committer: Committer,
    /// The log's reach: segments are let go from it before they go.
    reach: Reach,
    /// `journal/nouns/`, for [`NounLog::close`].
    dir: Dir,
    health: Health,
    /// A plain mutex is enough: held for an append and a count, never I/O.
    accounts: Mutex<Accounts>,
    /// Segments whose records are all on disk by themselves, in order.
    retire: Mutex<Option<mpsc::Sender<u64>>>,
    retirer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl NounLog {
    /// Starts the log in `dir` at segment `next` (after replay emptied it)
    /// with segments of `segment_len` bytes, its reach kept in `reach`,
    /// reporting into `health`.
    pub(super) fn start(
        dir: &Dir,
        reach: Reach,
        next: u64,
        segment_len: u64,
        health: &Health,
    ) -> Result<NounLog, Error> {
        let clone = || {
            dir.try_clone()
                .map_err(|e| io_err("cloning journal/nouns/", e))
        };
        let committer = Committer::start(
            Box::new(SegmentDir::new(clone()?, reach.clone())),
            next,
            segment_len,
            health.clone(),
            Writer::NounLog,
        )?;
        let (tx, rx) = mpsc::channel();
        let (retire_dir, retire_health, retire_reach) = (clone()?, health.clone(), reach.clone());
        let retirer = std::thread::Builder::new()
            .name("tessera-noun-retire".into())
            .spawn(move || retire(&retire_dir, &retire_reach, &retire_health, &rx))
            .map_err(|e| io_err("starting the noun log retirer", e))?;
        Ok(NounLog {
            committer,
            reach,
            dir: clone()?,
            health: health.clone(),
            accounts: Mutex::default(),
            retire: Mutex::new(Some(tx)),
            retirer: Mutex::new(Some(retirer)),
        })
    }

    fn accounts(&self) -> MutexGuard<'_, Accounts> {
        self.accounts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends a record (refused with nothing appended when the disk is
    /// full or a durable write has failed).
    pub fn append(&self, payload: &[u8]) -> Result<Ticket, Error> {
        // Counted under the same lock as the append, so a segment never
        // looks complete while a record bound for it is between the two.
        let mut accounts = self.accounts();
        if accounts.closed {
            return Err(Error::Io {
                context: "changing a noun".into(),
                error: std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    "the daemon is stopping",
                ),
            });
        }
        let a = self.committer.append_in(payload)?;
        accounts.segments.entry(a.segment).or_default().appended += 1;
        Ok(Ticket {
            seq: a.seq,
            segment: a.segment,
        })
    }

    /// Blocks until the record is durable.
    pub fn wait(&self, ticket: Ticket) -> Result<(), Error> {
        self.committer.wait_blocking(ticket.seq)
    }

    /// Marks the record materialized (its files written), and hands every
    /// segment that is then complete, oldest first, to the retirer.
    pub fn done(&self, ticket: Ticket) {
        let mut accounts = self.accounts();
        if let Some(c) = accounts.segments.get_mut(&ticket.segment) {
            c.done += 1;
        }
        let newest = accounts.segments.keys().next_back().copied();
        let mut complete = Vec::new();
        for (n, c) in &accounts.segments {
            if Some(*n) == newest || c.done < c.appended {
                break;
            }
            complete.push(*n);
        }
        for n in &complete {
            accounts.segments.remove(n);
        }
        drop(accounts);
        if let Some(tx) = self
            .retire
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            for n in complete {
                let _ = tx.send(n);
            }
        }
    }
}

impl NounLog {
    /// Stops the log at a graceful stop: appends are refused from now on;
    /// when every record is materialized, one `syncfs` and the log is
    /// emptied, so the next start has nothing to replay (else replay
    /// does the rest). Safe to call twice.
    pub fn close(&self) {
        let settled = {
            let mut accounts = self.accounts();
            accounts.closed = true;
            accounts.segments.values().all(|c| c.done == c.appended)
        };
        self.committer.shutdown();
        self.retire
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = self
            .retirer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
        if !settled || self.health.failure().is_some() {
            return;
        }
        if let Err(e) = self.empty() {
            tracing::warn!(error = %e, "could not empty the noun log at stop; the next start replays it");
        }
    }

    /// Syncs the filesystem, lets go of every segment, then deletes them.
    fn empty(&self) -> std::io::Result<()> {
        syncfs(&self.dir)?;
        self.reach
            .forget(|_| true)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        for entry in self.dir.entries()? {
            let name = entry?.file_name();
            if super::log::segment::segment_number(&name.to_string_lossy()).is_some() {
                self.dir.remove_file(&name)?;
            }
        }
        sync_dir(&self.dir)
    }
}

impl Drop for NounLog {
    fn drop(&mut self) {
        self.close();
    }
}

/// The retirer thread: for each batch of complete segments, one `syncfs`
/// puts everything written before it on disk, then the segments are let
/// go from the log's reach and deleted. A failed `syncfs` fails the
/// root's health and retires nothing more.
fn retire(dir: &Dir, reach: &Reach, health: &Health, rx: &mpsc::Receiver<u64>) {
    while let Ok(first) = rx.recv() {
        let batch: Vec<u64> = std::iter::once(first).chain(rx.try_iter()).collect();
        if health.failure().is_some() {
            return;
        }
        if let Err(e) = syncfs(dir) {
            health.report_failed(
                Writer::NounLog,
                format!("syncfs before retiring noun log segments: {e}"),
            );
            return;
        }
        if let Err(e) = reach.forget(|n| batch.contains(&n)) {
            tracing::warn!(error = %e, "could not let go of retired noun log segments; they stay until the next start replays them");
            continue;
        }
        for n in &batch {
            if let Err(e) = dir.remove_file(segment_name(*n)) {
                tracing::warn!(segment = %segment_name(*n), error = %e, "could not delete a retired noun log segment; the next start replays it");
            }
        }
        if let Err(e) = sync_dir(dir) {
            tracing::warn!(error = %e, "could not sync journal/nouns/ after retiring segments; the next start replays any that come back");
        }
    }
}

/// Syncs the filesystem holding `dir` (every area of the root is on it).
pub(super) fn syncfs(dir: &Dir) -> std::io::Result<()> {
    let fd = dir.open(".")?;
    rustix::fs::syncfs(&fd).map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Dir) -> Vec<String> {
        let mut out: Vec<String> = dir
            .entries()
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_segment_goes_only_once_it_and_every_older_one_is_materialized() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        let record = format!("{{\"pad\":\"{}\"}}", "x".repeat(100));
        let size = (super::super::log::segment::HEADER + record.len()) as u64;
        let header = super::super::log::segment::header_record(5).len() as u64;
        let reach = Reach::load_none("journal/nouns").unwrap();
        let log = NounLog::start(&dir, reach, 5, 2 * size + header, &Health::new()).unwrap();
        let tickets: Vec<Ticket> = (0..5)
            .map(|_| log.append(record.as_bytes()).unwrap())
            .collect();
        let segments: Vec<u64> = tickets.iter().map(|t| t.segment).collect();
        assert_eq!(segments, [5, 5, 6, 6, 7]);
        for t in &tickets {
            log.wait(*t).unwrap();
        }
        let wait_retired = |expected: &[&str]| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while names(&dir) != expected && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert_eq!(names(&dir), expected);
        };
        let all = [segment_name(5), segment_name(6), segment_name(7)];
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        // Segment 6 is complete, but 5 is not: nothing goes.
        log.done(tickets[2]);
        log.done(tickets[3]);
        log.done(tickets[0]);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(names(&dir), all);
        // 5 completes: 5 and 6 go; 7 is the open one and stays.
        log.done(tickets[1]);
        wait_retired(&all[2..]);
        log.done(tickets[4]);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(names(&dir), &all[2..], "the open segment stays");
    }
}
