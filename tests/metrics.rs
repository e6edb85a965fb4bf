//! `GET /metrics` over real HTTP: who may scrape it, and that the figures
//! follow what the queue did (task gauges with zero rows, counters of
//! enqueues, claims, submits by outcome and lease expiries, histograms of
//! HTTP requests by route template, journal commits and claim-to-submit).

mod support;

use serde_json::json;
use support::*;

async fn scrape(c: &tessera::client::Client) -> String {
    let r = c.get("/metrics").await.unwrap();
    assert_status!(r, 200);
    assert!(
        r.header("content-type")
            .is_some_and(|t| t.starts_with("application/openmetrics-text")),
        "{:?}",
        r.header("content-type")
    );
    String::from_utf8(r.body.to_vec()).unwrap()
}

#[tokio::test]
async fn metrics_follow_the_queue_and_need_the_scope() {
    let team = Team::start().await;
    let admin = &team.d.admin;

    let none = scrape(admin).await;
    for state in ["pending", "queued", "claimed", "succeeded", "failed"] {
        let row = format!("tessera_tasks{{queue=\"work.short\",state=\"{state}\"}}");
        assert_eq!(
            sample(&none, &row),
            Some(0.0),
            "zero rows are present: {row}"
        );
    }
    assert!(none.contains("tessera_build_info{version=\""), "{none}");
    assert!(none.trim_end().ends_with("# EOF"));

    let ok = enqueue(&team.requester, &spec("verb.compute", json!({}))).await;
    let bad = enqueue(&team.requester, &spec("verb.compute", json!({}))).await;
    for (id, verdict) in [(&ok, true), (&bad, false)] {
        let c = claim(&team.worker, "work.external").await.unwrap();
        assert_eq!(&claimed_id(&c), id);
        let r = submit(&team.worker, id, &lease(&c), verdict, json!([])).await;
        assert!(
            r.status.is_success(),
            "{}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let mut short = spec("verb.compute", json!({}));
    short["queue"] = json!("work.short");
    enqueue(&team.requester, &short).await;
    claim(&team.worker, "work.short").await.unwrap();

    let q = "queue=\"work.external\"";
    eventually(10, || async {
        let text = scrape(admin).await;
        sample(&text, "tessera_lease_expiries_total{queue=\"work.short\"}") == Some(1.0)
    })
    .await;
    let text = scrape(admin).await;
    let expect = [
        (format!("tessera_tasks_enqueued_total{{{q}}}"), 2.0),
        (format!("tessera_claims_total{{{q}}}"), 2.0),
        (format!("tessera_submits_total{{{q},outcome=\"ok\"}}"), 1.0),
        (
            format!("tessera_submits_total{{{q},outcome=\"failed\"}}"),
            1.0,
        ),
        (format!("tessera_claim_to_submit_seconds_count{{{q}}}"), 2.0),
        (
            "tessera_retries_total{queue=\"work.short\"}".to_string(),
            1.0,
        ),
        (
            "tessera_tasks{queue=\"work.short\",state=\"queued\"}".to_string(),
            1.0,
        ),
    ];
    for (row, want) in expect {
        assert_eq!(sample(&text, &row), Some(want), "{row}\n{text}");
    }
    assert!(
        sample(&text, "tessera_journal_commit_seconds_count").unwrap() >= 1.0,
        "{text}"
    );
    assert!(
        text.contains("tessera_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/tasks/{}/submit\",status=\"201\"}"),
        "routes are templates, never raw ids:\n{text}"
    );
    assert!(
        !text.contains(&format!("/v1/tasks/{ok}")),
        "no raw task id in a label"
    );

    let r = team.worker.get("/metrics").await.unwrap();
    assert_status!(r, 403);
    let r = admin
        .post_json(
            "/v1/keys",
            &json!({"label": "scraper", "grants": {"scopes": ["metrics:read"]}}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    let scraper = team.d.client(body(&r)["secret"].as_str().unwrap());
    scrape(&scraper).await;
    let anonymous = team.d.client("");
    let r = anonymous.anonymous().get("/metrics").await.unwrap();
    assert_status!(r, 401);
    let text = scrape(admin).await;
    assert!(
        sample(&text, "tessera_auth_failures_total").unwrap() >= 1.0,
        "{text}"
    );
    let open = sample(&text, "tessera_connections_open").unwrap();
    let busy = sample(&text, "tessera_connections_busy").unwrap();
    assert!(
        busy >= 1.0 && open >= busy,
        "the scrape is in flight: {text}"
    );
    for counter in [
        "tessera_connections_refused_total",
        "tessera_connections_evicted_total",
    ] {
        assert_eq!(sample(&text, counter), Some(0.0), "{text}");
    }
}
