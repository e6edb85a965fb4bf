//! The connection table: every open connection, whether a request is in
//! flight on it and when it was last active, and the cap on how many may
//! be open (`[limits] max_connections`).
//!
//! The cap is fitted below the process's open-file limit, which is raised
//! to its hard limit at start, leaving [`FILE_RESERVE`] descriptors for
//! the root's files, so connections can never starve the store of file
//! descriptors. At the cap a new connection first makes room: the
//! connection idle longest (no request in flight: kept alive between
//! requests, or not yet done sending a request head) is closed by
//! dropping its task. Only when every connection has a request in flight
//! is the new one refused, with a bare `503` and `Retry-After: 1`, without
//! reaching hyper. So idle connections, however many an attacker opens,
//! only ever push each other out, and a client that sends its request
//! right away gets served.
//!
//! Refused and evicted connections are counted (for `/metrics`) and logged
//! at info, at most one line a second. Timeouts on a connection (its head,
//! its keep-alive wait) are hyper's, set in `mod.rs`.

use crate::metrics::ConnCounts;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::net::TcpStream;
use tokio::task::AbortHandle;

use crate::auth::throttle::Failures;

/// Open-file descriptors kept free of connections, for the root's files,
/// the journal and the blocking pool's work.
pub const FILE_RESERVE: u64 = 256;

/// What a refused connection is told before it is closed.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// Raises the soft open-file limit to the hard one, logs what it got, and
/// returns `max_connections` lowered to fit below it with
/// [`FILE_RESERVE`] to spare.
pub fn fit_to_open_files(max_connections: usize) -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let before = getrlimit(Resource::Nofile);
    let mut raised = before;
    raised.current = before.maximum;
    if raised.current != before.current
        && let Err(e) = setrlimit(Resource::Nofile, raised)
    {
        tracing::warn!(error = %e, "could not raise the open-file limit");
    }
    let files = getrlimit(Resource::Nofile).current;
    let cap = cap_below(max_connections, files);
    let show = |n: Option<u64>| n.map_or_else(|| "unlimited".to_string(), |n| n.to_string());
    tracing::info!(
        open_files = show(files),
        was = show(before.current),
        max_connections = cap,
        "connection cap fitted below the open-file limit (soft limit raised to the hard one)"
    );
    cap
}

/// `max_connections` fitted below an open-file limit (`None`: unlimited),
/// at least 1.
fn cap_below(max_connections: usize, files: Option<u64>) -> usize {
    let fits = files.map_or(u64::MAX, |n| n.saturating_sub(FILE_RESERVE));
    (max_connections as u64).min(fits).max(1) as usize
}

/// The table of open connections: shared by the accept loop and every
/// connection's task.
#[derive(Debug)]
pub struct Connections {
    cap: usize,
    started: Instant,
    next_id: AtomicU64,
    /// A `std` mutex is enough: it is held for one insert, one removal or
    /// one scan, never across `.await`, and no task is aborted under it.
    open: Mutex<HashMap<u64, Open>>,
    refused: Failures,
    evicted: Failures,
}

#[derive(Debug)]
struct Open {
    activity: Arc<Activity>,
    /// Set right after the connection's task is spawned; until then the
    /// connection cannot be closed from here.
    abort: Option<AbortHandle>,
}

/// How busy one connection is, kept by its service, read by the table.
#[derive(Debug)]
pub struct Activity {
    in_flight: AtomicU32,
    /// Milliseconds from the table's start to the accept or the last
    /// request's start or end.
    last_ms: AtomicU64,
    started: Instant,
}

/// A request in flight on a connection; when dropped, the connection is
/// idle again from that moment.
#[derive(Debug)]
pub struct InFlight(Arc<Activity>);

/// A connection's place in the table, held by its task: dropping it
/// (the task ended or was aborted) frees the place.
#[derive(Debug)]
pub struct Slot {
    id: u64,
    activity: Arc<Activity>,
    table: Arc<Connections>,
}

/// A connection's id in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnId(u64);

/// What the table says to a new connection.
#[derive(Debug)]
pub enum Admission {
    /// Served; its slot goes to its task.
    Admitted(Slot),
    /// Every connection is busy: refuse it.
    Full,
}

impl Activity {
    fn new(started: Instant) -> Activity {
        let a = Activity {
            in_flight: AtomicU32::new(0),
            last_ms: AtomicU64::new(0),
            started,
        };
        a.touch();
        a
    }

    fn touch(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// Marks a request in flight until the returned guard is dropped.
    pub fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
        InFlight(self.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Slot {
    /// The connection's activity, for its service to keep.
    pub fn activity(&self) -> Arc<Activity> {
        self.activity.clone()
    }

    /// The connection's id in the table.
    pub fn id(&self) -> ConnId {
        ConnId(self.id)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.lock().remove(&self.id);
    }
}

impl Connections {
    /// A table for at most `cap` connections.
    pub fn new(cap: usize) -> Arc<Connections> {
        Arc::new(Connections {
            cap: cap.max(1),
            started: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            refused: Failures::default(),
            evicted: Failures::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Open>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes a place for a new connection, closing the connection idle
    /// longest when the table is full; `Full` when none is idle.
    pub fn admit(self: &Arc<Self>) -> Admission {
        let (victim, open) = {
            let mut open = self.lock();
            let mut victim = None;
            if open.len() >= self.cap {
                let oldest = open
                    .iter()
                    .filter(|(_, o)| o.abort.is_some() && o.activity.idle())
                    .min_by_key(|(_, o)| o.activity.last_ms.load(Ordering::Relaxed))
                    .map(|(id, _)| *id);
                let Some(id) = oldest else {
                    let n = open.len();
                    drop(open);
                    if let Some(not_logged) = self.refused.record() {
                        tracing::info!(
                            refused_total = self.refused.total(),
                            not_logged,
                            open = n,
                            "connection refused: every open connection has a request in flight"
                        );
                    }
                    return Admission::Full;
                };
                victim = open.remove(&id).and_then(|o| o.abort);
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let activity = Arc::new(Activity::new(self.started));
            open.insert(
                id,
                Open {
                    activity: activity.clone(),
                    abort: None,
                },
            );
            (
                victim,
                Slot {
                    id,
                    activity,
                    table: self.clone(),
                },
            )
        };
        if let Some(abort) = victim {
            abort.abort();
            if let Some(not_logged) = self.evicted.record() {
                tracing::info!(
                    evicted_total = self.evicted.total(),
                    not_logged,
                    "closed the connection idle longest to make room for a new one"
                );
            }
        }
        Admission::Admitted(open)
    }

    /// Lets the table close connection `id` by aborting `abort`, the task
    /// that owns its slot. A connection already gone is left alone.
    pub fn watch(&self, id: ConnId, abort: AbortHandle) {
        if let Some(open) = self.lock().get_mut(&id.0) {
            open.abort = Some(abort);
        }
    }

    /// Closes every connection with no request in flight (at shutdown);
    /// returns how many.
    pub fn close_idle(&self) -> usize {
        self.close_where(|a| a.idle())
    }

    /// Closes every connection (when the drain time is up).
    pub fn close_all(&self) -> usize {
        self.close_where(|_| true)
    }

    fn close_where(&self, pick: impl Fn(&Activity) -> bool) -> usize {
        let aborts: Vec<AbortHandle> = {
            let mut open = self.lock();
            let ids: Vec<u64> = open
                .iter()
                .filter(|(_, o)| o.abort.is_some() && pick(&o.activity))
                .map(|(id, _)| *id)
                .collect();
            ids.iter()
                .filter_map(|id| open.remove(id).and_then(|o| o.abort))
                .collect()
        };
        for abort in &aborts {
            abort.abort();
        }
        aborts.len()
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.lock().len()
    }

    /// The table's figures now, for `/metrics`.
    pub fn counts(&self) -> ConnCounts {
        let (open, busy) = {
            let open = self.lock();
            let busy = open.values().filter(|o| !o.activity.idle()).count();
            (open.len(), busy)
        };
        ConnCounts {
            open,
            busy,
            refused: self.refused(),
            evicted: self.evicted(),
        }
    }

    /// Connections refused since start.
    pub fn refused(&self) -> u64 {
        self.refused.total()
    }

    /// Idle connections closed to make room since start.
    pub fn evicted(&self) -> u64 {
        self.evicted.total()
    }
}

/// Refuses a connection without waiting on it: reads what has already
/// arrived (so closing does not reset the connection under the answer),
/// writes the bare `503`, closes.
pub fn refuse(stream: TcpStream) {
    let mut scratch = [0u8; 4096];
    for _ in 0..16 {
        if !matches!(stream.try_read(&mut scratch), Ok(n) if n > 0) {
            break;
        }
    }
    let _ = stream.try_write(REFUSAL);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(a: Admission) -> Slot {
        match a {
            Admission::Admitted(s) => s,
            Admission::Full => panic!("refused"),
        }
    }

    #[test]
    fn the_cap_fits_below_the_open_file_limit() {
        for (max, files, cap) in [
            (10_000, Some(20_000), 10_000),
            (10_000, Some(1_024), 768),
            (10_000, None, 10_000),
            (10, Some(100), 1),
            (0, Some(20_000), 1),
        ] {
            assert_eq!(cap_below(max, files), cap, "{max} under {files:?}");
        }
    }

    #[tokio::test]
    async fn at_the_cap_the_longest_idle_is_closed_and_when_all_are_busy_the_new_one_is_refused() {
        let t = Connections::new(3);
        let open = |t: &Arc<Connections>| {
            let slot = admitted(t.admit());
            let task = tokio::spawn(std::future::pending::<()>());
            t.watch(slot.id(), task.abort_handle());
            (slot, task)
        };
        let (a, a_task) = open(&t);
        let (b, b_task) = open(&t);
        let (c, _c_task) = open(&t);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        drop(a.activity().begin());
        let _c_busy = c.activity().begin();

        let (d, _d_task) = open(&t);
        assert!(
            b_task.await.unwrap_err().is_cancelled(),
            "b was idle longest"
        );
        assert_eq!((t.open(), t.evicted()), (3, 1));
        drop(b);
        assert_eq!(t.open(), 3, "an evicted slot's drop frees nothing twice");

        let _d_busy = d.activity().begin();
        let (e, _e_task) = open(&t);
        assert!(
            a_task.await.unwrap_err().is_cancelled(),
            "a was the only idle one"
        );
        let e_busy = e.activity().begin();
        assert!(matches!(t.admit(), Admission::Full));
        assert_eq!((t.open(), t.refused(), t.evicted()), (3, 1, 2));

        drop(e_busy);
        assert_eq!(t.close_idle(), 1, "only e is idle");
        assert_eq!(t.close_all(), 2);
        assert_eq!(t.open(), 0);
        drop((a, c, d, e));
    }
}
