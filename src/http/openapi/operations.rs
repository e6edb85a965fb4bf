//! What each route takes and answers, for the document: its credential,
//! query parameters, request body and success answers. The error answers
//! follow from the route's class (see [`Operation::error_statuses`]).

use http::Method;
use serde_json::{Value, json};

use super::schemas::{Built, Schemas};
use crate::http::wire::{
    BatchReply, BulkBody, BulkReply, ClaimNext, ClaimOne, Claimed, ClaimedMany, Enqueued, Health,
    Heartbeat, IssueKey, IssuedKey, KeyList, KeyView, LeaseRef, NounBatch, NounList, ParkBody,
    ProvisionedQueue, PutNoun, PutNounReply, QueueList, ResumeBody, Retried, RetryBody, SplitBody,
    SplitDone, StateReply, Status, Submitted, TaskBatch, TaskList, TaskOutcome, TaskView,
    ThinClaimed,
};
use crate::queue::{QueuePatch, TaskSpec};
use crate::store::{Name, NounRef, Sha256};
use crate::worker::submit::SubmitBody;

/// The credential a route takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Auth {
    /// None: the route serves no secrets.
    None,
    /// An issued key (`key` scheme).
    Key,
    /// A worker handle or capability token (`worker` scheme).
    Worker,
}

/// A success answer: status, description, and the body's media type and
/// schema (none for an empty body).
pub(super) struct Answer {
    /// The status.
    pub status: u16,
    /// What it means.
    pub what: &'static str,
    /// Media type and schema.
    pub body: Option<(&'static str, Value)>,
}

/// One operation of the document.
pub(super) struct Operation {
    /// The method.
    pub method: Method,
    /// The path template, as in the router's table.
    pub path: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// Its credential.
    pub auth: Auth,
    /// Query parameters: name, schema, required, description.
    pub query: Vec<(&'static str, Value, bool, &'static str)>,
    /// The request body: media type, schema, required.
    pub body: Option<(&'static str, Value, bool)>,
    /// Success answers.
    pub ok: Vec<Answer>,
    /// Whether it writes (and so may meet conflicts, rules and a full disk).
    pub writes: bool,
    /// Error statuses beyond its class's.
    pub also: Vec<u16>,
}

impl Operation {
    fn new(method: Method, path: &'static str, auth: Auth, summary: &'static str) -> Operation {
        Operation {
            method,
            path,
            summary,
            auth,
            query: Vec::new(),
            body: None,
            ok: Vec::new(),
            writes: false,
            also: Vec::new(),
        }
    }

    fn query(mut self, name: &'static str, schema: Value, description: &'static str) -> Self {
        self.query.push((name, schema, false, description));
        self
    }

    fn json(mut self, schema: Value) -> Self {
        self.body = Some(("application/json", schema, true));
        self
    }

    fn json_optional(mut self, schema: Value) -> Self {
        self.body = Some(("application/json", schema, false));
        self
    }

    fn bytes(mut self) -> Self {
        self.body = Some(("application/octet-stream", binary(), false));
        self
    }

    fn ok(self, status: u16, what: &'static str, schema: Value) -> Self {
        self.ok_as(status, what, "application/json", schema)
    }

    fn ok_as(
        mut self,
        status: u16,
        what: &'static str,
        media: &'static str,
        schema: Value,
    ) -> Self {
        self.ok.push(Answer {
            status,
            what,
            body: Some((media, schema)),
        });
        self
    }

    fn empty(mut self, status: u16, what: &'static str) -> Self {
        self.ok.push(Answer {
            status,
            what,
            body: None,
        });
        self
    }

    fn may(mut self, status: u16) -> Self {
        self.also.push(status);
        self
    }

    fn writes(mut self) -> Self {
        self.writes = true;
        self
    }

    /// The error statuses the route's class can answer, each with the
    /// error body: any route can meet a bad path (400), a missing or hidden
    /// thing (404), a bug or a failed store (500, 503); a credential adds
    /// 401 and 403, a worker credential also a dead attempt (409) and the
    /// failure budget (429); a body adds a slow body (408) and a large one
    /// (413); a write adds conflicts (409), rules (422) and a full disk (507);
    /// a read by pin adds a pin mismatch (409).
    pub fn error_statuses(&self) -> Vec<u16> {
        let mut s = vec![400, 404, 500, 503];
        match self.auth {
            Auth::None => {}
            Auth::Key => s.extend([401, 403]),
            Auth::Worker => s.extend([401, 403, 409, 429]),
        }
        if self.body.is_some() {
            s.extend([408, 413]);
        }
        if self.writes {
            s.extend([409, 422, 507]);
        }
        s.extend(&self.also);
        s.retain(|st| !self.ok.iter().any(|a| a.status == *st));
        s.sort_unstable();
        s.dedup();
        s
    }
}

fn binary() -> Value {
    json!({"type": "string", "format": "binary"})
}

fn boolean() -> Value {
    json!({"type": "boolean"})
}

fn count() -> Value {
    json!({"type": "integer", "minimum": 0})
}

/// Every documented operation, in the router's order.
pub(super) fn operations(s: &mut Schemas) -> Vec<Operation> {
    use Auth::{Key, None, Worker};
    use Method as M;
    let name = s.of::<Name>();
    let sha = s.of::<Sha256>();
    let dry_run = |op: Operation| {
        op.query(
            "dry_run",
            boolean(),
            "Report what would happen; write nothing.",
        )
    };
    let task_id = |op: Operation, sch: &mut Schemas| {
        op.query(
            "task_id",
            sch.of::<crate::queue::TaskId>(),
            "The task, when the credential is a key rather than a handle.",
        )
    };
    let pin_query = |op: Operation| {
        op.query(
            "version",
            count(),
            "A version (default: the latest readable).",
        )
        .query(
            "sha256",
            sha.clone(),
            "The version's expected sha256 (409 pin_mismatch otherwise).",
        )
        .may(409)
    };
    let state = s.of::<StateReply>();
    let lease = s.of::<LeaseRef>();
    let submitted = s.of::<Submitted>();
    let noun_ref = s.of::<NounRef>();
    vec![
        Operation::new(M::GET, "/healthz", None, "Whether writes are accepted")
            .ok(200, "Ok, or out of space (reads work).", s.of::<Health>())
            .ok(
                503,
                "Storage failed: writes refused until restart.",
                s.of::<Health>(),
            ),
        Operation::new(
            M::GET,
            "/metrics",
            Key,
            "Prometheus text, or OpenMetrics when Accept prefers it (admin or metrics:read)",
        )
        .ok_as(
            200,
            "The metrics.",
            crate::metrics::TEXT_CONTENT_TYPE,
            json!({"type": "string"}),
        )
        .ok_as(
            200,
            "The metrics.",
            crate::metrics::OPENMETRICS_CONTENT_TYPE,
            json!({"type": "string"}),
        ),
        Operation::new(M::GET, "/v1/openapi.json", None, "This document").ok(
            200,
            "The OpenAPI 3.1 document.",
            json!({"type": "object"}),
        ),
        Operation::new(
            M::GET,
            "/v1/events",
            Key,
            "Server-Sent Events of transitions and noun writes the key may see",
        )
        .query(
            "last_event_id",
            json!({"type": "string"}),
            "Resume after this event (or the Last-Event-ID header).",
        )
        .ok_as(
            200,
            "An endless event stream.",
            "text/event-stream",
            json!({"type": "string"}),
        ),
        Operation::new(
            M::GET,
            "/v1/status",
            Key,
            "Queues the key may see, and (admin) storage",
        )
        .ok(200, "The overview.", s.of::<Status>()),
        Operation::new(M::GET, "/", None, "The overview site").ok_as(
            200,
            "The page.",
            "text/html",
            json!({"type": "string"}),
        ),
        Operation::new(
            M::GET,
            "/ui/{name}",
            None,
            "A stylesheet or script of the overview site",
        )
        .ok_as(200, "The file.", "text/*", json!({"type": "string"}))
        .empty(304, "Not modified (If-None-Match)."),
        Operation::new(
            M::PUT,
            "/v1/nouns/{namespace}/{store}/{key}",
            Key,
            "Add a noun version (compare-and-swap on expected_version)",
        )
        .query("source_pack", name.clone(), "The seed pack this write comes from (a label; grants nothing).")
        .json(s.of::<PutNoun>())
        .ok(
            200,
            "Unchanged, a dry run, or a new version.",
            s.of::<PutNounReply>(),
        )
        .ok(201, "Created.", s.of::<PutNounReply>())
        .writes(),
        pin_query(Operation::new(
            M::GET,
            "/v1/nouns/{namespace}/{store}/{key}",
            Key,
            "A noun version's exact bytes",
        ))
        .ok_as(
            200,
            "The body, with x-tessera-version, x-tessera-sha256 and etag headers.",
            "*/*",
            json!({}),
        ),
        Operation::new(
            M::GET,
            "/v1/nouns",
            Key,
            "The nouns the key may read, with their latest readable version, a page at a time",
        )
        .query("namespace", name.clone(), "Only this namespace.")
        .query("store", name.clone(), "Only this store.")
        .query("source_pack", name.clone(), "Only nouns this seed pack wrote.")
        .query("cursor", json!({"type": "string"}), "Start after this namespace/store/key.")
        .query("limit", count(), "Page size (at most 1000).")
        .ok(200, "A page.", s.of::<NounList>()),
        Operation::new(
            M::GET,
            "/v1/nouns/{namespace}/{store}/{key}/versions",
            Key,
            "The versions the key may read",
        )
        .ok(200, "The noun's ref, filtered.", noun_ref.clone()),
        Operation::new(
            M::POST,
            "/v1/nouns/{namespace}/{store}/{key}/quarantine",
            Key,
            "Quarantine the latest version (admin)",
        )
        .ok(200, "The noun's ref.", noun_ref.clone())
        .writes(),
        Operation::new(
            M::POST,
            "/v1/nouns/{namespace}/{store}/{key}/unquarantine",
            Key,
            "Lift the quarantine (admin)",
        )
        .ok(200, "The noun's ref.", noun_ref)
        .writes(),
        Operation::new(
            M::POST,
            "/v1/batch/nouns",
            Key,
            "Many noun puts, each answered on its own",
        )
        .query("source_pack", name.clone(), "The seed pack this write comes from (a label; grants nothing).")
        .json(s.of::<NounBatch>())
        .ok(
            200,
            "One answer per item.",
            s.inline::<BatchReply<PutNounReply>>(),
        )
        .writes(),
        dry_run(Operation::new(
            M::POST,
            "/v1/batch/tasks",
            Key,
            "Many enqueues, each answered on its own",
        ))
        .query("source_pack", name.clone(), "The seed pack this write comes from (a label; grants nothing).")
        .json(s.of::<TaskBatch>())
        .ok(
            200,
            "One answer per item.",
            s.inline::<BatchReply<TaskOutcome>>(),
        )
        .writes(),
        Operation::new(
            M::POST,
            "/v1/keys",
            Key,
            "Issue a key (admin); the secret is shown once",
        )
        .json(s.of::<IssueKey>())
        .ok(201, "The key and its secret.", s.of::<IssuedKey>())
        .writes(),
        Operation::new(M::GET, "/v1/keys", Key, "Every key (admin)").ok(
            200,
            "The keys, without secrets.",
            s.of::<KeyList>(),
        ),
        Operation::new(M::DELETE, "/v1/keys/{key_id}", Key, "Revoke a key (admin)")
            .ok(200, "The revoked key.", s.of::<KeyView>())
            .writes(),
        Operation::new(
            M::POST,
            "/v1/queues",
            Key,
            "Provision a queue, or change the settings named of an existing one (admin)",
        )
        .json(s.of::<QueuePatch>())
        .ok(
            200,
            "It existed: the fields named changed, the others kept their values.",
            s.of::<ProvisionedQueue>(),
        )
        .ok(
            201,
            "Provisioned, with defaults for the fields left out.",
            s.of::<ProvisionedQueue>(),
        )
        .writes(),
        Operation::new(
            M::GET,
            "/v1/queues",
            Key,
            "The queues the key may use, with counts",
        )
        .ok(200, "The queues.", s.of::<QueueList>()),
        Operation::new(
            M::POST,
            "/v1/queues/{queue}/claim",
            Key,
            "Claim the next task (long poll up to wait_ms)",
        )
        .json(s.of::<ClaimNext>())
        .ok(
            200,
            "A claim, or with `max` a list of claims; with `thin`, thin claims (no brief, no \
             token).",
            json!({"oneOf": [
                s.of::<Claimed>(),
                s.of::<ThinClaimed>(),
                s.of::<ClaimedMany>(),
            ]}),
        )
        .empty(204, "Nothing to claim.")
        .writes(),
        dry_run(Operation::new(
            M::POST,
            "/v1/tasks",
            Key,
            "Enqueue a task (idempotent by idempotency_key)",
        ))
        .query("source_pack", name.clone(), "The seed pack this write comes from (a label; grants nothing).")
        .json(s.of::<TaskSpec>())
        .ok(
            200,
            "The existing task, or a dry run's outcome.",
            s.of::<TaskOutcome>(),
        )
        .ok(201, "Enqueued.", s.of::<Enqueued>())
        .writes(),
        Operation::new(
            M::POST,
            "/v1/tasks/retry",
            Key,
            "Retry the failed or cancelled tasks a filter matches",
        )
        .json(s.of::<BulkBody>())
        .ok(200, "What was (or would be) retried.", s.of::<BulkReply>())
        .writes(),
        Operation::new(
            M::POST,
            "/v1/tasks/cancel",
            Key,
            "Cancel the tasks a filter matches",
        )
        .json(s.of::<BulkBody>())
        .ok(
            200,
            "What was (or would be) cancelled.",
            s.of::<BulkReply>(),
        )
        .writes(),
        Operation::new(
            M::GET,
            "/v1/tasks",
            Key,
            "Tasks the key may see, a page at a time",
        )
        .query(
            "state",
            s.of::<crate::queue::TaskState>(),
            "Only this state.",
        )
        .query("queue", name.clone(), "Only this queue.")
        .query("kind", name.clone(), "Only this kind.")
        .query("namespace", name.clone(), "Only this namespace.")
        .query("source_pack", name.clone(), "Only tasks this seed pack enqueued.")
        .query(
            "cursor",
            s.of::<crate::queue::TaskId>(),
            "Start after this task.",
        )
        .query("limit", count(), "Page size.")
        .ok(200, "A page.", s.of::<TaskList>()),
        Operation::new(M::GET, "/v1/tasks/{id}", Key, "One task").ok(
            200,
            "The task.",
            s.of::<TaskView>(),
        ),
        Operation::new(
            M::GET,
            "/v1/tasks/{id}/receipts",
            Key,
            "A task's receipts, in order",
        )
        .ok(200, "The receipts.", s.built(Built::ReceiptList)),
        Operation::new(M::POST, "/v1/tasks/{id}/claim", Key, "Claim one task by id")
            .json_optional(s.of::<ClaimOne>())
            .ok(
                200,
                "The claim: lease, token and handle; with `thin`, a thin claim (no brief, no token).",
                json!({"oneOf": [s.of::<Claimed>(), s.of::<ThinClaimed>()]}),
            )
            .writes(),
        Operation::new(M::POST, "/v1/tasks/{id}/heartbeat", Key, "Extend the lease")
            .json(lease.clone())
            .ok(200, "The new expiry.", s.of::<Heartbeat>())
            .writes(),
        Operation::new(
            M::POST,
            "/v1/tasks/{id}/release",
            Key,
            "Give the task back to its queue",
        )
        .json(lease)
        .ok(200, "The task's state.", state.clone())
        .writes(),
        Operation::new(
            M::POST,
            "/v1/tasks/{id}/submit",
            Key,
            "Finish the attempt with a receipt",
        )
        .json(s.of::<SubmitBody>())
        .ok(
            200,
            "The same submit again: the receipt it made.",
            submitted.clone(),
        )
        .ok(201, "The receipt.", submitted.clone())
        .writes(),
        Operation::new(
            M::POST,
            "/v1/tasks/{id}/park",
            Key,
            "Park the task until another principal resumes it",
        )
        .json(s.of::<ParkBody>())
        .ok(200, "The task's state.", state.clone())
        .writes(),
        Operation::new(
            M::POST,
            "/v1/tasks/{id}/resume",
            Key,
            "Resume a parked task with a new input pin",
        )
        .json(s.of::<ResumeBody>())
        .ok(200, "The task's state.", state.clone())
        .writes(),
        Operation::new(
            M::POST,
            "/v1/tasks/{id}/split",
            Key,
            "Split the task into children",
        )
        .json(s.of::<SplitBody>())
        .ok(200, "The children.", s.of::<SplitDone>())
        .writes(),
        Operation::new(
            M::POST,
            "/v1/tasks/{id}/cancel",
            Key,
            "Cancel the task and its children",
        )
        .query(
            "if_state",
            json!({"type": "string"}),
            "Comma-separated states (e.g. pending,queued,parked): cancel only a task in one of them, else 409 invalid_state.",
        )
        .ok(200, "The task's state.", state)
        .writes(),
        Operation::new(
            M::POST,
            "/v1/tasks/{id}/retry",
            Key,
            "Queue a failed or cancelled task again",
        )
        .json_optional(s.of::<RetryBody>())
        .ok(200, "The new attempt.", s.of::<Retried>())
        .writes(),
        Operation::new(
            M::GET,
            "/v1/tasks/{id}/output",
            Key,
            "The final pull: {out, parts}, or with ?path= one piece's raw bytes",
        )
        .query(
            "path",
            json!({"type": "string"}),
            "One piece: `$.out` or `$.parts[\"<name>\"]`; answered raw with x-tessera-sha256.",
        )
        .ok(200, "The last receipt's output.", s.built(Built::Output))
        .ok_as(200, "With ?path=: that piece's bytes.", "*/*", json!({})),
        Operation::new(
            M::POST,
            "/v1/promotions",
            Key,
            "Promote a noun version to public (admin)",
        )
        .json(s.of::<crate::promotion::Request>())
        .ok(201, "The promotion record.", s.built(Built::PromotionReply))
        .writes(),
        task_id(
            Operation::new(
                M::GET,
                "/v1/worker/prompt",
                Worker,
                "The attempt's prompt, assembled now",
            ),
            s,
        )
        .ok(200, "The prompt.", s.built(Built::Prompt)),
        task_id(
            Operation::new(
                M::POST,
                "/v1/worker/artifact",
                Worker,
                "Stage a part (last write wins)",
            ),
            s,
        )
        .query("name", json!({"type": "string"}), "The part's name.")
        .bytes()
        .ok(200, "The staged part.", s.built(Built::StagedPart))
        .writes(),
        task_id(
            Operation::new(
                M::POST,
                "/v1/worker/submit",
                Worker,
                "Submit the final body; completes the attempt",
            ),
            s,
        )
        .query("ok", boolean(), "false for a failed attempt.")
        .query("final", boolean(), "With ok=false: no retry.")
        .bytes()
        .ok(
            200,
            "The same submit again: the receipt it made.",
            submitted.clone(),
        )
        .ok(201, "The receipt.", submitted)
        .writes(),
        pin_query(task_id(
            Operation::new(
                M::GET,
                "/v1/worker/nouns/{namespace}/{store}/{key}",
                Worker,
                "A noun the task pins, read as the claimant",
            ),
            s,
        ))
        .ok_as(200, "The body.", "*/*", json!({})),
        task_id(
            Operation::new(
                M::POST,
                "/v1/worker/heartbeat",
                Worker,
                "Extend the attempt's lease",
            ),
            s,
        )
        .ok(200, "The new expiry.", s.built(Built::WorkerHeartbeat))
        .writes(),
        task_id(
            Operation::new(
                M::GET,
                "/v1/worker/parts",
                Worker,
                "The parts staged so far",
            ),
            s,
        )
        .ok(200, "The parts.", s.built(Built::WorkerParts)),
        task_id(
            Operation::new(
                M::GET,
                "/v1/worker/consumes/{name}",
                Worker,
                "A ready consumes entry's raw bytes (an upstream step's output)",
            ),
            s,
        )
        .ok_as(
            200,
            "The bytes, with x-tessera-sha256.",
            "*/*",
            json!({}),
        ),
        Operation::new(
            M::POST,
            "/mcp",
            Worker,
            "The MCP server over streamable HTTP (stateless JSON-RPC; see the README's Agents section)",
        )
        .json(json!({"type": "object", "description": "A JSON-RPC 2.0 request or notification of the Model Context Protocol."}))
        .ok(200, "The JSON-RPC answer.", json!({"type": "object"}))
        .empty(202, "A notification, accepted."),
    ]
}
