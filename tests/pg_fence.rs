//! The fence on the queue database, step by step against a real server:
//! a lapsed lease, a reaped task claimed again, a zombie's late
//! completion, a wrong attempt, a resend and a conflicting resend, each
//! answered as the embedded queue answers it; claims filtered by the
//! claimant's grants; concurrent claimers never sharing a task; two
//! upstreams ending together releasing their dependent, and a split's
//! last child queueing its parent, by counters in the completing
//! statement.

use crate::support;

use std::collections::HashSet;

use support::pg;
use tessera::database::{Database, schema};
use tessera::queue::errors::{SubmitError, TaskCallError};
use tessera::queue::pg::complete::{self, Completed, Completion};
use tessera::queue::pg::lease::{self, Fence};
use tessera::queue::pg::viewer::Grants;
use tessera::queue::{Attempt, LeaseId, TaskId, TaskState};
use tessera::store::envelope::{EffectClass, Viewer};
use tessera::store::{Name, Sha256};

fn name(s: &str) -> Name {
    Name::parse("name", s).unwrap()
}

/// A migrated database with queue `q1` and `n` public `read` tasks of
/// kind `k1` in namespace `ns1`, ids 1..=n.
async fn with_tasks(n: i64) -> (Database, tokio_postgres::Client) {
    let url = pg::fresh_database().await;
    let db = Database::connect(&url).await.unwrap();
    schema::migrate(&db).await.unwrap();
    let client = pg::connect(&url).await;
    client
        .batch_execute("INSERT INTO queues (name, server, config) VALUES ('q1', false, '{}')")
        .await
        .unwrap();
    client
        .execute(
            &format!(
                "INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, requester, state, spec) \
                 SELECT i, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'queued', {} \
                 FROM generate_series(1, $1::bigint) i",
                pg::spec_sql("json_build_object()")
            ),
            &[&n],
        )
        .await
        .unwrap();
    (db, client)
}

fn worker(key: &str) -> Viewer {
    let mut v = Viewer::admin(name(key));
    v.admin = false;
    v.namespaces = [name("ns1")].into();
    v.queues = [name("q1")].into();
    v.kinds = [name("k1")].into();
    v.effect_classes = [EffectClass::Read].into();
    v
}

fn lease_for(_: usize) -> (LeaseId, String) {
    (
        tessera::queue::task::new_lease_id(),
        tessera::auth::token::new_handle(),
    )
}

async fn claim_one(db: &Database, key: &str) -> lease::ClaimedRow {
    let mut got = lease::claim(
        db,
        &name("q1"),
        &Grants::of(&worker(key)),
        &name(key),
        &[lease_for(0)],
    )
    .await
    .unwrap();
    assert_eq!(got.len(), 1, "one task claimed");
    got.pop().unwrap()
}

fn fence<'a>(c: &'a lease::ClaimedRow, by: &'a Name) -> Fence<'a> {
    Fence {
        id: c.id(),
        lease: &c.lease().id,
        attempt: c.attempt(),
        by,
    }
}

fn stale(state: TaskState, attempt: u32) -> impl Fn(&SubmitError) -> bool {
    move |e| {
        matches!(e, SubmitError::Task(TaskCallError::StaleLease { state: s, attempt: a })
            if *s == state && *a == Attempt(attempt))
    }
}

#[tokio::test]
async fn the_nine_fence_steps_answer_as_the_embedded_queue_does() {
    let (db, client) = with_tasks(1).await;
    let (w1, w2) = (name("worker-1"), name("worker-2"));
    let done = |f: Fence<'_>| {
        finish(
            f,
            TaskState::Succeeded,
            b"the submission",
            b"{\"receipt\":1}",
        )
    };

    // 1. worker-1 claims: attempt 1.
    let first = claim_one(&db, "worker-1").await;
    assert_eq!((first.id(), first.attempt()), (TaskId(1), Attempt(1)));

    // 2. Its lease lapses, not yet reaped; its completion is stale.
    client
        .batch_execute("UPDATE tasks SET lease_expires = now() - interval '1 second'")
        .await
        .unwrap();
    let late = complete::complete(&db, done(fence(&first, &w1)))
        .await
        .unwrap();
    assert!(
        late.as_ref().is_err_and(stale(TaskState::Claimed, 1)),
        "{late:?}"
    );

    // 3. It goes back to the queue, as the maintenance leader returns a
    // lapsed lease's task (the daemon's expiry, `pg::Shared`, decides it
    // with the embedded queue's rules; here, the rows it leaves).
    client
        .batch_execute(
            "UPDATE tasks SET state = 'queued', lease_id = NULL, lease_holder = NULL, \
             lease_expires = NULL WHERE state = 'claimed' AND lease_expires <= now()",
        )
        .await
        .unwrap();

    // 4. worker-2 claims: attempt 2.
    let second = claim_one(&db, "worker-2").await;
    assert_eq!((second.id(), second.attempt()), (TaskId(1), Attempt(2)));

    // 5. Zombie worker-1 completes with its old lease.
    let zombie = complete::complete(&db, done(fence(&first, &w1)))
        .await
        .unwrap();
    assert!(
        zombie.as_ref().is_err_and(stale(TaskState::Claimed, 2)),
        "{zombie:?}"
    );

    // 6. worker-2's lease with the old attempt number.
    let wrong = Fence {
        attempt: Attempt(1),
        ..fence(&second, &w2)
    };
    let wrong = complete::complete(&db, done(wrong)).await.unwrap();
    assert!(
        wrong.as_ref().is_err_and(stale(TaskState::Claimed, 2)),
        "{wrong:?}"
    );

    // Another key naming worker-2's live lease is not its claimant.
    let thief = complete::complete(&db, done(fence(&second, &w1)))
        .await
        .unwrap();
    assert!(
        matches!(thief, Err(SubmitError::Task(TaskCallError::NotClaimant))),
        "{thief:?}"
    );
    let beat = lease::heartbeat(&db, fence(&second, &w1)).await.unwrap();
    assert!(matches!(beat, Err(TaskCallError::NotClaimant)), "{beat:?}");
    let beat = lease::heartbeat(&db, fence(&second, &w2))
        .await
        .unwrap()
        .unwrap();
    assert!(
        beat >= second.lease().expires_at,
        "a heartbeat extends the lease"
    );

    // 7. worker-2 completes: accepted.
    let accepted = complete::complete(&db, done(fence(&second, &w2)))
        .await
        .unwrap()
        .unwrap();
    let Completed::Accepted(sha) = accepted else {
        panic!("accepted, not {accepted:?}");
    };
    assert_eq!(sha, Sha256::of(b"{\"receipt\":1}"));

    // 8. The same submit again: the same receipt.
    let again = complete::complete(&db, done(fence(&second, &w2)))
        .await
        .unwrap();
    assert_eq!(
        again.unwrap(),
        Completed::Existing(sha, TaskState::Succeeded)
    );

    // 9. A different submit on that lease: a conflict.
    let other = finish(
        fence(&second, &w2),
        TaskState::Succeeded,
        b"another submission",
        b"{\"receipt\":1}",
    );
    let conflict = complete::complete(&db, other).await.unwrap();
    assert!(
        matches!(conflict, Err(SubmitError::Conflict)),
        "{conflict:?}"
    );

    // The zombie's lease after the end is stale against the final state.
    let after = complete::complete(&db, done(fence(&first, &w1)))
        .await
        .unwrap();
    assert!(
        after.as_ref().is_err_and(stale(TaskState::Succeeded, 2)),
        "{after:?}"
    );
    let beat = lease::heartbeat(&db, fence(&second, &w2)).await.unwrap();
    assert!(
        matches!(
            beat,
            Err(TaskCallError::StaleLease {
                state: TaskState::Succeeded,
                ..
            })
        ),
        "{beat:?}"
    );

    let receipts: i64 = client
        .query_one("SELECT count(*) FROM receipts WHERE task_id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(receipts, 1, "one accepted receipt for the task");
    let handles: i64 = client
        .query_one("SELECT count(*) FROM handles WHERE task_id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(handles, 2, "each claim recorded its handle");
    let missing = Fence {
        id: TaskId(99),
        ..fence(&second, &w2)
    };
    let missing = complete::complete(&db, done(missing)).await.unwrap();
    assert!(
        matches!(missing, Err(SubmitError::Task(TaskCallError::NotFound))),
        "{missing:?}"
    );
}

#[tokio::test]
async fn a_claim_takes_only_what_the_claimants_grants_allow() {
    let (db, client) = with_tasks(4).await;
    client
        .batch_execute(
            "UPDATE tasks SET kind = 'k2' WHERE id = 1; \
             UPDATE tasks SET namespace = 'ns2' WHERE id = 2; \
             UPDATE tasks SET effect_class = 'write-repo' WHERE id = 3",
        )
        .await
        .unwrap();
    let leases: Vec<_> = (0..4).map(lease_for).collect();
    let mut plain = worker("w");
    plain.kinds.insert(name("k2"));
    plain.effect_classes.insert(EffectClass::WriteRepo);
    let got = lease::claim(&db, &name("q1"), &Grants::of(&plain), &name("w"), &leases)
        .await
        .unwrap();
    let ids: Vec<u64> = got.iter().map(|c| c.id().0).collect();
    assert_eq!(
        ids,
        [1, 4],
        "not another namespace, not an admin-only effect"
    );
    let mut no_claim = worker("w");
    no_claim.claims = false;
    let got = lease::claim(
        &db,
        &name("q1"),
        &Grants::of(&no_claim),
        &name("w"),
        &leases,
    )
    .await
    .unwrap();
    assert!(got.is_empty(), "a key without verbs:claim claims nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claimers_never_share_a_task() {
    let (db, _client) = with_tasks(400).await;
    let claimers: Vec<_> = (0..8)
        .map(|w| {
            let db = db.clone();
            tokio::spawn(async move {
                let key = format!("w{w}");
                let grants = Grants::of(&worker(&key));
                let mut mine = Vec::new();
                loop {
                    let leases: Vec<_> = (0..7).map(lease_for).collect();
                    let got = lease::claim(&db, &name("q1"), &grants, &name(&key), &leases)
                        .await
                        .unwrap();
                    if got.is_empty() {
                        return mine;
                    }
                    mine.extend(
                        got.into_iter()
                            .map(|c| (c.id(), c.lease().id.clone(), c.lease().handle.clone())),
                    );
                }
            })
        })
        .collect();
    let mut ids = HashSet::new();
    let mut handles = HashSet::new();
    let mut total = 0;
    for c in claimers {
        for (id, _, handle) in c.await.unwrap() {
            ids.insert(id);
            handles.insert(handle);
            total += 1;
        }
    }
    assert_eq!(total, 400, "every task claimed once");
    assert_eq!(ids.len(), 400);
    assert_eq!(handles.len(), 400, "each claim its own handle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_upstreams_ending_together_release_their_dependent() {
    let (db, client) = with_tasks(0).await;
    let w = name("w");
    for round in 0..40i64 {
        let (a, b, dependent) = (round * 10 + 1, round * 10 + 2, round * 10 + 3);
        client
            .execute(
                "INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, requester, state, blocked, spec) \
                 VALUES ($1, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'queued', 0, json_build_object('namespace', 'ns1', 'queue', 'q1', 'kind', 'k1', 'effect_class', 'read', 'brief', json_build_object())), \
                        ($2, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'queued', 0, json_build_object('namespace', 'ns1', 'queue', 'q1', 'kind', 'k1', 'effect_class', 'read', 'brief', json_build_object())), \
                        ($3, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'pending', 2, json_build_object('namespace', 'ns1', 'queue', 'q1', 'kind', 'k1', 'effect_class', 'read', 'brief', json_build_object()))",
                &[&a, &b, &dependent],
            )
            .await
            .unwrap();
        client
            .execute(
                "INSERT INTO task_deps (upstream, downstream) VALUES ($1, $3), ($2, $3)",
                &[&a, &b, &dependent],
            )
            .await
            .unwrap();
        let leases: Vec<_> = (0..2).map(lease_for).collect();
        let claimed = lease::claim(&db, &name("q1"), &Grants::of(&worker("w")), &w, &leases)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 2, "round {round}: both upstreams claimed");
        let ends: Vec<_> = claimed
            .into_iter()
            .map(|c| {
                let (db, w) = (db.clone(), w.clone());
                tokio::spawn(async move {
                    let done = finish(fence(&c, &w), TaskState::Succeeded, b"done", b"{}");
                    complete::complete(&db, done).await.unwrap().unwrap()
                })
            })
            .collect();
        for e in ends {
            assert!(matches!(e.await.unwrap(), Completed::Accepted(_)));
        }
        let row = client
            .query_one(
                "SELECT state, blocked FROM tasks WHERE id = $1",
                &[&dependent],
            )
            .await
            .unwrap();
        assert_eq!(
            (row.get::<_, &str>(0), row.get::<_, i32>(1)),
            ("queued", 0),
            "round {round}: the dependent is released once, when its last upstream ends"
        );
        // Out of the next round's way.
        client
            .execute(
                "UPDATE tasks SET state = 'cancelled' WHERE id = $1",
                &[&dependent],
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_split_child_and_a_failure_with_dependents_are_left_to_the_family_transaction() {
    let (db, client) = with_tasks(0).await;
    client
        .batch_execute(
            "INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, requester, state, open_children, spec) \
             VALUES (1, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'waiting', 1, json_build_object('namespace', 'ns1', 'queue', 'q1', 'kind', 'k1', 'effect_class', 'read', 'brief', json_build_object())); \
             INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, requester, state, parent, depth, spec) \
             VALUES (2, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'queued', 1, 1, json_build_object('namespace', 'ns1', 'queue', 'q1', 'kind', 'k1', 'effect_class', 'read', 'brief', json_build_object())); \
             INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, requester, state, spec) \
             VALUES (3, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'queued', json_build_object('namespace', 'ns1', 'queue', 'q1', 'kind', 'k1', 'effect_class', 'read', 'brief', json_build_object())); \
             INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, requester, state, blocked, spec) \
             VALUES (4, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'pending', 1, json_build_object('namespace', 'ns1', 'queue', 'q1', 'kind', 'k1', 'effect_class', 'read', 'brief', json_build_object())); \
             INSERT INTO task_deps (upstream, downstream) VALUES (3, 4)",
        )
        .await
        .unwrap();
    let w = name("w");
    let row = |id: i64| {
        let client = &client;
        async move {
            let r = client
                .query_one(
                    "SELECT state, lease_id IS NOT NULL, blocked, \
                       (SELECT count(*) FROM receipts WHERE task_id = $1) FROM tasks WHERE id = $1",
                    &[&id],
                )
                .await
                .unwrap();
            (
                r.get::<_, String>(0),
                r.get::<_, bool>(1),
                r.get::<_, i32>(2),
                r.get::<_, i64>(3),
            )
        }
    };
    let failed = |f: Fence<'_>, state: TaskState| Completion {
        reason: Some("it broke".into()),
        ..finish(f, state, b"r", b"{\"ok\":false}")
    };
    let child = claim_one(&db, "w").await;
    assert_eq!(child.id(), TaskId(2));
    for state in [TaskState::Succeeded, TaskState::Failed] {
        let out = complete::complete(&db, failed(fence(&child, &w), state));
        assert_eq!(out.await.unwrap().unwrap(), Completed::Related, "a child");
    }
    assert_eq!(
        row(2).await,
        ("claimed".into(), true, 0, 0),
        "left as it was"
    );
    assert_eq!(row(1).await.0, "waiting");

    let upstream = claim_one(&db, "w").await;
    assert_eq!(upstream.id(), TaskId(3));
    let out = complete::complete(&db, failed(fence(&upstream, &w), TaskState::Failed));
    assert_eq!(
        out.await.unwrap().unwrap(),
        Completed::Related,
        "a failure with a dependent"
    );
    assert_eq!(row(3).await, ("claimed".into(), true, 0, 0));
    let retried = Completion {
        not_before: Some(jiff::Timestamp::now() + jiff::SignedDuration::from_secs(60)),
        ..failed(fence(&upstream, &w), TaskState::Queued)
    };
    let out = complete::complete(&db, retried);
    assert!(matches!(
        out.await.unwrap().unwrap(),
        Completed::Accepted(_)
    ));
    assert_eq!(row(3).await, ("queued".into(), false, 0, 1), "retried");
    assert_eq!(
        row(4).await.0,
        "pending",
        "a retried failure releases nothing"
    );
    let r = client
        .query_one(
            "SELECT reason, not_before > now() + interval '50 seconds' FROM tasks WHERE id = 3",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(r.get::<_, Option<&str>>(0), Some("it broke"));
    assert!(
        r.get::<_, bool>(1),
        "claimable after its backoff, on the database's clock"
    );
}

#[tokio::test]
async fn a_success_releases_only_dependents_still_pending() {
    let (db, client) = with_tasks(1).await;
    client
        .batch_execute(
            "INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, requester, state, blocked, spec) \
             VALUES (2, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'cancelled', 0, '{}'), \
                    (3, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'pending', 1, '{}'); \
             INSERT INTO task_deps (upstream, downstream) VALUES (1, 2), (1, 3)",
        )
        .await
        .unwrap();
    let c = claim_one(&db, "w").await;
    let done = completion(&c, "w", TaskState::Succeeded, b"r", b"{}");
    let out = complete::complete_many(&db, &[done]).await.unwrap();
    assert!(matches!(out[0], Ok(Completed::Accepted(_))), "{out:?}");
    let rows: Vec<(i64, String, i32)> = client
        .query(
            "SELECT id, state, blocked FROM tasks WHERE id > 1 ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        [(2, "cancelled".into(), 0), (3, "queued".into(), 0)],
        "a cancelled dependent stays as it was; the pending one is queued"
    );
    let released: i64 = client
        .query_one(
            "SELECT count(*) FROM events WHERE task_id = 3 AND from_state = 'pending' AND to_state = 'queued'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(released, 1, "the release has its event row");
}

/// The completion of `f`'s attempt in `state`, with `request` (hashed)
/// and `receipt`, decided now.
fn finish(f: Fence<'_>, state: TaskState, request: &[u8], receipt: &[u8]) -> Completion {
    Completion {
        id: f.id,
        lease: f.lease.clone(),
        attempt: f.attempt,
        by: f.by.clone(),
        state,
        request: Sha256::of(request),
        receipt: receipt.to_vec(),
        reason: None,
        not_before: None,
        at: jiff::Timestamp::now(),
    }
}

fn completion(
    c: &lease::ClaimedRow,
    by: &str,
    state: TaskState,
    request: &[u8],
    receipt: &[u8],
) -> Completion {
    finish(fence(c, &name(by)), state, request, receipt)
}

#[tokio::test]
async fn one_task_twice_in_a_batch_is_accepted_once_as_the_embedded_queue_would() {
    let (db, client) = with_tasks(2).await;
    let leases: Vec<_> = (0..2).map(lease_for).collect();
    let claimed = lease::claim(
        &db,
        &name("q1"),
        &Grants::of(&worker("w")),
        &name("w"),
        &leases,
    )
    .await
    .unwrap();
    let (a, b) = (&claimed[0], &claimed[1]);
    let same = completion(a, "w", TaskState::Succeeded, b"r", b"{\"a\":1}");
    let first = completion(b, "w", TaskState::Succeeded, b"r1", b"{\"b\":1}");
    let other = completion(b, "w", TaskState::Succeeded, b"r2", b"{\"b\":2}");
    let out = complete::complete_many(&db, &[same.clone(), same, first, other])
        .await
        .unwrap();
    let sha_a = Sha256::of(b"{\"a\":1}");
    let sha_b = Sha256::of(b"{\"b\":1}");
    assert_eq!(out[0].as_ref().unwrap(), &Completed::Accepted(sha_a));
    assert_eq!(
        out[1].as_ref().unwrap(),
        &Completed::Existing(sha_a, TaskState::Succeeded),
        "a resend in the same batch"
    );
    assert_eq!(out[2].as_ref().unwrap(), &Completed::Accepted(sha_b));
    assert!(matches!(out[3], Err(SubmitError::Conflict)), "{:?}", out[3]);
    let stored: Vec<u8> = client
        .query_one(
            "SELECT sha256 FROM receipts WHERE task_id = $1",
            &[&(b.id().0 as i64)],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        stored,
        sha_b.as_bytes(),
        "the receipt kept is the one answered as accepted"
    );
}

#[tokio::test]
async fn two_upstreams_ending_in_one_batch_count_down_twice() {
    let (db, client) = with_tasks(2).await;
    client
        .batch_execute(
            "INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, requester, state, blocked, spec) \
             VALUES (3, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'pending', 2, json_build_object('namespace', 'ns1', 'queue', 'q1', 'kind', 'k1', 'effect_class', 'read', 'brief', json_build_object())); \
             INSERT INTO task_deps (upstream, downstream) VALUES (1, 3), (2, 3)",
        )
        .await
        .unwrap();
    let leases: Vec<_> = (0..2).map(lease_for).collect();
    let claimed = lease::claim(
        &db,
        &name("q1"),
        &Grants::of(&worker("w")),
        &name("w"),
        &leases,
    )
    .await
    .unwrap();
    let batch: Vec<_> = claimed
        .iter()
        .map(|c| completion(c, "w", TaskState::Succeeded, b"r", b"{}"))
        .collect();
    for o in complete::complete_many(&db, &batch).await.unwrap() {
        assert!(matches!(o, Ok(Completed::Accepted(_))), "{o:?}");
    }
    let r = client
        .query_one("SELECT state, blocked FROM tasks WHERE id = 3", &[])
        .await
        .unwrap();
    assert_eq!((r.get::<_, &str>(0), r.get::<_, i32>(1)), ("queued", 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_submits_share_statements_and_each_is_answered() {
    let (db, client) = with_tasks(600).await;
    let completer = tessera::queue::pg::batch::completer(db.clone());
    let leases: Vec<_> = (0..400).map(lease_for).collect();
    let mut claimed = Vec::new();
    for chunk in leases.chunks(100) {
        claimed.extend(
            lease::claim(
                &db,
                &name("q1"),
                &Grants::of(&worker("w")),
                &name("w"),
                chunk,
            )
            .await
            .unwrap(),
        );
    }
    assert_eq!(claimed.len(), 400);
    let grants = std::sync::Arc::new(Grants::of(&worker("w")));
    // Half of them claim the next task with their submit (`claim_next`).
    let submits: Vec<_> = claimed
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let completer = completer.clone();
            let done = completion(
                c,
                "w",
                TaskState::Succeeded,
                b"r",
                c.id().to_string().as_bytes(),
            );
            let next = (i % 2 == 0).then(|| lease::ClaimAsk {
                queue: name("q1"),
                grants: grants.clone(),
                holder: name("w"),
                kinds: None,
                leases: vec![lease_for(0)],
            });
            tokio::spawn(async move { completer.call((done, next)).await })
        })
        .collect();
    let mut next_ids = HashSet::new();
    for (i, s) in submits.into_iter().enumerate() {
        let (outcome, next) = s.await.unwrap().unwrap();
        assert!(matches!(outcome, Ok(Completed::Accepted(_))), "{outcome:?}");
        assert_eq!(
            next.len(),
            usize::from(i % 2 == 0),
            "a claim only where asked"
        );
        for n in next {
            assert!(n.id().0 > 400, "a task nobody held: {}", n.id());
            assert_eq!(
                (n.task().state, n.lease().attempt),
                (TaskState::Claimed, n.attempt()),
                "the task as the claim left it"
            );
            assert!(next_ids.insert(n.id()), "task {} claimed twice", n.id());
        }
    }
    assert_eq!(next_ids.len(), 200);
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT xid) FROM events WHERE from_state = 'claimed'",
            &[],
        )
        .await
        .unwrap();
    let (events, commits) = (row.get::<_, i64>(0), row.get::<_, i64>(1));
    assert_eq!(
        events, 400,
        "one event per completion, written by its statement"
    );
    assert!(
        commits < 400,
        "400 completions took {commits} commits: none shared one"
    );
    let apart: i64 = client
        .query_one(
            "SELECT count(*) FROM events c WHERE c.from_state = 'queued' AND c.task_id > 400 \
             AND NOT EXISTS (SELECT 1 FROM events d WHERE d.xid = c.xid AND d.from_state = 'claimed')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        apart, 0,
        "each next claim committed with the submits it followed"
    );
    let receipts: i64 = client
        .query_one("SELECT count(*) FROM receipts", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(receipts, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_share_statements_and_never_share_a_task() {
    let (db, client) = with_tasks(300).await;
    let claimer = tessera::queue::pg::batch::claimer(db.clone());
    let grants = std::sync::Arc::new(Grants::of(&worker("w")));
    let asks: Vec<_> = (0..80)
        .map(|i| {
            let claimer = claimer.clone();
            let ask = lease::ClaimAsk {
                queue: name("q1"),
                grants: grants.clone(),
                holder: name(&format!("w{}", i % 3)),
                kinds: None,
                leases: (0..5).map(lease_for).collect(),
            };
            tokio::spawn(async move {
                let leases: HashSet<_> = ask.leases.iter().map(|(l, _)| l.clone()).collect();
                let holder = ask.holder.clone();
                (claimer.call(ask).await.unwrap(), leases, holder)
            })
        })
        .collect();
    let mut ids = HashSet::new();
    for a in asks {
        let (got, leases, holder) = a.await.unwrap();
        assert!(got.len() <= 5);
        for c in got {
            assert!(
                leases.contains(&c.lease().id),
                "each task goes to the ask whose lease it took"
            );
            let row = client
                .query_one(
                    "SELECT lease_holder FROM tasks WHERE id = $1",
                    &[&(c.id().0 as i64)],
                )
                .await
                .unwrap();
            assert_eq!(row.get::<_, &str>(0), holder.as_str(), "held by its asker");
            assert!(ids.insert(c.id()), "{} claimed twice", c.id());
        }
    }
    assert_eq!(ids.len(), 300, "80 asks of 5 took all 300 tasks");
    let commits: i64 = client
        .query_one(
            "SELECT count(DISTINCT xid) FROM events WHERE to_state = 'claimed'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        commits < 80,
        "80 claims took {commits} commits: none shared one"
    );
}

#[tokio::test]
async fn a_lease_lasts_the_tasks_own_length_else_its_queues_else_300_s() {
    let (db, client) = with_tasks(0).await;
    client
        .batch_execute(
            "INSERT INTO queues (name, server, config) VALUES ('q2', false, '{\"lease_ttl_s\": 45}'); \
             INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, requester, state, lease_ttl_s, spec) \
             VALUES (1, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'queued', 90, json_build_object('namespace', 'ns1', 'queue', 'q1', 'kind', 'k1', 'effect_class', 'read', 'brief', json_build_object())), \
                    (2, 'ns1', 'q2', 'k1', 'read', 'public', 'requester', 'queued', NULL, json_build_object('namespace', 'ns1', 'queue', 'q1', 'kind', 'k1', 'effect_class', 'read', 'brief', json_build_object())), \
                    (3, 'ns1', 'q1', 'k1', 'read', 'public', 'requester', 'queued', NULL, json_build_object('namespace', 'ns1', 'queue', 'q1', 'kind', 'k1', 'effect_class', 'read', 'brief', json_build_object()))",
        )
        .await
        .unwrap();
    let mut grants_of = worker("w");
    grants_of.queues.insert(name("q2"));
    let grants = Grants::of(&grants_of);
    let w = name("w");
    let mut lengths = Vec::new();
    for (queue, n) in [("q1", 2), ("q2", 1)] {
        let leases: Vec<_> = (0..n).map(lease_for).collect();
        let got = lease::claim(&db, &name(queue), &grants, &w, &leases)
            .await
            .unwrap();
        for c in got {
            let row = client
                .query_one(
                    "SELECT extract(epoch FROM lease_expires - claimed_at)::int FROM tasks WHERE id = $1",
                    &[&(c.id().0 as i64)],
                )
                .await
                .unwrap();
            lengths.push((c.id().0, row.get::<_, i32>(0)));
            let beat = lease::heartbeat(&db, fence(&c, &w)).await.unwrap().unwrap();
            let left = beat.duration_since(jiff::Timestamp::now()).as_secs();
            lengths.push((c.id().0 + 10, left as i32 + 1));
        }
    }
    lengths.sort();
    assert_eq!(
        lengths,
        [(1, 90), (2, 45), (3, 300), (11, 90), (12, 45), (13, 300)],
        "claims, then heartbeats: the task's own length, else its queue's, else 300 s"
    );
}
