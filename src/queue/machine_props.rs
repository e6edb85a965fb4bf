//! Property test of the state machine: random command sequences are
//! decided and applied, and after every step the derived indexes must equal
//! a rebuild from the tasks alone, terminal tasks must change only by a
//! retry of that very task, every event must pass `applies` before it is
//! applied, and a replay of the journaled events must reach the same tasks.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::decide::{Enqueue, Submit};
use super::event::Event;
use super::machine::{SplitLimits, State};
use super::receipt::SubmitInput;
use super::spec::{ChildSpec, QueueConfig, TaskSpec};
use super::task::{LeaseId, Park, TaskId, TaskState};
use crate::store::{Name, Sha256};

#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        deps: Vec<usize>,
        priority: i32,
        key: Option<u8>,
        cancel_on_failure: bool,
    },
    Claim,
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
    Expire,
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
        3 => (proptest::collection::vec(0usize..64, 0..3), -2i32..3, proptest::option::of(0u8..4), any::<bool>())
            .prop_map(|(deps, priority, key, cancel_on_failure)| Op::Enqueue { deps, priority, key, cancel_on_failure }),
        3 => Just(Op::Claim),
        2 => (0usize..64, any::<bool>(), any::<bool>()).prop_map(|(pick, ok, f)| Op::Submit { pick, ok, final_failure: f && !ok }),
        1 => (0usize..64).prop_map(|pick| Op::Retry { pick }),
        1 => (0usize..64).prop_map(|pick| Op::Release { pick }),
        1 => Just(Op::Expire),
        1 => (0usize..64).prop_map(|pick| Op::Park { pick }),
        1 => (0usize..64).prop_map(|pick| Op::Resume { pick }),
        1 => (0usize..64, 1usize..4).prop_map(|(pick, n)| Op::Split { pick, n }),
        1 => (0usize..64).prop_map(|pick| Op::Cancel { pick }),
    ]
}

fn name(s: &str) -> Name {
    Name::parse("name", s).expect("valid")
}

fn spec(deps: Vec<TaskId>, priority: i32, key: Option<u8>, cancel_on_failure: bool) -> TaskSpec {
    let v = json!({
        "namespace": "ns", "queue": "q", "kind": "k", "effect_class": "read",
        "brief": {"p": priority}, "depends_on": deps, "priority": priority,
        "idempotency_key": key.map(|k| format!("key-{k}")),
        "on_upstream_failure": if cancel_on_failure { "cancel" } else { "run" },
    });
    serde_json::from_str(&v.to_string()).expect("a valid spec")
}

fn pick_in(st: &State, state: TaskState, pick: usize) -> Option<TaskId> {
    let ids: Vec<TaskId> = st
        .tasks
        .values()
        .filter(|t| t.state == state)
        .map(|t| t.id)
        .collect();
    (!ids.is_empty()).then(|| ids[pick % ids.len()])
}

fn lease_of(st: &State, id: TaskId) -> LeaseId {
    st.tasks[&id].lease.as_ref().expect("claimed").id.clone()
}

/// The derived indexes, in a comparable form.
fn derived(st: &State) -> Value {
    let shelves = st.index.shelves.dump();
    let on_shelves: usize = st.index.shelves.all().map(|v| v.len).sum();
    assert_eq!(on_shelves, st.tasks.len(), "every task is on one shelf");
    let ready = st
        .index
        .shelves
        .ready_sets()
        .map(|(_, s)| s.len())
        .sum::<usize>();
    let mut blocked: Vec<(TaskId, usize)> =
        st.index.blocked.iter().map(|(k, v)| (*k, *v)).collect();
    blocked.sort();
    let mut handles: Vec<_> = st
        .index
        .handles
        .iter()
        .map(|(h, (t, a))| format!("{h}={t}/{}", a.0))
        .collect();
    handles.sort();
    let mut idem: Vec<_> = st
        .index
        .idempotency
        .ids()
        .map(|id| &st.tasks[&id])
        .map(|t| {
            let k = t.spec.idempotency_key.as_deref().unwrap_or_default();
            format!("{}/{}/{k}={}", t.spec.namespace, t.requester, t.id)
        })
        .collect();
    idem.sort();
    let counts: BTreeMap<String, Vec<(String, u64)>> = st
        .queues
        .keys()
        .map(|q| {
            (
                q.to_string(),
                st.index
                    .counts_of(q)
                    .into_iter()
                    .map(|(s, n)| (s.as_str().to_string(), n))
                    .collect(),
            )
        })
        .collect();
    json!({
        "ready_or_delayed": ready + st.index.delayed.len(), "shelves": shelves,
        "leases": st.index.leases.iter().map(|(e, id)| format!("{e}/{id}")).collect::<Vec<_>>(),
        "blocked": blocked, "handles": handles, "idempotency": idem, "counts": counts,
    })
}

fn tasks_json(st: &State) -> String {
    serde_json::to_string(&st.tasks.values().collect::<Vec<_>>()).expect("tasks serialize")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn indexes_replay_and_terminal_states_hold(ops in proptest::collection::vec(op(), 1..80)) {
        let limits = SplitLimits { max_depth: 2, max_children: 4 };
        let mut st = State::new(limits);
        let mut log: Vec<Event> = Vec::new();
        let mut now = Timestamp::from_second(1_900_000_000).unwrap();
        let mut terminal: BTreeMap<TaskId, String> = BTreeMap::new();
        let me = name("key");
        let resumer = name("resumer");
        let config: QueueConfig = serde_json::from_value(json!({"name": "q", "lease_ttl_s": 10, "max_attempts": 3, "backoff": {"base_ms": 100, "cap_ms": 1000}})).unwrap();
        let ev = st.decide_queue(config).unwrap();
        st.apply(&ev);
        log.push(ev);
        let mut handle_seq = 0u32;
        // Ids fall as tasks are created, so nothing may take id order
        // for creation order.
        let mut ids_left = 1_000_000u64;
        let mut draw = move || {
            ids_left -= 1;
            TaskId(ids_left)
        };
        for op in ops {
            now += SignedDuration::from_millis(250);
            st.promote_due(now);
            let ev: Option<Event> = match op {
                Op::Enqueue { deps, priority, key, cancel_on_failure } => {
                    let ids: Vec<TaskId> = st.tasks.values().map(|t| t.id).collect();
                    let deps = if ids.is_empty() { vec![] } else { deps.iter().map(|d| ids[d % ids.len()]).collect() };
                    match st.decide_enqueue(spec(deps, priority, key, cancel_on_failure), None, now, &crate::store::envelope::Viewer::admin(me.clone()), &mut draw) {
                        Ok(Enqueue::New(ev, _)) => Some(ev),
                        _ => None,
                    }
                }
                Op::Claim => st.find_claimable(&name("q"), None, &crate::store::envelope::Viewer::admin(name("k"))).map(|id| {
                    handle_seq += 1;
                    st.decide_claim(id, &me, LeaseId(format!("l{handle_seq}")), format!("wh-{handle_seq:08x}"), now).unwrap()
                }),
                Op::Submit { pick, ok, final_failure } => pick_in(&st, TaskState::Claimed, pick).map(|id| {
                    let input = SubmitInput::bare(ok, final_failure, Sha256::of(&[u8::from(ok)]));
                    match st.decide_submit(id, &lease_of(&st, id), &input, &me, now).unwrap() {
                        Submit::New { event, .. } => event,
                        Submit::Existing(_) => unreachable!("first submit"),
                    }
                }),
                Op::Retry { pick } => {
                    let ids: Vec<TaskId> = st.tasks.values().map(|t| t.id).collect();
                    match (!ids.is_empty()).then(|| ids[pick % ids.len()]) {
                        None => None,
                        Some(id) => {
                            let ev = st.decide_retry(id, &me, now);
                            prop_assert_eq!(ev.is_ok(), st.tasks[&id].state.is_retryable());
                            ev.ok()
                        }
                    }
                }
                Op::Release { pick } => pick_in(&st, TaskState::Claimed, pick).map(|id| st.decide_release(id, &lease_of(&st, id), Some(&me), now).unwrap()),
                Op::Expire => {
                    now += SignedDuration::from_secs(11);
                    let evs = st.decide_expiries(now);
                    for ev in &evs {
                        prop_assert_eq!(st.applies(ev), Ok(()));
                        st.apply(ev);
                    }
                    log.extend(evs);
                    None
                }
                Op::Park { pick } => pick_in(&st, TaskState::Claimed, pick).map(|id| {
                    st.decide_park(id, &lease_of(&st, id), &me, Park { reason: "input".into(), needs: json!({}), by: None }, now).unwrap()
                }),
                Op::Resume { pick } => pick_in(&st, TaskState::Parked, pick).map(|id| st.decide_resume(id, serde_json::from_value(json!({"store": "s", "key": "k", "version": 1, "sha256": "0".repeat(64)})).unwrap(), &resumer, now).unwrap()),
                Op::Split { pick, n } => pick_in(&st, TaskState::Claimed, pick).and_then(|id| {
                    let parent = st.tasks[&id].spec.clone();
                    let kids: Vec<TaskSpec> = (0..n).map(|i| serde_json::from_str::<ChildSpec>(&json!({"queue": "q", "kind": "k", "effect_class": "read", "brief": {"i": i}}).to_string()).unwrap().under(&parent).unwrap()).collect();
                    st.decide_split(id, &lease_of(&st, id), &me, kids, &crate::store::envelope::Viewer::admin(me.clone()), &mut draw, now).ok()
                }),
                Op::Cancel { pick } => {
                    let ids: Vec<TaskId> = st.tasks.values().map(|t| t.id).collect();
                    (!ids.is_empty()).then(|| ids[pick % ids.len()]).and_then(|id| st.decide_cancel(id, &me, now).ok())
                }
            };
            if let Some(ev) = ev {
                prop_assert_eq!(st.applies(&ev), Ok(()));
                if let Event::Retried { id, .. } = &ev {
                    terminal.remove(id);
                }
                st.apply(&ev);
                log.push(ev);
            }
            for t in st.tasks.values() {
                prop_assert_eq!(t.lease.is_some(), t.state == TaskState::Claimed, "lease iff claimed: {}", t.id);
                if let Some(before) = terminal.get(&t.id) {
                    prop_assert_eq!(before, &serde_json::to_string(t).unwrap(), "terminal task {} changed", t.id);
                } else if t.state.is_terminal() {
                    terminal.insert(t.id, serde_json::to_string(t).unwrap());
                }
            }
            let rebuilt = State::restore(st.queues.clone(), st.tasks.clone(), Default::default(), limits, now);
            prop_assert_eq!(derived(&st), derived(&rebuilt), "indexes drifted from the tasks");
        }
        let mut replayed = State::new(limits);
        for ev in &log {
            let back: Event = serde_json::from_slice(&serde_json::to_vec(ev).unwrap()).unwrap();
            replayed.apply_owned(back);
        }
        prop_assert_eq!(tasks_json(&st), tasks_json(&replayed), "replay diverged from the live state");
    }
}

/// A failed submit written by the code before retries (no `retry_at`)
/// still means a failed task at replay; a new one that retries carries it.
#[test]
fn submitted_events_without_retry_at_keep_their_old_meaning() {
    let limits = SplitLimits {
        max_depth: 2,
        max_children: 4,
    };
    let mut st = State::new(limits);
    let now = Timestamp::from_second(1_900_000_000).unwrap();
    let me = name("key");
    let config: QueueConfig =
        serde_json::from_value(json!({"name": "q", "max_attempts": 3})).unwrap();
    st.apply(&st.decide_queue(config).unwrap());
    let Ok(Enqueue::New(ev, id)) = st.decide_enqueue(
        spec(vec![], 0, None, false),
        None,
        now,
        &crate::store::envelope::Viewer::admin(me.clone()),
        &mut super::task::random_id,
    ) else {
        panic!("enqueued")
    };
    st.apply(&ev);
    let claim = st
        .decide_claim(id, &me, LeaseId("l1".into()), "wh-1".into(), now)
        .unwrap();
    st.apply(&claim);
    let old = json!({"submitted": {
        "id": id, "lease_id": "l1", "request": Sha256::of(b"r"), "ok": false,
        "receipt": {"task_id": id, "attempt": 1, "state": "failed", "ok": false, "outputs": [],
                    "evidence": [], "by_key": "key", "at": now, "prev": null},
        "receipt_sha256": Sha256::of(b"receipt"), "at": now,
    }});
    let ev: Event = serde_json::from_value(old).expect("an old record still parses");
    assert_eq!(st.applies(&ev), Ok(()));
    let mut replayed = State::restore(
        st.queues.clone(),
        st.tasks.clone(),
        Default::default(),
        limits,
        now,
    );
    replayed.apply(&ev);
    assert_eq!(replayed.tasks[&id].state, TaskState::Failed);

    let input = SubmitInput::bare(false, false, Sha256::of(b"r"));
    let Submit::New { event, .. } = st
        .decide_submit(id, &LeaseId("l1".into()), &input, &me, now)
        .unwrap()
    else {
        panic!("a new receipt")
    };
    let back: Event = serde_json::from_slice(&serde_json::to_vec(&event).unwrap()).unwrap();
    st.apply(&back);
    assert_eq!(st.tasks[&id].state, TaskState::Queued);
    assert!(st.tasks[&id].not_before.is_some());
}
