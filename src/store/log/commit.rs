//! Group commit: appenders put encoded records into a shared buffer; one
//! thread writes whatever has accumulated and fsyncs it once, then tells
//! every waiter how far the log is durable. A change is acknowledged only
//! after `wait` (async callers) or `wait_blocking` (callers on a blocking
//! thread) sees its sequence number durable. Each log (the task journal,
//! the noun log) has its own committer, reporting as its own [`Writer`].
//!
//! Space. `append` runs before the caller applies the change, and it
//! reserves the record's bytes in the current segment's preallocated
//! space; when they do not fit it first creates the next segment
//! ([`Segments`]). Invariants:
//! 1. Every appended record has its bytes reserved in a segment that
//!    exists, so the thread's writes never need new space.
//! 2. When the next segment cannot be created (a full disk), `append`
//!    refuses with `OutOfSpace` and nothing is applied or poisoned; the
//!    next `append` tries to create it again, and the first that succeeds
//!    ends the out-of-space condition in the root's [`Health`].
//! 3. Records reach the disk in order: a batch that spans two segments
//!    writes and syncs the older one first.
//!
//! Segments whose space is written with zeros beforehand make the cheapest
//! syncs (no block to convert, so no filesystem metadata per sync), but
//! writing 64 MiB of zeros takes a while. So a spare is made in the
//! background: once the open segment is half used (or, for a segment that
//! was only reserved, as soon as 1 MiB of records in it shows the journal
//! is busy), a helper thread takes the next number and writes the spare; a
//! reserved segment is left for the spare as soon as it is ready, and a
//! zeroed one when it is full. Numbers stay in record order: while a spare
//! is being made, a segment change waits for it.
//!
//! Without a spare, `append` makes the next segment itself (`fallocate`,
//! two fsyncs), under the caller's lock: at the start of a run, on a
//! filesystem where the spare failed, and on every change refused for want
//! of space, which is cheap.
//!
//! Grouping. A sync costs about the same however many records it covers
//! (on the machine this was measured on, ~60 µs of CPU and ~300 µs of
//! wall time), and the thread starts the next one as soon as the last
//! returns, so under load each sync covers only what arrived during the
//! previous one. When the previous sync answered [`GROUP_FROM`] waiters or
//! more (requests arrive faster than syncs complete) and fewer records
//! are pending than it covered, the thread first waits half as long as
//! that sync took (at most [`MAX_LINGER`]) so the next sync covers more.
//! A lone writer, or a log whose waiters block (the noun log's puts), never
//! waits: its latency stays one sync.
//!
//! Failure. After a failed write or fsync the committer is finished:
//! every waiter and every later append is refused until the daemon
//! restarts, since the kernel may have dropped pages it could not write
//! and the changes are already applied in memory. Appends are refused
//! too after any other durable writer's failed fsync (one health state).

use std::collections::VecDeque;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::oneshot;

use super::SyncObserver;
use super::reach::Sealed;
use super::segment::{self, Created, Fill, Segments, segment_name};
use crate::store::{self, Error, Health, Incident, Writer};

/// How far the log is durable, and who waits for more.
#[derive(Debug, Default)]
struct Durable {
    /// Records durable so far (a sequence number).
    seq: u64,
    /// A write or fsync failed; nothing more will become durable.
    failed: Option<Incident>,
    /// Waiters and the record each waits for, in record order. A sync
    /// wakes only the waiters it covers (a watch channel woke all of
    /// them on every sync, and most went back to sleep).
    waiting: VecDeque<(u64, oneshot::Sender<()>)>,
}

/// Async waiters the previous sync must have answered before the thread
/// waits for more records ahead of the next one.
const GROUP_FROM: usize = 2;

/// The longest the thread waits for more records before a sync.
const MAX_LINGER: Duration = Duration::from_micros(200);

/// What the previous sync covered: the evidence for waiting before the
/// next one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Group {
    /// Records it wrote.
    records: u64,
    /// Async waiters it answered.
    waiters: usize,
    /// How long its write and fsync took.
    took: Duration,
}

impl Group {
    /// How long to wait for more records before syncing `pending` records
    /// (none unless this group showed concurrent waiters and fewer records
    /// are pending than it held).
    fn linger(&self, pending: u64) -> Option<Duration> {
        (self.waiters >= GROUP_FROM && pending < self.records)
            .then(|| (self.took / 2).min(MAX_LINGER))
            .filter(|d| !d.is_zero())
    }
}

/// Records in a reserved segment after which a zeroed spare is made.
const BUSY_BYTES: u64 = 1 << 20;

/// The segment records go into.
#[derive(Debug)]
struct Open {
    /// Its number.
    number: u64,
    /// Written with zeros beforehand ([`Fill::Zeros`]).
    zeroed: bool,
    file: Arc<std::fs::File>,
    /// Its preallocated length.
    len: u64,
    /// Bytes reserved so far (written or pending), its header included.
    used: u64,
    /// Records appended to it.
    records: u64,
}

impl Open {
    /// A segment just made, numbered `number`, of `len` bytes.
    fn made(number: u64, zeroed: bool, len: u64, created: Created) -> Open {
        Open {
            number,
            zeroed,
            file: Arc::new(created.file),
            len,
            used: created.used,
            records: 0,
        }
    }

    /// What the segment holds, for its seal.
    fn sealed(&self) -> Sealed {
        Sealed {
            len: self.used,
            records: self.records,
        }
    }
}

/// Bytes to write at an offset of one segment.
#[derive(Debug)]
struct Chunk {
    file: Arc<std::fs::File>,
    at: u64,
    bytes: Vec<u8>,
}

#[derive(Debug)]
struct Pending {
    /// Pending writes, oldest first; consecutive records of one segment
    /// share a chunk.
    chunks: Vec<Chunk>,
    appended: u64,
    shutdown: bool,
    /// The thread waits for records (an append must wake it).
    idle: bool,
    open: Option<Open>,
    /// Segments that take no more records (full, or left for the spare
    /// or by a cut), to be sealed once their records are written and
    /// then trimmed: their preallocated tail would otherwise count as
    /// journal bytes for as long as they are kept (the fold's trigger
    /// reads sizes).
    closed: Vec<Open>,
    /// A zeroed segment made ahead, numbered after `open`.
    spare: Option<Open>,
    /// A helper thread is making the spare (it holds number `next - 1`).
    making: bool,
    /// The open segment for which making a spare failed (not retried).
    no_spare_for: Option<u64>,
    /// The number the next segment gets.
    next: u64,
    segment_len: u64,
    /// Emptied chunk buffers of written batches, reused by the next ones
    /// so that a batch's bytes grow into room a batch already needed.
    buffers: Vec<Vec<u8>>,
}

/// Chunk buffers kept for reuse, and the largest kept (a bulk import's
/// batch is not held on to).
const KEPT_BUFFERS: usize = 4;
const KEPT_BUFFER_BYTES: usize = 1 << 20;

impl Pending {
    /// Keeps the written `chunks`' buffers, emptied, for the next batches.
    fn keep_buffers(&mut self, chunks: Vec<Chunk>) {
        for c in chunks {
            if self.buffers.len() < KEPT_BUFFERS && c.bytes.capacity() <= KEPT_BUFFER_BYTES {
                let mut bytes = c.bytes;
                bytes.clear();
                self.buffers.push(bytes);
            }
        }
    }

    /// Makes `next` the open segment; the one it replaces is sealed and
    /// trimmed once its records are written.
    fn open_next(&mut self, next: Open) {
        if let Some(old) = self.open.replace(next) {
            self.closed.push(old);
        }
    }

    /// Moves to the next segment, big enough for a `size`-byte record:
    /// the spare when there is one that fits, else a new reserved one.
    /// The caller has waited for any spare being made.
    fn roll(
        &mut self,
        segments: &dyn Segments,
        size: u64,
        health: &Health,
        writer: Writer,
    ) -> Result<(), Error> {
        debug_assert!(!self.making);
        if let Some(spare) = self.spare.take()
            && spare.len >= size
        {
            self.open_next(spare);
            return Ok(());
        }
        // A change needs room for its record, not a whole segment: on a
        // full disk the segment is made as large as still fits, down to
        // what this record (and the segment's header) needs.
        let least = size + segment::header_record(self.next).len() as u64;
        let mut len = self.segment_len.max(least);
        loop {
            match segments.create(self.next, len, Fill::Reserve) {
                Ok(created) => {
                    self.open_next(Open::made(self.next, false, len, created));
                    self.next += 1;
                    health.report_written(writer);
                    return Ok(());
                }
                Err(e) if store::health::is_out_of_space(&e) && len > least => {
                    len = (len / 2).max(least);
                }
                Err(e) => {
                    let mut context = format!(
                        "preallocating {len} bytes for {} segment {}",
                        writer.as_str(),
                        segment_name(self.next)
                    );
                    if store::health::is_out_of_space(&e) {
                        let free = segments
                            .free_bytes()
                            .map_or_else(String::new, |f| format!(", {f} bytes are free"));
                        context.push_str(&format!(" (the least this change needs{free})"));
                    }
                    let err = store::io_err(context, e);
                    if let Error::OutOfSpace { context } = &err {
                        health.report_full(writer, context.clone(), Some(len));
                    }
                    return Err(err);
                }
            }
        }
    }

    /// Whether a spare should be made now (see the module's notes).
    fn wants_spare(&self) -> bool {
        let Some(o) = &self.open else { return false };
        let busy = if o.zeroed {
            o.used * 2 >= o.len
        } else {
            o.used >= BUSY_BYTES
        };
        busy && self.spare.is_none() && !self.making && self.no_spare_for != Some(o.number)
    }
}

#[derive(Debug)]
struct Shared {
    pending: Mutex<Pending>,
    segments: Box<dyn Segments>,
    wake: Condvar,
    /// Signalled when a spare is made (or could not be).
    made: Condvar,
    /// Told of every sync.
    observers: std::sync::OnceLock<Vec<Arc<dyn SyncObserver>>>,
    /// How far the log is durable, and its waiters.
    durable: Mutex<Durable>,
    /// Signalled on every change of `durable`, for blocking waiters.
    synced: Condvar,
    health: Health,
    writer: Writer,
}

impl Shared {
    fn durable(&self) -> MutexGuard<'_, Durable> {
        self.durable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Applies `change` and tells the waiters it concerns: async waiters
    /// whose record is now durable (after a failure the others too, by
    /// dropping their senders: each then reads `failed`), and every
    /// blocking waiter, which checks for itself.
    /// Returns how many async waiters it answered.
    fn publish(&self, change: impl FnOnce(&mut Durable)) -> usize {
        let mut d = self.durable();
        change(&mut d);
        let seq = d.seq;
        let covered = d.waiting.partition_point(|(s, _)| *s <= seq);
        let woken: Vec<_> = d.waiting.drain(..covered).collect();
        if d.failed.is_some() {
            d.waiting.clear();
        }
        drop(d);
        self.synced.notify_all();
        let answered = woken.len();
        for (_, tx) in woken {
            let _ = tx.send(());
        }
        answered
    }
}

/// Marks the log failed when its thread ends by a panic, so no waiter
/// waits for it forever.
struct Unwinding<'a>(&'a Shared);

impl Drop for Unwinding<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let incident = self.0.health.report_failed(
                self.0.writer,
                format!("the {} thread stopped", self.0.writer.as_str()),
            );
            self.0.publish(|d| d.failed = Some(incident.clone()));
        }
    }
}

/// Where an appended record went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// Its sequence number (1 for the first record of this run).
    pub seq: u64,
    /// The segment holding it.
    pub segment: u64,
}

/// The committer handle: append records, wait for durability.
#[derive(Debug)]
pub struct Committer {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Committer {
    /// Starts the commit thread; its first segment is number `next`, made
    /// by `segments` with `segment_len` bytes; it reports into `health`
    /// as `writer`. A full disk does not stop the start: appends are
    /// refused until a segment can be made.
    pub fn start(
        segments: Box<dyn Segments>,
        next: u64,
        segment_len: u64,
        health: Health,
        writer: Writer,
    ) -> Result<Committer, Error> {
        let mut pending = Pending {
            chunks: Vec::new(),
            appended: 0,
            shutdown: false,
            idle: false,
            open: None,
            closed: Vec::new(),
            spare: None,
            making: false,
            no_spare_for: None,
            next,
            segment_len,
            buffers: Vec::new(),
        };
        match pending.roll(segments.as_ref(), 0, &health, writer) {
            Ok(()) | Err(Error::OutOfSpace { .. }) => {}
            Err(e) => return Err(e),
        }
        let shared = Arc::new(Shared {
            pending: Mutex::new(pending),
            segments,
            wake: Condvar::new(),
            made: Condvar::new(),
            observers: std::sync::OnceLock::new(),
            durable: Mutex::new(Durable::default()),
            synced: Condvar::new(),
            health,
            writer,
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("tessera-{}", writer.as_str()))
            .spawn(move || {
                let _unwinding = Unwinding(&worker);
                run(&worker);
            })
            .map_err(|e| store::io_err(format!("starting the {} thread", writer.as_str()), e))?;
        Ok(Committer {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Appends one record and returns its sequence number, or refuses it
    /// (out of space, or after a failure) with nothing appended. Call it
    /// in the same critical section that applies the record, before
    /// applying it, so log order is application order.
    pub fn append(&self, payload: &[u8]) -> Result<u64, Error> {
        self.append_in(payload).map(|a| a.seq)
    }

    /// [`Committer::append`], also saying which segment took the record.
    pub fn append_in(&self, payload: &[u8]) -> Result<Appended, Error> {
        let mut p = self.shared.pending();
        if let Some(incident) = self.shared.health.failure() {
            return Err(Error::StorageFailed(incident));
        }
        let size = (segment::HEADER + payload.len()) as u64;
        if p.open.as_ref().is_none_or(|o| o.used + size > o.len) {
            while p.making {
                p = self
                    .shared
                    .made
                    .wait(p)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            p.roll(
                self.shared.segments.as_ref(),
                size,
                &self.shared.health,
                self.shared.writer,
            )?;
        }
        let open = p.open.as_mut().expect("a segment with room");
        let (file, at, segment) = (open.file.clone(), open.used, open.number);
        open.used += size;
        open.records += 1;
        match p.chunks.last_mut() {
            Some(c) if Arc::ptr_eq(&c.file, &file) => segment::encode(payload, &mut c.bytes),
            _ => {
                let mut bytes = p.buffers.pop().unwrap_or_default();
                segment::encode(payload, &mut bytes);
                p.chunks.push(Chunk { file, at, bytes });
            }
        }
        p.appended += 1;
        let seq = p.appended;
        let wake = std::mem::take(&mut p.idle);
        drop(p);
        if wake {
            self.shared.wake.notify_one();
        }
        Ok(Appended { seq, segment })
    }

    /// Has `observers` told of every sync from now on (set once).
    pub fn observe(&self, observers: Vec<Arc<dyn SyncObserver>>) {
        let _ = self.shared.observers.set(observers);
    }

    /// The sequence number of the last appended record.
    pub fn appended(&self) -> u64 {
        self.shared.pending().appended
    }

    /// Closes the open segment early when it holds records, so that later
    /// records go to the next one: the number of the segment they go to,
    /// and the last appended record's sequence number. Once that record is
    /// durable, every segment below the number is whole and closed. The
    /// caller keeps appends out meanwhile (the queue calls it under its
    /// lock), so the cut falls exactly between two records it knows.
    /// `None` while a spare segment is being made: waiting for it here
    /// would hold the caller's lock that long, so the caller tries later.
    pub fn cut(&self) -> Result<Option<(u64, u64)>, Error> {
        let mut p = self.shared.pending();
        if p.open.as_ref().is_none_or(|o| o.used > 0) {
            if p.making {
                return Ok(None);
            }
            p.roll(
                self.shared.segments.as_ref(),
                0,
                &self.shared.health,
                self.shared.writer,
            )?;
        }
        let open = p.open.as_ref().expect("roll opened a segment");
        Ok(Some((open.number, p.appended)))
    }

    /// The open segment's number; `None` while no segment is open (a
    /// full disk). Every segment below it is closed: nothing is appended
    /// to it again.
    pub fn open_segment(&self) -> Option<u64> {
        self.shared.pending().open.as_ref().map(|o| o.number)
    }

    /// Waits until record `seq` is durable.
    pub async fn wait(&self, seq: u64) -> Result<(), Error> {
        let woken = {
            let mut d = self.shared.durable();
            if d.seq >= seq {
                return Ok(());
            }
            if let Some(incident) = &d.failed {
                return Err(Error::StorageFailed(incident.clone()));
            }
            let (tx, rx) = oneshot::channel();
            let at = d.waiting.partition_point(|(s, _)| *s <= seq);
            d.waiting.insert(at, (seq, tx));
            rx
        };
        if woken.await.is_ok() {
            return Ok(());
        }
        // Dropped unanswered: a failed write, or a thread that is gone.
        let failed = self.shared.durable().failed.clone();
        Err(Error::StorageFailed(
            failed.unwrap_or_else(|| self.stopped()),
        ))
    }

    /// Waits until record `seq` is durable, blocking this thread (for
    /// callers on the blocking pool, which must not enter the runtime).
    pub fn wait_blocking(&self, seq: u64) -> Result<(), Error> {
        let mut d = self.shared.durable();
        while d.seq < seq && d.failed.is_none() {
            d = self
                .shared
                .synced
                .wait(d)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        match &d.failed {
            _ if d.seq >= seq => Ok(()),
            Some(incident) => Err(Error::StorageFailed(incident.clone())),
            None => unreachable!("the loop ends durable or failed"),
        }
    }

    /// The incident for a commit thread that is gone without reporting.
    fn stopped(&self) -> Incident {
        self.shared.health.report_failed(
            self.shared.writer,
            format!("the {} thread stopped", self.shared.writer.as_str()),
        )
    }

    /// Flushes what is pending, trims the current segment's unused
    /// space, and stops the thread.
    pub fn shutdown(&self) {
        self.shared.pending().shutdown = true;
        self.shared.wake.notify_one();
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
    }
}

fn run(shared: &Arc<Shared>) {
    let mut last = Group::default();
    let mut durable = 0;
    loop {
        let (chunks, seq, closed) = {
            let mut p = shared.pending();
            while p.chunks.is_empty() && !p.shutdown {
                p.idle = true;
                p = shared
                    .wake
                    .wait(p)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            p.idle = false;
            if let Some(wait) = last.linger(p.appended - durable).filter(|_| !p.shutdown) {
                drop(p);
                std::thread::sleep(wait);
                p = shared.pending();
            }
            if p.chunks.is_empty() {
                let (open, spare) = (p.open.take(), p.spare.take());
                for o in p.closed.drain(..).chain(open).chain(spare) {
                    seal_and_trim(shared, &o, true);
                }
                return;
            }
            if p.wants_spare() {
                p.making = true;
                let (number, len) = (p.next, p.segment_len);
                p.next += 1;
                make_spare(shared.clone(), number, len);
            }
            // Every record of a closed segment was appended before it
            // closed, so it is in these chunks or in earlier ones.
            let closed = std::mem::take(&mut p.closed);
            (std::mem::take(&mut p.chunks), p.appended, closed)
        };
        let started = std::time::Instant::now();
        let written = chunks.iter().try_for_each(|c| {
            c.file
                .write_all_at(&c.bytes, c.at)
                .and_then(|()| c.file.sync_data())
        });
        match written {
            Ok(()) => {
                let took = started.elapsed();
                shared.pending().keep_buffers(chunks);
                for o in shared.observers.get().into_iter().flatten() {
                    o.synced(seq, seq - durable, took);
                }
                for o in &closed {
                    seal_and_trim(shared, o, false);
                }
                let waiters = shared.publish(|d| d.seq = seq);
                last = Group {
                    records: seq - durable,
                    waiters,
                    took,
                };
                durable = seq;
            }
            Err(e) => {
                let incident = shared.health.report_failed(
                    shared.writer,
                    format!("writing the {}: {e}", shared.writer.as_str()),
                );
                shared.publish(|d| d.failed = Some(incident.clone()));
                return;
            }
        }
    }
}

/// Makes the zeroed spare segment `number` on a helper thread and hands it
/// over: as the open segment when that one was only reserved, else as the
/// spare for the next change of segment. On failure the number is given
/// back (nothing took another while `making` was set) and no spare is
/// tried again for the open segment; changes of segment then make a
/// reserved one as before.
fn make_spare(shared: Arc<Shared>, number: u64, len: u64) {
    let helper = shared.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("tessera-{}-spare", shared.writer.as_str()))
        .spawn(move || {
            let made = helper.segments.create(number, len, Fill::Zeros);
            hand_over(&helper, number, len, made);
        });
    if let Err(e) = spawned {
        hand_over(&shared, number, len, Err(e));
    }
}

fn hand_over(shared: &Shared, number: u64, len: u64, made: std::io::Result<Created>) {
    let mut p = shared.pending();
    p.making = false;
    match made {
        Ok(created) => {
            let spare = Open::made(number, true, len, created);
            if p.open.as_ref().is_none_or(|o| !o.zeroed) {
                p.open_next(spare);
                shared.health.report_written(shared.writer);
            } else {
                p.spare = Some(spare);
            }
        }
        Err(e) => {
            p.next = number;
            p.no_spare_for = p.open.as_ref().map(|o| o.number);
            tracing::warn!(log = shared.writer.as_str(), segment = %segment_name(number), error = %e, "could not make a zeroed segment ahead; segments are reserved as they are needed");
        }
    }
    drop(p);
    shared.made.notify_all();
}

/// Seals a segment whose every record is written (its reach records its
/// length), then cuts its unused preallocated space: synced at a graceful
/// stop (the next start would trim it too), unsynced for a segment closed
/// during the run (a crash may leave the zeros, which a start reads as
/// the segment's end). A segment that cannot be sealed keeps its space,
/// as a segment not sealed must.
fn seal_and_trim(shared: &Shared, o: &Open, sync: bool) {
    if let Err(e) = shared.segments.seal(o.number, o.sealed()) {
        tracing::warn!(segment = %segment_name(o.number), error = %e, "could not seal a log segment; it keeps its preallocated space, and the next start seals it");
        return;
    }
    let trimmed = o
        .file
        .set_len(o.used)
        .and_then(|()| if sync { o.file.sync_all() } else { Ok(()) });
    if let Err(e) = trimmed {
        tracing::warn!(segment = %segment_name(o.number), error = %e, "could not trim a log segment's unused space; it counts as log bytes until a start or a fold removes it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_waits_for_more_only_after_one_that_answered_concurrent_waiters() {
        let ms = Duration::from_millis;
        let group = |records, waiters, took| Group {
            records,
            waiters,
            took,
        };
        // Busy: half the last sync, capped.
        assert_eq!(
            group(6, 6, Duration::from_micros(300)).linger(2),
            Some(Duration::from_micros(150))
        );
        assert_eq!(group(6, 6, ms(5)).linger(2), Some(MAX_LINGER));
        // As many records pending as the last sync covered: sync now.
        assert_eq!(group(6, 6, ms(1)).linger(6), None);
        // A lone writer, blocking waiters (none async), the first sync.
        assert_eq!(group(1, 1, ms(1)).linger(0), None);
        assert_eq!(group(8, 0, ms(1)).linger(1), None);
        assert_eq!(Group::default().linger(1), None);
        assert_eq!(group(8, GROUP_FROM - 1, ms(1)).linger(1), None);
    }

    /// Segments in a temporary directory that run out of space on demand.
    #[derive(Debug)]
    struct Disk {
        dir: std::path::PathBuf,
        full: Arc<std::sync::atomic::AtomicBool>,
        /// Hands out segments opened read-only, so every write fails.
        broken: bool,
        /// Each segment made, with how its space was set aside.
        made: Arc<Mutex<Vec<(u64, Fill)>>>,
    }

    impl Disk {
        fn new(dir: &std::path::Path) -> (Disk, Arc<std::sync::atomic::AtomicBool>) {
            let full = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let disk = Disk {
                dir: dir.to_path_buf(),
                full: full.clone(),
                broken: false,
                made: Arc::default(),
            };
            (disk, full)
        }
    }

    impl Segments for Disk {
        fn create(&self, number: u64, len: u64, fill: Fill) -> std::io::Result<Created> {
            if self.full.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            self.made.lock().unwrap().push((number, fill));
            let path = self.dir.join(segment_name(number));
            let f = std::fs::File::options()
                .write(true)
                .create_new(true)
                .open(&path)?;
            f.set_len(len)?;
            let file = if self.broken {
                std::fs::File::open(&path)?
            } else {
                f
            };
            Ok(Created { file, used: 0 })
        }

        fn seal(&self, _: u64, _: Sealed) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn records(dir: &std::path::Path) -> Vec<(u64, Vec<String>, u64)> {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
            .iter()
            .map(|name| {
                let bytes = std::fs::read(dir.join(name)).unwrap();
                let mut out = Vec::new();
                let end = segment::read::<std::io::Error>(&bytes[..], |_, p| {
                    out.push(String::from_utf8(p.to_vec()).unwrap());
                    Ok(())
                })
                .unwrap();
                assert_eq!(end.damage, None, "{name}");
                (segment::segment_number(name).unwrap(), out, end.valid_len)
            })
            .collect()
    }

    /// Segment `number`'s file length and the length of its records.
    fn len_and_records(dir: &std::path::Path, number: u64) -> (u64, u64) {
        let len = std::fs::metadata(dir.join(segment_name(number)))
            .unwrap()
            .len();
        let segment = records(dir).into_iter().find(|s| s.0 == number).unwrap();
        (len, segment.2)
    }

    #[tokio::test]
    async fn a_full_disk_refuses_appends_before_they_are_taken_and_they_resume_after() {
        let tmp = tempfile::tempdir().unwrap();
        let (disk, full) = Disk::new(tmp.path());
        let health = Health::new();
        let record = |i: usize| format!("{{\"i\":{i},\"pad\":\"{}\"}}", "x".repeat(20));
        let size = (segment::HEADER + record(0).len()) as u64;
        let c =
            Committer::start(Box::new(disk), 7, 3 * size, health.clone(), Writer::Journal).unwrap();

        for i in 0..3 {
            assert_eq!(c.append(record(i).as_bytes()).unwrap(), i as u64 + 1);
        }
        full.store(true, std::sync::atomic::Ordering::SeqCst);
        for _ in 0..2 {
            let refused = c.append(record(99).as_bytes()).unwrap_err();
            assert!(matches!(refused, Error::OutOfSpace { .. }), "{refused:?}");
            assert_eq!(c.appended(), 3, "a refused record takes no sequence number");
        }
        assert!(
            matches!(health.condition(), store::Condition::OutOfSpace(i) if i.writer == Writer::Journal)
        );
        c.wait(3)
            .await
            .expect("what was appended before is durable");

        full.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(c.append(record(3).as_bytes()).unwrap(), 4);
        assert_eq!(health.condition(), store::Condition::Ok);
        c.wait(4).await.unwrap();
        c.wait_blocking(4).unwrap();
        c.shutdown();

        let segments = records(tmp.path());
        let expected = vec![
            (7, (0..3).map(record).collect::<Vec<_>>(), 3 * size),
            (8, vec![record(3)], size),
        ];
        assert_eq!(segments, expected);
        let lens: Vec<u64> = segments
            .iter()
            .map(|(n, _, _)| {
                std::fs::metadata(tmp.path().join(segment_name(*n)))
                    .unwrap()
                    .len()
            })
            .collect();
        assert_eq!(
            lens,
            vec![3 * size, size],
            "a graceful stop trims the unused space"
        );
    }

    #[tokio::test]
    async fn a_full_disk_at_start_refuses_until_a_segment_can_be_made() {
        let tmp = tempfile::tempdir().unwrap();
        let (disk, full) = Disk::new(tmp.path());
        full.store(true, std::sync::atomic::Ordering::SeqCst);
        let health = Health::new();
        let c =
            Committer::start(Box::new(disk), 0, 1 << 16, health.clone(), Writer::Journal).unwrap();
        assert!(matches!(
            health.condition(),
            store::Condition::OutOfSpace(_)
        ));
        assert!(c.append(b"{}").is_err());
        c.wait(0).await.expect("nothing to wait for");
        full.store(false, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(c.append(b"{}").unwrap(), 1);
        c.wait(1).await.unwrap();
        c.shutdown();
        assert_eq!(records(tmp.path()), vec![(0, vec!["{}".to_string()], 10)]);
    }

    #[tokio::test]
    async fn a_failed_write_refuses_every_later_append_and_waiter() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut disk, _) = Disk::new(tmp.path());
        disk.broken = true;
        let health = Health::new();
        let c =
            Committer::start(Box::new(disk), 0, 1 << 16, health.clone(), Writer::Journal).unwrap();
        let seq = c.append(b"{}").unwrap();
        let failed = c.wait(seq).await.unwrap_err();
        assert!(
            matches!(&failed, Error::StorageFailed(i) if i.writer == Writer::Journal),
            "{failed:?}"
        );
        assert!(matches!(c.append(b"{}"), Err(Error::StorageFailed(_))));
        assert!(
            matches!(c.wait_blocking(seq), Err(Error::StorageFailed(_))),
            "a blocking waiter is told too"
        );
        assert!(matches!(health.condition(), store::Condition::Failed(_)));
        c.shutdown();
    }

    #[test]
    fn another_writers_failed_fsync_refuses_appends() {
        let tmp = tempfile::tempdir().unwrap();
        let (disk, _) = Disk::new(tmp.path());
        let health = Health::new();
        let c =
            Committer::start(Box::new(disk), 0, 1 << 16, health.clone(), Writer::Journal).unwrap();
        health.report_failed(Writer::Files, "fsync failed: EIO");
        assert!(matches!(
            c.append(b"{}").unwrap_err(),
            Error::StorageFailed(i) if i.writer == Writer::Files
        ));
        c.shutdown();
    }

    /// Appends `n` records of about 64 KiB each, each waited for.
    async fn busy(c: &Committer, from: usize, n: usize) {
        for i in from..from + n {
            let record = format!("{{\"i\":{i},\"pad\":\"{}\"}}", "x".repeat(64 << 10));
            let seq = c.append(record.as_bytes()).unwrap();
            c.wait(seq).await.unwrap();
        }
    }

    #[test]
    fn a_cut_sends_later_records_to_the_next_segment() {
        let tmp = tempfile::tempdir().unwrap();
        let (disk, _) = Disk::new(tmp.path());
        let c =
            Committer::start(Box::new(disk), 0, 1 << 16, Health::new(), Writer::Journal).unwrap();
        assert_eq!(
            c.cut().unwrap(),
            Some((0, 0)),
            "an empty segment is not cut"
        );
        let a = c.append_in(b"{\"a\":1}").unwrap();
        let b = c.append_in(b"{\"b\":2}").unwrap();
        assert_eq!((a.segment, b.segment, b.seq), (0, 0, 2));
        assert_eq!(c.cut().unwrap(), Some((1, 2)), "later records go to 1");
        let d = c.append_in(b"{\"d\":3}").unwrap();
        assert_eq!((d.segment, d.seq), (1, 3));
        assert_eq!(c.open_segment(), Some(1));
        c.wait_blocking(3).unwrap();
        let (len, records_len) = len_and_records(tmp.path(), 0);
        assert_eq!(
            len, records_len,
            "the cut segment is trimmed to its records once they are written"
        );
        c.shutdown();
        let segments: Vec<(u64, Vec<String>)> = records(tmp.path())
            .into_iter()
            .map(|(n, recs, _)| (n, recs))
            .collect();
        assert_eq!(
            segments,
            vec![
                (0, vec!["{\"a\":1}".into(), "{\"b\":2}".into()]),
                (1, vec!["{\"d\":3}".into()])
            ]
        );
    }

    #[test]
    fn reused_batch_buffers_carry_nothing_of_earlier_batches() {
        let tmp = tempfile::tempdir().unwrap();
        let (disk, _) = Disk::new(tmp.path());
        let c =
            Committer::start(Box::new(disk), 0, 8 << 20, Health::new(), Writer::Journal).unwrap();
        let big = format!("{{\"big\":\"{}\"}}", "x".repeat(2 << 20));
        let mut written = vec![big.clone()];
        c.wait_blocking(c.append_in(big.as_bytes()).unwrap().seq)
            .unwrap();
        for i in 0..6 {
            // Each batch shorter than the one before: a buffer not emptied
            // would write the earlier batch's tail after this one's.
            let record = format!("{{\"i\":{i},\"pad\":\"{}\"}}", "y".repeat(600 - 100 * i));
            c.wait_blocking(c.append_in(record.as_bytes()).unwrap().seq)
                .unwrap();
            written.push(record);
        }
        {
            let p = c.shared.pending();
            assert!(p.buffers.len() <= KEPT_BUFFERS);
            assert!(
                p.buffers
                    .iter()
                    .all(|b| b.is_empty() && b.capacity() <= KEPT_BUFFER_BYTES),
                "a bulk batch's buffer is not kept"
            );
        }
        c.shutdown();
        let read: Vec<String> = records(tmp.path())
            .into_iter()
            .flat_map(|(_, recs, _)| recs)
            .collect();
        assert_eq!(read, written);
    }

    #[tokio::test]
    async fn a_busy_journal_moves_to_a_zeroed_spare_and_keeps_record_order() {
        let tmp = tempfile::tempdir().unwrap();
        let (disk, _) = Disk::new(tmp.path());
        let made = disk.made.clone();
        let c =
            Committer::start(Box::new(disk), 7, 8 << 20, Health::new(), Writer::Journal).unwrap();
        busy(&c, 0, 17).await;
        while c.open_segment() != Some(8) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        busy(&c, 17, 3).await;
        let (len, records_len) = len_and_records(tmp.path(), 7);
        assert_eq!(
            len, records_len,
            "the segment left for the spare is trimmed to its records"
        );
        c.shutdown();

        assert_eq!(
            *made.lock().unwrap(),
            vec![(7, Fill::Reserve), (8, Fill::Zeros)],
            "the run starts on a reserved segment; after 1 MiB a zeroed one is made ahead"
        );
        let segments = records(tmp.path());
        let order: Vec<usize> = segments
            .iter()
            .flat_map(|(_, recs, _)| recs.iter())
            .map(|r| {
                serde_json::from_str::<serde_json::Value>(r).unwrap()["i"]
                    .as_u64()
                    .unwrap() as usize
            })
            .collect();
        assert_eq!(
            order,
            (0..20).collect::<Vec<_>>(),
            "records in order across the switch"
        );
        assert!(
            segments[1].1.len() >= 3,
            "the last records are in the spare: {:?}",
            segments
                .iter()
                .map(|s| (s.0, s.1.len()))
                .collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn a_spare_that_cannot_be_made_gives_its_number_back() {
        let tmp = tempfile::tempdir().unwrap();
        let (disk, full) = Disk::new(tmp.path());
        let made = disk.made.clone();
        let c =
            Committer::start(Box::new(disk), 7, 2 << 20, Health::new(), Writer::Journal).unwrap();
        busy(&c, 0, 10).await;
        full.store(true, std::sync::atomic::Ordering::SeqCst);
        busy(&c, 10, 10).await;
        while c.shared.pending().making {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(
            c.shared.pending().no_spare_for,
            Some(7),
            "the spare was tried"
        );
        full.store(false, std::sync::atomic::Ordering::SeqCst);
        busy(&c, 20, 20).await;
        c.shutdown();

        let made = made.lock().unwrap().clone();
        assert_eq!(made[0], (7, Fill::Reserve));
        assert_eq!(
            made[1],
            (8, Fill::Reserve),
            "the refused spare's number went to the next segment: {made:?}"
        );
        let numbers: Vec<u64> = records(tmp.path()).iter().map(|s| s.0).collect();
        assert_eq!(numbers[..2], [7, 8], "no gap in the numbers");
    }
}
