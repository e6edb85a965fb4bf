//! The only module that knows HTTP statuses: every domain error becomes a
//! status and a `{"error": {"code", "message", "details"}}` body here.
//! Internal failures become a bare 500 (logged with their cause); "may not
//! see" becomes the very same 404 as "missing".

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use serde_json::{Value, json};

use crate::auth::throttle::TooManyFailures;
use crate::{auth, promotion, queue, store, worker};

/// An error on its way to the client.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable snake_case code.
    pub code: &'static str,
    /// What happened and what to do next.
    pub message: String,
    /// Structured details (an object).
    pub details: Value,
    /// What the log line says besides the message: the hidden cause of an
    /// internal error, the path of a corrupt object. Never sent.
    pub cause: Option<String>,
    /// Seconds for a `Retry-After` header.
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    /// An error with empty details.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            details: json!({}),
            cause: None,
            retry_after_s: None,
        }
    }

    /// Adds details.
    pub fn with(mut self, details: Value) -> ApiError {
        self.details = details;
        self
    }

    /// Marks the error as about item `i` of a list in the request (a
    /// split's children): `details.item`, and the message says which.
    pub fn in_item(mut self, i: usize) -> ApiError {
        self.message = format!("children[{i}]: {}", self.message);
        if let Value::Object(map) = &mut self.details {
            map.insert("item".into(), json!(i));
        }
        self
    }

    /// `400` with `code`.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// The one "not found" answer, shared by missing and hidden records so
    /// that neither body nor headers tell them apart.
    pub fn not_found() -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such record, or this key may not see it",
        )
    }

    /// Records what the log line should say besides the message.
    pub fn because(mut self, cause: impl Into<String>) -> ApiError {
        self.cause = Some(cause.into());
        self
    }

    /// A 500 that hides its cause from the client; the log line names it.
    pub fn internal(cause: &dyn std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; the daemon log has the cause",
        )
        .because(cause.to_string())
    }

    /// The response carrying this error. A server error is logged here,
    /// once, with its cause.
    pub fn into_response(self) -> Response<Full<Bytes>> {
        if self.status.is_server_error() {
            let cause = self.cause.as_deref().unwrap_or("");
            tracing::error!(status = self.status.as_u16(), code = self.code, message = %self.message, cause, "request failed");
        } else {
            tracing::debug!(status = self.status.as_u16(), code = self.code, message = %self.message, "request refused");
        }
        let body =
            json!({"error": {"code": self.code, "message": self.message, "details": self.details}});
        let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
        *resp.status_mut() = self.status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(secs) = self.retry_after_s {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

impl From<TooManyFailures> for ApiError {
    fn from(e: TooManyFailures) -> ApiError {
        let mut api = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_failures",
            e.to_string(),
        )
        .with(json!({"retry_after_s": e.retry_after_s}));
        api.retry_after_s = Some(e.retry_after_s);
        api
    }
}

impl From<store::Error> for ApiError {
    fn from(e: store::Error) -> ApiError {
        use store::Error as E;
        let msg = e.to_string();
        match e {
            E::InvalidName { field, value } => ApiError::bad_request("invalid_name", msg)
                .with(json!({"field": field, "value": value})),
            E::NounNotFound => ApiError::not_found(),
            E::VersionNotFound { version, latest } => {
                ApiError::new(StatusCode::NOT_FOUND, "version_not_found", msg)
                    .with(json!({"version": version, "latest": latest}))
            }
            E::VersionConflict { expected, current } => {
                ApiError::new(StatusCode::CONFLICT, "version_conflict", msg)
                    .with(json!({"expected": expected, "current": current}))
            }
            E::PinMismatch {
                version,
                expected,
                actual,
            } => ApiError::new(StatusCode::CONFLICT, "pin_mismatch", msg)
                .with(json!({"version": version, "expected": expected, "actual": actual})),
            E::CorruptObject { path } => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "corrupt_object",
                "a stored object failed its hash check; the operator should run `tessera fsck`",
            )
            .because(format!("{path} does not hash to its name; not served")),
            E::OutOfSpace { .. } => {
                ApiError::new(StatusCode::INSUFFICIENT_STORAGE, "insufficient_storage", msg)
            }
            E::StorageFailed(incident) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "storage_failed", msg).with(
                    json!({"writer": incident.writer, "cause": incident.cause, "since": incident.since}),
                )
            }
            E::ObjectMissing { .. }
            | E::CorruptRef { .. }
            | E::Locked { .. }
            | E::TaskFailed(_)
            | E::Io { .. } => ApiError::internal(&msg),
        }
    }
}

impl From<auth::Error> for ApiError {
    fn from(e: auth::Error) -> ApiError {
        use auth::Error as E;
        let msg = e.to_string();
        match e {
            E::Unauthenticated(_) => {
                ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", msg)
            }
            E::Forbidden(_) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", msg),
            E::Hidden => ApiError::not_found(),
            E::HiddenQueue(q) => {
                ApiError::new(StatusCode::NOT_FOUND, "unknown_queue", msg).with(json!({"queue": q}))
            }
            E::BadRequest(code, _) => ApiError::bad_request(code, msg),
            E::InvalidGrant(_) => ApiError::bad_request("invalid_grant", msg),
            E::UnknownKey => ApiError::not_found(),
            E::LastAdminKey => ApiError::new(StatusCode::CONFLICT, "last_admin_key", msg),
            E::Store(s) => s.into(),
        }
    }
}

impl From<queue::Error> for ApiError {
    fn from(e: queue::Error) -> ApiError {
        use queue::Error as E;
        let msg = e.to_string();
        match e {
            E::UnknownQueue(q) => {
                ApiError::new(StatusCode::NOT_FOUND, "unknown_queue", msg).with(json!({"queue": q}))
            }
            E::NotFound => ApiError::not_found(),
            E::InvalidSpec { field, .. } => {
                ApiError::bad_request("invalid_field", msg).with(json!({"field": field}))
            }
            E::UnknownUpstream(id) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "unknown_upstream", msg)
                    .with(json!({"task_id": id}))
            }
            E::IdempotencyConflict(id) => {
                ApiError::new(StatusCode::CONFLICT, "idempotency_conflict", msg)
                    .with(json!({"task_id": id}))
            }
            E::InvalidState { state, action } => {
                ApiError::new(StatusCode::CONFLICT, "invalid_state", msg)
                    .with(json!({"state": state, "action": action}))
            }
            E::StaleLease { state, attempt } => {
                ApiError::new(StatusCode::CONFLICT, "stale_lease", msg)
                    .with(json!({"state": state, "attempt": attempt}))
            }
            E::SubmitConflict => ApiError::new(StatusCode::CONFLICT, "submit_conflict", msg),
            E::SplitLimit(_) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "split_limit", msg),
            E::SplitWidens { field } => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "split_widens", msg)
                    .with(json!({"field": field}))
            }
            E::JournalFailed(incident) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "journal_failed", msg).with(
                    json!({"writer": incident.writer, "cause": incident.cause, "since": incident.since}),
                )
            }
            E::CorruptJournal { .. } | E::Inapplicable(_) => ApiError::internal(&msg),
            E::Store(s) => s.into(),
        }
    }
}

impl From<worker::Error> for ApiError {
    fn from(e: worker::Error) -> ApiError {
        use worker::Error as E;
        let msg = e.to_string();
        match e {
            E::Unauthenticated(_) => {
                ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", msg)
            }
            E::WrongTask => ApiError::new(StatusCode::FORBIDDEN, "wrong_task", msg),
            E::StaleLease { state, attempt } => {
                ApiError::new(StatusCode::CONFLICT, "stale_lease", msg)
                    .with(json!({"state": state, "attempt": attempt}))
            }
            E::AlreadySubmitted => ApiError::new(StatusCode::CONFLICT, "already_submitted", msg),
            E::InvalidPartName { name, .. } => {
                ApiError::bad_request("invalid_part_name", msg).with(json!({"name": name}))
            }
            E::FileRef(_) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_file_ref", msg)
            }
            E::FileRefMissing(_) => ApiError::new(StatusCode::NOT_FOUND, "file_not_found", msg),
            E::TooLarge { limit } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", msg)
                    .with(json!({"limit": limit}))
            }
            E::ProjectionFailed { path, reason } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "projection_failed", msg)
                    .with(json!({"path": path, "reason": reason}))
            }
            E::WorkDirUnavailable { path, reason } => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "work_dir_unavailable",
                msg,
            )
            .with(json!({"path": path, "reason": reason})),
            E::InvalidPin { field, pin, .. } => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_pin", msg)
                    .with(json!({"field": field, "pin": pin}))
            }
            E::Queue(q) => q.into(),
            E::Auth(a) => a.into(),
            E::Store(s) => s.into(),
        }
    }
}

impl From<promotion::Error> for ApiError {
    fn from(e: promotion::Error) -> ApiError {
        let msg = e.to_string();
        match e {
            promotion::Error::Refused(problems) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "promotion_refused", msg)
                    .with(json!({"problems": problems}))
            }
            promotion::Error::Store(s) => s.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Sha256;

    fn io() -> std::io::Error {
        std::io::Error::other("disk")
    }

    #[test]
    fn every_store_error_maps_to_its_status_and_code() {
        let sha = Sha256::of(b"x");
        let cases: Vec<(store::Error, u16, &str)> = vec![
            (
                store::Error::InvalidName {
                    field: "key",
                    value: "..".into(),
                },
                400,
                "invalid_name",
            ),
            (store::Error::NounNotFound, 404, "not_found"),
            (
                store::Error::VersionNotFound {
                    version: 3,
                    latest: 2,
                },
                404,
                "version_not_found",
            ),
            (
                store::Error::VersionConflict {
                    expected: 1,
                    current: 2,
                },
                409,
                "version_conflict",
            ),
            (
                store::Error::PinMismatch {
                    version: 1,
                    expected: sha,
                    actual: sha,
                },
                409,
                "pin_mismatch",
            ),
            (
                store::Error::CorruptObject { path: "p".into() },
                500,
                "corrupt_object",
            ),
            (store::Error::ObjectMissing { sha256: sha }, 500, "internal"),
            (
                store::Error::CorruptRef {
                    path: "p".into(),
                    message: "m".into(),
                },
                500,
                "internal",
            ),
            (
                store::Error::Locked {
                    path: "p".into(),
                    pid: Some(1),
                },
                500,
                "internal",
            ),
            (
                store::Error::OutOfSpace {
                    context: "c".into(),
                },
                507,
                "insufficient_storage",
            ),
            (
                store::Error::Io {
                    context: "c".into(),
                    error: io(),
                },
                500,
                "internal",
            ),
        ];
        for (err, status, code) in cases {
            let api = ApiError::from(err);
            assert_eq!((api.status.as_u16(), api.code), (status, code));
        }
    }

    #[test]
    fn every_queue_error_maps_to_its_status_and_code() {
        use crate::queue::{Attempt, TaskId, TaskState};
        let cases: Vec<(queue::Error, u16, &str)> = vec![
            (queue::Error::UnknownQueue("q".into()), 404, "unknown_queue"),
            (queue::Error::NotFound, 404, "not_found"),
            (
                queue::Error::InvalidSpec {
                    field: "brief",
                    message: "m".into(),
                },
                400,
                "invalid_field",
            ),
            (
                queue::Error::UnknownUpstream(TaskId(1)),
                422,
                "unknown_upstream",
            ),
            (
                queue::Error::IdempotencyConflict(TaskId(1)),
                409,
                "idempotency_conflict",
            ),
            (
                queue::Error::InvalidState {
                    state: TaskState::Queued,
                    action: "resume",
                },
                409,
                "invalid_state",
            ),
            (
                queue::Error::StaleLease {
                    state: TaskState::Queued,
                    attempt: Attempt(2),
                },
                409,
                "stale_lease",
            ),
            (queue::Error::SubmitConflict, 409, "submit_conflict"),
            (queue::Error::SplitLimit("x".into()), 422, "split_limit"),
            (
                queue::Error::SplitWidens { field: "namespace" },
                422,
                "split_widens",
            ),
            (
                queue::Error::CorruptJournal {
                    path: "p".into(),
                    message: "m".into(),
                },
                500,
                "internal",
            ),
            (
                queue::Error::JournalFailed(store::Incident {
                    writer: store::Writer::Journal,
                    cause: "c".into(),
                    since: jiff::Timestamp::UNIX_EPOCH,
                }),
                503,
                "journal_failed",
            ),
            (
                queue::Error::Store(store::Error::NounNotFound),
                404,
                "not_found",
            ),
        ];
        for (err, status, code) in cases {
            let api = ApiError::from(err);
            assert_eq!((api.status.as_u16(), api.code), (status, code));
        }
    }

    #[test]
    fn every_worker_error_maps_to_its_status_and_code() {
        use crate::queue::{Attempt, TaskState};
        let pin: store::Pin = serde_json::from_value(
            json!({"store": "s", "key": "k", "version": 1, "sha256": "0".repeat(64)}),
        )
        .unwrap();
        let cases: Vec<(worker::Error, u16, &str)> = vec![
            (worker::Error::Unauthenticated("x"), 401, "unauthenticated"),
            (worker::Error::WrongTask, 403, "wrong_task"),
            (
                worker::Error::StaleLease {
                    state: TaskState::Queued,
                    attempt: Attempt(2),
                },
                409,
                "stale_lease",
            ),
            (worker::Error::AlreadySubmitted, 409, "already_submitted"),
            (
                worker::Error::InvalidPartName {
                    name: "..".into(),
                    why: "x",
                },
                400,
                "invalid_part_name",
            ),
            (worker::Error::FileRef("x".into()), 422, "invalid_file_ref"),
            (
                worker::Error::FileRefMissing("x".into()),
                404,
                "file_not_found",
            ),
            (worker::Error::TooLarge { limit: 1 }, 413, "body_too_large"),
            (
                worker::Error::ProjectionFailed {
                    path: "p".into(),
                    reason: "r".into(),
                },
                500,
                "projection_failed",
            ),
            (
                worker::Error::WorkDirUnavailable {
                    path: "p".into(),
                    reason: "r".into(),
                },
                500,
                "work_dir_unavailable",
            ),
            (
                worker::Error::InvalidPin {
                    field: "outputs[0]".into(),
                    reason: "r".into(),
                    pin: Box::new(pin),
                },
                422,
                "invalid_pin",
            ),
            (
                worker::Error::Queue(queue::Error::NotFound),
                404,
                "not_found",
            ),
            (worker::Error::Auth(auth::Error::Hidden), 404, "not_found"),
            (
                worker::Error::Store(store::Error::OutOfSpace {
                    context: "c".into(),
                }),
                507,
                "insufficient_storage",
            ),
        ];
        for (err, status, code) in cases {
            let api = ApiError::from(err);
            assert_eq!((api.status.as_u16(), api.code), (status, code));
        }
    }

    #[test]
    fn too_many_failures_is_429_with_retry_after() {
        let resp = ApiError::from(TooManyFailures { retry_after_s: 3 }).into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "3");
    }

    #[test]
    fn every_promotion_error_maps_to_its_status_and_code() {
        let refused = ApiError::from(promotion::Error::Refused(vec!["no stage".into()]));
        assert_eq!(
            (refused.status.as_u16(), refused.code),
            (422, "promotion_refused")
        );
        assert_eq!(refused.details["problems"], json!(["no stage"]));
        let conflict = ApiError::from(promotion::Error::Store(store::Error::VersionConflict {
            expected: 1,
            current: 2,
        }));
        assert_eq!(
            (conflict.status.as_u16(), conflict.code),
            (409, "version_conflict")
        );
    }

    #[test]
    fn every_auth_error_maps_and_hidden_equals_missing() {
        let cases: Vec<(auth::Error, u16, &str)> = vec![
            (auth::Error::Unauthenticated("x"), 401, "unauthenticated"),
            (auth::Error::Forbidden("x".into()), 403, "forbidden"),
            (auth::Error::Hidden, 404, "not_found"),
            (
                auth::Error::BadRequest("producer_surface_required", "x".into()),
                400,
                "producer_surface_required",
            ),
            (auth::Error::InvalidGrant("x".into()), 400, "invalid_grant"),
            (auth::Error::UnknownKey, 404, "not_found"),
            (auth::Error::LastAdminKey, 409, "last_admin_key"),
            (
                auth::Error::Store(store::Error::NounNotFound),
                404,
                "not_found",
            ),
        ];
        for (err, status, code) in cases {
            let api = ApiError::from(err);
            assert_eq!((api.status.as_u16(), api.code), (status, code));
        }
        let hidden = ApiError::from(auth::Error::Hidden);
        let no_task = ApiError::from(queue::Error::NotFound);
        assert_eq!(
            (no_task.status, no_task.code, &no_task.message),
            (hidden.status, hidden.code, &hidden.message)
        );
        let missing = ApiError::from(store::Error::NounNotFound);
        assert_eq!(
            (hidden.status, hidden.code, hidden.message, hidden.details),
            (
                missing.status,
                missing.code,
                missing.message,
                missing.details
            )
        );
    }
}
