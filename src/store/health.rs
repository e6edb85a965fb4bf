//! The one health state of the root's durable writers. The atomic writer
//! (`atomic.rs`) and the two log committers (`log/commit.rs`: the task
//! journal's and the noun log's) report into it; the writers refuse work by it and `/healthz` reads it.
//!
//! What each condition means and how far to trust the root under it:
//!
//! | condition | meaning | writes | clears |
//! | --- | --- | --- | --- |
//! | ok | every write since the start reached the disk | accepted | - |
//! | out of space | a write found the disk (or quota) full; nothing of it was kept | refused by the full writer (`507`), each retried | by that writer's next successful write, or by the periodic check once the free space would hold the refused write ([`Health::recheck`]) |
//! | failed | an fsync (or a journal write) failed: the kernel may have dropped data it had accepted | all refused (`503`) | only by a restart |
//!
//! Out of space is a state, not an outage: a write that hits it keeps
//! nothing and changes nothing in memory, so the next write simply tries
//! again. A failure is final: retrying could acknowledge bytes the disk
//! no longer holds (redb's `PreviousIo`), so the first cause is kept and
//! every later write is refused until the daemon restarts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use serde::Serialize;

/// Which durable writer reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Writer {
    /// The atomic file writer: objects, noun refs, keys, snapshots, ctx-dirs.
    Files,
    /// The task journal's committer.
    Journal,
    /// The noun log's committer (`journal/nouns/`).
    NounLog,
}

impl Writer {
    /// The writer's name in messages and in `/healthz`.
    pub fn as_str(self) -> &'static str {
        match self {
            Writer::Files => "files",
            Writer::Journal => "journal",
            Writer::NounLog => "noun_log",
        }
    }
}

/// One reported problem: which writer, what happened, since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Incident {
    /// The writer that reported it.
    pub writer: Writer,
    /// What failed, with the OS error.
    pub cause: String,
    /// When it was first reported.
    pub since: Timestamp,
}

impl std::fmt::Display for Incident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (the {} writer, since {})",
            self.cause,
            self.writer.as_str(),
            self.since
        )
    }
}

/// The condition `/healthz` shows: the worst one reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Nothing reported.
    Ok,
    /// A writer found the disk full (the earliest such report).
    OutOfSpace(Incident),
    /// An fsync failed; writes are refused until restart.
    Failed(Incident),
}

/// The shared health state: cheap to clone (an `Arc`).
#[derive(Clone, Debug, Default)]
pub struct Health {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Set while anything is reported, so a healthy write path never
    /// takes the lock.
    troubled: AtomicBool,
    /// A plain mutex is enough: it guards a few fields, never I/O.
    state: Mutex<Reports>,
}

#[derive(Debug, Default)]
struct Reports {
    failed: Option<Incident>,
    files_full: Option<Full>,
    journal_full: Option<Full>,
    noun_log_full: Option<Full>,
}

/// One writer's out-of-space episode.
#[derive(Debug)]
struct Full {
    incident: Incident,
    /// The free bytes the refused write needed, when the writer knows.
    needed: Option<u64>,
}

/// Free bytes taken to be enough for a write whose size is unknown.
const UNKNOWN_NEED: u64 = 1 << 20;

impl Reports {
    fn full(&mut self, writer: Writer) -> &mut Option<Full> {
        match writer {
            Writer::Files => &mut self.files_full,
            Writer::Journal => &mut self.journal_full,
            Writer::NounLog => &mut self.noun_log_full,
        }
    }

    fn episodes(&self) -> impl Iterator<Item = &Full> {
        [&self.files_full, &self.journal_full, &self.noun_log_full]
            .into_iter()
            .flatten()
    }

    /// Whether anything is reported (the `troubled` flag's value).
    fn troubled(&self) -> bool {
        self.failed.is_some() || self.episodes().next().is_some()
    }
}

impl Health {
    /// A fresh state: ok.
    pub fn new() -> Health {
        Health::default()
    }

    fn reports(&self) -> std::sync::MutexGuard<'_, Reports> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The worst condition reported.
    pub fn condition(&self) -> Condition {
        if !self.inner.troubled.load(Ordering::Acquire) {
            return Condition::Ok;
        }
        let r = self.reports();
        if let Some(i) = &r.failed {
            return Condition::Failed(i.clone());
        }
        let full = r.episodes().min_by_key(|f| f.incident.since);
        full.map_or(Condition::Ok, |f| Condition::OutOfSpace(f.incident.clone()))
    }

    /// The free bytes the write `writer` was refused for needed, while its
    /// out-of-space episode lasts and the writer said.
    pub fn needed(&self, writer: Writer) -> Option<u64> {
        if !self.inner.troubled.load(Ordering::Acquire) {
            return None;
        }
        self.reports().full(writer).as_ref().and_then(|f| f.needed)
    }

    /// Whether some writer's out-of-space episode is on.
    pub fn out_of_space(&self) -> bool {
        self.inner.troubled.load(Ordering::Acquire) && self.reports().episodes().next().is_some()
    }

    /// The periodic check: `free` bytes are free now, so each episode
    /// whose refused write would fit (1 MiB when its size is unknown) is
    /// over, even if that writer has not written since. A quota the free
    /// space does not show may refuse the next write again, which starts a
    /// new episode.
    pub fn recheck(&self, free: u64) {
        if !self.inner.troubled.load(Ordering::Acquire) {
            return;
        }
        let mut r = self.reports();
        for writer in [Writer::Files, Writer::Journal, Writer::NounLog] {
            let slot = r.full(writer);
            if slot
                .as_ref()
                .is_some_and(|f| free >= f.needed.unwrap_or(UNKNOWN_NEED))
            {
                *slot = None;
                tracing::info!(
                    writer = writer.as_str(),
                    free_bytes = free,
                    "space is available again; writes resume"
                );
            }
        }
        self.inner.troubled.store(r.troubled(), Ordering::Release);
    }

    /// The failure that refuses every write, if one was reported.
    pub fn failure(&self) -> Option<Incident> {
        if !self.inner.troubled.load(Ordering::Acquire) {
            return None;
        }
        self.reports().failed.clone()
    }

    /// Records a failed fsync (or journal write) and returns the failure
    /// that now refuses writes: the first one reported.
    pub fn report_failed(&self, writer: Writer, cause: impl Into<String>) -> Incident {
        let mut r = self.reports();
        self.inner.troubled.store(true, Ordering::Release);
        r.failed
            .get_or_insert_with(|| {
                let cause = cause.into();
                tracing::error!(writer = writer.as_str(), cause = %cause, "a durable write failed; refusing every write until restart");
                Incident {
                    writer,
                    cause,
                    since: Timestamp::now(),
                }
            })
            .clone()
    }

    /// Records that `writer` found the disk full, for a write that needed
    /// `needed` free bytes (when it knows); the episode keeps its first
    /// cause and time, and the latest need.
    pub fn report_full(&self, writer: Writer, cause: impl Into<String>, needed: Option<u64>) {
        let mut r = self.reports();
        let slot = r.full(writer);
        match slot {
            Some(full) => full.needed = needed,
            None => {
                let cause = cause.into();
                tracing::warn!(writer = writer.as_str(), cause = %cause, "out of space; writes answer 507 until space is freed");
                *slot = Some(Full {
                    incident: Incident {
                        writer,
                        cause,
                        since: Timestamp::now(),
                    },
                    needed,
                });
            }
        }
        self.inner.troubled.store(true, Ordering::Release);
    }

    /// Records that `writer` wrote successfully: its out-of-space episode,
    /// if any, is over.
    pub fn report_written(&self, writer: Writer) {
        if !self.inner.troubled.load(Ordering::Acquire) {
            return;
        }
        let mut r = self.reports();
        if r.full(writer).take().is_some() {
            tracing::info!(
                writer = writer.as_str(),
                "space is available again; writes resume"
            );
        }
        self.inner.troubled.store(r.troubled(), Ordering::Release);
    }
}

/// The free bytes (for an unprivileged writer) of the filesystem holding
/// `dir`: what the periodic check and `/healthz` compare with a need.
pub fn free_bytes(dir: &cap_std::fs::Dir) -> std::io::Result<u64> {
    let fs = rustix::fs::fstatvfs(dir)?;
    Ok(fs.f_bavail.saturating_mul(fs.f_frsize))
}

/// Whether an I/O error means the disk or the quota is full.
pub fn is_out_of_space(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_ok(h: &Health) -> bool {
        h.condition() == Condition::Ok
    }

    #[test]
    fn out_of_space_clears_by_the_same_writer_and_a_failure_stays() {
        let h = Health::new();
        assert!(is_ok(&h));
        h.report_full(Writer::Journal, "preallocating a segment: no space", None);
        h.report_full(Writer::Files, "writing an object: no space", None);
        let Condition::OutOfSpace(first) = h.condition() else {
            panic!("{:?}", h.condition())
        };
        assert_eq!(
            first.writer,
            Writer::Journal,
            "the earliest report is shown"
        );
        h.report_written(Writer::Files);
        assert!(matches!(h.condition(), Condition::OutOfSpace(i) if i.writer == Writer::Journal));
        h.report_written(Writer::Journal);
        assert!(is_ok(&h));

        h.report_failed(Writer::Files, "fsync: EIO");
        h.report_failed(Writer::Journal, "fdatasync: EIO");
        h.report_written(Writer::Files);
        let Condition::Failed(i) = h.condition() else {
            panic!("{:?}", h.condition())
        };
        assert_eq!(
            (i.writer, i.cause.as_str()),
            (Writer::Files, "fsync: EIO"),
            "the first cause stays"
        );
        assert_eq!(h.failure(), Some(i));
    }

    /// Regression: a success of one writer recomputed the "anything
    /// reported" flag without the noun log's episode, which then hid and
    /// outlived itself: its own next success saw nothing to clear, and the
    /// next report by anyone showed its stale cause again.
    #[test]
    fn each_episode_ends_by_its_own_writer_or_once_its_need_fits_and_none_outlives_itself() {
        let h = Health::new();
        h.report_full(
            Writer::NounLog,
            "preallocating a noun_log segment",
            Some(64 << 20),
        );
        h.report_written(Writer::Files);
        assert!(
            matches!(h.condition(), Condition::OutOfSpace(i) if i.writer == Writer::NounLog),
            "another writer's success does not hide it: {:?}",
            h.condition()
        );
        assert_eq!(h.needed(Writer::NounLog), Some(64 << 20));
        h.report_written(Writer::NounLog);
        assert!(is_ok(&h));
        h.report_full(Writer::Files, "writing an object", Some(100));
        assert!(
            matches!(h.condition(), Condition::OutOfSpace(i) if i.writer == Writer::Files),
            "no stale cause comes back: {:?}",
            h.condition()
        );

        // The periodic check: space is back, nobody wrote.
        h.report_full(
            Writer::Journal,
            "preallocating a journal segment",
            Some(4096),
        );
        h.recheck(1000);
        assert!(matches!(h.condition(), Condition::OutOfSpace(i) if i.writer == Writer::Journal));
        h.recheck(4096);
        assert!(is_ok(&h));
        h.report_full(Writer::Files, "writing", None);
        h.recheck(UNKNOWN_NEED - 1);
        assert!(!is_ok(&h));
        h.recheck(UNKNOWN_NEED);
        assert!(is_ok(&h));

        // A failure stays, whatever is free.
        h.report_failed(Writer::Files, "fsync: EIO");
        h.recheck(u64::MAX);
        assert!(matches!(h.condition(), Condition::Failed(_)));
    }

    #[test]
    fn enospc_and_edquot_are_out_of_space_and_eio_is_not() {
        for (errno, full) in [(28, true), (122, true), (5, false), (13, false)] {
            let e = std::io::Error::from_raw_os_error(errno);
            assert_eq!(is_out_of_space(&e), full, "errno {errno}");
        }
    }
}
