//! The source of the live event stream (`GET /v1/events`): task
//! transitions, taken from the queue's committed changes and released only
//! once the journal has made them durable, and noun changes (new versions,
//! quarantine), told by the store once they are on disk. Each gets an id `<run>-<n>`; the last [`WINDOW`] are
//! kept so a reader that reconnects with `Last-Event-ID` misses nothing
//! within them. Publishing never waits for readers: each reader has a
//! bounded backlog ([`BACKLOG`]), and one that falls behind it is told
//! where to resume and cut off.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use crate::queue::{self, Observer, State, TaskId, TaskState, Transition};
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

/// What a task event tells besides the task and its state. Built under
/// the queue's lock on every change, so it only shares the task's names
/// (no allocation); it becomes JSON when a reader takes it.
#[derive(Clone, Debug)]
pub struct TaskData {
    queue: Name,
    kind: Name,
    namespace: Name,
    attempt: u32,
}

/// One published event.
#[derive(Clone, Debug)]
pub struct Event {
    /// Its number in this run (ids are `<run>-<n>`).
    pub n: u64,
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

    /// The JSON the reader gets.
    pub fn data(&self) -> Value {
        match &self.what {
            What::Task { id, state, data } => json!({
                "queue": data.queue,
                "kind": data.kind,
                "namespace": data.namespace,
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
    /// The newest event published when it subscribed (0 for none yet).
    pub head: u64,
    /// Every event published after `head`.
    pub rx: broadcast::Receiver<Arc<Event>>,
}

#[derive(Debug)]
struct Inner {
    /// Task transitions committed but not yet durable, by journal record.
    pending: VecDeque<(u64, What)>,
    /// The newest published events, oldest first.
    window: VecDeque<Arc<Event>>,
    /// The next event's number (from 1: `<run>-0` is "before the first").
    next: u64,
    /// Journal records durable so far, as last reported.
    durable: u64,
}

impl Default for Inner {
    fn default() -> Inner {
        Inner {
            pending: VecDeque::new(),
            window: VecDeque::new(),
            next: 1,
            durable: 0,
        }
    }
}

/// The event hub: one per daemon.
#[derive(Debug)]
pub struct Events {
    run: String,
    inner: Mutex<Inner>,
    live: broadcast::Sender<Arc<Event>>,
    closed: watch::Sender<bool>,
}

impl Events {
    /// An empty hub for a new run (its ids cannot match an earlier run's)
    /// whose readers may fall `backlog` events behind.
    pub fn new(backlog: usize) -> Events {
        let ms = jiff::Timestamp::now().as_millisecond();
        let salt: u32 = rand::random();
        Events {
            run: format!("{ms:x}{salt:08x}"),
            inner: Mutex::default(),
            live: broadcast::Sender::new(backlog.max(1)),
            closed: watch::Sender::new(false),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The id of event `n`.
    pub fn id(&self, n: u64) -> String {
        format!("{}-{n}", self.run)
    }

    fn publish(&self, inner: &mut Inner, what: What) {
        let ev = Arc::new(Event {
            n: inner.next,
            what,
        });
        inner.next += 1;
        if inner.window.len() == WINDOW {
            inner.window.pop_front();
        }
        inner.window.push_back(ev.clone());
        let _ = self.live.send(ev);
    }

    /// A new reader whose last event was `last` (a `Last-Event-ID`): what
    /// it missed, and the live events after those (nothing lost or doubled
    /// between the two).
    /// `head` is the newest event published so far.
    pub fn subscribe(&self, last: Option<&str>) -> Subscription {
        let inner = self.inner();
        let rx = self.live.subscribe();
        let head = inner.next - 1;
        let Some(last) = last else {
            return Subscription {
                start: Start::Resume(Vec::new()),
                head,
                rx,
            };
        };
        let n = last
            .strip_prefix(&self.run)
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| *n < inner.next);
        let oldest = inner.window.front().map_or(inner.next, |e| e.n);
        let start = match n {
            Some(n) if n + 1 >= oldest => {
                Start::Resume(inner.window.iter().filter(|e| e.n > n).cloned().collect())
            }
            _ => Start::Reset,
        };
        Subscription { start, head, rx }
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
fn task_data(st: &State, id: TaskId) -> Option<TaskData> {
    let t = st.tasks.get(&id)?;
    Some(TaskData {
        queue: t.spec.queue.clone(),
        kind: t.spec.kind.clone(),
        namespace: t.spec.namespace.clone(),
        attempt: t.attempt.0,
    })
}

impl NounWatcher for Events {
    fn written(&self, path: &NounPath, entry: &VersionEntry) {
        let (path, entry) = (path.clone(), Box::new(entry.clone()));
        let mut inner = self.inner();
        self.publish(&mut inner, What::Noun { path, entry });
    }
}

impl Observer for Events {
    fn committed(&self, seq: u64, _ev: &queue::Event, moved: &[Transition], st: &State) {
        if moved.is_empty() {
            return;
        }
        let mut inner = self.inner();
        for m in moved {
            let Some(data) = task_data(st, m.id) else {
                continue;
            };
            let what = What::Task {
                id: m.id,
                state: m.to,
                data,
            };
            // The journal thread may have synced the record already: it
            // can run between the append and this call.
            if seq <= inner.durable {
                self.publish(&mut inner, what);
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
            self.publish(&mut inner, what);
        }
    }
}
