//! Tasks written to the queue database and read back are the tasks the
//! embedded queue holds, field for field (times to the microsecond):
//! fresh, claimed with staged parts, parked, split, ended with receipts
//! (all made by one statement), and changed and written again.

use crate::support;

use std::sync::Arc;

use jiff::Timestamp;
use serde_json::json;
use support::pg;
use tessera::database::{Database, schema};
use tessera::queue::pg::tasks;
use tessera::queue::task::Submission;
use tessera::queue::{Attempt, Lease, LeaseId, Park, Task, TaskId, TaskSpec, TaskState};
use tessera::store::{Name, Sha256};

fn name(s: &str) -> Name {
    Name::parse("name", s).unwrap()
}

fn at(us: i64) -> Timestamp {
    Timestamp::from_microsecond(us).unwrap()
}

fn spec(extra: serde_json::Value) -> Arc<TaskSpec> {
    let mut s = json!({
        "namespace": "ns1", "queue": "q1", "kind": "k1", "effect_class": "write-internal",
        "producer_surface": "s1", "visibility_scope": "allowlist_surfaces",
        "allowed_surfaces": ["s2", "s3"], "target_cohorts": ["c"], "tags": ["t1", "t2"],
        "depends_on": [],
    });
    for (k, v) in extra.as_object().unwrap() {
        s[k] = v.clone();
    }
    // The brief's bytes as written: key order and spacing kept.
    let text = s
        .to_string()
        .replacen("{", r#"{"brief": {"z": 1,  "a": [2, 1]},"#, 1);
    Arc::new(serde_json::from_str(&text).unwrap())
}

fn task(id: u64, spec: Arc<TaskSpec>) -> Task {
    Task {
        id: TaskId(id),
        spec,
        requester: name("requester-key"),
        source_pack: None,
        parent: None,
        depth: 0,
        children: Vec::new(),
        state: TaskState::Queued,
        attempt: Attempt(0),
        lease: None,
        not_before: None,
        receipts: Vec::new(),
        staged: Default::default(),
        dropped: Vec::new(),
        handles: Vec::new(),
        fingerprint: None,
        submission: None,
        park: None,
        reason: None,
        created_at: at(1_780_000_000_123_456),
        updated_at: at(1_780_000_001_654_321),
    }
}

fn same(a: &Task, b: &Task) {
    assert_eq!(
        serde_json::to_value(a).unwrap(),
        serde_json::to_value(b).unwrap(),
        "task {} read back differs",
        a.id
    );
    assert_eq!(a.spec.brief.get(), b.spec.brief.get(), "the brief's bytes");
}

#[tokio::test]
async fn tasks_read_back_as_they_were_written() {
    let url = pg::fresh_database().await;
    let db = Database::connect(&url).await.unwrap();
    schema::migrate(&db).await.unwrap();
    let client = db.client().await.unwrap();
    client
        .batch_execute("INSERT INTO queues (name, server, config) VALUES ('q1', false, '{}')")
        .await
        .unwrap();

    let mut fresh = task(
        1_000_000_000_000_001,
        spec(json!({
            "idempotency_key": "once", "priority": -3, "max_attempts": 5, "lease_ttl_s": 90,
            "not_before": "2026-12-02T10:00:00.5Z", "on_upstream_failure": "cancel",
        })),
    );
    fresh.fingerprint = Some(Sha256::of(b"fingerprint"));
    fresh.source_pack = Some(name("pack-a"));
    fresh.not_before = Some(at(1_780_000_100_000_001));

    let mut claimed = task(
        1_000_000_000_000_002,
        spec(json!({"depends_on": ["t1000000000000001"]})),
    );
    claimed.state = TaskState::Claimed;
    claimed.attempt = Attempt(2);
    claimed.handles = vec!["wh-first".into(), "wh-second".into()];
    claimed.lease = Some(Box::new(Lease {
        id: LeaseId("0123456789abcdef0123456789abcdef".into()),
        attempt: Attempt(2),
        holder: name("worker-key"),
        expires_at: at(1_780_000_300_000_007),
        handle: "wh-second".into(),
    }));
    claimed.staged = [
        ("notes.md".to_string(), Sha256::of(b"notes")),
        ("out.json".to_string(), Sha256::of(b"out")),
    ]
    .into();
    claimed.dropped = vec![Sha256::of(b"an earlier part"), Sha256::of(b"one before")];

    let mut parked = task(1_000_000_000_000_003, spec(json!({})));
    parked.state = TaskState::Parked;
    parked.attempt = Attempt(1);
    parked.handles = vec!["wh-parked".into()];
    parked.park = Some(Box::new(Park {
        reason: "needs a key".into(),
        needs: json!({"input": ["api_key"], "n": 1}),
        by: Some(name("worker-key")),
    }));

    let mut parent = task(1_000_000_000_000_004, spec(json!({})));
    parent.state = TaskState::Waiting;
    parent.attempt = Attempt(1);
    parent.handles = vec!["wh-parent".into()];
    parent.children = vec![TaskId(1_000_000_000_000_006), TaskId(1_000_000_000_000_005)];
    let mut child = task(1_000_000_000_000_005, spec(json!({})));
    child.parent = Some(parent.id);
    child.depth = 1;
    let mut child2 = task(1_000_000_000_000_006, spec(json!({})));
    child2.parent = Some(parent.id);
    child2.depth = 1;

    let mut ended = task(1_000_000_000_000_007, spec(json!({})));
    ended.state = TaskState::Failed;
    ended.attempt = Attempt(2);
    ended.handles = vec!["wh-e1".into(), "wh-e2".into()];
    ended.reason = Some("attempts_exhausted".into());
    ended.receipts = vec![Sha256::of(b"receipt 1"), Sha256::of(b"receipt 2")];
    ended.submission = Some(Box::new(Submission {
        attempt: Attempt(2),
        lease_id: LeaseId("ffffffffffffffffffffffffffffffff".into()),
        request: Sha256::of(b"request 2"),
        receipt: Sha256::of(b"receipt 2"),
    }));

    let all = [&fresh, &claimed, &parked, &parent, &child, &child2, &ended];
    let made: Vec<_> = all.iter().map(|t| (*t, Default::default())).collect();
    tasks::insert_many(&client, &made).await.unwrap();
    for (attempt, lease, request, body) in [
        (
            1,
            "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee",
            &b"request 1"[..],
            &b"receipt 1"[..],
        ),
        (
            2,
            "ffffffffffffffffffffffffffffffff",
            b"request 2",
            b"receipt 2",
        ),
    ] {
        client
            .execute(
                "INSERT INTO receipts (task_id, attempt, lease_id, request, sha256, body) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &(ended.id.0 as i64),
                    &attempt,
                    &lease,
                    &Sha256::of(request).as_bytes().as_slice(),
                    &Sha256::of(body).as_bytes().as_slice(),
                    &body,
                ],
            )
            .await
            .unwrap();
    }
    let ids: Vec<TaskId> = all.iter().map(|t| t.id).collect();
    let back = tasks::load(&client, &ids, false).await.unwrap();
    assert_eq!(back.len(), all.len());
    for (t, b) in all.iter().zip(&back) {
        same(t, b);
    }

    // Claimed again: a new attempt, its own staged parts, the last ones dropped.
    let mut next = claimed.clone();
    next.attempt = Attempt(3);
    next.handles.push("wh-third".into());
    next.lease = Some(Box::new(Lease {
        id: LeaseId("abababababababababababababababab".into()),
        attempt: Attempt(3),
        holder: name("other-worker"),
        expires_at: at(1_780_000_400_000_000),
        handle: "wh-third".into(),
    }));
    next.dropped.extend(next.staged.values().copied());
    next.staged = [("final.md".to_string(), Sha256::of(b"final"))].into();
    next.updated_at = at(1_780_000_350_000_000);
    tasks::save(&client, &next, Default::default(), true)
        .await
        .unwrap();
    let back = tasks::load(&client, &[next.id, TaskId(42)], true)
        .await
        .unwrap();
    assert_eq!(back.len(), 1, "a task that does not exist is left out");
    same(&next, &back[0]);

    // What changes is written only over a row that is there.
    let mut stray = next.clone();
    stray.id = TaskId(42);
    assert!(
        tasks::save(&client, &stray, Default::default(), false)
            .await
            .is_err()
    );
}
