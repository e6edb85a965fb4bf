//! The API's error vocabulary, shared by the daemon, `tessera mcp` and
//! the client side: [`ErrorCode`], the closed list of codes, each with its
//! one status (the README's error table lists them all), and [`ApiError`],
//! an error with its code, message and details, whose body is
//! `{"error": {"code", "message", "details"}}`. How domain errors become
//! API errors, and an API error a response, is the daemon's
//! (`http::error`).

use http::StatusCode;
use serde_json::{Value, json};

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
}
