//! The model test of the database's paths against the embedded queue:
//! random command sequences are decided on the embedded queue's whole
//! state and in a real PostgreSQL, a submit on the task alone and
//! recorded by the fenced completion ([`complete`]) as the daemon does,
//! and what that leaves, and every other change, through
//! [`transact::decide`] on the family of rows each one touches; the two
//! decisions must be the same event (or the same refusal), and after
//! every step every task read back from the database must equal the
//! embedded queue's, with each pending task's open-upstream counter
//! equal to its index.

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::json;

use super::{cluster, complete, shelves, tasks, transact};
use crate::database::{Database, schema};
use crate::queue::decide::{Enqueue, Submit};
use crate::queue::event::Event;
use crate::queue::machine::{SplitLimits, State};
use crate::queue::query::{Filter, Totals};
use crate::queue::receipt::SubmitInput;
use crate::queue::spec::{ChildSpec, QueueConfig, TaskSpec};
use crate::queue::task::{LeaseId, Park, TaskId, TaskState};
use crate::store::envelope::Viewer;
use crate::store::{Name, Sha256};

#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        deps: Vec<usize>,
        cancel_on_failure: bool,
    },
    Claim {
        pick: usize,
    },
    Submit {
        pick: usize,
        ok: bool,
        final_failure: bool,
    },
    Retry {
        pick: usize,
    },
    Release {
        pick: usize,
    },
    Park {
        pick: usize,
    },
    Resume {
        pick: usize,
    },
    Split {
        pick: usize,
        n: usize,
    },
    Cancel {
        pick: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (proptest::collection::vec(0usize..64, 0..3), any::<bool>())
            .prop_map(|(deps, cancel_on_failure)| Op::Enqueue { deps, cancel_on_failure }),
        3 => (0usize..64).prop_map(|pick| Op::Claim { pick }),
        3 => (0usize..64, any::<bool>(), any::<bool>())
            .prop_map(|(pick, ok, f)| Op::Submit { pick, ok, final_failure: f && !ok }),
        1 => (0usize..64).prop_map(|pick| Op::Retry { pick }),
        1 => (0usize..64).prop_map(|pick| Op::Release { pick }),
        1 => (0usize..64).prop_map(|pick| Op::Park { pick }),
        1 => (0usize..64).prop_map(|pick| Op::Resume { pick }),
        1 => (0usize..64, 1usize..4).prop_map(|(pick, n)| Op::Split { pick, n }),
        1 => (0usize..64).prop_map(|pick| Op::Cancel { pick }),
    ]
}

fn name(s: &str) -> Name {
    Name::parse("name", s).expect("valid")
}

fn spec(deps: Vec<TaskId>, cancel_on_failure: bool) -> TaskSpec {
    let v = json!({
        "namespace": "ns", "queue": "q", "kind": "k", "effect_class": "read",
        "brief": {"d": deps.len()}, "depends_on": deps,
        "on_upstream_failure": if cancel_on_failure { "cancel" } else { "run" },
    });
    serde_json::from_str(&v.to_string()).expect("a valid spec")
}

fn pick_in(st: &State, state: Option<TaskState>, pick: usize) -> Option<TaskId> {
    let ids: Vec<TaskId> = st
        .tasks
        .values()
        .filter(|t| state.is_none_or(|s| t.state == s))
        .map(|t| t.id)
        .collect();
    (!ids.is_empty()).then(|| ids[pick % ids.len()])
}

fn lease_of(st: &State, id: TaskId) -> LeaseId {
    st.tasks[&id].lease.as_ref().expect("claimed").id.clone()
}

/// One decision on `st`: the event, or the refusal in words.
type Decision = Result<Event, String>;

/// What `op` decides on `st` at `now` with ids drawn from `next` on.
fn decide(st: &State, op: &Op, target: &Target, now: jiff::Timestamp, next: u64) -> Decision {
    let me = name("key");
    let mut n = next;
    let mut draw = move || {
        n += 1;
        TaskId(n)
    };
    let words = |e: &dyn std::fmt::Debug| format!("{e:?}");
    match (op, target) {
        (
            Op::Enqueue {
                cancel_on_failure, ..
            },
            Target::Deps(deps),
        ) => {
            match st.decide_enqueue(
                spec(deps.clone(), *cancel_on_failure),
                None,
                now,
                &Viewer::admin(me),
                &mut draw,
            ) {
                Ok(Enqueue::New(ev, _)) => Ok(ev),
                Ok(Enqueue::Existing(id)) => Err(format!("existing {id}")),
                Err(e) => Err(words(&e)),
            }
        }
        (Op::Claim { .. }, Target::One(id)) => st
            .decide_claim(
                *id,
                &me,
                LeaseId(format!("l{next}")),
                format!("wh-{next}"),
                now,
            )
            .map_err(|e| words(&e)),
        (
            Op::Submit {
                ok, final_failure, ..
            },
            Target::Leased(id, lease),
        ) => {
            let input = SubmitInput::bare(*ok, *final_failure, Sha256::of(&[u8::from(*ok)]));
            match st.decide_submit(*id, lease, &input, &me, now) {
                Ok(Submit::New { event, .. }) => Ok(event),
                Ok(Submit::Existing(id)) => Err(format!("existing {id}")),
                Err(e) => Err(words(&e)),
            }
        }
        (Op::Retry { .. }, Target::One(id)) => {
            st.decide_retry(*id, &me, now).map_err(|e| words(&e))
        }
        (Op::Cancel { .. }, Target::One(id)) => {
            st.decide_cancel(*id, &me, now).map_err(|e| words(&e))
        }
        (Op::Release { .. }, Target::Leased(id, lease)) => st
            .decide_release(*id, lease, Some(&me), now)
            .map_err(|e| words(&e)),
        (Op::Park { .. }, Target::Leased(id, lease)) => {
            let park = Park {
                reason: "input".into(),
                needs: json!({"n": 1}),
                by: None,
            };
            st.decide_park(*id, lease, &me, park, now)
                .map_err(|e| words(&e))
        }
        (Op::Resume { .. }, Target::One(id)) => {
            let pin = serde_json::from_value(
                json!({"store": "s", "key": "k", "version": 1, "sha256": "0".repeat(64)}),
            )
            .expect("a pin");
            st.decide_resume(*id, pin, &name("resumer"), now)
                .map_err(|e| words(&e))
        }
        (Op::Split { n, .. }, Target::Leased(id, lease)) => {
            let Some(parent) = st.tasks.get(id).map(|t| t.spec.clone()) else {
                return Err("no such task".into());
            };
            let kids: Vec<TaskSpec> = (0..*n)
                .map(|i| {
                    let child = json!({"queue": "q", "kind": "k", "effect_class": "read", "brief": {"i": i}});
                    serde_json::from_str::<ChildSpec>(&child.to_string()).unwrap().under(&parent).unwrap()
                })
                .collect();
            st.decide_split(
                *id,
                lease,
                &me,
                kids,
                &Viewer::admin(me.clone()),
                &mut draw,
                now,
            )
            .map_err(|e| words(&e))
        }
        (op, target) => unreachable!("{op:?} with {target:?}"),
    }
}

/// What an op acts on, chosen from the embedded queue's state.
#[derive(Clone, Debug)]
enum Target {
    Deps(Vec<TaskId>),
    One(TaskId),
    Leased(TaskId, LeaseId),
}

fn target(st: &State, op: &Op) -> Option<Target> {
    let claimed = |pick| {
        pick_in(st, Some(TaskState::Claimed), pick).map(|id| Target::Leased(id, lease_of(st, id)))
    };
    match op {
        Op::Enqueue { deps, .. } => {
            let ids: Vec<TaskId> = st.tasks.values().map(|t| t.id).collect();
            let mut deps: Vec<TaskId> = if ids.is_empty() {
                vec![]
            } else {
                deps.iter().map(|d| ids[d % ids.len()]).collect()
            };
            deps.sort();
            deps.dedup();
            Some(Target::Deps(deps))
        }
        Op::Claim { pick } => pick_in(st, Some(TaskState::Queued), *pick).map(Target::One),
        Op::Submit { pick, .. }
        | Op::Release { pick }
        | Op::Park { pick }
        | Op::Split { pick, .. } => claimed(*pick),
        Op::Resume { pick } => pick_in(st, Some(TaskState::Parked), *pick).map(Target::One),
        Op::Retry { pick } | Op::Cancel { pick } => pick_in(st, None, *pick).map(Target::One),
    }
}

fn ids_of(target: &Target) -> Vec<TaskId> {
    match target {
        Target::Deps(d) => d.clone(),
        Target::One(id) | Target::Leased(id, _) => vec![*id],
    }
}

fn json_of<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).expect("serializes")
}

async fn compare(db: &Database, st: &State) -> Result<(), TestCaseError> {
    let ids: Vec<TaskId> = st.tasks.values().map(|t| t.id).collect();
    let client = db.client().await.expect("a connection");
    let back = tasks::load(&client, &ids, false)
        .await
        .expect("tasks read back");
    prop_assert_eq!(back.len(), ids.len());
    let back: HashMap<TaskId, _> = back.into_iter().map(|t| (t.id, t)).collect();
    for t in st.tasks.values() {
        prop_assert_eq!(json_of(t), json_of(&back[&t.id]), "task {}", t.id);
    }
    for r in client
        .query("SELECT id, blocked FROM tasks WHERE state = 'pending'", &[])
        .await
        .expect("counters")
    {
        let id = TaskId(r.get::<_, i64>(0) as u64);
        let blocked = st.index.blocked.get(&id).copied().unwrap_or(0);
        prop_assert_eq!(
            r.get::<_, i32>(1) as usize,
            blocked,
            "open upstreams of {}",
            id
        );
    }
    // Counts and pages read from the grouped statement and the scan equal
    // the embedded queue's shelves and creation order.
    let described = |t: &Totals<'_>| {
        format!(
            "{:?} {:?} {} {:?} {}",
            t.view.sight, t.view.state, t.view.len, t.oldest_queued, t.live_leases
        )
    };
    let mut want: Vec<String> = st
        .totals(Some(jiff::Timestamp::now()))
        .iter()
        .map(described)
        .collect();
    let found = shelves::all(&client).await.expect("shelves");
    let mut got: Vec<String> = found.iter().map(|s| described(&s.totals())).collect();
    want.sort();
    got.sort();
    prop_assert_eq!(got, want);
    for (state, limit) in [(None, usize::MAX), (Some(TaskState::Queued), 2)] {
        let filter = Filter {
            state,
            ..Filter::default()
        };
        let (page, more) = shelves::scan(&client, &filter, None, limit, |_| true)
            .await
            .expect("a scan");
        let mut order = st
            .tasks
            .values()
            .filter(|t| state.is_none_or(|s| t.state == s))
            .map(|t| t.id);
        let want: Vec<TaskId> = order.by_ref().take(limit).collect();
        prop_assert_eq!(page, want, "{:?}", state);
        prop_assert_eq!(more, order.next().is_some());
    }
    Ok(())
}

/// A submit as the daemon records it: decided on the task alone and
/// written by the fenced completion. Answers
/// whether it was recorded; false leaves it to the family transaction
/// (the statement answered `Related`, or the embedded queue refuses it,
/// which the family transaction's decision is compared with).
async fn fenced(
    db: &Database,
    st: &mut State,
    op: &Op,
    target: &Target,
    limits: SplitLimits,
) -> Result<bool, TestCaseError> {
    let (
        Op::Submit {
            ok, final_failure, ..
        },
        Target::Leased(id, lease),
    ) = (op, target)
    else {
        return Ok(false);
    };
    let now = jiff::Timestamp::now();
    let now = jiff::Timestamp::from_microsecond(now.as_microsecond()).expect("now");
    st.promote_due(now);
    let Ok(embedded) = decide(st, op, target, now, 0) else {
        return Ok(false);
    };
    let input = SubmitInput::bare(*ok, *final_failure, Sha256::of(&[u8::from(*ok)]));
    let seen = st.tasks[id].clone();
    let decided = complete::decide(&seen, &st.queues, limits, lease, &input, &name("key"), now);
    let (completion, event) = match decided {
        Ok(complete::Decision::New(new)) => (new.completion, new.event.0),
        Ok(complete::Decision::Related) if seen.parent.is_some() => return Ok(false),
        decided => {
            return Err(TestCaseError::fail(format!(
                "{op:?}: the task alone decided {decided:?}, the whole state {embedded:?}"
            )));
        }
    };
    prop_assert_eq!(json_of(&event), json_of(&embedded), "{:?}", op);
    let mut out = complete::complete_many(db, &[completion])
        .await
        .expect("the database answers");
    match out.pop().expect("one answer") {
        Ok(complete::Completed::Accepted(_)) => {
            st.apply(&event);
            Ok(true)
        }
        Ok(complete::Completed::Related) => Ok(false),
        other => Err(TestCaseError::fail(format!(
            "{op:?}: the statement answered {other:?}"
        ))),
    }
}

#[test]
fn the_database_path_decides_and_records_as_the_embedded_queue_does() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 32,
        max_shrink_iters: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let limits = SplitLimits {
        max_depth: 2,
        max_children: 4,
    };
    let config: QueueConfig = serde_json::from_value(json!({
        "name": "q", "lease_ttl_s": 30, "max_attempts": 3, "backoff": {"base_ms": 1, "cap_ms": 2}
    }))
    .unwrap();
    runner
        .run(&proptest::collection::vec(op(), 1..60), |ops| {
            rt.block_on(async {
                let url = cluster::fresh_database().await;
                let db = Database::connect(&url).await.unwrap();
                schema::migrate(&db).await.unwrap();
                let made = |_: Option<&QueueConfig>| Ok::<_, ()>(config.clone());
                transact::provision(&db, &config.name, made)
                    .await
                    .unwrap()
                    .unwrap();
                let mut st = State::new(limits);
                st.apply(&st.decide_queue(config.clone()).unwrap());
                let mut next = 1_000_000_000_000_000u64;
                for op in &ops {
                    let Some(target) = target(&st, op) else {
                        continue;
                    };
                    if fenced(&db, &mut st, op, &target, limits).await? {
                        compare(&db, &st).await?;
                        continue;
                    }
                    let ids = ids_of(&target);
                    let mut embedded: Option<Decision> = None;
                    let decided = transact::decide(
                        &db,
                        limits,
                        &ids,
                        None,
                        |family, now| {
                            st.promote_due(now);
                            let mine = decide(family, op, &target, now, next);
                            embedded = Some(decide(&st, op, &target, now, next));
                            mine.map(|ev| (ev, ()))
                        },
                        |_, ()| (),
                    )
                    .await
                    .expect("the database answers");
                    let embedded = embedded.expect("decided");
                    next += 100;
                    match (decided, embedded) {
                        (Ok(d), Ok(ev)) => {
                            prop_assert_eq!(json_of(&d.made[0].0), json_of(&ev), "{:?}", op);
                            st.apply(&ev);
                        }
                        (Err(a), Err(b)) => prop_assert_eq!(a, b, "{:?}", op),
                        (a, b) => prop_assert!(
                            false,
                            "{:?}: the family decided {:?}, the whole state {:?}",
                            op,
                            a.map(|d| d.made.into_iter().next().map(|(ev, _)| ev)),
                            b
                        ),
                    }
                    compare(&db, &st).await?;
                }
                Ok(())
            })
        })
        .unwrap();
}
