//! Every endpoint of the API, each declared once: method, path, credential,
//! summary, handler, and what it takes and answers (for the OpenAPI
//! document). The router, `/metrics`' route label and the document read
//! this table and nothing else.

use serde_json::json;

use super::{Params, Route, Served};
use crate::http::mcp;
use crate::http::openapi::{Auth, boolean, count, output_address, part_name, state_list, string};
use crate::http::{
    batch, events, keys, lifecycle, noun_list, nouns, openapi, ops, promotions, queues, site,
    status, tasks, worker,
};
use crate::paths;
use crate::queue::{BulkAction, QueuePatch, TaskId, TaskSpec, TaskState};
use crate::store::{Name, NounRef};
use crate::wire::{
    BatchReply, BulkBody, BulkReply, ClaimNext, ClaimOne, Claimed, ClaimedMany, Enqueued, Health,
    Heartbeat, IssueKey, IssuedKey, KeyList, KeyView, LeaseRef, NounBatch, NounList, ParkBody,
    PromotionReply, ProvisionedQueue, PutNoun, PutNounReply, QueueList, ReceiptList, ResumeBody,
    Retried, RetryBody, SplitBody, SplitDone, StagedPart, StateReply, Status, Submitted, TaskBatch,
    TaskList, TaskOutcome, TaskView, ThinClaimed, WorkerHeartbeat, WorkerParts,
};
use crate::worker::output::Output;
use crate::worker::prompt::Prompt;
use crate::worker::submit::SubmitBody;

use Auth::{Key, None, Worker};

/// Serves a route by an `async` expression over the context `$ctx`, the
/// request `$req` and the path's segments `$p`.
macro_rules! serve {
    (|$ctx:pat_param, $req:pat_param, $p:pat_param| $body:expr) => {
        |$ctx, $req, $p: Params| -> Served { Box::pin(async move { $body.await }) }
    };
}

/// Every route of the API, in the document's order. The router answers
/// 405 to a method no route takes on a path some route serves, and
/// `no_route` to any other request.
pub static ROUTES: &[Route] = &[
    Route::new(
        &paths::HEALTHZ,
        None,
        "Whether writes are accepted",
        serve!(|ctx, _, _| ops::healthz(&ctx)),
        |op, s| {
            op.ok(200, "Ok, or out of space (reads work).", s.of::<Health>())
                .ok(
                    503,
                    "Storage failed: writes refused until restart.",
                    s.of::<Health>(),
                )
        },
    ),
    Route::new(
        &paths::METRICS,
        Key,
        "Prometheus text, or OpenMetrics when Accept prefers it (admin or metrics:read)",
        serve!(|ctx, req, _| ops::metrics(&ctx, &req)),
        |op, _| {
            op.ok_as(
                200,
                "The metrics.",
                crate::metrics::TEXT_CONTENT_TYPE,
                string(),
            )
            .ok_as(
                200,
                "The metrics.",
                crate::metrics::OPENMETRICS_CONTENT_TYPE,
                string(),
            )
        },
    ),
    Route::new(
        &paths::OPENAPI,
        None,
        "This document",
        serve!(|_, _, _| async { openapi::serve() }),
        |op, _| op.ok(200, "The OpenAPI 3.1 document.", json!({"type": "object"})),
    ),
    Route::new(
        &paths::EVENTS,
        Key,
        "Server-Sent Events of transitions and noun writes the key may see",
        serve!(|ctx, req, _| events::stream(&ctx, req)),
        |op, _| {
            op.query(
                "last_event_id",
                string(),
                "Resume after this event (or the Last-Event-ID header).",
            )
            .ok_as(
                200,
                "An endless event stream.",
                "text/event-stream",
                string(),
            )
        },
    ),
    Route::new(
        &paths::STATUS,
        Key,
        "Queues the key may see, and (admin) storage",
        serve!(|ctx, req, _| status::status(&ctx, req)),
        |op, s| op.ok(200, "The overview.", s.of::<Status>()),
    ),
    Route::new(
        &paths::SITE_INDEX,
        None,
        "The overview site",
        serve!(|_, req, _| async move { site::index(&req) }),
        |op, _| op.ok_as(200, "The page.", "text/html", string()),
    ),
    Route::new(
        &paths::SITE_FILE,
        None,
        "A stylesheet or script of the overview site",
        serve!(|_, req, p| async move { site::file(&req, p.get("name")) }),
        |op, _| {
            op.ok_as(200, "A stylesheet.", "text/css", string())
                .ok_as(200, "A script.", "text/javascript", string())
                .empty(304, "Not modified (If-None-Match).")
        },
    ),
    Route::new(
        &paths::NOUN_LIST,
        Key,
        "The nouns the key may read, with their latest readable version, a page at a time",
        serve!(|ctx, req, _| noun_list::list(&ctx, req)),
        |op, s| {
            op.query("namespace", s.of::<Name>(), "Only this namespace.")
                .query("store", s.of::<Name>(), "Only this store.")
                .query(
                    "source_pack",
                    s.of::<Name>(),
                    "Only nouns this seed pack wrote.",
                )
                .query("cursor", string(), "Start after this namespace/store/key.")
                .query("limit", count(), "Page size (at most 1000).")
                .ok(200, "A page.", s.of::<NounList>())
        },
    ),
    Route::new(
        &paths::NOUN_PUT,
        Key,
        "Add a noun version (compare-and-swap on expected_version)",
        serve!(|ctx, req, p| nouns::put(&ctx, req, p.noun())),
        |op, s| {
            op.source_pack(s)
                .json(s.of::<PutNoun>())
                .ok(
                    200,
                    "Unchanged, a dry run, or a new version.",
                    s.of::<PutNounReply>(),
                )
                .ok(201, "Created.", s.of::<PutNounReply>())
                .writes()
        },
    ),
    Route::new(
        &paths::NOUN_GET,
        Key,
        "A noun version's exact bytes",
        serve!(|ctx, req, p| nouns::get(&ctx, req, p.noun())),
        |op, s| {
            op.pin_query(s).raw(
                "The body, in its own media type, with x-tessera-version, x-tessera-sha256 and \
                 etag headers.",
            )
        },
    ),
    Route::new(
        &paths::NOUN_VERSIONS,
        Key,
        "The versions the key may read",
        serve!(|ctx, req, p| nouns::versions(&ctx, req, p.noun())),
        |op, s| op.ok(200, "The noun's ref, filtered.", s.of::<NounRef>()),
    ),
    Route::new(
        &paths::NOUN_QUARANTINE,
        Key,
        "Quarantine the latest version (admin)",
        serve!(|ctx, req, p| nouns::quarantine(&ctx, req, p.noun(), true)),
        |op, s| op.ok(200, "The noun's ref.", s.of::<NounRef>()).writes(),
    ),
    Route::new(
        &paths::NOUN_UNQUARANTINE,
        Key,
        "Lift the quarantine (admin)",
        serve!(|ctx, req, p| nouns::quarantine(&ctx, req, p.noun(), false)),
        |op, s| op.ok(200, "The noun's ref.", s.of::<NounRef>()).writes(),
    ),
    Route::new(
        &paths::BATCH_NOUNS,
        Key,
        "Many noun puts, each answered on its own",
        serve!(|ctx, req, _| batch::nouns(&ctx, req)),
        |op, s| {
            op.source_pack(s)
                .json(s.of::<NounBatch>())
                .ok(
                    200,
                    "One answer per item.",
                    s.inline::<BatchReply<PutNounReply>>(),
                )
                .writes()
        },
    ),
    Route::new(
        &paths::BATCH_TASKS,
        Key,
        "Many enqueues, each answered on its own",
        serve!(|ctx, req, _| batch::tasks(&ctx, req)),
        |op, s| {
            op.dry_run()
                .source_pack(s)
                .json(s.of::<TaskBatch>())
                .ok(
                    200,
                    "One answer per item.",
                    s.inline::<BatchReply<TaskOutcome>>(),
                )
                .writes()
        },
    ),
    Route::new(
        &paths::KEY_ISSUE,
        Key,
        "Issue a key (admin); the secret is shown once",
        serve!(|ctx, req, _| keys::issue(&ctx, req)),
        |op, s| {
            op.json(s.of::<IssueKey>())
                .ok(201, "The key and its secret.", s.of::<IssuedKey>())
                .writes()
        },
    ),
    Route::new(
        &paths::KEY_LIST,
        Key,
        "Every key (admin)",
        serve!(|ctx, req, _| keys::list(&ctx, req)),
        |op, s| op.ok(200, "The keys, without secrets.", s.of::<KeyList>()),
    ),
    Route::new(
        &paths::KEY_REVOKE,
        Key,
        "Revoke a key (admin)",
        serve!(|ctx, req, p| keys::revoke(&ctx, req, p.get("key_id"))),
        |op, s| op.ok(200, "The revoked key.", s.of::<KeyView>()).writes(),
    ),
    Route::new(
        &paths::QUEUE_PROVISION,
        Key,
        "Provision a queue, or change the settings named of an existing one (admin)",
        serve!(|ctx, req, _| queues::provision(&ctx, req)),
        |op, s| {
            op.json(s.of::<QueuePatch>())
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
                .writes()
        },
    ),
    Route::new(
        &paths::QUEUE_LIST,
        Key,
        "The queues the key may use, with counts",
        serve!(|ctx, req, _| queues::list(&ctx, req)),
        |op, s| op.ok(200, "The queues.", s.of::<QueueList>()),
    ),
    Route::new(
        &paths::QUEUE_CLAIM,
        Key,
        "Claim the next task (long poll up to wait_ms)",
        serve!(|ctx, req, p| queues::claim_next(&ctx, req, p.get("queue"))),
        |op, s| {
            let claims = json!({"oneOf": [
                s.of::<Claimed>(),
                s.of::<ThinClaimed>(),
                s.of::<ClaimedMany>(),
            ]});
            op.json(s.of::<ClaimNext>())
                .ok(
                    200,
                    "A claim, or with `max` a list of claims; with `thin`, thin claims (no \
                     brief, no token).",
                    claims,
                )
                .empty(204, "Nothing to claim.")
                .writes()
        },
    ),
    Route::new(
        &paths::TASK_ENQUEUE,
        Key,
        "Enqueue a task (idempotent by idempotency_key)",
        serve!(|ctx, req, _| tasks::enqueue(&ctx, req)),
        |op, s| {
            let found = json!({"oneOf": [s.of::<Enqueued>(), s.of::<TaskOutcome>()]});
            op.dry_run()
                .source_pack(s)
                .json(s.of::<TaskSpec>())
                .ok(
                    200,
                    "The existing task (`created: false`), or a dry run's outcome.",
                    found,
                )
                .ok(201, "Enqueued.", s.of::<Enqueued>())
                .writes()
        },
    ),
    Route::new(
        &paths::TASKS_RETRY,
        Key,
        "Retry the failed or cancelled tasks a filter matches",
        serve!(|ctx, req, _| lifecycle::bulk(&ctx, req, BulkAction::Retry)),
        |op, s| {
            op.json(s.of::<BulkBody>())
                .ok(200, "What was (or would be) retried.", s.of::<BulkReply>())
                .writes()
        },
    ),
    Route::new(
        &paths::TASKS_CANCEL,
        Key,
        "Cancel the tasks a filter matches",
        serve!(|ctx, req, _| lifecycle::bulk(&ctx, req, BulkAction::Cancel)),
        |op, s| {
            op.json(s.of::<BulkBody>())
                .ok(
                    200,
                    "What was (or would be) cancelled.",
                    s.of::<BulkReply>(),
                )
                .writes()
        },
    ),
    Route::new(
        &paths::TASK_LIST,
        Key,
        "Tasks the key may see, a page at a time",
        serve!(|ctx, req, _| tasks::list(&ctx, req)),
        |op, s| {
            op.query("state", s.of::<TaskState>(), "Only this state.")
                .query("queue", s.of::<Name>(), "Only this queue.")
                .query("kind", s.of::<Name>(), "Only this kind.")
                .query("namespace", s.of::<Name>(), "Only this namespace.")
                .query(
                    "source_pack",
                    s.of::<Name>(),
                    "Only tasks this seed pack enqueued.",
                )
                .query("cursor", s.of::<TaskId>(), "Start after this task.")
                .query("limit", count(), "Page size.")
                .ok(200, "A page.", s.of::<TaskList>())
        },
    ),
    Route::new(
        &paths::TASK_GET,
        Key,
        "One task",
        serve!(|ctx, req, p| tasks::show(&ctx, req, p.get("id"))),
        |op, s| op.ok(200, "The task.", s.of::<TaskView>()),
    ),
    Route::new(
        &paths::TASK_RECEIPTS,
        Key,
        "A task's receipts, in order",
        serve!(|ctx, req, p| tasks::receipts(&ctx, req, p.get("id"))),
        |op, s| op.ok(200, "The receipts.", s.of::<ReceiptList>()),
    ),
    Route::new(
        &paths::TASK_CLAIM,
        Key,
        "Claim one task by id",
        serve!(|ctx, req, p| queues::claim_one(&ctx, req, p.get("id"))),
        |op, s| {
            let claim = json!({"oneOf": [s.of::<Claimed>(), s.of::<ThinClaimed>()]});
            op.json_optional(s.of::<ClaimOne>())
                .ok(
                    200,
                    "The claim: lease, token and handle; with `thin`, a thin claim (no brief, \
                     no token).",
                    claim,
                )
                .writes()
        },
    ),
    Route::new(
        &paths::TASK_HEARTBEAT,
        Key,
        "Extend the lease",
        serve!(|ctx, req, p| lifecycle::heartbeat(&ctx, req, p.get("id"))),
        |op, s| {
            op.json(s.of::<LeaseRef>())
                .ok(200, "The new expiry.", s.of::<Heartbeat>())
                .writes()
        },
    ),
    Route::new(
        &paths::TASK_RELEASE,
        Key,
        "Give the task back to its queue",
        serve!(|ctx, req, p| lifecycle::release(&ctx, req, p.get("id"))),
        |op, s| {
            op.json(s.of::<LeaseRef>())
                .ok(200, "The task's state.", s.of::<StateReply>())
                .writes()
        },
    ),
    Route::new(
        &paths::TASK_SUBMIT,
        Key,
        "Finish the attempt with a receipt",
        serve!(|ctx, req, p| lifecycle::submit(&ctx, req, p.get("id"))),
        |op, s| {
            op.json(s.of::<SubmitBody>())
                .ok(
                    200,
                    "The same submit again: the receipt it made.",
                    s.of::<Submitted>(),
                )
                .ok(201, "The receipt.", s.of::<Submitted>())
                .writes()
        },
    ),
    Route::new(
        &paths::TASK_PARK,
        Key,
        "Park the task until another principal resumes it",
        serve!(|ctx, req, p| lifecycle::park(&ctx, req, p.get("id"))),
        |op, s| {
            op.json(s.of::<ParkBody>())
                .ok(200, "The task's state.", s.of::<StateReply>())
                .writes()
        },
    ),
    Route::new(
        &paths::TASK_RESUME,
        Key,
        "Resume a parked task with a new input pin",
        serve!(|ctx, req, p| lifecycle::resume(&ctx, req, p.get("id"))),
        |op, s| {
            op.json(s.of::<ResumeBody>())
                .ok(200, "The task's state.", s.of::<StateReply>())
                .writes()
        },
    ),
    Route::new(
        &paths::TASK_SPLIT,
        Key,
        "Split the task into children",
        serve!(|ctx, req, p| lifecycle::split(&ctx, req, p.get("id"))),
        |op, s| {
            op.json(s.of::<SplitBody>())
                .ok(200, "The children.", s.of::<SplitDone>())
                .writes()
        },
    ),
    Route::new(
        &paths::TASK_CANCEL,
        Key,
        "Cancel the task and its children",
        serve!(|ctx, req, p| lifecycle::cancel(&ctx, req, p.get("id"))),
        |op, s| {
            op.query(
                "if_state",
                state_list(),
                "Comma-separated states (e.g. pending,queued,parked): cancel only a task in \
                 one of them, else 409 invalid_state.",
            )
            .ok(200, "The task's state.", s.of::<StateReply>())
            .writes()
        },
    ),
    Route::new(
        &paths::TASK_RETRY,
        Key,
        "Queue a failed or cancelled task again",
        serve!(|ctx, req, p| lifecycle::retry(&ctx, req, p.get("id"))),
        |op, s| {
            op.json_optional(s.of::<RetryBody>())
                .ok(200, "The new attempt.", s.of::<Retried>())
                .writes()
        },
    ),
    Route::new(
        &paths::TASK_OUTPUT,
        Key,
        "The final pull: {out, parts}, or with ?path= one piece's raw bytes",
        serve!(|ctx, req, p| worker::output(&ctx, req, p.get("id"))),
        |op, s| {
            op.query(
                "path",
                output_address(),
                "One piece: `$.out` or `$.parts[\"<name>\"]`; answered raw with \
                 x-tessera-sha256.",
            )
            .ok(200, "The last receipt's output.", s.of::<Output>())
            .raw("With ?path=: that piece's bytes, in its own media type.")
        },
    ),
    Route::new(
        &paths::PROMOTE,
        Key,
        "Promote a noun version to public (admin)",
        serve!(|ctx, req, _| promotions::promote(&ctx, req)),
        |op, s| {
            op.json(s.of::<crate::promotion::Request>())
                .ok(201, "The promotion record.", s.of::<PromotionReply>())
                .writes()
        },
    ),
    Route::new(
        &paths::WORKER_PROMPT,
        Worker,
        "The attempt's prompt, assembled now",
        serve!(|ctx, req, _| worker::prompt(&ctx, req)),
        |op, s| op.task_id(s).ok(200, "The prompt.", s.of::<Prompt>()),
    ),
    Route::new(
        &paths::WORKER_ARTIFACT,
        Worker,
        "Stage a part (last write wins)",
        serve!(|ctx, req, _| worker::stage(&ctx, req)),
        |op, s| {
            op.task_id(s)
                .query("name", part_name(), "The part's name.")
                .bytes()
                .ok(200, "The staged part.", s.of::<StagedPart>())
                .writes()
        },
    ),
    Route::new(
        &paths::WORKER_SUBMIT,
        Worker,
        "Submit the final body; completes the attempt",
        serve!(|ctx, req, _| worker::submit(&ctx, req)),
        |op, s| {
            op.task_id(s)
                .query("ok", boolean(), "false for a failed attempt.")
                .query("final", boolean(), "With ok=false: no retry.")
                .bytes()
                .ok(
                    200,
                    "The same submit again: the receipt it made.",
                    s.of::<Submitted>(),
                )
                .ok(201, "The receipt.", s.of::<Submitted>())
                .writes()
        },
    ),
    Route::new(
        &paths::WORKER_NOUN,
        Worker,
        "A noun the task pins, read as the claimant",
        serve!(|ctx, req, p| worker::noun(&ctx, req, p.noun())),
        |op, s| {
            op.task_id(s)
                .pin_query(s)
                .raw("The body, in its own media type.")
        },
    ),
    Route::new(
        &paths::WORKER_HEARTBEAT,
        Worker,
        "Extend the attempt's lease",
        serve!(|ctx, req, _| worker::heartbeat(&ctx, req)),
        |op, s| {
            op.task_id(s)
                .ok(200, "The new expiry.", s.of::<WorkerHeartbeat>())
                .writes()
        },
    ),
    Route::new(
        &paths::WORKER_PARTS,
        Worker,
        "The parts staged so far",
        serve!(|ctx, req, _| worker::parts(&ctx, req)),
        |op, s| op.task_id(s).ok(200, "The parts.", s.of::<WorkerParts>()),
    ),
    Route::new(
        &paths::WORKER_CONSUMES,
        Worker,
        "A ready consumes entry's raw bytes (an upstream step's output)",
        serve!(|ctx, req, p| worker::consumed(&ctx, req, p.get("name"))),
        |op, s| {
            op.task_id(s)
                .raw("The bytes, in their own media type, with x-tessera-sha256.")
        },
    ),
    Route::new(
        &paths::MCP,
        Worker,
        "The MCP server over streamable HTTP (stateless JSON-RPC; see the README's Agents \
         section)",
        serve!(|ctx, req, _| mcp::serve(&ctx, req)),
        |op, _| {
            op.json(json!({
                "type": "object",
                "description": "A JSON-RPC 2.0 request or notification of the Model Context \
                                Protocol.",
            }))
            .ok(200, "The JSON-RPC answer.", json!({"type": "object"}))
            .empty(202, "A notification, accepted.")
        },
    ),
];
