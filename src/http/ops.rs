//! Operational routes: `/healthz` (no authentication), which reports the
//! root's one health state (`store::health`), and `/metrics`.

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use super::error::ApiError;
use super::request::Req;
use super::{Ctx, Resp, json_response};
use crate::metrics::Format;
use crate::store::Condition;
use crate::wire::{Health, HealthIncident};

/// `GET /healthz`: the root's health, then whether the queue's backend
/// answers now (asked on every call, so a database that is back is
/// healthy at once).
pub async fn healthz(ctx: &Ctx) -> Result<Resp, ApiError> {
    let (mut status, mut body) = report(&ctx.store);
    if status == StatusCode::OK {
        let down = match ctx.queue.health().await {
            Err(e) => Some(e.to_string()),
            Ok(()) => ctx.keyring.ready().await.err().map(|e| e.to_string()),
        };
        if let Some(why) = down {
            status = StatusCode::SERVICE_UNAVAILABLE;
            body.status = "queue_unavailable".into();
            body.queue = Some(why);
        }
    }
    Ok(json_response(status, &body))
}

/// `GET /metrics` (an admin key or `metrics:read`): the classic text
/// format, or OpenMetrics when the `Accept` header prefers it.
pub async fn metrics(ctx: &Ctx, req: &Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(req).await?;
    crate::auth::access::require(&p, crate::auth::Scope::MetricsRead)?;
    let accept = req.headers().get_all(header::ACCEPT);
    let format = Format::from_accept(accept.iter().filter_map(|v| v.to_str().ok()));
    let now = crate::metrics::Readings {
        failed_authentications: ctx.keyring.failed_authentications(),
        connections: ctx.connections.counts(),
    };
    let counts = ctx.queue.task_counts().await?;
    let text = ctx.metrics.render(&counts, &now, format);
    let mut resp = Response::new(super::body::full(text));
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    headers.insert(header::VARY, HeaderValue::from_static("accept"));
    Ok(resp)
}

/// The root's health now, after the periodic check of a full disk
/// (`Store::recheck_space`), with what the refused write needed and how
/// much is free.
pub(super) fn report(store: &crate::store::Store) -> (StatusCode, Health) {
    let free = store.recheck_space();
    let condition = store.health().condition();
    let needed = match &condition {
        Condition::OutOfSpace(i) => store.health().needed(i.writer),
        _ => None,
    };
    answer(condition, needed, free)
}

/// The answer for a condition: `200` when ok or out of space (reads are
/// served and writes resume by themselves once space is freed), `503`
/// after a failed fsync (only a restart clears it).
fn answer(condition: Condition, needed: Option<u64>, free: Option<u64>) -> (StatusCode, Health) {
    let out_of_space = matches!(condition, Condition::OutOfSpace(_));
    let (status, name, incident) = match condition {
        Condition::Ok => (StatusCode::OK, "ok", None),
        Condition::OutOfSpace(i) => (StatusCode::OK, "out_of_space", Some(i)),
        Condition::Failed(i) => (StatusCode::SERVICE_UNAVAILABLE, "storage_failed", Some(i)),
    };
    let health = Health {
        status: name.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        storage: incident.map(|i| HealthIncident {
            writer: i.writer.as_str().into(),
            cause: i.cause,
            since: i.since,
            needed_bytes: needed.filter(|_| out_of_space),
            free_bytes: free.filter(|_| out_of_space),
        }),
        queue: None,
    };
    (status, health)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Incident, Writer};

    #[test]
    fn healthz_is_503_only_after_a_failed_fsync_and_names_the_cause() {
        let incident = |writer| Incident {
            writer,
            cause: "fsync failed: EIO".into(),
            since: jiff::Timestamp::UNIX_EPOCH,
        };
        let cases = [
            (Condition::Ok, 200, "ok", None),
            (
                Condition::OutOfSpace(incident(Writer::Journal)),
                200,
                "out_of_space",
                Some("journal"),
            ),
            (
                Condition::Failed(incident(Writer::Files)),
                503,
                "storage_failed",
                Some("files"),
            ),
        ];
        for (condition, status, name, writer) in cases {
            let (got, health) = answer(condition, Some(10), Some(5));
            assert_eq!(got.as_u16(), status, "{name}");
            assert_eq!(health.status, name);
            assert_eq!(
                health.storage.as_ref().map(|s| s.writer.as_str()),
                writer,
                "{name}"
            );
            if let Some(s) = &health.storage {
                assert_eq!(s.cause, "fsync failed: EIO");
                let space = (name == "out_of_space").then_some(10);
                assert_eq!(s.needed_bytes, space, "{name}");
            }
        }
    }
}
