//! The batch routes check every item as its single route does: the access
//! rows (401 and 403 for the whole request, 404 for another namespace, and
//! per item the very status and code the single route answers), a bad item
//! failing only itself, dry runs, and the limits on items and bytes.

use serde_json::{Value, json};
use tessera::client::{Client, Reply};

use super::{Env, importer_grants};
use crate::support::{NS, SURFACE, body};

fn noun(ns: &str, store: &str, key: &str, envelope: Value) -> Value {
    json!({"namespace": ns, "store": store, "key": key, "envelope": envelope})
}

fn spec(ns: &str, queue: &str, kind: &str) -> Value {
    json!({
        "namespace": ns, "queue": queue, "kind": kind, "effect_class": "write-internal",
        "producer_surface": SURFACE, "visibility_scope": "surface_only", "brief": {"n": 1},
    })
}

fn with(mut v: Value, field: &str, value: Value) -> Value {
    v[field] = value;
    v
}

async fn post(c: &Client, path: &str, body: &Value) -> Reply {
    c.post_json(path, body).await.unwrap()
}

/// `(status, code)` of each item of a batch answer.
fn items(r: &Reply) -> Vec<(u64, Option<String>)> {
    assert_status!(r, 200);
    body(r)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let code = i["error"]["code"].as_str().map(str::to_string);
            (i["status"].as_u64().unwrap(), code)
        })
        .collect()
}

/// `(status, code)` of a single-route answer.
fn single(r: &Reply) -> (u64, Option<String>) {
    (u64::from(r.status.as_u16()), r.error_code())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_items_answer_exactly_as_their_single_routes() {
    let env = Env::start().await;
    let c = &env.importer;
    let ok = json!({"skip_unchanged": true, "body": {"n": 1}});
    // (row, item, status, code); error rows are also sent to the single route.
    let noun_rows: Vec<(&str, Value, u64, Option<&str>)> = vec![
        (
            "create",
            noun(NS, "work.inputs", "a", ok.clone()),
            201,
            None,
        ),
        (
            "another namespace",
            noun("elsewhere", "work.inputs", "a", ok.clone()),
            404,
            Some("not_found"),
        ),
        (
            "invalid name",
            noun(NS, "work.inputs", "bad key", ok.clone()),
            400,
            Some("invalid_name"),
        ),
        (
            "unknown field",
            noun(NS, "work.inputs", "b", with(ok.clone(), "bogus", json!(1))),
            400,
            Some("unknown_field"),
        ),
        (
            "no expected_version",
            noun(NS, "work.inputs", "c", json!({"body": {}})),
            400,
            Some("missing_field"),
        ),
        (
            "public needs admin",
            noun(
                NS,
                "work.inputs",
                "d",
                with(ok.clone(), "visibility", json!("public")),
            ),
            403,
            Some("forbidden"),
        ),
        (
            "foreign surface",
            noun(
                NS,
                "work.inputs",
                "e",
                with(ok.clone(), "producer_surface", json!("other")),
            ),
            403,
            Some("forbidden"),
        ),
    ];
    let plain = spec(NS, "work.external", "verb.solve_draft");
    let base = with(plain.clone(), "idempotency_key", json!("k1"));
    let task_rows: Vec<(&str, Value, u64, Option<&str>)> = vec![
        ("create", base.clone(), 201, None),
        (
            "another namespace",
            spec("elsewhere", "work.external", "verb.solve_draft"),
            404,
            Some("not_found"),
        ),
        (
            "unknown queue",
            spec(NS, "work.nowhere", "verb.solve_draft"),
            404,
            Some("unknown_queue"),
        ),
        (
            "kind not granted",
            spec(NS, "work.external", "verb.other"),
            403,
            Some("forbidden"),
        ),
        (
            "unknown field",
            with(plain.clone(), "bogus", json!(1)),
            400,
            Some("unknown_field"),
        ),
        (
            "unknown upstream",
            with(plain.clone(), "depends_on", json!(["t999"])),
            422,
            Some("unknown_upstream"),
        ),
        (
            "brief not a map",
            with(plain.clone(), "brief", json!([])),
            400,
            Some("invalid_field"),
        ),
    ];
    for (row, item, status, code) in noun_rows.iter().chain(&task_rows) {
        if *status < 400 {
            continue;
        }
        let r = if item.get("envelope").is_some() {
            let path = format!(
                "/v1/nouns/{}/{}/{}",
                item["namespace"].as_str().unwrap(),
                item["store"].as_str().unwrap(),
                item["key"].as_str().unwrap().replace(' ', "%20")
            );
            c.put_json(&path, &item["envelope"]).await.unwrap()
        } else {
            post(c, "/v1/tasks", item).await
        };
        assert_eq!(
            single(&r),
            (*status, code.map(str::to_string)),
            "single route: {row}"
        );
    }
    for (path, rows) in [
        ("/v1/batch/nouns", &noun_rows),
        ("/v1/batch/tasks", &task_rows),
    ] {
        let all: Vec<&Value> = rows.iter().map(|r| &r.1).collect();
        let got = items(&post(c, path, &json!({"items": all})).await);
        let want: Vec<(u64, Option<String>)> = rows
            .iter()
            .map(|r| (r.2, r.3.map(str::to_string)))
            .collect();
        assert_eq!(
            got,
            want,
            "{path}: each item as its single route, rows {:?}",
            rows.iter().map(|r| r.0).collect::<Vec<_>>()
        );
    }

    let changed = with(base.clone(), "brief", json!({"n": 2}));
    let fresh = with(base.clone(), "idempotency_key", json!("k2"));
    let r = post(
        c,
        "/v1/batch/tasks?dry_run=true",
        &json!({"items": [base, changed, fresh]}),
    )
    .await;
    let outcomes: Vec<Value> = body(&r)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| json!([i["status"], i["result"]["outcome"], i["result"]["task_id"]]))
        .collect();
    let listed = body(&c.get("/v1/tasks").await.unwrap());
    let keyed = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["idempotency_key"] == "k1")
        .expect("the keyed task")["task_id"]
        .clone();
    assert_eq!(
        outcomes,
        [
            json!([200, "unchanged", keyed]),
            json!([200, "conflict", keyed]),
            json!([200, "create", null])
        ]
    );
    let r = post(c, "/v1/batch/tasks", &json!({"items": [changed]})).await;
    assert_eq!(items(&r), [(409, Some("idempotency_conflict".to_string()))]);
    assert_eq!(
        env.tasks().await.len(),
        1,
        "dry runs and refusals enqueue nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_batch_requests_need_a_key_and_the_scope() {
    let env = Env::start().await;
    let no_write = env
        .d
        .client(&Env::issue(&env.d, importer_grants(&["cas:write"])).await);
    let no_enqueue = env
        .d
        .client(&Env::issue(&env.d, importer_grants(&["verbs:enqueue"])).await);
    let anonymous = env.d.admin.anonymous();
    let one_noun =
        json!({"items": [noun(NS, "s", "k", json!({"skip_unchanged": true, "body": {}}))]});
    let one_task = json!({"items": [spec(NS, "work.external", "verb.solve_draft")]});
    let tiny = noun(NS, "s", "k", json!({"skip_unchanged": true, "body": {}}));
    let rows: [(&str, &Client, &str, Value, u16, &str); 8] = [
        (
            "anonymous nouns",
            &anonymous,
            "/v1/batch/nouns",
            one_noun.clone(),
            401,
            "unauthenticated",
        ),
        (
            "anonymous tasks",
            &anonymous,
            "/v1/batch/tasks",
            one_task.clone(),
            401,
            "unauthenticated",
        ),
        (
            "nouns without cas:write",
            &no_write,
            "/v1/batch/nouns",
            one_noun.clone(),
            403,
            "forbidden",
        ),
        (
            "tasks without verbs:enqueue",
            &no_enqueue,
            "/v1/batch/tasks",
            one_task.clone(),
            403,
            "forbidden",
        ),
        (
            "dry run without verbs:enqueue",
            &no_enqueue,
            "/v1/batch/tasks?dry_run=true",
            one_task,
            403,
            "forbidden",
        ),
        (
            "unknown field",
            &env.importer,
            "/v1/batch/nouns",
            json!({"items": [], "x": 1}),
            400,
            "unknown_field",
        ),
        (
            "items not a list",
            &env.importer,
            "/v1/batch/tasks",
            json!({"items": 5}),
            400,
            "invalid_body",
        ),
        (
            "too many items",
            &env.importer,
            "/v1/batch/nouns",
            json!({"items": vec![tiny; 1001]}),
            400,
            "too_many_items",
        ),
    ];
    for (row, client, path, request, status, code) in rows {
        let r = post(client, path, &request).await;
        assert_eq!(
            (r.status.as_u16(), r.error_code().as_deref()),
            (status, Some(code)),
            "{row}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    assert!(env.tasks().await.is_empty());
    assert_eq!(env.versions("s", "k").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_item_keeps_the_single_body_limit_and_the_cli_splits_batches_the_daemon_refuses() {
    let env = Env::start_with(|c| c.limits.max_body_bytes = 1024).await;
    let c = &env.importer;
    let small = noun(
        NS,
        "s",
        "small",
        json!({"skip_unchanged": true, "body": {"n": 1}}),
    );
    let big = noun(
        NS,
        "s",
        "big",
        json!({"skip_unchanged": true, "body": {"pad": "x".repeat(2000)}}),
    );
    let r = post(c, "/v1/batch/nouns", &json!({"items": [small, big]})).await;
    assert_eq!(
        items(&r),
        [(201, None), (413, Some("body_too_large".to_string()))]
    );
    let r = post(c, "/v1/batch/nouns", &json!({"items": vec![small; 60]})).await;
    assert_status!(r, 413, "body_too_large");

    let tmp = tempfile::tempdir().unwrap();
    let mut text = format!(
        "pack: split\nversion: \"1\"\nnamespace: {NS}\nproducer_surface: {SURFACE}\nnouns:\n"
    );
    for i in 0..60 {
        text.push_str(&format!(
            "  - {{store: s, key: n{i}, type: noun.input, body: {{index: {i}}}}}\n"
        ));
    }
    std::fs::write(tmp.path().join("pack.yaml"), text).unwrap();
    let run = env.import(tmp.path(), &[]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.summary(),
        "import: 60 create, 0 new version, 0 unchanged, 0 conflict, 0 error (60 nouns, 0 tasks)"
    );
    assert_eq!(env.versions("s", "n59").await, 1);
}
