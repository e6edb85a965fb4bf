//! The source of the live event stream (`GET /v1/events`): task
//! transitions, taken from the queue's committed changes and released only
//! once the journal has made them durable (on a shared queue, every
//! daemon's, read from the database's event rows in one order and with
//! the rows' ids, so a reader resumes on any daemon), and noun changes (new versions,
//! quarantine), told by the store once they are on disk. Each gets an
//! opaque id ([`EventId`]); the last [`WINDOW`] are kept so a reader that
//! reconnects with `Last-Event-ID` misses nothing within them. Publishing
//! never waits for readers: each reader has a bounded backlog
//! ([`BACKLOG`]), and one that falls behind it is told where to resume and
//! cut off.
//!
//! Every reader shares one sequence of events but sees only those its key
//! may see, so an id must not count the others: ids are random, and the
//! order of events is the window's, never the ids'.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use crate::queue::Sight;
use crate::queue::{self, Observer, TaskId, TaskState, Transition};
use crate::store::{Name, NounPath, NounWatcher, VersionEntry};

/// Events kept for readers that reconnect.
pub const WINDOW: usize = 4096;

/// Events a reader may fall behind the newest before it is cut off,
/// unless configured otherwise (`[limits] events_backlog`).
pub const BACKLOG: usize = 1024;

/// What happened.
#[derive(Clone, Debug)]
pub enum What {
    /// A task was created or changed state.
    Task {
        /// The task.
        id: TaskId,
        /// Its state now.
        state: TaskState,
        /// Its queue, kind, namespace and attempt, for the reader.
        data: TaskData,
    },
    /// A noun version was written.
    Noun {
        /// The noun.
        path: NounPath,
        /// The version (who may read it is decided from it).
        entry: Box<VersionEntry>,
    },
}

/// What a task event tells besides the task and its state: the task's
/// sight (its queue, kind, namespace, and the envelope that decides who
/// may see the event, with no look at the queue) and its attempt. Built
/// under the queue's lock on every change, so it only shares the task's
/// names; it becomes JSON when a reader takes it.
#[derive(Clone, Debug)]
pub struct TaskData {
    /// The task's sight.
    pub sight: Sight,
    attempt: u32,
}

/// An event's id as readers see it: 128 bits from the OS RNG, drawn when
/// it is published, shown as 32 hex digits. It tells nothing of how many
/// events came before it or between two ids (a counter would let a reader
/// count the events it may not see), nor which run it is from: an id from
/// before a restart is simply not in the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventId(u128);

impl EventId {
    fn random() -> EventId {
        EventId(rand::random())
    }

    /// Parses an id as [`Display`](std::fmt::Display) writes it; `None`
    /// for anything else (a reader's stale or foreign `Last-Event-ID`).
    pub fn parse(s: &str) -> Option<EventId> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u128::from_str_radix(s, 16).ok().map(EventId)
    }

    /// The id as a number (what a shared queue's event rows keep).
    pub fn value(self) -> u128 {
        self.0
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// One published event.
#[derive(Clone, Debug)]
pub struct Event {
    /// Its place in this run's order (from 1); never shown to a reader.
    pub n: u64,
    /// Its id, as readers see it.
    pub id: EventId,
    /// What happened.
    pub what: What,
}

impl Event {
    /// `task` or `noun`: the SSE event name.
    pub fn name(&self) -> &'static str {
        match self.what {
            What::Task { .. } => "task",
            What::Noun { .. } => "noun",
        }
    }

    /// The JSON a reader gets; a task's queue is `null` to a reader that
    /// `shows_queue` says may not see its name.
    pub fn data(&self, shows_queue: impl Fn(&Name) -> bool) -> Value {
        match &self.what {
            What::Task { id, state, data } => json!({
                "queue": shows_queue(&data.sight.queue).then_some(&data.sight.queue),
                "kind": data.sight.kind,
                "namespace": data.sight.namespace,
                "attempt": data.attempt,
                "task_id": id.to_string(),
                "state": state.as_str(),
            }),
            What::Noun { path, entry } => json!({
                "namespace": path.namespace,
                "store": path.store,
                "key": path.key,
                "version": entry.version,
                "sha256": entry.sha256,
                "quarantined": entry.quarantined,
            }),
        }
    }
}

/// Where a reader starts.
#[derive(Debug)]
pub enum Start {
    /// The events after its last one (possibly none), then live ones.
    Resume(Vec<Arc<Event>>),
    /// Its last event is older than the window or from another run: it
    /// missed events and should reload what it shows; live ones follow.
    Reset,
}

/// A new reader's start: what it missed, the newest event so far, and
/// the live events after it.
#[derive(Debug)]
pub struct Subscription {
    /// What it missed.
    pub start: Start,
    /// The place of the newest event published when it subscribed (0 for
    /// none yet).
    pub head: u64,
    /// Every event published after `head`.
    pub rx: broadcast::Receiver<Arc<Event>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Task transitions committed but not yet durable, by journal record.
    pending: VecDeque<(u64, What)>,
    /// The newest published events, oldest first, at consecutive places.
    window: VecDeque<Arc<Event>>,
    /// The last event dropped from the window, with its place: a reader
    /// resuming after it has missed nothing the window holds.
    dropped: Option<(EventId, u64)>,
    /// Ids minted for places ([`Events::mark`]), the newest [`WINDOW`].
    marks: VecDeque<(EventId, u64)>,
    /// The last event's place (0 before the first).
    last: u64,
    /// Journal records durable so far, as last reported.
    durable: u64,
}

impl Inner {
    /// The place `id` names: an event's, the dropped one's, or a mark's.
    fn place(&self, id: EventId) -> Option<u64> {
        let event = self.window.iter().find(|e| e.id == id).map(|e| e.n);
        let dropped = self.dropped.filter(|(d, _)| *d == id).map(|(_, n)| n);
        let mark = || self.marks.iter().find(|(m, _)| *m == id).map(|(_, n)| *n);
        event.or(dropped).or_else(mark)
    }
}

/// The event hub: one per daemon.
#[derive(Debug)]
pub struct Events {
    inner: Mutex<Inner>,
    live: broadcast::Sender<Arc<Event>>,
    closed: watch::Sender<bool>,
}

impl Events {
    /// An empty hub for a new run whose readers may fall `backlog` events
    /// behind.
    pub fn new(backlog: usize) -> Events {
        Events {
            inner: Mutex::default(),
            live: broadcast::Sender::new(backlog.max(1)),
            closed: watch::Sender::new(false),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, inner: &mut Inner, what: What, id: EventId) {
        inner.last += 1;
        let ev = Arc::new(Event {
            n: inner.last,
            id,
            what,
        });
        if inner.window.len() == WINDOW
            && let Some(dropped) = inner.window.pop_front()
        {
            inner.dropped = Some((dropped.id, dropped.n));
        }
        inner.window.push_back(ev.clone());
        let _ = self.live.send(ev);
    }

    /// A fresh id for the place just after event `after` (0: before the
    /// first), for a reader to resume from (a lagged reader's
    /// `resume_from`). It is no event's id, so it tells where the reader
    /// stands without telling it the id of an event it was not sent.
    pub fn mark(&self, after: u64) -> EventId {
        let id = EventId::random();
        let mut inner = self.inner();
        if inner.marks.len() == WINDOW {
            inner.marks.pop_front();
        }
        inner.marks.push_back((id, after));
        id
    }

    /// A new reader whose last event was `last` (a `Last-Event-ID`, or an
    /// id from [`mark`](Self::mark)): what it missed, and the live events
    /// after those (nothing lost or doubled between the two). An id that
    /// names no place, or one older than the window, is a
    /// [`Start::Reset`].
    pub fn subscribe(&self, last: Option<&str>) -> Subscription {
        let inner = self.inner();
        let rx = self.live.subscribe();
        let oldest = inner.window.front().map_or(inner.last + 1, |e| e.n);
        let start = match last.map(|l| EventId::parse(l).and_then(|id| inner.place(id))) {
            None => Start::Resume(Vec::new()),
            Some(Some(after)) if after + 1 >= oldest => Start::Resume(
                inner
                    .window
                    .iter()
                    .filter(|e| e.n > after)
                    .cloned()
                    .collect(),
            ),
            Some(_) => Start::Reset,
        };
        Subscription {
            start,
            head: inner.last,
            rx,
        }
    }

    /// Ends every stream (the daemon is stopping).
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Resolves when the daemon stops.
    pub fn closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }
}

/// The reader-facing facts of a task.
impl NounWatcher for Events {
    fn written(&self, path: &NounPath, entry: &VersionEntry) {
        let (path, entry) = (path.clone(), Box::new(entry.clone()));
        let mut inner = self.inner();
        self.publish(&mut inner, What::Noun { path, entry }, EventId::random());
    }
}

/// A task event's facts.
fn task(m: Transition) -> What {
    What::Task {
        id: m.id,
        state: m.to,
        data: TaskData {
            sight: m.sight,
            attempt: m.attempt.0,
        },
    }
}

impl Observer for Events {
    fn committed(&self, seq: u64, _ev: &queue::Event, moved: &[Transition]) {
        if moved.is_empty() {
            return;
        }
        let mut inner = self.inner();
        for m in moved {
            let what = task(m.clone());
            // The journal thread may have synced the record already: it
            // can run between the append and this call.
            if seq <= inner.durable {
                self.publish(&mut inner, what, EventId::random());
            } else {
                inner.pending.push_back((seq, what));
            }
        }
    }
}

impl crate::store::log::SyncObserver for Events {
    fn synced(&self, durable: u64, _records: u64, _took: Duration) {
        let mut inner = self.inner();
        inner.durable = durable;
        while inner
            .pending
            .front()
            .is_some_and(|(seq, _)| *seq <= durable)
        {
            let (_, what) = inner.pending.pop_front().expect("checked");
            self.publish(&mut inner, what, EventId::random());
        }
    }
}

impl queue::Stream for Events {
    fn streamed(&self, id: u128, change: queue::Streamed) {
        let what = match change {
            queue::Streamed::Task(moved) => task(moved),
            queue::Streamed::Noun { path, entry } => What::Noun { path, entry },
        };
        let mut inner = self.inner();
        self.publish(&mut inner, what, EventId(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Sha256, Visibility};

    fn publish(hub: &Events, n: usize) {
        let path = NounPath::parse("n", "s", "k").unwrap();
        let entry = VersionEntry {
            version: 1,
            sha256: Sha256::of(b""),
            size: 0,
            media_type: "application/json".into(),
            noun_type: None,
            created_at: jiff::Timestamp::UNIX_EPOCH,
            created_by: "k1".into(),
            producer_surface: None,
            visibility: Visibility::Public,
            allowed_surfaces: Vec::new(),
            owner: None,
            quarantined: false,
            source_pack: None,
        };
        for _ in 0..n {
            hub.written(&path, &entry);
        }
    }

    /// The places a reader resuming from `last` is sent, or `None` for a reset.
    fn resumes(hub: &Events, last: &str) -> Option<Vec<u64>> {
        match hub.subscribe(Some(last)).start {
            Start::Resume(missed) => Some(missed.iter().map(|e| e.n).collect()),
            Start::Reset => None,
        }
    }

    fn ids(hub: &Events) -> Vec<String> {
        hub.inner()
            .window
            .iter()
            .map(|e| e.id.to_string())
            .collect()
    }

    #[test]
    fn ids_count_nothing_and_a_reader_resumes_from_an_event_or_a_mark() {
        let hub = Events::new(16);
        publish(&hub, 3);
        let first = ids(&hub);
        assert!(first.iter().all(|id| EventId::parse(id).is_some()));
        assert_eq!(resumes(&hub, &first[0]), Some(vec![2, 3]));
        assert_eq!(resumes(&hub, &first[2]), Some(vec![]));
        assert_eq!(resumes(&hub, &hub.mark(1).to_string()), Some(vec![2, 3]));
        assert_eq!(resumes(&hub, &hub.mark(0).to_string()), Some(vec![1, 2, 3]));
        for never in ["", "nope", "0-1", &"0".repeat(32)] {
            assert_eq!(resumes(&hub, never), None, "{never:?}");
        }
        let early = hub.mark(0).to_string();
        publish(&hub, WINDOW);
        let window = ids(&hub);
        assert_eq!(
            resumes(&hub, &first[2]),
            Some((4..=WINDOW as u64 + 3).collect())
        );
        assert_eq!(resumes(&hub, &first[1]), None, "older than the window");
        assert_eq!(resumes(&hub, &early), None, "a mark older than the window");
        assert_eq!(resumes(&hub, window.last().unwrap()), Some(vec![]));
        assert_eq!(hub.subscribe(None).head, WINDOW as u64 + 3);
    }
}
