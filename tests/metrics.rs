//! `GET /metrics` over real HTTP: who may scrape it, and that the figures
//! follow what the queue did (task gauges with zero rows, counters of
//! enqueues, claims, submits by outcome and lease expiries, histograms of
//! HTTP requests by route template, journal commits and claim-to-submit);
//! that every series a queue can have is there at zero from its
//! creation, after a restart and on another daemon sharing its database;
//! that the classic text passes `promtool check metrics` and OpenMetrics
//! is served when asked for; and that the alert rules in
//! `docs/alerts.yml` evaluate on an idle queue's scrape
//! (`promtool test rules`). promtool comes with Debian's `prometheus`
//! package; these tests fail without it.

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::json;
use support::*;

/// The classic text format's content type.
const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The OpenMetrics content type.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// What Prometheus sends when it scrapes.
const PROMETHEUS_ACCEPT: &str =
    "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1";

/// A scrape sending `accept` (none when empty): its content type and text.
async fn scrape_as(c: &tessera::client::Client, accept: &str) -> (String, String) {
    let headers: &[(&str, &str)] = if accept.is_empty() {
        &[]
    } else {
        &[("accept", accept)]
    };
    let r = c
        .send(http::Method::GET, "/metrics", None, headers)
        .await
        .unwrap();
    assert_status!(r, 200);
    let kind = r.header("content-type").unwrap_or_default().to_string();
    (kind, String::from_utf8(r.body.to_vec()).unwrap())
}

/// A scrape asking for no format: the classic text.
async fn scrape(c: &tessera::client::Client) -> String {
    let (kind, text) = scrape_as(c, "").await;
    assert_eq!(kind, TEXT);
    text
}

/// Runs `promtool` with `args` and `stdin`: whether it succeeded, and
/// what it printed (stdout then stderr).
fn promtool(args: &[&str], stdin: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (Debian: apt-get install prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), printed)
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

/// Provisions `queue` with the defaults.
async fn provision(c: &tessera::client::Client, queue: &str) {
    let r = c
        .post_json("/v1/queues", &json!({"name": queue}))
        .await
        .unwrap();
    assert_status!(r, 201);
}

/// Checks that `text` has every per-queue series of `queue` at zero,
/// and claim-to-submit buckets from a millisecond to hours; `when` names
/// the scrape in a failure.
fn assert_zero_series(text: &str, queue: &str, when: &str) {
    let q = format!("queue=\"{queue}\"");
    let mut rows: Vec<String> = [
        "tessera_tasks_enqueued_total",
        "tessera_claims_total",
        "tessera_lease_expiries_total",
        "tessera_retries_total",
        "tessera_claim_to_submit_seconds_count",
        "tessera_claim_to_submit_seconds_sum",
    ]
    .iter()
    .map(|m| format!("{m}{{{q}}}"))
    .collect();
    for outcome in ["ok", "failed"] {
        rows.push(format!(
            "tessera_submits_total{{{q},outcome=\"{outcome}\"}}"
        ));
    }
    rows.push(format!(
        "tessera_claim_to_submit_seconds_bucket{{le=\"+Inf\",{q}}}"
    ));
    for row in rows {
        assert_eq!(sample(text, &row), Some(0.0), "{when}: {row}\n{text}");
    }
    let bounds: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("tessera_claim_to_submit_seconds_bucket{le=\"")?;
            let (bound, labels) = rest.split_once('"')?;
            labels
                .starts_with(&format!(",{q}}}"))
                .then(|| bound.parse().ok())?
        })
        .filter(|b: &f64| b.is_finite())
        .collect();
    let (low, high) = bounds
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &b| (lo.min(b), hi.max(b)));
    assert!(
        low <= 0.001 && high >= 3600.0,
        "{when}: claim-to-submit buckets from {low} s to {high} s"
    );
}

#[tokio::test]
async fn every_series_of_a_queue_is_there_at_zero_from_its_creation_and_after_a_restart() {
    let mut d = TestDaemon::start().await;
    let before = scrape(&d.admin).await;
    assert!(!before.contains("queue=\"idle\""), "{before}");
    provision(&d.admin, "idle").await;
    assert_zero_series(&scrape(&d.admin).await, "idle", "provisioned");
    d.restart().await;
    assert_zero_series(&scrape(&d.admin).await, "idle", "after a restart");
}

#[tokio::test]
async fn a_queue_provisioned_through_another_daemon_has_its_zero_series_by_the_next_scrape() {
    let url = support::pg::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let a = DaemonProcess::spawn_shared(&dir.path().join("a"), &url);
    let b = DaemonProcess::spawn_shared_beside(&dir.path().join("b"), &url, &a);
    let before = scrape(&b.admin).await;
    assert!(!before.contains("queue=\"idle\""), "{before}");
    provision(&a.admin, "idle").await;
    // b reads the queues' configs again once its last read is a second old.
    eventually(5, || async {
        let text = scrape(&b.admin).await;
        sample(&text, "tessera_claims_total{queue=\"idle\"}").is_some()
    })
    .await;
    assert_zero_series(&scrape(&b.admin).await, "idle", "on the other daemon");
}

#[tokio::test]
async fn the_classic_text_passes_promtool_and_openmetrics_is_served_when_preferred() {
    let team = Team::start().await;
    let admin = &team.d.admin;
    for verdict in [true, false] {
        let id = enqueue(&team.requester, &spec("verb.compute", json!({}))).await;
        let c = claim(&team.worker, "work.external").await.unwrap();
        let r = submit(&team.worker, &id, &lease(&c), verdict, json!([])).await;
        assert!(r.status.is_success(), "{r:?}");
    }
    let classic_types = ["counter", "gauge", "histogram", "summary", "untyped"];
    for accept in [
        "",
        "*/*",
        "text/plain",
        "text/plain;version=0.0.4",
        "text/*",
    ] {
        let (kind, text) = scrape_as(admin, accept).await;
        assert_eq!(kind, TEXT, "Accept: {accept:?}");
        assert_eq!(
            sample(
                &text,
                "tessera_submits_total{queue=\"work.external\",outcome=\"ok\"}"
            ),
            Some(1.0),
            "{text}"
        );
        for line in text.lines().filter(|l| l.starts_with('#')) {
            let known = line.starts_with("# HELP ")
                || line
                    .strip_prefix("# TYPE ")
                    .and_then(|t| t.rsplit_once(' '))
                    .is_some_and(|(_, t)| classic_types.contains(&t));
            assert!(known, "not the classic format: {line}");
        }
        assert!(!text.contains("_created"), "{text}");
        let (ok, printed) = promtool(&["check", "metrics"], &text);
        assert!(
            ok && printed.trim().is_empty(),
            "promtool check metrics, Accept {accept:?}:\n{printed}\n{text}"
        );
    }
    for accept in [PROMETHEUS_ACCEPT, "application/openmetrics-text"] {
        let (kind, text) = scrape_as(admin, accept).await;
        assert_eq!(kind, OPENMETRICS, "Accept: {accept:?}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        for line in [
            "# TYPE tessera_build info",
            "# TYPE tessera_claims counter",
            "# UNIT tessera_claim_to_submit_seconds seconds",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        assert_eq!(
            sample(
                &text,
                "tessera_submits_total{queue=\"work.external\",outcome=\"failed\"}"
            ),
            Some(1.0),
            "{text}"
        );
    }
}

#[tokio::test]
async fn the_alert_rules_evaluate_on_a_fresh_idle_queue() {
    let d = TestDaemon::start().await;
    provision(&d.admin, "idle").await;
    let text = scrape(&d.admin).await;
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/alerts.yml");
    let rules = rules.to_str().unwrap();
    let (ok, printed) = promtool(&["check", "rules", rules], "");
    assert!(ok, "promtool check rules {rules}:\n{printed}");
    // Thirty minutes of scrapes of the idle queue, each as this one.
    let series: String = text
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("queue=\"idle\""))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(name, v)| format!("      - series: '{name}'\n        values: '{v}+0x30'\n"))
        .collect();
    assert!(
        series.contains("tessera_claims_total{queue=\"idle\"}"),
        "{series}"
    );
    let claims = "increase(tessera_claims_total{queue=\"idle\"}[30m])";
    let unit = format!(
        r#"rule_files:
  - {rules}
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
{series}    promql_expr_test:
      - expr: '{claims}'
        eval_time: 30m
        exp_samples:
          - labels: '{{queue="idle"}}'
            value: 0
      - expr: 'increase(tessera_lease_expiries_total{{queue="idle"}}[15m])'
        eval_time: 30m
        exp_samples:
          - labels: '{{queue="idle"}}'
            value: 0
    alert_rule_test:
      - eval_time: 30m
        alertname: TesseraQueueNoClaims
        exp_alerts:
          - exp_labels: {{severity: info, queue: idle}}
            exp_annotations:
              summary: "Queue idle: 0 claims in 30 minutes"
      - eval_time: 30m
        alertname: TesseraQueueStalled
        exp_alerts: []
      - eval_time: 30m
        alertname: TesseraLeasesExpiring
        exp_alerts: []
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("idle_test.yml");
    std::fs::write(&file, &unit).unwrap();
    let (ok, printed) = promtool(&["test", "rules", file.to_str().unwrap()], "");
    assert!(ok, "promtool test rules:\n{printed}\n{unit}");
    println!(
        "promtool test rules: {claims} = 0 on the scraped idle queue; \
         TesseraQueueNoClaims fired with \"Queue idle: 0 claims in 30 minutes\"\n{printed}"
    );
}
