//! A small HTTP client for the daemon's API, used by the `tessera` command,
//! the integration tests, the example and the benchmarks. It knows the
//! error body shape and nothing of the daemon's internals.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A client bound to one daemon address and, optionally, one credential.
/// Cheap to clone; clones share the connection pool.
#[derive(Clone, Debug)]
pub struct Client {
    base: Arc<str>,
    bearer: Option<Arc<str>>,
    http: HyperClient<HttpConnector, Full<Bytes>>,
}

/// A response, fully read.
#[derive(Clone, Debug)]
pub struct Reply {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body bytes.
    pub body: Bytes,
}

/// What a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon could not be reached.
    #[error("cannot reach the daemon at {base}: {message}; is `tessera serve` running there?")]
    Connect {
        /// The base URL.
        base: String,
        /// The transport error.
        message: String,
    },
    /// The daemon answered with an error body.
    #[error("{status}: {code}: {message}")]
    Api {
        /// HTTP status.
        status: StatusCode,
        /// The error code.
        code: String,
        /// The daemon's message.
        message: String,
        /// The error details.
        details: Value,
    },
    /// The body was not what the caller expected.
    #[error("unexpected response body: {0}")]
    Decode(String),
    /// The credential cannot be sent: it holds a character no
    /// `Authorization` header carries. Nothing was sent.
    #[error(
        "the key or handle is malformed: {0}; a credential is printable ASCII, so check how it was copied (nothing was sent)"
    )]
    MalformedCredential(String),
}

/// What makes `credential` unsendable as `Authorization: Bearer
/// <credential>`: its first character that is not printable ASCII (a
/// control character, such as a newline copied with it), named by code
/// point and position, never by the credential's text.
pub fn credential_problem(credential: &str) -> Option<String> {
    let (at, c) = credential
        .chars()
        .enumerate()
        .find(|(_, c)| !(*c == ' ' || c.is_ascii_graphic()))?;
    let what = if c.is_control() {
        "a control character"
    } else {
        "not ASCII"
    };
    Some(format!(
        "character {} is U+{:04X} ({what})",
        at + 1,
        u32::from(c)
    ))
}

impl Reply {
    /// The body parsed as JSON of type `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ClientError> {
        serde_json::from_slice(&self.body).map_err(|e| ClientError::Decode(e.to_string()))
    }

    /// The body as a JSON value (`Null` when it is not JSON).
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The `error.code` of an error body.
    pub fn error_code(&self) -> Option<String> {
        self.value()["error"]["code"].as_str().map(str::to_string)
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `Ok(self)` for a 2xx answer, else the daemon's error.
    pub fn success(self) -> Result<Reply, ClientError> {
        if self.status.is_success() {
            return Ok(self);
        }
        let v = self.value();
        let e = &v["error"];
        Err(ClientError::Api {
            status: self.status,
            code: e["code"].as_str().unwrap_or("unknown").to_string(),
            message: e["message"].as_str().map_or_else(
                || String::from_utf8_lossy(&self.body).into_owned(),
                str::to_string,
            ),
            details: e["details"].clone(),
        })
    }
}

impl Client {
    /// A client for the daemon at `base` (such as `http://127.0.0.1:7700`).
    pub fn new(base: &str) -> Client {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Client {
            base: base.trim_end_matches('/').into(),
            bearer: None,
            http: HyperClient::builder(TokioExecutor::new())
                .pool_max_idle_per_host(256)
                .build(connector),
        }
    }

    /// The same daemon, with `Authorization: Bearer <credential>`.
    pub fn with_bearer(&self, credential: &str) -> Client {
        Client {
            bearer: Some(credential.into()),
            ..self.clone()
        }
    }

    /// The same daemon, without a credential.
    pub fn anonymous(&self) -> Client {
        Client {
            bearer: None,
            ..self.clone()
        }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The credential sent as `Authorization: Bearer`, if any.
    pub fn bearer(&self) -> Option<&str> {
        self.bearer.as_deref()
    }

    /// Sends a request with an optional body and extra headers.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        extra: &[(&str, &str)],
    ) -> Result<Reply, ClientError> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path));
        if let Some(b) = &self.bearer {
            if let Some(problem) = credential_problem(b) {
                return Err(ClientError::MalformedCredential(problem));
            }
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {b}"));
        }
        if body.is_some() {
            builder = builder.header(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        for (k, v) in extra {
            builder = builder.header(*k, *v);
        }
        let req = builder
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| ClientError::Decode(format!("bad request: {e}")))?;
        let connect = |e: &dyn std::fmt::Display| ClientError::Connect {
            base: self.base.to_string(),
            message: e.to_string(),
        };
        let resp = self.http.request(req).await.map_err(|e| connect(&e))?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| connect(&e))?.to_bytes();
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Reply, ClientError> {
        self.send(Method::GET, path, None, &[]).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Result<Reply, ClientError> {
        self.send(Method::DELETE, path, None, &[]).await
    }

    /// `PUT path` with a JSON body.
    pub async fn put_json<T: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &T,
    ) -> Result<Reply, ClientError> {
        self.send(Method::PUT, path, Some(to_bytes(body)), &[])
            .await
    }

    /// `POST path` with a JSON body.
    pub async fn post_json<T: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &T,
    ) -> Result<Reply, ClientError> {
        self.send(Method::POST, path, Some(to_bytes(body)), &[])
            .await
    }

    /// `POST path` with raw bytes.
    pub async fn post_bytes(
        &self,
        path: &str,
        body: impl Into<Bytes>,
    ) -> Result<Reply, ClientError> {
        self.send(Method::POST, path, Some(body.into()), &[]).await
    }
}

fn to_bytes<T: Serialize + ?Sized>(body: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(body).expect("request bodies serialize"))
}
