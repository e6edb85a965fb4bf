//! Every error code and every domain error variant, walked.

use http::StatusCode;

use super::*;
use crate::queue::{Attempt, TaskId, TaskState};
use crate::store::{Incident, Sha256, Writer};

/// Asserts the status and code of each case, naming the case that differs.
fn check<E: std::fmt::Debug>(cases: Vec<(E, u16, &str)>)
where
    ApiError: From<E>,
{
    for (err, status, code) in cases {
        let shown = format!("{err:?}");
        let api = ApiError::from(err);
        assert_eq!(
            (api.status().as_u16(), api.code.as_str()),
            (status, code),
            "{shown}"
        );
    }
}

fn incident(writer: Writer) -> Incident {
    Incident {
        writer,
        cause: "fsync failed: Input/output error (os error 5)".into(),
        since: jiff::Timestamp::UNIX_EPOCH,
    }
}

fn snake(variant: &str) -> String {
    let mut out = String::new();
    for (i, c) in variant.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// The rows of the README's error table: code and status.
fn readme_codes() -> Vec<(String, u16)> {
    let readme = include_str!("../../../README.md");
    let table = readme
        .split("\n### Errors\n")
        .nth(1)
        .expect("the README has an Errors section");
    table
        .lines()
        .take_while(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut cells = l.split('|').map(str::trim).skip(1);
            let code = cells.next()?.strip_prefix('`')?.strip_suffix('`')?;
            let status = cells.next()?.parse().ok()?;
            Some((code.to_string(), status))
        })
        .collect()
}

#[test]
fn every_code_has_its_status_a_snake_case_name_and_a_readme_row() {
    let readme = readme_codes();
    let mut names = std::collections::HashSet::new();
    for code in ErrorCode::ALL {
        let name = code.as_str();
        assert_eq!(name, snake(&format!("{code:?}")), "{code:?}");
        assert!(names.insert(name), "{name} twice");
        let status = code.status();
        assert!(
            status.is_client_error() || status.is_server_error(),
            "{name}: {status}"
        );
        assert!(
            readme.contains(&(name.to_string(), status.as_u16())),
            "the README's error table has no row `{name}` | {}",
            status.as_u16()
        );
    }
    assert_eq!(
        readme.len(),
        ErrorCode::ALL.len(),
        "the README lists a code the API does not have: {readme:?}"
    );
}

#[test]
fn every_store_error_maps_to_its_status_and_code() {
    let sha = Sha256::of(b"x");
    let io = || std::io::Error::other("disk");
    check(vec![
        (
            store::Error::InvalidName(store::BadName {
                field: "key",
                value: "..".into(),
            }),
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
        (
            store::Error::ObjectMissing { sha256: sha },
            500,
            "object_missing",
        ),
        (
            store::Error::CorruptRef {
                path: "p".into(),
                message: "m".into(),
            },
            500,
            "corrupt_ref",
        ),
        (
            store::Error::Locked {
                path: "p".into(),
                pid: Some(1),
            },
            500,
            "internal",
        ),
        (store::Error::TaskFailed("panicked".into()), 500, "internal"),
        (
            store::Error::CorruptLog {
                path: "journal/nouns/00000000000000000000.log".into(),
                message: "at byte 8: damaged".into(),
            },
            500,
            "internal",
        ),
        (
            store::Error::OutOfSpace {
                context: "writing k.json".into(),
            },
            507,
            "insufficient_storage",
        ),
        (
            store::Error::StorageFailed(incident(Writer::Files)),
            503,
            "storage_failed",
        ),
        (
            store::Error::Io {
                context: "c".into(),
                error: io(),
            },
            500,
            "storage_io",
        ),
    ]);
}

#[test]
fn storage_conditions_say_what_happened() {
    let full = ApiError::from(crate::store::io_err(
        "writing a temp file",
        std::io::Error::from_raw_os_error(28),
    ));
    assert_eq!(full.code, ErrorCode::InsufficientStorage);
    assert!(full.message.contains("free space"), "{}", full.message);

    let failed = ApiError::from(queue::JournalError::Failed(incident(Writer::Journal)));
    assert_eq!(failed.code, ErrorCode::JournalFailed);
    assert_eq!(
        failed.details,
        json!({"writer": "journal", "cause": "fsync failed: Input/output error (os error 5)", "since": "1970-01-01T00:00:00Z"})
    );
    assert!(failed.message.contains("restart"), "{}", failed.message);

    let io = ApiError::from(crate::store::io_err(
        "reading nouns/a/b/c.json",
        std::io::Error::from_raw_os_error(5),
    ));
    assert_eq!(io.code, ErrorCode::StorageIo);
    assert!(!io.message.contains("nouns/"), "the path stays in the log");
    assert!(io.cause.unwrap().contains("nouns/a/b/c.json"));
}

#[test]
fn every_queue_error_maps_to_its_status_and_code() {
    use queue::{EnqueueError, JournalError, SplitError, SubmitError, TaskCallError};
    check(vec![
        (EnqueueError::UnknownQueue("q".into()), 404, "unknown_queue"),
        (
            EnqueueError::InvalidSpec {
                field: "brief",
                message: "m".into(),
            },
            400,
            "invalid_field",
        ),
        (
            EnqueueError::UnknownUpstream(TaskId(1)),
            422,
            "unknown_upstream",
        ),
        (
            EnqueueError::IdempotencyConflict(TaskId(1)),
            409,
            "idempotency_conflict",
        ),
        (
            EnqueueError::Unclaimable("m".into()),
            422,
            "unclaimable_task",
        ),
    ]);
    check(vec![
        (TaskCallError::NotFound, 404, "not_found"),
        (
            TaskCallError::InvalidState {
                state: TaskState::Queued,
                action: "resume",
            },
            409,
            "invalid_state",
        ),
        (
            TaskCallError::StaleLease {
                state: TaskState::Queued,
                attempt: Attempt(2),
            },
            409,
            "stale_lease",
        ),
        (
            TaskCallError::NotRetryable {
                state: TaskState::Queued,
            },
            409,
            "not_retryable",
        ),
    ]);
    check(vec![(SubmitError::Conflict, 409, "submit_conflict")]);
    check(vec![
        (SplitError::Limit("x".into()), 422, "split_limit"),
        (
            SplitError::Widens { field: "namespace" },
            422,
            "split_widens",
        ),
        (
            SplitError::Child(EnqueueError::UnknownQueue("q".into())),
            404,
            "unknown_queue",
        ),
    ]);
    check(vec![
        (JournalError::Inapplicable("x".into()), 500, "internal"),
        (
            JournalError::Failed(incident(Writer::Journal)),
            503,
            "journal_failed",
        ),
        (
            JournalError::Store(store::Error::NounNotFound),
            404,
            "not_found",
        ),
    ]);
    check(vec![(
        queue::Error::CorruptJournal {
            path: "p".into(),
            message: "m".into(),
        },
        500,
        "internal",
    )]);
}

#[test]
fn every_worker_error_maps_to_its_status_and_code() {
    let pin: store::Pin = serde_json::from_value(
        json!({"store": "s", "key": "k", "version": 1, "sha256": "0".repeat(64)}),
    )
    .unwrap();
    check(vec![
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
            worker::Error::Task(queue::TaskCallError::NotFound),
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
    ]);
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
    assert_eq!(refused.details["problems"], json!(["no stage"]));
    check(vec![
        (
            promotion::Error::Refused(vec!["no stage".into()]),
            422,
            "promotion_refused",
        ),
        (
            promotion::Error::Store(store::Error::VersionConflict {
                expected: 1,
                current: 2,
            }),
            409,
            "version_conflict",
        ),
    ]);
}

#[test]
fn every_auth_error_maps_and_hidden_equals_missing() {
    check(vec![
        (auth::Error::Unauthenticated("x"), 401, "unauthenticated"),
        (auth::Error::Forbidden("x".into()), 403, "forbidden"),
        (auth::Error::Hidden, 404, "not_found"),
        (auth::Error::HiddenQueue("q".into()), 404, "unknown_queue"),
        (
            auth::Error::ProducerSurfaceRequired,
            400,
            "producer_surface_required",
        ),
        (
            auth::Error::ProducerSurfaceFixed,
            400,
            "producer_surface_fixed",
        ),
        (auth::Error::InvalidGrant("x".into()), 400, "invalid_grant"),
        (auth::Error::UnknownKey, 404, "not_found"),
        (auth::Error::LastAdminKey, 409, "last_admin_key"),
        (
            auth::Error::Store(store::Error::NounNotFound),
            404,
            "not_found",
        ),
    ]);
    let unknown = "nouns:write".parse::<auth::Scope>().unwrap_err();
    let scope = ApiError::from(auth::scope::UnknownScopeAt { index: 2, unknown });
    assert_eq!(
        (scope.status().as_u16(), scope.code.as_str(), &scope.details),
        (400, "invalid_grant", &json!({"field": "grants.scopes[2]"}))
    );
    let hidden = ApiError::from(auth::Error::Hidden);
    let no_task = ApiError::from(queue::TaskCallError::NotFound);
    assert_eq!(
        (no_task.code, &no_task.message),
        (hidden.code, &hidden.message)
    );
    let missing = ApiError::from(store::Error::NounNotFound);
    assert_eq!(
        (hidden.code, hidden.message, hidden.details),
        (missing.code, missing.message, missing.details)
    );
}
