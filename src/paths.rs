//! Every endpoint's method and path template, declared once: the daemon's
//! route table binds each to its handler and its document entry
//! (`http::routes`), and the command line and the MCP tools build their
//! requests' paths from the same constants ([`Endpoint::at`]), so no path
//! is spelled twice.

use http::Method;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What a path segment keeps as is: RFC 3986's unreserved characters
/// (letters, digits, `-`, `.`, `_`, `~`); anything else is encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One endpoint: a method and a path template whose `{name}` segments
/// stand for any one segment.
#[derive(Debug)]
pub struct Endpoint {
    /// The method.
    pub method: Method,
    /// The path template, as the OpenAPI document spells it.
    pub path: &'static str,
}

impl Endpoint {
    const fn new(method: Method, path: &'static str) -> Endpoint {
        Endpoint { method, path }
    }

    /// The path with its `{name}` segments filled from `values` in order,
    /// each percent-encoded, so a value is always one whole segment.
    /// Giving another number of values than the template has names is a
    /// bug in the caller.
    pub fn at(&self, values: &[&str]) -> String {
        let mut values = values.iter();
        let path = self
            .path
            .split('/')
            .map(|seg| match seg.starts_with('{') {
                true => {
                    let value = values.next().unwrap_or_else(|| {
                        panic!("{} {} needs a value for {seg}", self.method, self.path)
                    });
                    utf8_percent_encode(value, SEGMENT).to_string()
                }
                false => seg.to_string(),
            })
            .collect::<Vec<_>>()
            .join("/");
        assert!(
            values.next().is_none(),
            "{} {} takes fewer values",
            self.method,
            self.path
        );
        path
    }
}

/// `GET /healthz`.
pub static HEALTHZ: Endpoint = Endpoint::new(Method::GET, "/healthz");

/// `GET /metrics`.
pub static METRICS: Endpoint = Endpoint::new(Method::GET, "/metrics");

/// `GET /v1/openapi.json`.
pub static OPENAPI: Endpoint = Endpoint::new(Method::GET, "/v1/openapi.json");

/// `GET /v1/events`.
pub static EVENTS: Endpoint = Endpoint::new(Method::GET, "/v1/events");

/// `GET /v1/status`.
pub static STATUS: Endpoint = Endpoint::new(Method::GET, "/v1/status");

/// `GET /`.
pub static SITE_INDEX: Endpoint = Endpoint::new(Method::GET, "/");

/// `GET /ui/{name}`.
pub static SITE_FILE: Endpoint = Endpoint::new(Method::GET, "/ui/{name}");

/// `GET /v1/nouns`.
pub static NOUN_LIST: Endpoint = Endpoint::new(Method::GET, "/v1/nouns");

/// `PUT /v1/nouns/{namespace}/{store}/{key}`.
pub static NOUN_PUT: Endpoint = Endpoint::new(Method::PUT, "/v1/nouns/{namespace}/{store}/{key}");

/// `GET /v1/nouns/{namespace}/{store}/{key}`.
pub static NOUN_GET: Endpoint = Endpoint::new(Method::GET, "/v1/nouns/{namespace}/{store}/{key}");

/// `GET /v1/nouns/{namespace}/{store}/{key}/versions`.
pub static NOUN_VERSIONS: Endpoint =
    Endpoint::new(Method::GET, "/v1/nouns/{namespace}/{store}/{key}/versions");

/// `POST /v1/nouns/{namespace}/{store}/{key}/quarantine`.
pub static NOUN_QUARANTINE: Endpoint = Endpoint::new(
    Method::POST,
    "/v1/nouns/{namespace}/{store}/{key}/quarantine",
);

/// `POST /v1/nouns/{namespace}/{store}/{key}/unquarantine`.
pub static NOUN_UNQUARANTINE: Endpoint = Endpoint::new(
    Method::POST,
    "/v1/nouns/{namespace}/{store}/{key}/unquarantine",
);

/// `POST /v1/batch/nouns`.
pub static BATCH_NOUNS: Endpoint = Endpoint::new(Method::POST, "/v1/batch/nouns");

/// `POST /v1/batch/tasks`.
pub static BATCH_TASKS: Endpoint = Endpoint::new(Method::POST, "/v1/batch/tasks");

/// `POST /v1/keys`.
pub static KEY_ISSUE: Endpoint = Endpoint::new(Method::POST, "/v1/keys");

/// `GET /v1/keys`.
pub static KEY_LIST: Endpoint = Endpoint::new(Method::GET, "/v1/keys");

/// `DELETE /v1/keys/{key_id}`.
pub static KEY_REVOKE: Endpoint = Endpoint::new(Method::DELETE, "/v1/keys/{key_id}");

/// `POST /v1/queues`.
pub static QUEUE_PROVISION: Endpoint = Endpoint::new(Method::POST, "/v1/queues");

/// `GET /v1/queues`.
pub static QUEUE_LIST: Endpoint = Endpoint::new(Method::GET, "/v1/queues");

/// `POST /v1/queues/{queue}/claim`.
pub static QUEUE_CLAIM: Endpoint = Endpoint::new(Method::POST, "/v1/queues/{queue}/claim");

/// `POST /v1/tasks`.
pub static TASK_ENQUEUE: Endpoint = Endpoint::new(Method::POST, "/v1/tasks");

/// `POST /v1/tasks/retry`.
pub static TASKS_RETRY: Endpoint = Endpoint::new(Method::POST, "/v1/tasks/retry");

/// `POST /v1/tasks/cancel`.
pub static TASKS_CANCEL: Endpoint = Endpoint::new(Method::POST, "/v1/tasks/cancel");

/// `GET /v1/tasks`.
pub static TASK_LIST: Endpoint = Endpoint::new(Method::GET, "/v1/tasks");

/// `GET /v1/tasks/{id}`.
pub static TASK_GET: Endpoint = Endpoint::new(Method::GET, "/v1/tasks/{id}");

/// `GET /v1/tasks/{id}/receipts`.
pub static TASK_RECEIPTS: Endpoint = Endpoint::new(Method::GET, "/v1/tasks/{id}/receipts");

/// `POST /v1/tasks/{id}/claim`.
pub static TASK_CLAIM: Endpoint = Endpoint::new(Method::POST, "/v1/tasks/{id}/claim");

/// `POST /v1/tasks/{id}/heartbeat`.
pub static TASK_HEARTBEAT: Endpoint = Endpoint::new(Method::POST, "/v1/tasks/{id}/heartbeat");

/// `POST /v1/tasks/{id}/release`.
pub static TASK_RELEASE: Endpoint = Endpoint::new(Method::POST, "/v1/tasks/{id}/release");

/// `POST /v1/tasks/{id}/submit`.
pub static TASK_SUBMIT: Endpoint = Endpoint::new(Method::POST, "/v1/tasks/{id}/submit");

/// `POST /v1/tasks/{id}/park`.
pub static TASK_PARK: Endpoint = Endpoint::new(Method::POST, "/v1/tasks/{id}/park");

/// `POST /v1/tasks/{id}/resume`.
pub static TASK_RESUME: Endpoint = Endpoint::new(Method::POST, "/v1/tasks/{id}/resume");

/// `POST /v1/tasks/{id}/split`.
pub static TASK_SPLIT: Endpoint = Endpoint::new(Method::POST, "/v1/tasks/{id}/split");

/// `POST /v1/tasks/{id}/cancel`.
pub static TASK_CANCEL: Endpoint = Endpoint::new(Method::POST, "/v1/tasks/{id}/cancel");

/// `POST /v1/tasks/{id}/retry`.
pub static TASK_RETRY: Endpoint = Endpoint::new(Method::POST, "/v1/tasks/{id}/retry");

/// `GET /v1/tasks/{id}/output`.
pub static TASK_OUTPUT: Endpoint = Endpoint::new(Method::GET, "/v1/tasks/{id}/output");

/// `POST /v1/promotions`.
pub static PROMOTE: Endpoint = Endpoint::new(Method::POST, "/v1/promotions");

/// `GET /v1/worker/prompt`.
pub static WORKER_PROMPT: Endpoint = Endpoint::new(Method::GET, "/v1/worker/prompt");

/// `POST /v1/worker/artifact`.
pub static WORKER_ARTIFACT: Endpoint = Endpoint::new(Method::POST, "/v1/worker/artifact");

/// `POST /v1/worker/submit`.
pub static WORKER_SUBMIT: Endpoint = Endpoint::new(Method::POST, "/v1/worker/submit");

/// `GET /v1/worker/nouns/{namespace}/{store}/{key}`.
pub static WORKER_NOUN: Endpoint =
    Endpoint::new(Method::GET, "/v1/worker/nouns/{namespace}/{store}/{key}");

/// `POST /v1/worker/heartbeat`.
pub static WORKER_HEARTBEAT: Endpoint = Endpoint::new(Method::POST, "/v1/worker/heartbeat");

/// `GET /v1/worker/parts`.
pub static WORKER_PARTS: Endpoint = Endpoint::new(Method::GET, "/v1/worker/parts");

/// `GET /v1/worker/consumes/{name}`.
pub static WORKER_CONSUMES: Endpoint = Endpoint::new(Method::GET, "/v1/worker/consumes/{name}");

/// `POST /mcp`.
pub static MCP: Endpoint = Endpoint::new(Method::POST, "/mcp");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_fill_whole_segments() {
        assert_eq!(TASK_GET.at(&["t1"]), "/v1/tasks/t1");
        assert_eq!(
            NOUN_GET.at(&["ns-1", "a/b", "k.v ?"]),
            "/v1/nouns/ns-1/a%2Fb/k.v%20%3F"
        );
        assert_eq!(TASK_LIST.at(&[]), "/v1/tasks");
    }
}
