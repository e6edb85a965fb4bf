//! The daemon's metrics, scraped at `GET /metrics` in the OpenMetrics text
//! format (which Prometheus reads): what the queue did (counted from its
//! committed changes, one general hook), how long things took
//! (histograms in seconds), and at each scrape the tasks per queue and
//! state read from the queue itself, so a gauge row never vanishes.
//!
//! Every label value comes from a closed set, never from what a client
//! sends: a `&'static str` of this crate (a route template of
//! `http::routes::ROUTES`, a standard method or `other`, a state, an
//! outcome), a status code the daemon answered, or the name of a queue an
//! admin provisioned. So the scrape's size follows the configuration,
//! not the traffic.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hashbrown::HashMap;
use http::Method;
use jiff::Timestamp;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::http::conns::Counts;
use crate::queue::{Event, Observer, Op, TaskId, TaskState, Transition};
use crate::store::Name;

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SubmitLabels {
    queue: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    queue: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    method: &'static str,
    route: &'static str,
    status: u16,
}

/// The methods HTTP defines (RFC 9110 and PATCH); any other token a
/// client invents is counted as `other`.
const METHODS: [Method; 9] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::CONNECT,
    Method::OPTIONS,
    Method::TRACE,
    Method::PATCH,
];

/// A request's method as a label: one of [`METHODS`], or `other`.
fn method_label(method: &Method) -> &'static str {
    METHODS
        .iter()
        .find(|m| *m == method)
        .map_or("other", |m| m.as_str())
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Buckets from 0.25 ms to about 32 s, doubling.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.000_25, 2.0, 18))
}

/// Buckets from 1 µs to about 0.5 s, doubling: the time the queue's lock
/// is held.
fn micros() -> Histogram {
    Histogram::new(exponential_buckets(0.000_001, 2.0, 20))
}

/// What a scrape reads from outside the queue, at the moment of the scrape.
#[derive(Clone, Copy, Debug, Default)]
pub struct Readings {
    /// Requests refused for a bad credential since start.
    pub failed_authentications: u64,
    /// The connection table's figures.
    pub connections: Counts,
}

/// Every metric the daemon keeps between scrapes.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    enqueued: Family<QueueLabel, Counter>,
    claims: Family<QueueLabel, Counter>,
    submits: Family<SubmitLabels, Counter>,
    expiries: Family<QueueLabel, Counter>,
    retries: Family<QueueLabel, Counter>,
    claim_to_submit: Histograms<QueueLabel>,
    claim_wait: Histogram,
    commit: Histogram,
    commit_records: Histogram,
    http: Histograms<HttpLabels>,
    noun_put: Histogram,
    noun_get: Histogram,
    /// The lock's hold time per operation, indexed by `Op as usize` (the
    /// family's own histograms, so no lookup per observation).
    lock_held: Vec<Histogram>,
    /// When each live lease was taken (this run's claims only).
    claimed_at: Mutex<HashMap<TaskId, Timestamp>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Empty metrics, registered under their names.
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            enqueued: Family::default(),
            claims: Family::default(),
            submits: Family::default(),
            expiries: Family::default(),
            retries: Family::default(),
            claim_to_submit: Family::new_with_constructor(seconds),
            claim_wait: seconds(),
            commit: seconds(),
            commit_records: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            http: Family::new_with_constructor(seconds),
            noun_put: seconds(),
            noun_get: seconds(),
            lock_held: Vec::new(),
            claimed_at: Mutex::default(),
        };
        let held = Histograms::<OpLabel>::new_with_constructor(micros);
        let lock_held = Op::ALL
            .iter()
            .map(|op| held.get_or_create(&OpLabel { op: op.as_str() }).clone())
            .collect();
        let mut r = Registry::default();
        r.register_with_unit(
            "tessera_queue_lock_held",
            "How long each queue operation held the queue's lock",
            Unit::Seconds,
            held,
        );
        r.register(
            "tessera_tasks_enqueued",
            "Tasks enqueued (children of splits included)",
            m.enqueued.clone(),
        );
        r.register("tessera_claims", "Leases taken", m.claims.clone());
        r.register(
            "tessera_submits",
            "Submits accepted, by the daemon's verdict (ok or failed)",
            m.submits.clone(),
        );
        r.register(
            "tessera_lease_expiries",
            "Leases that lapsed without a heartbeat",
            m.expiries.clone(),
        );
        r.register(
            "tessera_retries",
            "Tasks queued again after a failed or lapsed attempt, or retried by hand",
            m.retries.clone(),
        );
        r.register_with_unit(
            "tessera_claim_to_submit",
            "From a lease taken to its submit accepted",
            Unit::Seconds,
            m.claim_to_submit.clone(),
        );
        r.register_with_unit(
            "tessera_claim_wait",
            "How long claim requests waited for a task (long polls included)",
            Unit::Seconds,
            m.claim_wait.clone(),
        );
        r.register_with_unit(
            "tessera_journal_commit",
            "One journal write and fsync (a group commit)",
            Unit::Seconds,
            m.commit.clone(),
        );
        r.register(
            "tessera_journal_commit_records",
            "Records made durable by one journal fsync",
            m.commit_records.clone(),
        );
        r.register_with_unit(
            "tessera_http_request_duration",
            "HTTP requests by method, route and status",
            Unit::Seconds,
            m.http.clone(),
        );
        r.register_with_unit(
            "tessera_noun_put_duration",
            "Noun puts: the store's part (checks, writes, fsyncs)",
            Unit::Seconds,
            m.noun_put.clone(),
        );
        r.register_with_unit(
            "tessera_noun_get_duration",
            "Noun reads: the store's part (ref, object, re-hash)",
            Unit::Seconds,
            m.noun_get.clone(),
        );
        r.register(
            "tessera_build",
            "The daemon's version",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        Metrics {
            registry: r,
            lock_held,
            ..m
        }
    }

    /// One HTTP request answered: `route` is the template of the route
    /// that served it (or the one value for none), never the raw path.
    pub fn request(&self, method: &Method, route: &'static str, status: u16, took: Duration) {
        let labels = HttpLabels {
            method: method_label(method),
            route,
            status,
        };
        self.http.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// A claim request waited `took` for its first task (or for none).
    pub fn claim_waited(&self, took: Duration) {
        self.claim_wait.observe(took.as_secs_f64());
    }

    /// A noun put's store work took `took`.
    pub fn noun_put(&self, took: Duration) {
        self.noun_put.observe(took.as_secs_f64());
    }

    /// A noun read's store work took `took`.
    pub fn noun_get(&self, took: Duration) {
        self.noun_get.observe(took.as_secs_f64());
    }

    /// The scrape: everything kept, then the tasks per queue and state
    /// (`counts`: every state of every queue, zeros included, as
    /// `Queue::task_counts` reads them) and what `now` read (failed
    /// authentications, connections).
    pub fn render(&self, counts: &[(Name, Vec<(TaskState, u64)>)], now: &Readings) -> String {
        let tasks = Family::<TaskLabels, Gauge>::default();
        for (queue, counts) in counts {
            for &(state, n) in counts {
                let labels = TaskLabels {
                    queue: queue.to_string(),
                    state: state.as_str(),
                };
                tasks.get_or_create(&labels).set(level(n));
            }
        }
        let gauge = |n: usize| {
            let g = Gauge::<i64>::default();
            g.set(level(n));
            g
        };
        let c = now.connections;
        let mut read = Registry::default();
        read.register("tessera_tasks", "Tasks by queue and state", tasks);
        read.register(
            "tessera_auth_failures",
            "Requests refused for a missing, unknown, revoked or expired credential",
            ConstCounter::new(now.failed_authentications),
        );
        read.register(
            "tessera_connections_open",
            "Connections open",
            gauge(c.open),
        );
        read.register(
            "tessera_connections_busy",
            "Open connections with a request in flight",
            gauge(c.busy),
        );
        read.register(
            "tessera_connections_refused",
            "Connections refused with 503 because every open one had a request in flight",
            ConstCounter::new(c.refused),
        );
        read.register(
            "tessera_connections_evicted",
            "Idle connections closed to make room for a new one",
            ConstCounter::new(c.evicted),
        );
        let mut out = String::new();
        encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, &read))
            .and_then(|()| encode_eof(&mut out))
            .expect("writing to a String cannot fail");
        out
    }

    fn claimed(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Timestamp>> {
        self.claimed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A count as a gauge's value.
fn level(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

fn label(queue: impl ToString) -> QueueLabel {
    QueueLabel {
        queue: queue.to_string(),
    }
}

impl Observer for Metrics {
    fn committed(&self, _seq: u64, ev: &Event, moved: &[Transition]) {
        // Only a provisioned queue's name becomes a label: enqueue and
        // split refuse any other, so a task's queue is one.
        let queue_of = |id: &TaskId| {
            moved
                .iter()
                .find(|m| m.id == *id)
                .map(|m| label(&m.sight.queue))
        };
        match ev {
            Event::Claimed { id, at, .. } => {
                if let Some(q) = queue_of(id) {
                    self.claims.get_or_create(&q).inc();
                }
                self.claimed().insert(*id, *at);
            }
            Event::Submitted { id, ok, at, .. } => {
                if let Some(q) = queue_of(id) {
                    let outcome = if *ok { "ok" } else { "failed" };
                    let labels = SubmitLabels {
                        queue: q.queue.clone(),
                        outcome,
                    };
                    self.submits.get_or_create(&labels).inc();
                    if let Some(t0) = self.claimed().remove(id) {
                        let took = at.duration_since(t0).as_secs_f64().max(0.0);
                        self.claim_to_submit.get_or_create(&q).observe(took);
                    }
                }
            }
            Event::Released {
                id, expired: true, ..
            } => {
                if let Some(q) = queue_of(id) {
                    self.expiries.get_or_create(&q).inc();
                }
            }
            _ => {}
        }
        let attempt_ended = matches!(
            ev,
            Event::Submitted { .. } | Event::Released { expired: true, .. }
        );
        for m in moved {
            let q = label(&m.sight.queue);
            match (m.from, m.to) {
                (None, _) => self.enqueued.get_or_create(&q).inc(),
                (Some(TaskState::Failed | TaskState::Cancelled), TaskState::Queued) => {
                    self.retries.get_or_create(&q).inc()
                }
                (Some(TaskState::Claimed), TaskState::Queued) if attempt_ended => {
                    self.retries.get_or_create(&q).inc()
                }
                _ => 0,
            };
            if m.from == Some(TaskState::Claimed) {
                self.claimed().remove(&m.id);
            }
        }
    }

    fn held(&self, op: Op, took: Duration) {
        self.lock_held[op as usize].observe(took.as_secs_f64());
    }
}

impl crate::store::log::SyncObserver for Metrics {
    fn synced(&self, _durable: u64, records: u64, took: Duration) {
        self.commit.observe(took.as_secs_f64());
        self.commit_records.observe(records as f64);
    }
}
