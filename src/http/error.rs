//! The only module that knows HTTP statuses: every domain error becomes a
//! status and a `{"error": {"code", "message", "details"}}` body here.
//! [`ErrorCode`] is the closed list of codes, each with its one status (the
//! README's error table lists them all). A bug becomes a bare 500
//! `internal` (logged with its cause); storage conditions have their own
//! codes; "may not see" becomes the very same 404 as "missing".

use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::auth::throttle::TooManyFailures;
use crate::{auth, promotion, queue, store, worker};

/// Declares [`ErrorCode`] from one table: variant, code, status.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])+ $variant:ident = $name:literal, $status:ident;)+) => {
        /// Every error code the API answers. A code always comes with the
        /// same status, so clients may match on either.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[doc = $doc])+ $variant,)+
        }

        impl ErrorCode {
            /// Every code, in the README table's order.
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$variant,)+];

            /// The snake_case name sent as `error.code`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $name,)+
                }
            }

            /// The status this code is always sent with.
            pub fn status(self) -> StatusCode {
                match self {
                    $(ErrorCode::$variant => StatusCode::$status,)+
                }
            }
        }
    };
}

error_codes! {
    /// A namespace, store, key or other name breaks the name rule.
    InvalidName = "invalid_name", BAD_REQUEST;
    /// A field's value breaks a rule (`details.field`).
    InvalidField = "invalid_field", BAD_REQUEST;
    /// A required field is absent (`details.field`).
    MissingField = "missing_field", BAD_REQUEST;
    /// A field the body type does not have.
    UnknownField = "unknown_field", BAD_REQUEST;
    /// A body of the wrong shape.
    InvalidBody = "invalid_body", BAD_REQUEST;
    /// A body that is not JSON.
    MalformedJson = "malformed_json", BAD_REQUEST;
    /// JSON nested deeper than the limit.
    TooDeep = "too_deep", BAD_REQUEST;
    /// The body could not be read off the connection.
    BodyUnreadable = "body_unreadable", BAD_REQUEST;
    /// A media type that is not a header-safe string.
    InvalidMediaType = "invalid_media_type", BAD_REQUEST;
    /// A path segment that is not UTF-8.
    InvalidPath = "invalid_path", BAD_REQUEST;
    /// A query parameter that cannot be parsed.
    InvalidQuery = "invalid_query", BAD_REQUEST;
    /// A task id that is not `t<number>`.
    InvalidTaskId = "invalid_task_id", BAD_REQUEST;
    /// A key's grants that cannot be issued.
    InvalidGrant = "invalid_grant", BAD_REQUEST;
    /// A part name that breaks the part-name rule.
    InvalidPartName = "invalid_part_name", BAD_REQUEST;
    /// A new record needs a producer surface and the key holds no single one.
    ProducerSurfaceRequired = "producer_surface_required", BAD_REQUEST;
    /// A noun's producer surface cannot change after it is created.
    ProducerSurfaceFixed = "producer_surface_fixed", BAD_REQUEST;
    /// A batch over the item limit.
    TooManyItems = "too_many_items", BAD_REQUEST;
    /// No usable credential.
    Unauthenticated = "unauthenticated", UNAUTHORIZED;
    /// The credential may see this but not do it.
    Forbidden = "forbidden", FORBIDDEN;
    /// A worker credential used on another task.
    WrongTask = "wrong_task", FORBIDDEN;
    /// Missing, or hidden from this key (the same answer).
    NotFound = "not_found", NOT_FOUND;
    /// The noun exists but not this version.
    VersionNotFound = "version_not_found", NOT_FOUND;
    /// A queue that is not provisioned, or not issued to this key.
    UnknownQueue = "unknown_queue", NOT_FOUND;
    /// An `@file:` body naming a file that does not exist.
    FileNotFound = "file_not_found", NOT_FOUND;
    /// No route for this method and path.
    NoRoute = "no_route", NOT_FOUND;
    /// A method no route takes on a path some route serves (`Allow` and
    /// `details.allow` list those that do).
    MethodNotAllowed = "method_not_allowed", METHOD_NOT_ALLOWED;
    /// Compare-and-swap lost: `details.current` is the current version.
    VersionConflict = "version_conflict", CONFLICT;
    /// A pin's sha256 differs from the version's.
    PinMismatch = "pin_mismatch", CONFLICT;
    /// The idempotency key was used with a different spec.
    IdempotencyConflict = "idempotency_conflict", CONFLICT;
    /// The task's state does not allow this.
    InvalidState = "invalid_state", CONFLICT;
    /// A retry of a task that neither failed nor was cancelled.
    NotRetryable = "not_retryable", CONFLICT;
    /// The lease named no longer holds the task.
    StaleLease = "stale_lease", CONFLICT;
    /// A different submit for an attempt that already has a receipt.
    SubmitConflict = "submit_conflict", CONFLICT;
    /// A worker submit for an attempt that already submitted.
    AlreadySubmitted = "already_submitted", CONFLICT;
    /// Revoking the last usable admin key.
    LastAdminKey = "last_admin_key", CONFLICT;
    /// A body over the size limit.
    BodyTooLarge = "body_too_large", PAYLOAD_TOO_LARGE;
    /// A request body that paused longer than the header timeout.
    BodyTimeout = "body_timeout", REQUEST_TIMEOUT;
    /// The bodies in flight fill the memory budget (`Retry-After`).
    Busy = "busy", SERVICE_UNAVAILABLE;
    /// A `depends_on` task that does not exist for this key.
    UnknownUpstream = "unknown_upstream", UNPROCESSABLE_ENTITY;
    /// A task no key but an admin could ever see or claim.
    UnclaimableTask = "unclaimable_task", UNPROCESSABLE_ENTITY;
    /// A split past the depth or fan-out bounds.
    SplitLimit = "split_limit", UNPROCESSABLE_ENTITY;
    /// A split child widening its parent's envelope.
    SplitWidens = "split_widens", UNPROCESSABLE_ENTITY;
    /// An `@file:` body outside the work dir or not a plain file.
    InvalidFileRef = "invalid_file_ref", UNPROCESSABLE_ENTITY;
    /// A pin that names no readable version with that hash.
    InvalidPin = "invalid_pin", UNPROCESSABLE_ENTITY;
    /// A strict task whose placement is already blocked.
    PlacementUnresolvable = "placement_unresolvable", UNPROCESSABLE_ENTITY;
    /// The promotion gate refused (`details.problems`).
    PromotionRefused = "promotion_refused", UNPROCESSABLE_ENTITY;
    /// Too many failed worker credentials from this address.
    TooManyFailures = "too_many_failures", TOO_MANY_REQUESTS;
    /// A bug; the daemon log has the cause.
    Internal = "internal", INTERNAL_SERVER_ERROR;
    /// A stored object failed its hash check.
    CorruptObject = "corrupt_object", INTERNAL_SERVER_ERROR;
    /// An object a noun or receipt names is missing.
    ObjectMissing = "object_missing", INTERNAL_SERVER_ERROR;
    /// A noun's ref file cannot be parsed.
    CorruptRef = "corrupt_ref", INTERNAL_SERVER_ERROR;
    /// Reading or writing under the root failed (not a full disk).
    StorageIo = "storage_io", INTERNAL_SERVER_ERROR;
    /// The task's work dir cannot be made ready.
    WorkDirUnavailable = "work_dir_unavailable", INTERNAL_SERVER_ERROR;
    /// An fsync failed earlier: writes are refused until restart.
    StorageFailed = "storage_failed", SERVICE_UNAVAILABLE;
    /// The task journal failed: task changes are refused until restart.
    JournalFailed = "journal_failed", SERVICE_UNAVAILABLE;
    /// The queue's database cannot be reached (`--queue-url`): retry.
    QueueUnavailable = "queue_unavailable", SERVICE_UNAVAILABLE;
    /// The shared store (`--objects-url` bucket, the nouns' database)
    /// does not answer: retry.
    StoreUnavailable = "store_unavailable", SERVICE_UNAVAILABLE;
    /// The disk is full: nothing was written; retry after freeing space.
    InsufficientStorage = "insufficient_storage", INSUFFICIENT_STORAGE;
}

/// An error on its way to the client.
#[derive(Debug)]
pub struct ApiError {
    /// The code, which decides the status.
    pub code: ErrorCode,
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
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            details: json!({}),
            cause: None,
            retry_after_s: None,
        }
    }

    /// The HTTP status (the code's).
    pub fn status(&self) -> StatusCode {
        self.code.status()
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

    /// The one "not found" answer, shared by missing and hidden records so
    /// that neither body nor headers tell them apart.
    pub fn not_found() -> ApiError {
        ApiError::new(
            ErrorCode::NotFound,
            "no such record, or this key may not see it",
        )
    }

    /// The body this error is sent with:
    /// `{"error": {"code", "message", "details"}}`. Code that answers for
    /// the API without going through a route (`tessera mcp`) builds it
    /// here too.
    pub fn body(&self) -> Value {
        json!({"error": {
            "code": self.code.as_str(),
            "message": self.message,
            "details": self.details,
        }})
    }

    /// Records what the log line should say besides the message.
    pub fn because(mut self, cause: impl Into<String>) -> ApiError {
        self.cause = Some(cause.into());
        self
    }

    /// A 500 that hides its cause from the client; the log line names it.
    pub fn internal(cause: &dyn std::fmt::Display) -> ApiError {
        ApiError::new(
            ErrorCode::Internal,
            "internal error; the daemon log has the cause",
        )
        .because(cause.to_string())
    }

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

impl From<store::Error> for ApiError {
    fn from(e: store::Error) -> ApiError {
        use ErrorCode as C;
        use store::Error as E;
        let msg = e.to_string();
        match e {
            E::InvalidName { field, value } => ApiError::new(C::InvalidName, msg)
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
