//! Reading requests: path segments, query parameters, bearer credentials,
//! size-limited bodies and strict JSON. Every failure here is a client
//! mistake with a 400, 408 or 413 that says what to fix, or a `503 busy`
//! when the body budget (`budget.rs`) cannot hold one more body right now.
//! A connection whose request body was not read to its end is settled
//! before the answer ([`Leftover`]): kept, or closed with `Connection:
//! close` said.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::request::Parts;
use http::{HeaderMap, Method, header};
use http_body_util::BodyExt;
use hyper::body::Body as _;
use hyper::body::Incoming;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::budget::{BodyBudget, Reservation};
use super::error::{ApiError, ErrorCode};
use crate::wire::bearer::bearer;
use crate::wire::json::parse_json;

/// Where a request's body comes from.
enum Source {
    /// A client's connection, read frame by frame.
    Wire(Incoming),
    /// Bytes already in hand (a tool call of `/mcp`, routed in-process).
    Whole(Bytes),
}

/// The most of a refused request's unread body that is read and thrown
/// away so its connection can serve the next request; past it, the answer
/// says `Connection: close` ([`Leftover::settle`]).
pub const DRAIN_BYTES: u64 = 64 * 1024;

/// Where a request's body goes when its handler answered without reading
/// all of it: the connection's task, which settles it after the answer.
#[derive(Clone, Default)]
pub struct Leftover(Arc<Mutex<Option<Unread>>>);

/// What a handler left of its request's body.
enum Unread {
    /// Never read: it may be short enough to read and throw away.
    Body(Incoming),
    /// Refused while it was read (too large, over the budget, stalled):
    /// the rest is not read.
    Refused,
}

impl Leftover {
    /// Before an answer goes out on the connection: a body the handler
    /// never read keeps the connection only if it is read to its end
    /// here, within [`DRAIN_BYTES`] and the body budget's stall time; a
    /// body refused while it was read is not read further. Hyper would
    /// close such a connection after the answer without saying so (a race
    /// with how much of the body had arrived), so the answer says
    /// `Connection: close`, and hyper closes it.
    pub async fn settle(&self, resp: &mut http::Response<super::body::Body>, stall: Duration) {
        let unread = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        let mut body = match unread {
            None => return,
            Some(Unread::Body(body)) if body.is_end_stream() => return,
            Some(Unread::Body(body)) => body,
            Some(Unread::Refused) => {
                close(resp);
                return;
            }
        };
        let drained = async {
            let mut left = DRAIN_BYTES;
            if body.size_hint().lower() > left {
                return false;
            }
            loop {
                match body.frame().await {
                    None => return true,
                    Some(Err(_)) => return false,
                    Some(Ok(frame)) => {
                        let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                        let Some(rest) = left.checked_sub(n) else {
                            return false;
                        };
                        left = rest;
                    }
                }
            }
        };
        let kept = tokio::time::timeout(stall, drained).await.unwrap_or(false);
        if !kept {
            close(resp);
        }
    }

    fn put(&self, unread: Unread) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(unread);
    }
}

/// Says in the answer that the connection closes after it (hyper then
/// closes it).
fn close(resp: &mut http::Response<super::body::Body>) {
    resp.headers_mut()
        .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
}

/// A request split into its head and its (not yet read) body.
pub struct Req {
    /// Method, URI, headers.
    pub parts: Parts,
    body: Option<Source>,
    /// Where an unread wire body goes when the request is dropped.
    leftover: Leftover,
    query: Vec<(String, String)>,
    peer: SocketAddr,
    budget: BodyBudget,
    /// The body's bytes in `budget`, held until the request is dropped,
    /// that is until its handler has answered.
    reservation: Reservation,
}

impl Req {
    /// Splits a hyper request from `peer` and parses its query string;
    /// its body will be read within `budget`.
    pub fn new(req: hyper::Request<Incoming>, peer: SocketAddr, budget: BodyBudget) -> Req {
        let (parts, body) = req.into_parts();
        Req::assemble(parts, Source::Wire(body), peer, budget)
    }

    /// A request whose body is already read: `/mcp` tool calls take this
    /// way through the routing table, with the caller's head and peer.
    pub fn whole(parts: Parts, body: Bytes, peer: SocketAddr, budget: BodyBudget) -> Req {
        Req::assemble(parts, Source::Whole(body), peer, budget)
    }

    fn assemble(parts: Parts, body: Source, peer: SocketAddr, budget: BodyBudget) -> Req {
        let query = parts
            .uri
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        Req {
            parts,
            body: Some(body),
            leftover: Leftover::default(),
            query,
            peer,
            budget,
            reservation: Reservation::default(),
        }
    }

    /// Where this request's body goes if its handler leaves it unread
    /// (for the connection to settle after the answer).
    pub fn leftover(&self) -> Leftover {
        self.leftover.clone()
    }

    /// The address the connection came from (the TCP peer, not a header).
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.parts.method
    }

    /// The headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.parts.headers
    }

    /// The decoded path segments. `%2F` stays inside its segment, so a
    /// decoded `/` or `..` reaches the name check and is refused there.
    pub fn segments(&self) -> Result<Vec<String>, ApiError> {
        let path = self.parts.uri.path();
        path.strip_prefix('/')
            .unwrap_or(path)
            .split('/')
            .map(|seg| {
                percent_encoding::percent_decode_str(seg)
                    .decode_utf8()
                    .map(|s| s.into_owned())
                    .map_err(|_| {
                        ApiError::new(ErrorCode::InvalidPath, "path segments must be UTF-8")
                    })
            })
            .collect()
    }

    /// The first value of a query parameter.
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A query parameter parsed as a number.
    pub fn query_u64(&self, name: &'static str) -> Result<Option<u64>, ApiError> {
        self.query(name)
            .map(|v| {
                v.parse().map_err(|_| {
                    ApiError::new(
                        ErrorCode::InvalidQuery,
                        format!("{name} must be a whole number"),
                    )
                    .with(json!({"field": name, "value": v}))
                })
            })
            .transpose()
    }

    /// The bearer credential (see [`bearer`]).
    pub fn bearer(&self) -> Result<Option<&str>, ApiError> {
        bearer(&self.parts.headers)
    }

    /// Reads the whole body, refusing more than `limit` bytes (or the whole
    /// body budget, when smaller) with 413, a body that pauses longer than
    /// the budget's stall time with 408, and one the budget cannot hold
    /// now with `503 busy`.
    pub async fn bytes(&mut self, limit: usize) -> Result<Bytes, ApiError> {
        let limit = (limit as u64).min(self.budget.total_bytes());
        let too_large = || {
            ApiError::new(
                ErrorCode::BodyTooLarge,
                format!("request body is over the {limit}-byte limit"),
            )
            .with(json!({"limit": limit}))
        };
        let declared = self
            .parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|len| len.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let mut body = match self.body.take() {
            None => return Ok(Bytes::new()),
            Some(Source::Whole(bytes)) if bytes.len() as u64 > limit => return Err(too_large()),
            Some(Source::Whole(bytes)) => {
                self.reserve(bytes.len() as u64)?;
                return Ok(bytes);
            }
            Some(Source::Wire(body)) => body,
        };
        let read = self
            .read_wire(&mut body, limit, declared.unwrap_or(0))
            .await;
        if read.is_err() {
            self.leftover.put(Unread::Refused);
        }
        read
    }

    /// Reads the rest of a wire body (`declared` bytes announced), within
    /// `limit` and the body budget.
    async fn read_wire(
        &mut self,
        body: &mut Incoming,
        limit: u64,
        declared: u64,
    ) -> Result<Bytes, ApiError> {
        let too_large = || {
            ApiError::new(
                ErrorCode::BodyTooLarge,
                format!("request body is over the {limit}-byte limit"),
            )
            .with(json!({"limit": limit}))
        };
        self.reserve(declared)?;
        let stall = self.budget.stall();
        let mut buf = BytesMut::with_capacity(declared as usize);
        loop {
            let frame = match tokio::time::timeout(stall, body.frame()).await {
                Err(_) => {
                    return Err(ApiError::new(
                        ErrorCode::BodyTimeout,
                        format!(
                            "the request body paused for over {} ms; send it without pauses",
                            stall.as_millis()
                        ),
                    ));
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    return Err(ApiError::new(
                        ErrorCode::BodyUnreadable,
                        format!("could not read the request body: {e}"),
                    ));
                }
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let total = buf.len() as u64 + data.len() as u64;
            if total > limit {
                return Err(too_large());
            }
            if total > declared {
                self.reserve(total)?;
            }
            buf.extend_from_slice(&data);
        }
        Ok(buf.freeze())
    }

    /// Grows this request's share of the body budget to `bytes`.
    fn reserve(&mut self, bytes: u64) -> Result<(), ApiError> {
        self.budget
            .cover(&mut self.reservation, bytes)
            .map_err(|_| {
                let mut e = ApiError::new(
                    ErrorCode::Busy,
                    "the daemon holds as many request bodies as its memory budget allows; retry in a moment",
                )
                .with(json!({"retry_after_s": 1}));
                e.retry_after_s = Some(1);
                e
            })
    }

    /// Reads the body as strict JSON of type `T`, its parsed form held in
    /// the body budget too ([`Req::parsing`]).
    pub async fn json<T: DeserializeOwned>(&mut self, limit: usize) -> Result<T, ApiError> {
        let bytes = self.bytes(limit).await?;
        self.parsing(&bytes)?;
        parse_json(&bytes)
    }

    /// Reads an optional body: no bytes is `T::default()`, anything else
    /// strict JSON of type `T`, as [`Req::json`] reads it.
    pub async fn json_or_default<T: DeserializeOwned + Default>(
        &mut self,
        limit: usize,
    ) -> Result<T, ApiError> {
        let bytes = self.bytes(limit).await?;
        if bytes.is_empty() {
            return Ok(T::default());
        }
        self.parsing(&bytes)?;
        parse_json(&bytes)
    }

    /// Before `text` (this request's body) is parsed: grows the request's
    /// share of the body budget to the text and what parsing it may take
    /// ([`budget::parsed_cost`]), so bodies in flight hold their parsed
    /// forms within the budget, not only their bytes. One the budget can
    /// never hold is `413`; one it cannot hold now is `503 busy`.
    pub fn parsing(&mut self, text: &[u8]) -> Result<(), ApiError> {
        let cost = text.len() as u64 + super::budget::parsed_cost(text);
        let total = self.budget.total_bytes();
        if cost > total {
            return Err(ApiError::new(
                ErrorCode::BodyTooLarge,
                format!(
                    "parsed, this {}-byte JSON body would take about {cost} bytes, over the {total}-byte budget for bodies in flight; send fewer, larger values (a long string rather than many small ones)",
                    text.len()
                ),
            )
            .with(json!({"limit": total, "parsed_bytes": cost})));
        }
        self.reserve(cost)
    }
}

impl Drop for Req {
    fn drop(&mut self) {
        if let Some(Source::Wire(body)) = self.body.take() {
            self.leftover.put(Unread::Body(body));
        }
    }
}
