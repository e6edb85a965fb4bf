//! `GET /v1/events` over real HTTP: task transitions and noun writes as
//! Server-Sent Events, filtered by what each key may see, resumable with
//! `Last-Event-ID`, and a reader that falls behind is cut off with the id
//! to resume from instead of slowing the queue.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::sse::{Sse, Stream};
use support::*;

fn is_task(ev: &Sse, id: &str, state: &str) -> bool {
    ev.event == "task" && ev.data["task_id"] == id && ev.data["state"] == state
}

#[tokio::test]
async fn task_and_noun_events_are_filtered_by_what_each_key_may_see() {
    let team = Team::start().await;
    let base = team.d.admin.base().to_string();
    let mut admin = Stream::open(&base, &team.d.admin_key, None).await;
    let r = team
        .d
        .admin
        .post_json(
            "/v1/keys",
            &json!({"label": "watcher", "grants": {
                "queues": ["work.external"], "kinds": ["verb.compute"], "effect_classes": ["write-internal"],
                "scopes": [format!("namespace:{NS}"), "surface:elsewhere", "nouns:read", "verbs:enqueue"]}}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    let watcher_key = body(&r)["secret"].as_str().unwrap().to_string();
    let watcher = team.d.client(&watcher_key);
    let mut outsider = Stream::open(&base, &watcher_key, None).await;

    let hidden = enqueue(&team.requester, &spec("verb.compute", json!({}))).await;
    let mut own = spec("verb.compute", json!({}));
    own["producer_surface"] = json!("surface:elsewhere");
    let mine = enqueue(&watcher, &own).await;
    let c = claim(&team.worker, "work.external").await.unwrap();
    assert_eq!(claimed_id(&c), hidden);
    submit(&team.worker, &hidden, &lease(&c), true, json!([])).await;
    put_noun(&team.requester, "notes", "n1", json!({"a": 1})).await;

    // On a shared queue, task events come from the database's stream and
    // noun events from this daemon's store: each in order, not with each
    // other, so the reader reads until it has both.
    let mut seen = admin
        .until(|e| e.event == "noun" && e.data["key"] == "n1")
        .await;
    if !seen.iter().any(|e| is_task(e, &hidden, "succeeded")) {
        seen.extend(admin.until(|e| is_task(e, &hidden, "succeeded")).await);
    }
    for (id, state) in [
        (&hidden, "queued"),
        (&mine, "queued"),
        (&hidden, "claimed"),
        (&hidden, "succeeded"),
    ] {
        assert!(
            seen.iter().any(|e| is_task(e, id, state)),
            "admin sees {id} {state}: {seen:?}"
        );
    }
    let ids: Vec<&str> = seen.iter().filter_map(|e| e.id.as_deref()).collect();
    let mut sorted = ids.clone();
    sorted.dedup();
    assert_eq!(ids.len(), sorted.len(), "every event has its own id");

    let theirs = outsider.until(|e| is_task(e, &mine, "queued")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let more = outsider.next(1).await;
    let all: Vec<Sse> = theirs.into_iter().chain(more).collect();
    let text = format!("{all:?}");
    assert!(
        !text.contains(&format!("\"{hidden}\"")),
        "the hidden task never shows: {text}"
    );
}

#[tokio::test]
async fn a_reader_resumes_with_last_event_id_and_a_stale_id_resets() {
    let team = Team::start().await;
    let base = team.d.admin.base().to_string();
    let key = team.d.admin_key.clone();
    let mut s = Stream::open(&base, &key, None).await;
    let first = enqueue(&team.requester, &spec("verb.compute", json!({}))).await;
    let got = s.until(|e| is_task(e, &first, "queued")).await;
    let last = got.last().unwrap().id.clone().unwrap();
    drop(s);

    let second = enqueue(&team.requester, &spec("verb.compute", json!({}))).await;
    let third = enqueue(&team.requester, &spec("verb.compute", json!({}))).await;
    let mut s = Stream::open(&base, &key, Some(&last)).await;
    let a = s.next(5).await.unwrap();
    let b = s.next(5).await.unwrap();
    assert!(is_task(&a, &second, "queued"), "{a:?}");
    assert!(is_task(&b, &third, "queued"), "{b:?}");

    let mut stale = Stream::open(&base, &key, Some("0-1")).await;
    let reset = stale.next(5).await.unwrap();
    assert_eq!(reset.event, "reset", "{reset:?}");
}

#[tokio::test]
async fn a_reader_that_falls_behind_is_cut_off_with_where_to_resume() {
    let team = Team::start_with(|c| c.limits.events_backlog = 16).await;
    let base = team.d.admin.base().to_string();
    let mut slow = Stream::open(&base, &team.d.admin_key, None).await;
    let items: Vec<Value> = (0..500)
        .map(|i| spec("verb.compute", json!({"i": i})))
        .collect();
    let newest = enqueue_batch(&team.requester, &items).await["items"][499]["result"]["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut last = None;
    while let Some(ev) = slow.next(10).await {
        last = Some(ev);
    }
    let last = last.expect("some events");
    assert_eq!(last.event, "lagged", "{last:?}");
    let resume = last.data["resume_from"].as_str().unwrap().to_string();

    let mut again = Stream::open(&base, &team.d.admin_key, Some(&resume)).await;
    let rest = again.until(|e| e.data["task_id"] == newest).await;
    assert!(
        rest.iter().all(|e| e.event == "task"),
        "resumed without a reset: {:?}",
        &rest[..2]
    );
}

#[tokio::test]
async fn a_dependent_released_by_its_upstream_shows_its_own_transition() {
    let team = Team::start().await;
    let base = team.d.admin.base().to_string();
    let mut s = Stream::open(&base, &team.d.admin_key, None).await;
    let up = enqueue(&team.requester, &spec("verb.compute", json!({}))).await;
    let mut dep = spec("verb.compute", json!({}));
    dep["depends_on"] = json!([up]);
    let down = enqueue(&team.requester, &dep).await;
    let c = claim(&team.worker, "work.external").await.unwrap();
    submit(&team.worker, &up, &lease(&c), true, json!([])).await;
    let seen = s.until(|e| is_task(e, &down, "queued")).await;
    assert!(
        seen.iter().any(|e| is_task(e, &down, "pending")),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|e| is_task(e, &up, "succeeded")),
        "{seen:?}"
    );
}

#[tokio::test]
async fn every_noun_change_is_an_event_whoever_makes_it() {
    let team = Team::start().await;
    let base = team.d.admin.base().to_string();
    let mut s = Stream::open(&base, &team.d.admin_key, None).await;
    put_noun(&team.requester, "notes", "single", json!({"a": 1})).await;
    let r = team
        .requester
        .post_json(
            "/v1/batch/nouns",
            &json!({"items": [{"namespace": NS, "store": "notes", "key": "batched", "envelope": {"expected_version": 0, "body": {"b": 2}}}]}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    assert_eq!(body(&r)["items"][0]["status"], 201, "{:?}", body(&r));
    let r = team
        .d
        .admin
        .post_json(
            &format!("/v1/nouns/{NS}/notes/single/quarantine"),
            &json!({}),
        )
        .await
        .unwrap();
    assert!(
        r.status.is_success(),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let seen = s
        .until(|e| e.event == "noun" && e.data["quarantined"] == true)
        .await;
    let keys: Vec<&Value> = seen.iter().map(|e| &e.data["key"]).collect();
    assert_eq!(
        keys,
        [&json!("single"), &json!("batched"), &json!("single")],
        "{seen:?}"
    );
}

/// A stream ends the moment its key can no longer be used: revoked (and
/// nothing is delivered after the revocation), or past its expiry, not at
/// the next keep-alive.
#[tokio::test]
async fn a_stream_ends_the_moment_its_key_is_revoked_or_expires() {
    let team = Team::start().await;
    let base = team.d.admin.base().to_string();
    let issue = |expires_at: Option<String>| {
        let admin = team.d.admin.clone();
        async move {
            let mut spec = json!({"label": "watcher", "grants": {"queues": [], "kinds": [], "effect_classes": [],
                "scopes": [format!("namespace:{NS}"), "surface:team_example", "nouns:read"]}});
            if let Some(at) = expires_at {
                spec["expires_at"] = json!(at);
            }
            let r = admin.post_json("/v1/keys", &spec).await.unwrap();
            assert_status!(r, 201);
            let b = body(&r);
            (
                b["key_id"].as_str().unwrap().to_string(),
                b["secret"].as_str().unwrap().to_string(),
            )
        }
    };
    let (id, secret) = issue(None).await;
    let mut revoked = Stream::open(&base, &secret, None).await;
    put_noun(&team.requester, "work.inputs", "before", json!({"n": 1})).await;
    assert!(revoked.until(|e| e.event == "noun").await.len() == 1);
    let r = team
        .d
        .admin
        .delete(&format!("/v1/keys/{id}"))
        .await
        .unwrap();
    assert_status!(r, 200);
    put_noun(&team.requester, "work.inputs", "after", json!({"n": 2})).await;
    let started = std::time::Instant::now();
    assert!(
        revoked.next(10).await.is_none(),
        "nothing after the revocation"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "ended at once, not at a keep-alive"
    );

    let soon = jiff::Timestamp::now() + jiff::SignedDuration::from_millis(1500);
    let (_, secret) = issue(Some(soon.to_string())).await;
    let mut expiring = Stream::open(&base, &secret, None).await;
    let started = std::time::Instant::now();
    // A change made before it opened may still reach it (a shared
    // queue's and shared nouns' events come through the database's
    // stream, after the call that made them has answered); then it ends.
    while expiring.next(10).await.is_some() {}
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "ended at its expiry: {took:?}"
    );
}
