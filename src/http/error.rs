//! The only module that knows how domain errors become API errors: every
//! store, queue, auth, promotion and worker error becomes an [`ApiError`]
//! (the vocabulary, `wire::error`) here, and an [`ApiError`] a response. A
//! bug becomes a bare 500 `internal` (logged with its cause); storage
//! conditions have their own codes; "may not see" becomes the very same
//! 404 as "missing".

use http::{HeaderValue, Response, header};
use serde_json::json;

pub use crate::wire::error::{ApiError, ErrorCode};

use crate::auth::throttle::TooManyFailures;
use crate::{auth, promotion, queue, store, worker};

impl ApiError {
    /// A refusal after a failed durable write: which writer, what, since when.
    fn failed(code: ErrorCode, message: String, incident: &store::Incident) -> ApiError {
        ApiError::new(code, message).with(json!({
            "writer": incident.writer,
            "cause": incident.cause,
            "since": incident.since,
        }))
    }

    /// The response carrying this error. A server error is logged here,
    /// once, with its cause.
    pub fn into_response(self) -> super::Resp {
        let status = self.status();
        let code = self.code.as_str();
        if status.is_server_error() {
            let cause = self.cause.as_deref().unwrap_or("");
            tracing::error!(status = status.as_u16(), code, message = %self.message, cause, "request failed");
        } else {
            tracing::debug!(status = status.as_u16(), code, message = %self.message, "request refused");
        }
        let mut resp = Response::new(super::body::full(self.body().to_string()));
        *resp.status_mut() = status;
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
        let mut api = ApiError::new(ErrorCode::TooManyFailures, e.to_string())
            .with(json!({"retry_after_s": e.retry_after_s}));
        api.retry_after_s = Some(e.retry_after_s);
        api
    }
}

impl From<store::BadName> for ApiError {
    fn from(e: store::BadName) -> ApiError {
        store::Error::from(e).into()
    }
}

impl From<store::Error> for ApiError {
    fn from(e: store::Error) -> ApiError {
        use ErrorCode as C;
        use store::Error as E;
        let msg = e.to_string();
        match e {
            E::InvalidName(store::BadName { field, value }) => ApiError::new(C::InvalidName, msg)
                .with(json!({"field": field, "value": value})),
            E::NounNotFound => ApiError::not_found(),
            E::VersionNotFound { version, latest } => ApiError::new(C::VersionNotFound, msg)
                .with(json!({"version": version, "latest": latest})),
            E::VersionConflict { expected, current } => ApiError::new(C::VersionConflict, msg)
                .with(json!({"expected": expected, "current": current})),
            E::PinMismatch {
                version,
                expected,
                actual,
            } => ApiError::new(C::PinMismatch, msg)
                .with(json!({"version": version, "expected": expected, "actual": actual})),
            E::CorruptObject { path } => ApiError::new(
                C::CorruptObject,
                "a stored object failed its hash check; the operator should run `tessera fsck`",
            )
            .because(format!("{path} does not hash to its name; not served")),
            E::ObjectMissing { .. } => ApiError::new(
                C::ObjectMissing,
                "a stored object is missing; the operator should run `tessera fsck`",
            )
            .because(msg),
            E::CorruptRef { .. } => ApiError::new(
                C::CorruptRef,
                "a noun's ref file cannot be read; the operator should run `tessera fsck`",
            )
            .because(msg),
            E::OutOfSpace { .. } => ApiError::new(C::InsufficientStorage, msg),
            E::Unavailable { .. } => ApiError::new(
                C::StoreUnavailable,
                "the shared store (the objects' bucket, the nouns' database) does not answer; retry",
            )
            .because(msg),
            E::StorageFailed(incident) => ApiError::failed(C::StorageFailed, msg, &incident),
            E::Io { error, .. } => ApiError::new(
                C::StorageIo,
                format!(
                    "a file under the root could not be read or written ({}); the daemon log names it",
                    error.kind()
                ),
            )
            .because(msg),
            E::Locked { .. } | E::CorruptLog { .. } | E::TaskFailed(_) => {
                ApiError::internal(&msg)
            }
        }
    }
}

impl From<auth::Error> for ApiError {
    fn from(e: auth::Error) -> ApiError {
        use ErrorCode as C;
        use auth::Error as E;
        let msg = e.to_string();
        match e {
            E::Unauthenticated(_) => ApiError::new(C::Unauthenticated, msg),
            E::Forbidden(_) => ApiError::new(C::Forbidden, msg),
            E::Hidden => ApiError::not_found(),
            E::HiddenQueue(q) => ApiError::new(C::UnknownQueue, msg).with(json!({"queue": q})),
            E::ProducerSurfaceRequired => ApiError::new(C::ProducerSurfaceRequired, msg),
            E::ProducerSurfaceFixed => ApiError::new(C::ProducerSurfaceFixed, msg),
            E::InvalidGrant(_) => ApiError::new(C::InvalidGrant, msg),
            E::UnknownKey => ApiError::not_found(),
            E::LastAdminKey => ApiError::new(C::LastAdminKey, msg),
            E::KeysUnavailable(_) => ApiError::new(C::QueueUnavailable, msg),
            E::Store(s) => s.into(),
        }
    }
}

impl From<auth::scope::UnknownScopeAt> for ApiError {
    fn from(e: auth::scope::UnknownScopeAt) -> ApiError {
        let field = format!("grants.scopes[{}]", e.index);
        ApiError::new(ErrorCode::InvalidGrant, e.to_string()).with(json!({"field": field}))
    }
}

impl From<queue::JournalError> for ApiError {
    fn from(e: queue::JournalError) -> ApiError {
        use queue::JournalError as E;
        let msg = e.to_string();
        match e {
            E::Failed(incident) => ApiError::failed(ErrorCode::JournalFailed, msg, &incident),
            E::Inapplicable(_) => ApiError::internal(&msg),
            E::Store(s) => s.into(),
            E::Unavailable(_) => ApiError::new(ErrorCode::QueueUnavailable, msg),
        }
    }
}

impl From<queue::TaskCallError> for ApiError {
    fn from(e: queue::TaskCallError) -> ApiError {
        use ErrorCode as C;
        use queue::TaskCallError as E;
        let msg = e.to_string();
        match e {
            E::NotFound => ApiError::not_found(),
            E::InvalidState { state, action } => {
                ApiError::new(C::InvalidState, msg).with(json!({"state": state, "action": action}))
            }
            E::NotRetryable { state } => {
                ApiError::new(C::NotRetryable, msg).with(json!({"state": state}))
            }
            E::StaleLease { state, attempt } => {
                ApiError::new(C::StaleLease, msg).with(json!({"state": state, "attempt": attempt}))
            }
            E::NotClaimant | E::ResumedByParker => ApiError::new(C::Forbidden, msg),
            E::Journal(j) => j.into(),
        }
    }
}

impl From<queue::EnqueueError> for ApiError {
    fn from(e: queue::EnqueueError) -> ApiError {
        use ErrorCode as C;
        use queue::EnqueueError as E;
        let msg = e.to_string();
        match e {
            E::UnknownQueue(q) => ApiError::new(C::UnknownQueue, msg).with(json!({"queue": q})),
            E::InvalidSpec { field, .. } => {
                ApiError::new(C::InvalidField, msg).with(json!({"field": field}))
            }
            E::UnknownUpstream(id) => {
                ApiError::new(C::UnknownUpstream, msg).with(json!({"task_id": id}))
            }
            E::IdempotencyConflict(id) => {
                ApiError::new(C::IdempotencyConflict, msg).with(json!({"task_id": id}))
            }
            E::Unclaimable(_) => {
                ApiError::new(C::UnclaimableTask, msg).with(json!({"field": "producer_surface"}))
            }
            E::Journal(j) => j.into(),
        }
    }
}

impl From<queue::SubmitError> for ApiError {
    fn from(e: queue::SubmitError) -> ApiError {
        match e {
            queue::SubmitError::Task(t) => t.into(),
            queue::SubmitError::Conflict => ApiError::new(ErrorCode::SubmitConflict, e.to_string()),
        }
    }
}

impl From<queue::SplitError> for ApiError {
    fn from(e: queue::SplitError) -> ApiError {
        use ErrorCode as C;
        use queue::SplitError as E;
        let msg = e.to_string();
        match e {
            E::Task(t) => t.into(),
            E::Limit(_) => ApiError::new(C::SplitLimit, msg),
            E::Widens { field } => ApiError::new(C::SplitWidens, msg).with(json!({"field": field})),
            E::Child(c) => c.into(),
        }
    }
}

impl From<queue::Error> for ApiError {
    fn from(e: queue::Error) -> ApiError {
        let msg = e.to_string();
        match e {
            queue::Error::CorruptJournal { .. } => ApiError::internal(&msg),
            queue::Error::Journal(j) => j.into(),
            queue::Error::Store(s) => s.into(),
            queue::Error::Stopping => ApiError::new(ErrorCode::Busy, msg),
        }
    }
}

impl From<worker::Error> for ApiError {
    fn from(e: worker::Error) -> ApiError {
        use ErrorCode as C;
        use worker::Error as E;
        let msg = e.to_string();
        match e {
            E::Unauthenticated(_) => ApiError::new(C::Unauthenticated, msg),
            E::Queue(q) => q.into(),
            E::WrongTask => ApiError::new(C::WrongTask, msg),
            E::StaleLease { state, attempt } => {
                ApiError::new(C::StaleLease, msg).with(json!({"state": state, "attempt": attempt}))
            }
            E::AlreadySubmitted => ApiError::new(C::AlreadySubmitted, msg),
            E::InvalidPartName { name, .. } => {
                ApiError::new(C::InvalidPartName, msg).with(json!({"name": name}))
            }
            E::FileRef(_) => ApiError::new(C::InvalidFileRef, msg),
            E::FileRefMissing(_) => ApiError::new(C::FileNotFound, msg),
            E::TooLarge { limit } => {
                ApiError::new(C::BodyTooLarge, msg).with(json!({"limit": limit}))
            }
            E::WorkDirUnavailable { path, reason } => ApiError::new(C::WorkDirUnavailable, msg)
                .with(json!({"path": path, "reason": reason})),
            E::InvalidPin { field, pin, .. } => {
                ApiError::new(C::InvalidPin, msg).with(json!({"field": field, "pin": pin}))
            }
            E::InvalidField { field, .. } => {
                ApiError::new(C::InvalidField, msg).with(json!({"field": field}))
            }
            E::Task(t) => t.into(),
            E::Submit(s) => s.into(),
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
                ApiError::new(ErrorCode::PromotionRefused, msg).with(json!({"problems": problems}))
            }
            promotion::Error::Store(s) => s.into(),
            promotion::Error::Queue(q) => q.into(),
        }
    }
}

#[cfg(test)]
mod tests;
