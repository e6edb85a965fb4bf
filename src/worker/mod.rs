//! The worker I/O contract: a worker (a program, or an LLM agent handed
//! only a `wh-` handle) fetches its prompt in one request and leaves
//! through tool calls: staged named parts, then one final submit. It never
//! chooses a path; the server projects the result into ctx-dir files.
//!
//! A worker credential is a capability token or a handle standing for one,
//! bound to one (task, attempt); the worker acts under its claimant's key
//! as that key is now. [`resolve`] turns it into a [`Session`] when the
//! call arrives:
//! - unusable for any reason (missing, malformed, a forged or tampered
//!   token, an unknown handle, an attempt that ended because the task moved
//!   on or is terminal, a lapsed lease, a claimant key revoked or expired):
//!   [`Error::Unauthenticated`], one answer byte for byte (401), so a
//!   guesser learns nothing; the reason is for the log;
//! - the claimant lacks the route's grant (`verbs:claim` for prompt,
//!   nouns, heartbeat, artifact and parts, `verbs:submit` for submit) or
//!   sight of the task: 403 (or 404), as on the key routes;
//! - used for another task (`?task_id=`): 403.
//!
//! Staging and submit then take the task's lock ([`order`]) and resolve
//! again from the queue's current state ([`Session::recheck`]): an attempt
//! that ended while the call waited answers `409 already_submitted` (its
//! own submit ended it) or `409 stale_lease`, and the call touches no file.

pub mod area;
pub mod artifact;
pub mod audit;
pub mod consumes;
pub mod contract;
pub mod file_ref;
pub mod front_matter;
pub mod order;
pub mod output;
pub mod pins;
pub mod problem;
pub mod projection;
pub mod prompt;
pub mod shim;
pub mod submit;

use jiff::Timestamp;

use crate::auth::access::{self, TaskFacts};
use crate::auth::token::{self, Minter};
use crate::auth::{Keyring, Principal};
use crate::queue::{self, Attempt, Queue, Task, TaskId, TaskState};
use crate::store::{self, Name};

/// What can fail on the worker routes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No usable worker credential. The reason is for the log only: every
    /// case answers with the same message.
    #[error(
        "no usable worker credential; send `Authorization: Bearer <wh- handle or worker token>` from a live claim"
    )]
    Unauthenticated(&'static str),
    /// A credential for another task.
    #[error("this worker credential belongs to another task")]
    WrongTask,
    /// The attempt ended during the call (while it waited for its turn,
    /// or by a lease lapse or a key route meanwhile); the task goes on in
    /// a later attempt, or has ended.
    #[error("this attempt ended during the call (the task is {} at attempt {}); nothing it sent landed", state.as_str(), attempt.0)]
    StaleLease {
        /// The task's state.
        state: TaskState,
        /// Its current attempt.
        attempt: Attempt,
    },
    /// This attempt's own submit ended it while the call waited.
    #[error("this attempt already submitted; nothing this call sent landed")]
    AlreadySubmitted,
    /// A part name that is not a plain file name.
    #[error("invalid part name {name:?}: {why}")]
    InvalidPartName {
        /// The name.
        name: String,
        /// Why.
        why: &'static str,
    },
    /// An `@file:` body that is not allowed, not inside the task's work
    /// dir, or not a regular file with one link.
    #[error("{0}")]
    FileRef(String),
    /// An `@file:` body naming a file (or a work dir) that does not exist.
    #[error("{0}")]
    FileRefMissing(String),
    /// A body over the limit.
    #[error("the body is over the {limit}-byte limit")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The task's work dir cannot be created (something that is not the
    /// daemon's doing for this task is in the way, or the disk failed).
    #[error("the work dir {path} cannot be made ready: {reason}")]
    WorkDirUnavailable {
        /// The work dir, relative to the root.
        path: String,
        /// Why.
        reason: String,
    },
    /// A pin that does not name a readable version with that hash.
    #[error("{field}: {reason}")]
    InvalidPin {
        /// Which pin.
        field: String,
        /// Why.
        reason: String,
        /// The pin.
        pin: Box<store::Pin>,
    },
    /// A request field that breaks a rule.
    #[error("{field}: {message}")]
    InvalidField {
        /// The field.
        field: &'static str,
        /// Why.
        message: String,
    },
    /// The task or its lease refused the call.
    #[error(transparent)]
    Task(#[from] queue::TaskCallError),
    /// The queue could not answer.
    #[error(transparent)]
    Queue(#[from] queue::JournalError),
    /// The queue refused the submit.
    #[error(transparent)]
    Submit(#[from] queue::SubmitError),
    /// Access refused.
    #[error(transparent)]
    Auth(#[from] crate::auth::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] store::Error),
}

/// A resolved worker credential: the task, its live attempt and the
/// claimant whose grants the worker acts under.
#[derive(Clone, Debug)]
pub struct Session {
    /// The task as it was when resolved.
    pub task: Task,
    /// The attempt the credential belongs to (the live one).
    pub attempt: Attempt,
    /// The claiming key: usable, and holding the route's grants.
    pub claimant: Principal,
}

/// Which worker route asks: each needs its verb in the token and its
/// grant in the claimant's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET /v1/worker/prompt`.
    Prompt,
    /// `POST /v1/worker/artifact`.
    Artifact,
    /// `POST /v1/worker/submit`.
    Submit,
    /// `GET /v1/worker/nouns/{ns}/{store}/{key}`: part of reading IN.
    Nouns,
    /// `POST /v1/worker/heartbeat`.
    Heartbeat,
    /// `GET /v1/worker/parts`: what staging has done.
    Parts,
    /// `GET /v1/worker/consumes/{name}`: part of reading IN.
    Consumes,
}

impl Route {
    fn verb(self) -> &'static str {
        match self {
            Route::Prompt | Route::Nouns | Route::Heartbeat | Route::Consumes => "prompt",
            Route::Artifact | Route::Parts => "artifact",
            Route::Submit => "submit",
        }
    }

    /// The claimant's grant the route needs, checked as the key routes do.
    fn rule(self) -> fn(&Principal, &TaskFacts<'_>) -> Result<(), crate::auth::Error> {
        match self {
            Route::Prompt
            | Route::Artifact
            | Route::Nouns
            | Route::Heartbeat
            | Route::Parts
            | Route::Consumes => access::may_work,
            Route::Submit => access::may_submit,
        }
    }
}

/// When a credential is checked: an ended attempt is a dead credential
/// when the call arrives, and a conflict once the call had its turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    Arrival,
    Ordered,
}

/// Resolves a bearer handle or token to its live attempt when the call
/// arrives, and checks the claimant's current grants for `route`.
pub async fn resolve(
    queue: &Queue,
    tokens: &Minter,
    keyring: &Keyring,
    bearer: Option<&str>,
    wanted: Option<TaskId>,
    route: Route,
) -> Result<Session, Error> {
    let (id, attempt) = identify(queue, tokens, bearer, route).await?;
    let session = live(queue, keyring, id, attempt, route, When::Arrival).await?;
    if wanted.is_some_and(|w| w != id) {
        return Err(Error::WrongTask);
    }
    Ok(session)
}

impl Session {
    /// Resolves the same attempt again from the queue's current state,
    /// once the call holds its task's lock ([`order`]): an attempt that
    /// ended meanwhile is `AlreadySubmitted` or `StaleLease`.
    pub async fn recheck(
        &self,
        queue: &Queue,
        keyring: &Keyring,
        route: Route,
    ) -> Result<Session, Error> {
        live(
            queue,
            keyring,
            self.task.id,
            self.attempt,
            route,
            When::Ordered,
        )
        .await
    }
}

/// The (task, attempt) a credential names, whether or not it is live.
async fn identify(
    queue: &Queue,
    tokens: &Minter,
    bearer: Option<&str>,
    route: Route,
) -> Result<(TaskId, Attempt), Error> {
    let bearer = bearer.ok_or(Error::Unauthenticated("missing worker credential"))?;
    if token::is_handle(bearer) {
        return queue
            .handle(bearer)
            .await?
            .ok_or(Error::Unauthenticated("unknown handle"));
    }
    if !token::is_token(bearer) {
        return Err(Error::Unauthenticated("malformed worker credential"));
    }
    let claims = tokens
        .verify(bearer)
        .map_err(|_| Error::Unauthenticated("invalid worker token"))?;
    if !claims.allows(route.verb()) {
        return Err(Error::Unauthenticated("the token does not grant this verb"));
    }
    let id: TaskId = claims
        .task_id
        .parse()
        .map_err(|_| Error::Unauthenticated("invalid worker token"))?;
    Ok((id, Attempt(claims.attempt)))
}

/// The session of a live attempt whose claimant may still use `route`.
async fn live(
    queue: &Queue,
    keyring: &Keyring,
    id: TaskId,
    attempt: Attempt,
    route: Route,
    when: When,
) -> Result<Session, Error> {
    let (task, server_queue) = queue
        .task_now(id)
        .await?
        .ok_or(Error::Unauthenticated("unknown task"))?;
    let holder = live_holder(&task, attempt, Timestamp::now(), when)?;
    let claimant = match keyring.principal(holder).await {
        Ok(p) => p,
        Err(crate::auth::Error::Unauthenticated(why)) => return Err(Error::Unauthenticated(why)),
        Err(e) => return Err(e.into()),
    };
    route.rule()(&claimant, &task.facts(server_queue))?;
    Ok(Session {
        task,
        attempt,
        claimant,
    })
}

/// The claimant of `attempt` if it is `task`'s live attempt at `now`; the
/// one liveness rule, for both moments a call is checked.
fn live_holder(task: &Task, attempt: Attempt, now: Timestamp, when: When) -> Result<&Name, Error> {
    let why = match &task.lease {
        Some(l) if l.attempt == attempt && task.state == TaskState::Claimed => {
            if l.live_at(now) {
                return Ok(&l.holder);
            }
            "the attempt's lease lapsed"
        }
        _ => "the attempt has ended",
    };
    let submitted_here = task
        .submission
        .as_ref()
        .is_some_and(|s| s.attempt == attempt);
    Err(match when {
        When::Arrival => Error::Unauthenticated(why),
        When::Ordered if submitted_here => Error::AlreadySubmitted,
        When::Ordered => Error::StaleLease {
            state: task.state,
            attempt: task.attempt,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 2_000_000_000;

    /// A task at `attempt` in `state`, with a lease (its attempt, seconds
    /// left) and the attempt that submitted, if any.
    fn task(state: &str, attempt: u32, lease: Option<(u32, i64)>, submitted: Option<u32>) -> Task {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let sha = "0".repeat(64);
        serde_json::from_value(json!({
            "id": "t1",
            "spec": {"namespace": "ns", "queue": "q", "kind": "k", "effect_class": "read", "brief": {}},
            "requester": "kreq",
            "state": state,
            "attempt": attempt,
            "lease": lease.map(|(a, left)| json!({
                "id": "l", "attempt": a, "holder": "kwork", "expires_at": at(NOW + left), "handle": "h",
            })),
            "submission": submitted.map(|a| json!({
                "attempt": a, "lease_id": "l", "request": sha, "receipt": sha,
            })),
            "created_at": at(NOW),
            "updated_at": at(NOW),
        }))
        .expect("a valid task")
    }

    #[test]
    fn liveness_table() {
        use When::{Arrival, Ordered};
        let now = Timestamp::from_second(NOW).unwrap();
        let cases: &[(Task, u32, When, &str)] = &[
            (task("claimed", 1, Some((1, 30)), None), 1, Arrival, "live"),
            (task("claimed", 1, Some((1, 30)), None), 1, Ordered, "live"),
            (task("claimed", 1, Some((1, 0)), None), 1, Arrival, "401"),
            (
                task("claimed", 1, Some((1, 0)), None),
                1,
                Ordered,
                "stale_lease",
            ),
            (task("claimed", 2, Some((2, 30)), None), 1, Arrival, "401"),
            (
                task("claimed", 2, Some((2, 30)), None),
                1,
                Ordered,
                "stale_lease",
            ),
            (task("queued", 1, None, None), 1, Arrival, "401"),
            (task("queued", 1, None, None), 1, Ordered, "stale_lease"),
            (task("succeeded", 1, None, Some(1)), 1, Arrival, "401"),
            (
                task("succeeded", 1, None, Some(1)),
                1,
                Ordered,
                "already_submitted",
            ),
            (
                task("succeeded", 2, None, Some(2)),
                1,
                Ordered,
                "stale_lease",
            ),
            (task("cancelled", 1, None, None), 1, Ordered, "stale_lease"),
        ];
        for (t, attempt, when, want) in cases {
            let got = match live_holder(t, Attempt(*attempt), now, *when) {
                Ok(holder) => {
                    assert_eq!(holder.as_str(), "kwork");
                    "live"
                }
                Err(Error::Unauthenticated(_)) => "401",
                Err(Error::StaleLease { .. }) => "stale_lease",
                Err(Error::AlreadySubmitted) => "already_submitted",
                Err(e) => panic!("{e}"),
            };
            assert_eq!(
                got,
                *want,
                "{} attempt {} asked by {attempt} at {when:?}",
                t.state.as_str(),
                t.attempt.0
            );
        }
    }
}
