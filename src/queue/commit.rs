//! Group commit: appenders put encoded records into a shared buffer; one
//! thread writes whatever has accumulated and fsyncs it once, then tells
//! every waiter how far the journal is durable. A state change is
//! acknowledged only after `wait` sees its sequence number durable.
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
//! Making a segment (`fallocate`, two fsyncs) happens inside `append`,
//! under the queue's state lock: once per segment (64 MiB by default),
//! and on every change refused for want of space, which is cheap.
//!
//! Failure. After a failed write or fsync the committer is finished:
//! every waiter and every later append is refused until the daemon
//! restarts, since the kernel may have dropped pages it could not write
//! and the changes are already applied in memory. Appends are refused
//! too after any other durable writer's failed fsync (one health state).

use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use tokio::sync::watch;

use super::JournalError as Error;
use super::journal::{self, Segments, segment_name};
use crate::store::{self, Health, Incident, Writer};

/// How far the journal is durable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Durable {
    /// Records durable so far (a sequence number).
    seq: u64,
    /// A write or fsync failed; nothing more will become durable.
    failed: Option<Incident>,
}

/// The segment records go into.
#[derive(Debug)]
struct Open {
    file: Arc<std::fs::File>,
    /// Its preallocated length.
    len: u64,
    /// Bytes reserved so far (written or pending).
    used: u64,
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
    open: Option<Open>,
    /// The number the next segment gets.
    next: u64,
    segments: Box<dyn Segments>,
    segment_len: u64,
}

impl Pending {
    /// Creates the next segment, big enough for a `size`-byte record.
    fn roll(&mut self, size: u64, health: &Health) -> Result<(), Error> {
        let len = self.segment_len.max(size);
        match self.segments.create(self.next, len) {
            Ok(file) => {
                self.open = Some(Open {
                    file: Arc::new(file),
                    len,
                    used: 0,
                });
                self.next += 1;
                health.report_written(Writer::Journal);
                Ok(())
            }
            Err(e) => {
                let context = format!(
                    "preallocating {len} bytes for journal/{}",
                    segment_name(self.next)
                );
                let err = store::io_err(context, e);
                if let store::Error::OutOfSpace { context } = &err {
                    health.report_full(Writer::Journal, context.clone());
                }
                Err(err.into())
            }
        }
    }
}

#[derive(Debug)]
struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    durable: watch::Sender<Durable>,
    health: Health,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The committer handle: append records, wait for durability.
#[derive(Debug)]
pub struct Committer {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Committer {
    /// Starts the commit thread; its first segment is number `next`, made
    /// by `segments` with `segment_len` bytes. A full disk does not stop
    /// the start: appends are refused until a segment can be made.
    pub fn start(
        segments: Box<dyn Segments>,
        next: u64,
        segment_len: u64,
        health: Health,
    ) -> Result<Committer, Error> {
        let mut pending = Pending {
            chunks: Vec::new(),
            appended: 0,
            shutdown: false,
            open: None,
            next,
            segments,
            segment_len,
        };
        match pending.roll(0, &health) {
            Ok(()) | Err(Error::Store(store::Error::OutOfSpace { .. })) => {}
            Err(e) => return Err(e),
        }
        let shared = Arc::new(Shared {
            pending: Mutex::new(pending),
            wake: Condvar::new(),
            durable: watch::Sender::new(Durable::default()),
            health,
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tessera-journal".into())
            .spawn(move || run(&worker))
            .map_err(|e| store::io_err("starting the journal thread", e))?;
        Ok(Committer {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Appends one record and returns its sequence number, or refuses it
    /// (out of space, or after a failure) with nothing appended. Call it
    /// in the same critical section that applies the record, before
    /// applying it, so journal order is application order.
    pub fn append(&self, payload: &[u8]) -> Result<u64, Error> {
        let mut p = self.shared.pending();
        if let Some(incident) = self.shared.health.failure() {
            return Err(Error::Failed(incident));
        }
        let size = (journal::HEADER + payload.len()) as u64;
        if p.open.as_ref().is_none_or(|o| o.used + size > o.len) {
            p.roll(size, &self.shared.health)?;
        }
        let open = p.open.as_mut().expect("a segment with room");
        let (file, at) = (open.file.clone(), open.used);
        open.used += size;
        match p.chunks.last_mut() {
            Some(c) if Arc::ptr_eq(&c.file, &file) => journal::encode(payload, &mut c.bytes),
            _ => {
                let mut bytes = Vec::new();
                journal::encode(payload, &mut bytes);
                p.chunks.push(Chunk { file, at, bytes });
            }
        }
        p.appended += 1;
        let seq = p.appended;
        drop(p);
        self.shared.wake.notify_one();
        Ok(seq)
    }

    /// The sequence number of the last appended record.
    pub fn appended(&self) -> u64 {
        self.shared.pending().appended
    }

    /// Waits until record `seq` is durable.
    pub async fn wait(&self, seq: u64) -> Result<(), Error> {
        let mut rx = self.shared.durable.subscribe();
        let d = rx
            .wait_for(|d| d.seq >= seq || d.failed.is_some())
            .await
            .map_err(|_| Error::Failed(self.stopped()))?;
        match &d.failed {
            _ if d.seq >= seq => Ok(()),
            Some(incident) => Err(Error::Failed(incident.clone())),
            None => Err(Error::Failed(self.stopped())),
        }
    }

    /// The incident for a commit thread that is gone without reporting.
    fn stopped(&self) -> Incident {
        self.shared
            .health
            .report_failed(Writer::Journal, "the journal thread stopped")
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

fn run(shared: &Shared) {
    loop {
        let (chunks, seq) = {
            let mut p = shared.pending();
            while p.chunks.is_empty() && !p.shutdown {
                p = shared
                    .wake
                    .wait(p)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if p.chunks.is_empty() {
                trim(p.open.take());
                return;
            }
            (std::mem::take(&mut p.chunks), p.appended)
        };
        let written = chunks.iter().try_for_each(|c| {
            c.file
                .write_all_at(&c.bytes, c.at)
                .and_then(|()| c.file.sync_data())
        });
        match written {
            Ok(()) => shared.durable.send_modify(|d| d.seq = seq),
            Err(e) => {
                let incident = shared
                    .health
                    .report_failed(Writer::Journal, format!("writing the journal: {e}"));
                shared.durable.send_modify(|d| d.failed = Some(incident));
                return;
            }
        }
    }
}

/// Cuts a segment's unused preallocated space at a graceful stop (the
/// next start would trim it too).
fn trim(open: Option<Open>) {
    if let Some(o) = open
        && let Err(e) = o.file.set_len(o.used).and_then(|()| o.file.sync_all())
    {
        tracing::warn!(error = %e, "could not trim the journal segment's unused space; the next start does");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Segments in a temporary directory that run out of space on demand.
    #[derive(Debug)]
    struct Disk {
        dir: std::path::PathBuf,
        full: Arc<std::sync::atomic::AtomicBool>,
        /// Hands out segments opened read-only, so every write fails.
        broken: bool,
    }

    impl Disk {
        fn new(dir: &std::path::Path) -> (Disk, Arc<std::sync::atomic::AtomicBool>) {
            let full = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let disk = Disk {
                dir: dir.to_path_buf(),
                full: full.clone(),
                broken: false,
            };
            (disk, full)
        }
    }

    impl Segments for Disk {
        fn create(&mut self, number: u64, len: u64) -> std::io::Result<std::fs::File> {
            if self.full.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            let path = self.dir.join(segment_name(number));
            let f = std::fs::File::options()
                .write(true)
                .create_new(true)
                .open(&path)?;
            f.set_len(len)?;
            if self.broken {
                return std::fs::File::open(&path);
            }
            Ok(f)
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
                let end = journal::read::<std::io::Error>(&bytes[..], |_, p| {
                    out.push(String::from_utf8(p.to_vec()).unwrap());
                    Ok(())
                })
                .unwrap();
                assert_eq!(end.damage, None, "{name}");
                (journal::segment_number(name).unwrap(), out, end.valid_len)
            })
            .collect()
    }

    #[tokio::test]
    async fn a_full_disk_refuses_appends_before_they_are_taken_and_they_resume_after() {
        let tmp = tempfile::tempdir().unwrap();
        let (disk, full) = Disk::new(tmp.path());
        let health = Health::new();
        let record = |i: usize| format!("{{\"i\":{i},\"pad\":\"{}\"}}", "x".repeat(20));
        let size = (journal::HEADER + record(0).len()) as u64;
        let c = Committer::start(Box::new(disk), 7, 3 * size, health.clone()).unwrap();

        for i in 0..3 {
            assert_eq!(c.append(record(i).as_bytes()).unwrap(), i as u64 + 1);
        }
        full.store(true, std::sync::atomic::Ordering::SeqCst);
        for _ in 0..2 {
            let refused = c.append(record(99).as_bytes()).unwrap_err();
            assert!(
                matches!(refused, Error::Store(store::Error::OutOfSpace { .. })),
                "{refused:?}"
            );
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
        let c = Committer::start(Box::new(disk), 0, 1 << 16, health.clone()).unwrap();
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
        let c = Committer::start(Box::new(disk), 0, 1 << 16, health.clone()).unwrap();
        let seq = c.append(b"{}").unwrap();
        let failed = c.wait(seq).await.unwrap_err();
        assert!(
            matches!(&failed, Error::Failed(i) if i.writer == Writer::Journal),
            "{failed:?}"
        );
        assert!(matches!(c.append(b"{}"), Err(Error::Failed(_))));
        assert!(matches!(health.condition(), store::Condition::Failed(_)));
        c.shutdown();
    }

    #[test]
    fn another_writers_failed_fsync_refuses_appends() {
        let tmp = tempfile::tempdir().unwrap();
        let (disk, _) = Disk::new(tmp.path());
        let health = Health::new();
        let c = Committer::start(Box::new(disk), 0, 1 << 16, health.clone()).unwrap();
        health.report_failed(Writer::Files, "fsync failed: EIO");
        assert!(matches!(
            c.append(b"{}").unwrap_err(),
            Error::Failed(i) if i.writer == Writer::Files
        ));
        c.shutdown();
    }
}
