//! The daemon's metrics, scraped at `GET /metrics` in the classic
//! Prometheus text format or in OpenMetrics ([`Format`]): what the
//! queue did (counted from its committed changes, one general hook), how
//! long things took (histograms in seconds), and at each scrape the tasks
//! per queue and state read from the queue itself, so a gauge row never
//! vanishes.
//!
//! Every series a queue can have is in every scrape from the queue's
//! creation, at zero until its first event, so that `increase(..) == 0`
//! alerts on an idle queue: each scrape makes the missing ones from the
//! queue list it reads for the task gauges, which holds every queue
//! whichever way it came (provisioned here, replayed at start, or
//! provisioned through another daemon on the same database). Queues are
//! never deleted, so no series goes away.
//!
//! Every label value comes from a closed set, never from what a client
//! sends: a `&'static str` of this crate (a route template of
//! `http::routes::ROUTES`, a standard method or `other`, a state, an
//! outcome), a status code the daemon answered, or the name of a queue an
//! admin provisioned. So the scrape's size follows the configuration,
//! not the traffic.

use std::sync::Mutex;
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

mod exposition;
mod observe;

use crate::queue::{Op, TaskId, TaskState};
use crate::store::Name;

pub use exposition::{Format, OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};

/// What the server's connection table holds at one moment, and what it
/// turned away since start (`http::conns` counts, the scrape shows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnCounts {
    /// Connections open.
    pub open: usize,
    /// Open connections with a request in flight.
    pub busy: usize,
    /// Connections refused with `503` because every one was busy.
    pub refused: u64,
    /// Idle connections closed to make room for a new one.
    pub evicted: u64,
}

/// A submit's outcome label: the daemon's verdict on its receipt.
const OUTCOMES: [&str; 2] = ["ok", "failed"];

/// The outcome label of a submit with verdict `ok`.
fn outcome(ok: bool) -> &'static str {
    OUTCOMES[usize::from(!ok)]
}

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

/// Buckets from 0.25 ms to about 32 s, doubling: request latency, and
/// claim waits (a long poll lasts at most 30 s).
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.000_25, 2.0, 18))
}

/// Buckets from 1 ms to 8 h in steps an alert can name (1, 2.5, 5, 10
/// ..., then minutes and hours): an agent's or a person's time on an
/// attempt, which runs from a cached answer to an afternoon.
fn agent_seconds() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0,
    ])
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
    pub connections: ConnCounts,
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
            claim_to_submit: Family::new_with_constructor(agent_seconds),
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
            "Submits accepted, by the daemon's verdict (outcome ok or failed)",
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

    /// The scrape in `format`: everything kept (each queue of `counts`
    /// with every series it can have), then the tasks per queue and state
    /// (`counts`: every state of every queue, zeros included, as
    /// `Queue::task_counts` reads them) and what `now` read (failed
    /// authentications, connections).
    pub fn render(
        &self,
        counts: &[(Name, Vec<(TaskState, u64)>)],
        now: &Readings,
        format: Format,
    ) -> String {
        for (queue, _) in counts {
            self.zeros(queue);
        }
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
        match format {
            Format::OpenMetrics => out,
            Format::Text => exposition::classic(&out),
        }
    }

    /// Makes every per-queue series of `queue` that has not been made,
    /// at zero: its counters, each submit outcome, its claim-to-submit
    /// histogram.
    fn zeros(&self, queue: &Name) {
        let q = label(queue);
        for family in [&self.enqueued, &self.claims, &self.expiries, &self.retries] {
            drop(family.get_or_create(&q));
        }
        for outcome in OUTCOMES {
            let labels = SubmitLabels {
                queue: q.queue.clone(),
                outcome,
            };
            drop(self.submits.get_or_create(&labels));
        }
        drop(self.claim_to_submit.get_or_create(&q));
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
