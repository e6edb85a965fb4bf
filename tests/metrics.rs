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
    // How long each operation held the queue's lock: one histogram per
    // operation, every one listed, those that ran counted.
    for (op, ran) in [
        ("enqueue", 3.0),
        ("claim", 3.0),
        ("submit", 2.0),
        ("fold", 0.0),
    ] {
        let row = format!("tessera_queue_lock_held_seconds_count{{op=\"{op}\"}}");
        let n = sample(&text, &row).unwrap_or_else(|| panic!("{row} is exported\n{text}"));
        assert!(n >= ran, "{row}: {n}");
    }
    assert!(
        text.contains("tessera_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/tasks/{id}/submit\",status=\"201\"}"),
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

/// Literal segments of the API's paths: any sequence of them is a path a
/// client may send, and a route label built from such a path (rather than
/// from the route that served it) takes one value per sequence.
const LITERALS: [&str; 16] = [
    "claim",
    "submit",
    "versions",
    "output",
    "metrics",
    "healthz",
    "mcp",
    "receipts",
    "parts",
    "heartbeat",
    "release",
    "park",
    "resume",
    "split",
    "cancel",
    "quarantine",
];

/// The `n`th path of `/v1` and then one to five [`LITERALS`] (the base-16
/// digits of `n`): no route has any of them right after `/v1`, so every
/// such path is answered `404 no_route`, each a new path.
fn literal_path(mut n: usize) -> String {
    let mut path = String::from("/v1");
    for _ in 0..5 {
        path.push('/');
        path.push_str(LITERALS[n % LITERALS.len()]);
        n /= LITERALS.len();
        if n == 0 {
            break;
        }
    }
    path
}

/// The series in a scrape: its sample lines' names and labels.
fn series(text: &str) -> std::collections::BTreeSet<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').map(|(name, _)| name))
        .collect()
}

/// One round of traffic whose every label a client would choose if it
/// could, numbered from `from`: `n` requests each with an invented
/// method, with a path of literal segments and claiming from an
/// unprovisioned queue (named like a literal half the time), and `n / 10`
/// each enqueueing onto such a queue and calling an `/mcp` tool with
/// literals for names. Each kind gets the same
/// answer every time, so only labels taken from the request could add
/// series.
async fn odd_traffic(team: &Team, from: usize, n: usize) {
    use futures_util::StreamExt;
    let anon = team.d.admin.anonymous();
    let worker = &team.worker;
    let requester = &team.requester;
    // Enqueues and tool calls cost more: one in ten rounds sends them.
    let kinds = |i: usize| if i.is_multiple_of(10) { 0..5 } else { 0..3 };
    let calls = (from..from + n).flat_map(move |i| kinds(i).map(move |kind| (i, kind)));
    futures_util::stream::iter(calls)
        .for_each_concurrent(32, |(i, kind)| {
            let anon = anon.clone();
            async move {
                let queue = if i % 2 == 0 {
                    LITERALS[i / 2 % LITERALS.len()].to_string()
                } else {
                    format!("q{i}")
                };
                let r = match kind {
                    0 => {
                        let method = http::Method::from_bytes(format!("X{i}").as_bytes()).unwrap();
                        anon.send(method, "/v1/tasks", None, &[]).await
                    }
                    1 => anon.get(&literal_path(i)).await,
                    2 => {
                        let path = format!("/v1/queues/{queue}/claim");
                        worker.post_json(&path, &json!({})).await
                    }
                    3 => {
                        let mut s = spec("verb.compute", json!({}));
                        s["queue"] = json!(queue);
                        requester.post_json("/v1/tasks", &s).await
                    }
                    _ => {
                        let [ns, st, key] =
                            [i, i / 7, i / 49].map(|j| LITERALS[j % LITERALS.len()]);
                        let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                            "params": {"name": "put_noun", "arguments": {
                                "namespace": ns, "store": st, "key": key,
                                "expected_version": 0, "body": {}}}});
                        let body = serde_json::to_vec(&call).unwrap().into();
                        let headers = [
                            ("accept", "application/json, text/event-stream"),
                            ("mcp-protocol-version", "2025-11-25"),
                        ];
                        worker
                            .send(http::Method::POST, "/mcp", Some(body), &headers)
                            .await
                    }
                };
                let r = r.unwrap();
                assert!(
                    r.status.is_client_error() || r.status.is_success(),
                    "{kind}: {}",
                    r.status
                );
            }
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_chosen_methods_paths_and_names_add_no_series() {
    let team = Team::start().await;
    let admin = &team.d.admin;
    odd_traffic(&team, 0, 500).await;
    // The first scrape's own request is counted once it has answered.
    scrape(admin).await;
    let first = scrape(admin).await;
    odd_traffic(&team, 500, 19_500).await;
    let last = scrape(admin).await;
    let added: Vec<_> = series(&last).difference(&series(&first)).copied().collect();
    assert!(
        added.is_empty(),
        "20,000 rounds of odd methods, paths and names added {} series: {:?}",
        added.len(),
        &added[..added.len().min(40)]
    );
    assert!(
        last.len() < 64 * 1024,
        "the scrape grew to {} bytes",
        last.len()
    );
    for label in ["route=\"/v1/queues/{queue}/claim\"", "method=\"other\""] {
        assert!(last.contains(label), "{label}");
    }
    for raw in [
        "q1\"",
        "X1",
        "/v1/queues/claim/",
        "/v1/claim",
        "/v1/nouns/claim",
    ] {
        assert!(!last.contains(raw), "{raw} in a label:\n{last}");
    }
}
