//! Stands in for `tessera serve` in the peer harness: a server that does no
//! work. It parses each request (HTTP with hyper, the body with serde as
//! the daemon does) and answers at once with the bytes the daemon sends,
//! same shape and size; it writes nothing to disk and keeps only a count
//! of tasks per queue, so claims run dry when every task enqueued is taken.
//! The canned bodies were captured from `tessera serve`'s enqueue, claim
//! and submit answers: capture them again when those bodies change.
//!
//! ```sh
//! cargo build --release --example stand-in
//! TESSERA_BIN=target/release/examples/stand-in ../shared/bench-peers/run.sh tessera bullmq
//! ```
//! The harness's `tessera` line is then what it reports for a server that
//! costs nothing: the most it can report for Tessera on this machine, in
//! the same run as its other peers. `benches/peers/ceiling.mjs` runs the
//! adapter alone against it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use clap::{Parser, Subcommand};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;

/// The lease every claim carries (the daemon's, as captured).
const LEASE: &str = r#"{"id":"e518127341cf1589a6f27ecdd088ff6b","fence":1,"expires_at":"2026-12-01T04:44:44.323076291Z","holder":"k21386fd9f073171e"}"#;

/// The daemon's answer to an enqueue.
const ENQUEUED: &str = r#"{"task_id":"t4823957102938471","state":"queued","created":true}"#;

#[derive(Parser)]
#[command(
    name = "stand-in",
    version = "(a no-work server: canned answers, no disk)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serves on `listen`, writing `root/auth/admin.key` as the daemon
    /// does (the harness reads it; any key is accepted).
    Serve {
        #[arg(long)]
        root: PathBuf,
        #[arg(long)]
        listen: SocketAddr,
    },
}

/// A task spec, as far as the stand-in reads it.
#[derive(Deserialize)]
struct Spec {
    queue: String,
}

/// A batch enqueue.
#[derive(Deserialize)]
struct Batch {
    items: Vec<Spec>,
}

/// A submit, as far as the stand-in reads it.
#[derive(Deserialize)]
struct Submit {
    claim_next: Option<Spec>,
}

/// Tasks enqueued and not yet claimed, per queue, and the last task id.
#[derive(Default)]
struct Queues {
    queued: HashMap<String, u64>,
    last: u64,
}

impl Queues {
    fn add(&mut self, queue: String, n: u64) {
        *self.queued.entry(queue).or_default() += n;
    }

    /// A claim of the next task of `queue`, `None` when it has none left.
    fn take(&mut self, queue: &str) -> Option<String> {
        let left = self.queued.get_mut(queue).filter(|n| **n > 0)?;
        *left -= 1;
        self.last += 1;
        Some(claim(FIRST_ID + self.last))
    }
}

/// The first claimed task's id: the daemon's ids have 16 digits.
const FIRST_ID: u64 = 1_000_000_000_000_000;

/// The daemon's claim answer for task `t<id>`.
fn claim(id: u64) -> String {
    let task = format!(
        r#"{{"task_id":"t{id}","state":"claimed","attempt":1,"max_attempts":3,"namespace":"bench","queue":"work","kind":"verb.noop","effect_class":"read","producer_surface":"bench","visibility_scope":"surface_only","allowed_surfaces":[],"priority":0,"tags":[],"target_cohorts":[],"idempotency_key":null,"brief":{{"i":1}},"requester":"k21386fd9f073171e","lease":{LEASE},"not_before":null,"parent":null,"children":[],"upstream":[],"receipts":[],"park":null,"reason":null,"staged":{{}},"created_at":"2026-12-01T04:43:44.063812056Z","updated_at":"2026-12-01T04:43:44.323076291Z"}}"#
    );
    format!(
        r#"{{"task":{task},"lease":{LEASE},"token":"wt1.eyJ0YXNrX2lkIjoidDIiLCJhdHRlbXB0IjoxLCJyb2xlIjoid29ya2VyIiwidmVyYnMiOlsicHJvbXB0IiwiYXJ0aWZhY3QiLCJzdWJtaXQiXSwiZXhwIjoxNzk2MTAwMjg0fQ.TFfbb0EetxkSA3EfA1QHh_XCM5lySUq8UF8FSKT0GNI","handle":"wh-okwlhajfmi2lq4txtswruttpah","prompt_url":"/v1/worker/prompt"}}"#
    )
}

/// The daemon's submit answer, carrying `next` (a claim or `null`).
fn submitted(next: &str) -> String {
    format!(
        r#"{{"task_id":"t4823957102938471","state":"succeeded","ok":true,"receipt_sha256":"e7d8ebd79ec1cc487edb33e419cb5209b97f518b7ab78888b4027ceade3cbe00","created":true,"next":{next}}}"#
    )
}

fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// A refusal in the API's error shape.
fn refused(message: &str) -> Response<Full<Bytes>> {
    let body =
        serde_json::json!({"error": {"code": "malformed_json", "message": message, "details": {}}});
    json(StatusCode::BAD_REQUEST, body.to_string())
}

/// The answer to one request; a body it cannot read is a 400.
async fn answer(queues: &Mutex<Queues>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return refused(&format!("reading the body: {e}")),
    };
    let mut queues = queues.lock().unwrap_or_else(PoisonError::into_inner);
    let parsed = match (method, path.as_str()) {
        (Method::POST, "/v1/tasks") => serde_json::from_slice(&body).map(|s: Spec| {
            queues.add(s.queue, 1);
            json(StatusCode::CREATED, ENQUEUED)
        }),
        (Method::POST, "/v1/batch/tasks") => serde_json::from_slice(&body).map(|b: Batch| {
            let items = vec![r#"{"status":201}"#; b.items.len()].join(",");
            for s in b.items {
                queues.add(s.queue, 1);
            }
            json(StatusCode::OK, format!(r#"{{"items":[{items}]}}"#))
        }),
        (Method::POST, p) if p.ends_with("/submit") => {
            serde_json::from_slice(&body).map(|s: Submit| {
                let next = s.claim_next.and_then(|n| queues.take(&n.queue));
                json(
                    StatusCode::CREATED,
                    submitted(next.as_deref().unwrap_or("null")),
                )
            })
        }
        (Method::POST, p) if p.starts_with("/v1/queues/") && p.ends_with("/claim") => {
            let queue = &p["/v1/queues/".len()..p.len() - "/claim".len()];
            Ok(match queues.take(queue) {
                Some(c) => json(StatusCode::OK, c),
                None => {
                    let mut empty = Response::new(Full::new(Bytes::new()));
                    *empty.status_mut() = StatusCode::NO_CONTENT;
                    empty
                }
            })
        }
        // Provisioning a queue, a release, /healthz.
        _ => Ok(json(StatusCode::OK, "{}")),
    };
    parsed.unwrap_or_else(|e| refused(&format!("the body is not the JSON expected: {e}")))
}

fn main() -> anyhow::Result<()> {
    let Command::Serve { root, listen } = Cli::parse().command;
    std::fs::create_dir_all(root.join("auth"))?;
    std::fs::write(root.join("auth/admin.key"), "stand-in\n")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        println!("stand-in listening on http://{listen}");
        let queues = Arc::new(Mutex::new(Queues::default()));
        loop {
            let (sock, _) = listener.accept().await?;
            sock.set_nodelay(true)?;
            let queues = queues.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let queues = queues.clone();
                    async move { Ok::<_, Infallible>(answer(&queues, req).await) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(sock), service)
                    .await;
            });
        }
    })
}
