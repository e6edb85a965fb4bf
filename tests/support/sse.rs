//! A reader of `GET /v1/events` over real HTTP, one SSE event at a time.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use serde_json::Value;

/// One SSE event as read.
#[derive(Debug, Clone)]
pub struct Sse {
    pub id: Option<String>,
    pub event: String,
    pub data: Value,
    /// The event's lines as sent.
    pub raw: String,
}

/// A reader of one event stream.
pub struct Stream {
    body: Incoming,
    buf: String,
    _conn: tokio::task::JoinHandle<()>,
}

impl Stream {
    pub async fn open(base: &str, key: &str, last: Option<&str>) -> Stream {
        let addr = base.trim_start_matches("http://").to_string();
        let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .unwrap();
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = hyper::Request::get("/v1/events")
            .header("host", addr)
            .header("authorization", format!("Bearer {key}"));
        if let Some(last) = last {
            req = req.header("last-event-id", last);
        }
        let resp = send
            .send_request(req.body(Empty::<Bytes>::new()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        Stream {
            body: resp.into_body(),
            buf: String::new(),
            _conn: conn,
        }
    }

    /// The next event (comments skipped), or `None` when the stream ends or
    /// nothing comes within `secs`.
    pub async fn next(&mut self, secs: u64) -> Option<Sse> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let raw: String = self.buf.drain(..end + 2).collect();
                let mut ev = Sse {
                    id: None,
                    event: "message".into(),
                    data: Value::Null,
                    raw: raw.clone(),
                };
                let mut any = false;
                for line in raw.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        ev.id = Some(v.into());
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        ev.event = v.into();
                        any = true;
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        ev.data = serde_json::from_str(v).unwrap();
                    }
                }
                if any {
                    return Some(ev);
                }
                continue;
            }
            let frame = tokio::time::timeout(Duration::from_secs(secs), self.body.frame())
                .await
                .ok()??
                .unwrap();
            if let Ok(data) = frame.into_data() {
                self.buf.push_str(std::str::from_utf8(&data).unwrap());
            }
        }
    }

    /// Events until `until` holds for one (inclusive).
    pub async fn until(&mut self, until: impl Fn(&Sse) -> bool) -> Vec<Sse> {
        let mut got = Vec::new();
        while let Some(ev) = self.next(10).await {
            let stop = until(&ev);
            got.push(ev);
            if stop {
                return got;
            }
        }
        panic!("the stream ended or stalled before the awaited event: {got:?}");
    }
}
