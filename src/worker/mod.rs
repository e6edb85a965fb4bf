//! The worker I/O contract: a worker (a program, or an LLM agent handed
//! only a `wh-` handle) fetches its prompt in one request and leaves
//! through tool calls: staged named parts, then one final submit. It never
//! chooses a path; the server projects the result into ctx-dir files.
//!
//! A worker credential is a capability token or a handle standing for one,
//! bound to one (task, attempt). [`resolve`] turns it into a [`Session`]:
//! - missing or malformed, forged or tampered token, unknown handle: 401;
//! - the attempt's lease lapsed (and the sweeper has not yet requeued): 401;
//! - used for another task (`?task_id=`): 403;
//! - the attempt ended while the task goes on: `409 stale_lease`;
//! - the task is terminal: `410 gone` (a second submit by the attempt that
//!   ended it: `409 already_submitted`).

pub mod area;
pub mod artifact;
pub mod contract;
pub mod file_ref;
pub mod front_matter;
pub mod output;
pub mod projection;
pub mod prompt;
pub mod submit;

use jiff::Timestamp;

use crate::auth::token::{self, Minter};
use crate::queue::{self, Attempt, Queue, Task, TaskId, TaskState};
use crate::{auth, store};

/// What can fail on the worker routes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No usable worker credential.
    #[error("{0}; send `Authorization: Bearer <wh- handle or worker token>` from the claim")]
    Unauthenticated(&'static str),
    /// A credential for another task.
    #[error("this worker credential belongs to another task")]
    WrongTask,
    /// The attempt ended; the task goes on in a later attempt.
    #[error("this attempt has ended (the task is {} at attempt {}); nothing it sends lands", state.as_str(), attempt.0)]
    StaleLease {
        /// The task's state.
        state: TaskState,
        /// Its current attempt.
        attempt: Attempt,
    },
    /// The task is terminal.
    #[error("the task has ended ({}); this credential is no longer valid", state.as_str())]
    Gone {
        /// Its terminal state.
        state: TaskState,
    },
    /// This attempt already submitted.
    #[error("this attempt already submitted; a second submit is refused")]
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
    /// A strict task whose projection failed; the attempt stays open.
    #[error(
        "the result could not be projected into {path}: {reason}; the attempt is still open (check_policy: strict)"
    )]
    ProjectionFailed {
        /// The ctx-dir.
        path: String,
        /// Why.
        reason: String,
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
    /// The queue refused.
    #[error(transparent)]
    Queue(#[from] queue::Error),
    /// Access refused.
    #[error(transparent)]
    Auth(#[from] auth::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] store::Error),
}

/// A resolved worker credential: the task and the live attempt.
#[derive(Clone, Debug)]
pub struct Session {
    /// The task as it is now.
    pub task: Task,
    /// The attempt the credential belongs to (the live one).
    pub attempt: Attempt,
}

/// Which worker route asks: submit answers a second submit differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET /v1/worker/prompt`.
    Prompt,
    /// `POST /v1/worker/artifact`.
    Artifact,
    /// `POST /v1/worker/submit`.
    Submit,
}

impl Route {
    fn verb(self) -> &'static str {
        match self {
            Route::Prompt => "prompt",
            Route::Artifact => "artifact",
            Route::Submit => "submit",
        }
    }
}

/// Resolves a bearer handle or token to its live attempt.
pub fn resolve(
    queue: &Queue,
    tokens: &Minter,
    bearer: Option<&str>,
    wanted: Option<TaskId>,
    route: Route,
) -> Result<Session, Error> {
    let bearer = bearer.ok_or(Error::Unauthenticated("missing worker credential"))?;
    let (task_id, attempt) = if token::is_handle(bearer) {
        queue
            .handle(bearer)
            .ok_or(Error::Unauthenticated("unknown handle"))?
    } else if token::is_token(bearer) {
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
        (id, Attempt(claims.attempt))
    } else {
        return Err(Error::Unauthenticated("malformed worker credential"));
    };
    if wanted.is_some_and(|w| w != task_id) {
        return Err(Error::WrongTask);
    }
    let task = queue
        .peek(|st| st.tasks.get(&task_id).cloned())
        .ok_or(Error::Unauthenticated("unknown task"))?;
    let submitted_here = task
        .submission
        .as_ref()
        .is_some_and(|s| s.attempt == attempt);
    if route == Route::Submit && submitted_here {
        return Err(Error::AlreadySubmitted);
    }
    if task.state.is_terminal() {
        return Err(Error::Gone { state: task.state });
    }
    match &task.lease {
        Some(l) if l.attempt == attempt => {
            if l.expires_at <= Timestamp::now() {
                return Err(Error::Unauthenticated("the attempt's lease has expired"));
            }
            Ok(Session { task, attempt })
        }
        _ => Err(Error::StaleLease {
            state: task.state,
            attempt: task.attempt,
        }),
    }
}

/// The step name of a task: `brief.step` when set, else the kind without
/// its `verb.` prefix. Checked at enqueue, so it is a plain file name.
pub fn step_name(task_kind: &str, brief: &serde_json::Value) -> Result<String, String> {
    match brief.get("step") {
        None | Some(serde_json::Value::Null) => Ok(task_kind
            .strip_prefix("verb.")
            .filter(|s| store::name::is_valid(s))
            .unwrap_or(task_kind)
            .to_string()),
        Some(serde_json::Value::String(s)) if store::name::is_valid(s) => Ok(s.clone()),
        Some(other) => Err(format!(
            "brief.step must be a name ([A-Za-z0-9][A-Za-z0-9._-]{{0,127}}), not {other}"
        )),
    }
}
