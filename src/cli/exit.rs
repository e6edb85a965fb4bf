//! How a client subcommand ends: its exit code, and a failure told so the
//! user knows what to do next.
//!
//! | exit | meaning |
//! | --- | --- |
//! | 0 | done |
//! | 1 | the daemon refused (its status, code, message and a next step are printed), or another failure |
//! | 2 | usage: a bad flag, an unreadable or invalid input file, no key, a malformed key or handle (nothing was sent) |
//! | 3 | the daemon cannot be reached |
//!
//! `tessera import` keeps its own codes for a plan (see its `--help`).

use std::process::ExitCode;

use crate::client::ClientError;

/// Exit code: the daemon refused, or another failure.
pub const REFUSED: u8 = 1;
/// Exit code: a usage problem.
pub const USAGE: u8 = 2;
/// Exit code: the daemon cannot be reached.
pub const UNREACHABLE: u8 = 3;

/// A usage problem found before any request: exits 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// Prints `e` to stderr and returns its exit code.
pub fn report(e: &anyhow::Error) -> ExitCode {
    let client = e.chain().find_map(|c| c.downcast_ref::<ClientError>());
    let code = match client {
        Some(ClientError::Connect { .. }) => {
            eprintln!("error: {e:#}");
            UNREACHABLE
        }
        Some(ClientError::MalformedCredential(_)) => {
            eprintln!("error: {e:#}");
            USAGE
        }
        Some(ClientError::Api {
            status,
            code,
            message,
            details,
        }) => {
            eprintln!("error: the daemon refused: {status}: {code}: {message}");
            if !(details.is_null() || details.as_object().is_some_and(|m| m.is_empty())) {
                eprintln!("  details: {details}");
            }
            eprintln!("  next: {}", next_step(code));
            REFUSED
        }
        _ if e.chain().any(|c| c.downcast_ref::<Usage>().is_some()) => {
            eprintln!("error: {e:#}");
            USAGE
        }
        _ => {
            eprintln!("error: {e:#}");
            REFUSED
        }
    };
    ExitCode::from(code)
}

/// What to do about an error code the daemon answered.
fn next_step(code: &str) -> &'static str {
    match code {
        "unauthenticated" => {
            "check --key-file or TESSERA_KEY; the key may be revoked or expired (an admin can list keys with `tessera key list`)"
        }
        "forbidden" => {
            "the key lacks a grant for this; ask an admin for a key issued with it (`tessera key issue`)"
        }
        "not_found" => {
            "check the id; a record this key may not see answers the same (`tessera task list` shows what it sees)"
        }
        "unknown_queue" => {
            "create the queue (`tessera queue create NAME`, admin), or use a key issued for it (`tessera queue list` shows yours)"
        }
        "invalid_state" => {
            "the task's state does not allow this; see it with `tessera task show ID`"
        }
        "stale_lease" => "the lease changed; `tessera task show ID` shows the current one",
        "idempotency_conflict" => {
            "this idempotency key names a task with another spec; use a new key, or the same spec"
        }
        "invalid_field"
        | "missing_field"
        | "unknown_field"
        | "invalid_body"
        | "malformed_json"
        | "invalid_name"
        | "invalid_query"
        | "invalid_task_id"
        | "invalid_grant"
        | "invalid_pin"
        | "unknown_upstream"
        | "too_deep"
        | "producer_surface_required"
        | "producer_surface_fixed" => {
            "fix the request as the message says (the field is in details) and run it again"
        }
        "version_conflict" => "read the current version and write after it",
        "busy" | "too_many_failures" => "wait a moment and run it again",
        "insufficient_storage" => "free disk space on the daemon's root, then run it again",
        "storage_failed" | "journal_failed" => {
            "check the disk, then restart the daemon (it refuses writes until then)"
        }
        "no_route" => "the daemon may be older than this client; upgrade it",
        "internal" | "corrupt_object" | "object_missing" | "corrupt_ref" | "storage_io" => {
            "see the daemon's log; `tessera fsck` checks the root"
        }
        _ => "see the error table in the README",
    }
}
