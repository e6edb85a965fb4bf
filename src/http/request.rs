//! Reading requests: path segments, query parameters, bearer credentials,
//! size-limited bodies and strict JSON. Every failure here is a client
//! mistake with a 400, 408 or 413 that says what to fix, or a `503 busy`
//! when the body budget (`budget.rs`) cannot hold one more body right now.

use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use http::request::Parts;
use http::{HeaderMap, Method, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::budget::{BodyBudget, Reservation};
use super::error::{ApiError, ErrorCode};
use crate::store::canonical::{MAX_JSON_DEPTH, json_depth};

/// Where a request's body comes from.
enum Source {
    /// A client's connection, read frame by frame.
    Wire(Incoming),
    /// Bytes already in hand (a tool call of `/mcp`, routed in-process).
    Whole(Bytes),
}

/// A request split into its head and its (not yet read) body.
pub struct Req {
    /// Method, URI, headers.
    pub parts: Parts,
    body: Option<Source>,
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
            query,
            peer,
            budget,
            reservation: Reservation::default(),
        }
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
        let declared = declared.unwrap_or(0);
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

    /// Reads the body as strict JSON of type `T`.
    pub async fn json<T: DeserializeOwned>(&mut self, limit: usize) -> Result<T, ApiError> {
        let bytes = self.bytes(limit).await?;
        parse_json(&bytes)
    }
}

/// The bearer credential of a request head, the one rule every route and
/// `/mcp` read it by: `Ok(None)` when there is no `Authorization` header,
/// an error when it is not `Bearer <token>`. The scheme is matched without
/// regard to case (RFC 9110 §11.1): `bearer` and `BEARER` are `Bearer`.
pub fn bearer(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty())
        .map(Some)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::Unauthenticated,
                "malformed Authorization header; send `Authorization: Bearer <key>`",
            )
        })
}

/// Parses strict JSON: JSON nested deeper than `MAX_JSON_DEPTH`, unknown
/// fields, wrong types and syntax errors are 400s naming the limit, the
/// field or the position.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if json_depth(bytes) > MAX_JSON_DEPTH {
        return Err(ApiError::new(ErrorCode::TooDeep,
            format!(
                "the JSON body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels; flatten it"
            ),
        )
        .with(json!({"limit": MAX_JSON_DEPTH})));
    }
    serde_json::from_slice(bytes).map_err(|e| json_refusal(&e))
}

/// The answer to JSON that `serde_json` refused, for a body or for values
/// taken out of one (an MCP tool's arguments): an unknown field, a wrong
/// shape, or a syntax error, with the position when the error has one.
pub fn json_refusal(e: &serde_json::Error) -> ApiError {
    let mut details = serde_json::Map::new();
    if e.line() > 0 {
        details.insert("line".into(), json!(e.line()));
        details.insert("column".into(), json!(e.column()));
    }
    let msg = e.to_string();
    let (code, message) = match e.classify() {
        serde_json::error::Category::Data => match msg
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split('`').next())
        {
            Some(field) => {
                details.insert("field".into(), json!(field));
                (ErrorCode::UnknownField, format!("unknown field `{field}`"))
            }
            None => (ErrorCode::InvalidBody, msg),
        },
        _ => (ErrorCode::MalformedJson, format!("malformed JSON: {msg}")),
    };
    ApiError::new(code, message).with(serde_json::Value::Object(details))
}
