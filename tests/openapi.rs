//! `GET /v1/openapi.json` against the router: the document lists exactly
//! the routes the router's table serves, every listed route reaches a
//! handler, a method a listed path does not take answers 405 with `Allow`, and every operation names its credential, its
//! error statuses with the error body, and only schemas the document holds.

use crate::support;

use std::collections::BTreeSet;

use http::Method;
use serde_json::{Value, json};
use support::TestDaemon;
use tessera::http::routes::ROUTES;

/// (METHOD, template) pairs of the router's table.
fn routed() -> BTreeSet<(String, String)> {
    ROUTES
        .iter()
        .map(|r| (r.endpoint.method.to_string(), r.endpoint.path.to_string()))
        .collect()
}

/// (METHOD, template) pairs of the document.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            out.insert((method.to_ascii_uppercase(), path.clone()));
        }
    }
    out
}

async fn fetch_document(d: &TestDaemon) -> Value {
    let r = d.admin.anonymous().get("/v1/openapi.json").await.unwrap();
    assert_status!(r, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    support::body(&r)
}

#[tokio::test]
async fn document_lists_exactly_the_routes_the_router_serves() {
    let d = TestDaemon::start().await;
    let doc = fetch_document(&d).await;
    assert_eq!(doc["openapi"], "3.1.0");
    let routed = routed();
    let documented = documented(&doc);
    assert_eq!(
        routed, documented,
        "the document's routes against the table's"
    );
}

/// Every path the document lists, under each standard method it does not
/// take, answers 405 `method_not_allowed` with an `Allow` header (and
/// `details.allow`) naming exactly the methods the document lists there:
/// `GET` and `DELETE /mcp` among them, which MCP clients probe. A path no
/// route serves stays 404 `no_route`.
#[tokio::test]
async fn a_method_the_path_does_not_take_answers_405_with_allow() {
    let d = TestDaemon::start().await;
    let doc = fetch_document(&d).await;
    let c = &d.admin;
    let standard = [
        Method::GET,
        Method::PUT,
        Method::POST,
        Method::DELETE,
        Method::PATCH,
        Method::HEAD,
        Method::OPTIONS,
    ];
    let paths = doc["paths"].as_object().unwrap();
    let mut checked = 0;
    for template in paths.keys() {
        let path = concrete(template);
        // The methods of every template the path fits (`/v1/tasks/cancel`
        // fits `/v1/tasks/{id}` too).
        let takes: BTreeSet<String> = paths
            .iter()
            .filter(|(t, _)| fits(t, &path))
            .flat_map(|(_, item)| item.as_object().unwrap().keys())
            .map(|m| m.to_ascii_uppercase())
            .collect();
        for method in &standard {
            if takes.contains(method.as_str()) {
                continue;
            }
            let reply = c.send(method.clone(), &path, None, &[]).await.unwrap();
            let what = format!("{method} {path}");
            assert_eq!(reply.status, 405, "{what}: {:?}", reply.body);
            let allow: BTreeSet<String> = reply
                .header("allow")
                .unwrap_or_else(|| panic!("{what}: no Allow header"))
                .split(", ")
                .map(str::to_string)
                .collect();
            assert_eq!(allow, takes, "{what}: Allow");
            if *method != Method::HEAD {
                let body = support::body(&reply);
                assert_eq!(body["error"]["code"], "method_not_allowed", "{what}");
                let details: BTreeSet<String> =
                    serde_json::from_value(body["error"]["details"]["allow"].clone()).unwrap();
                assert_eq!(details, takes, "{what}: details.allow");
            }
            checked += 1;
        }
    }
    assert!(
        checked > 150,
        "only {checked} method and path pairs checked"
    );
    for method in [Method::GET, Method::DELETE] {
        let reply = c.send(method.clone(), "/mcp", None, &[]).await.unwrap();
        assert_status!(reply, 405, "method_not_allowed");
        assert_eq!(reply.header("allow"), Some("POST"), "{method} /mcp");
    }
    for path in ["/v1/task", "/v1/tasks/t1/nope", "/v1/nouns/a/b"] {
        let reply = c.send(Method::GET, path, None, &[]).await.unwrap();
        assert_status!(reply, 404, "no_route");
        assert_eq!(reply.header("allow"), None, "{path}");
    }
}

/// Whether `path` fits `template`, whose `{name}` segments stand for any
/// one segment.
fn fits(template: &str, path: &str) -> bool {
    let (t, p): (Vec<_>, Vec<_>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len() && t.iter().zip(&p).all(|(t, p)| t.starts_with('{') || t == p)
}

/// A concrete path for a template: a real site file for `/ui/{name}`, a
/// task id for `{id}`, a name elsewhere.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|seg| match seg {
            "{name}" => "app.js",
            "{id}" => "t1",
            s if s.starts_with('{') => "x",
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test]
async fn every_listed_route_reaches_a_handler() {
    let d = TestDaemon::start().await;
    let anon = d.admin.anonymous();
    for r in ROUTES {
        let path = concrete(r.endpoint.path);
        let reply = anon
            .send(r.endpoint.method.clone(), &path, None, &[])
            .await
            .unwrap();
        assert_ne!(
            reply.error_code().as_deref(),
            Some("no_route"),
            "{} {path} is in the table but no handler answers it",
            r.endpoint.method
        );
    }
    let reply = anon
        .send(Method::GET, "/v1/no/such/route", None, &[])
        .await
        .unwrap();
    assert_status!(reply, 404, "no_route");
}

#[tokio::test]
async fn every_operation_names_its_credential_errors_and_known_schemas() {
    let d = TestDaemon::start().await;
    let doc = fetch_document(&d).await;
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    assert_eq!(
        schemes.keys().collect::<Vec<_>>(),
        ["key", "worker"],
        "the two bearer credentials"
    );
    let error_ref = "#/components/schemas/Error";
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let at = format!("{method} {path}");
            assert!(op["security"].is_array(), "{at}: no security");
            let responses = op["responses"].as_object().unwrap();
            for status in ["400", "404", "500"] {
                assert_eq!(
                    responses[status]["content"]["application/json"]["schema"]["$ref"], error_ref,
                    "{at}: {status} is not the error body"
                );
            }
            if op["security"] != serde_json::json!([]) {
                assert!(
                    responses.contains_key("401") && responses.contains_key("403"),
                    "{at}: a credential without 401 and 403"
                );
            }
        }
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let codes = &schemas["Error"]["properties"]["error"]["properties"]["code"]["enum"];
    assert!(
        codes.as_array().unwrap().len() > 40,
        "every error code is listed"
    );
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    for r in refs {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("unexpected $ref {r}"));
        assert!(schemas.contains_key(name), "$ref to a missing schema: {r}");
    }
}

/// Every JSON request body is a closed object (the daemon refuses unknown
/// fields, so a generated request never carries one), with the objects it
/// names closed too; a struct that flattens another into its own fields
/// (a task spec and a split's child flatten the task's traits) is one
/// merged object, not an `allOf` that a closed member would contradict.
#[tokio::test]
async fn request_bodies_are_closed_objects_without_all_of() {
    let d = TestDaemon::start().await;
    let doc = fetch_document(&d).await;
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let resolve = |v: &Value| -> Value {
        match v["$ref"].as_str() {
            Some(r) => schemas[r.trim_start_matches("#/components/schemas/")].clone(),
            None => v.clone(),
        }
    };
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Some(body) = op["requestBody"]["content"]["application/json"]["schema"].as_object()
            else {
                continue;
            };
            let mut todo = vec![(format!("{method} {path}"), Value::Object(body.clone()))];
            while let Some((at, schema)) = todo.pop() {
                let schema = resolve(&schema);
                assert!(schema.get("allOf").is_none(), "{at}: allOf in {schema}");
                if schema["type"] == "object" && schema.get("properties").is_some() {
                    checked += 1;
                    assert_eq!(
                        schema["additionalProperties"],
                        json!(false),
                        "{at}: open to unknown fields: {schema}"
                    );
                    for (field, sub) in schema["properties"].as_object().unwrap() {
                        let sub = resolve(sub);
                        if sub["type"] == "array" {
                            todo.push((format!("{at}.{field}[]"), sub["items"].clone()));
                        } else if sub["type"] == "object" {
                            todo.push((format!("{at}.{field}"), sub));
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} request objects checked");
    let spec = &schemas["TaskSpec"];
    for field in [
        "tags",
        "target_cohorts",
        "priority",
        "check_policy",
        "brief",
    ] {
        assert!(
            spec["properties"].get(field).is_some(),
            "TaskSpec has no {field}"
        );
    }
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.push(r.clone());
            }
            m.values().for_each(|v| collect_refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// Integer fields take integer-valued JSON numbers (`3.0`, `3e0`), as the
/// document's `integer` type allows, through a body of each kind: a task
/// spec, a noun put, a queue's settings, a claim, and an `/mcp` tool's
/// arguments. A number with a fraction stays a 400 naming it, and a
/// float in free-form JSON (the brief) keeps its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integer_fields_take_integer_valued_numbers() {
    let t = support::Team::start().await;
    let mut s = support::spec("verb.solve_draft", json!({"ratio": 2.0}));
    s["priority"] = json!(3.0);
    s["max_attempts"] = json!(2e0);
    let r = t.requester.post_json("/v1/tasks", &s).await.unwrap();
    assert_status!(r, 201);
    let id = support::body(&r)["task_id"].as_str().unwrap().to_string();
    let view = support::body(&t.requester.get(&format!("/v1/tasks/{id}")).await.unwrap());
    assert_eq!(
        (view["priority"].clone(), view["max_attempts"].clone()),
        (json!(3), json!(2))
    );
    assert_eq!(view["brief"].to_string(), r#"{"ratio":2.0}"#);

    let put = json!({"expected_version": 0.0, "body": {"n": 1}});
    let r = t
        .requester
        .put_json(
            &format!("/v1/nouns/{}/work.inputs/whole", support::NS),
            &put,
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    let r =
        t.d.admin
            .post_json(
                "/v1/queues",
                &json!({"name": "work.external", "max_attempts": 4.0}),
            )
            .await
            .unwrap();
    assert_status!(r, 200);
    let r = t
        .worker
        .post_json(
            "/v1/queues/work.external/claim",
            &json!({"wait_ms": 0.0, "max": 1.0}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);

    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "put_noun",
        "arguments": {"namespace": support::NS, "store": "work.inputs", "key": "whole", "expected_version": 1.0, "body": {"n": 2}},
    }});
    let r = t
        .requester
        .send(
            Method::POST,
            "/mcp",
            Some(serde_json::to_vec(&call).unwrap().into()),
            &[
                ("accept", "application/json, text/event-stream"),
                ("mcp-protocol-version", "2025-11-25"),
            ],
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    let answer = support::body(&r);
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["version"],
        json!(2),
        "{answer}"
    );

    s["priority"] = json!(3.5);
    let r = t.requester.post_json("/v1/tasks", &s).await.unwrap();
    assert_status!(r, 400, "invalid_body");
    assert!(
        support::body(&r)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("3.5")
    );
}

/// Every field the document lets be `null` in a task spec takes `null`
/// over HTTP, alone and in a batch: the spec's fields with deserializers
/// of their own once refused it (`producer_surface: null` was 400).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spec_field_the_document_lets_be_null_takes_null() {
    let t = support::Team::start().await;
    let doc = support::body(&t.d.admin.get("/v1/openapi.json").await.unwrap());
    let schemas = &doc["components"]["schemas"];
    let nullable = |s: &Value| {
        let s = match s["$ref"].as_str() {
            Some(r) => &schemas[r.rsplit('/').next().unwrap()],
            None => s,
        };
        s["type"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("null")))
            || s["oneOf"]
                .as_array()
                .is_some_and(|all| all.iter().any(|o| o["type"] == json!("null")))
    };
    let fields: Vec<String> = schemas["TaskSpec"]["properties"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, s)| nullable(s))
        .map(|(name, _)| name.clone())
        .collect();
    assert!(fields.iter().any(|f| f == "producer_surface"), "{fields:?}");
    let mut items = vec![];
    for field in &fields {
        let mut s = support::spec("verb.solve_draft", json!({}));
        s[field.as_str()] = Value::Null;
        let r = t.requester.post_json("/v1/tasks", &s).await.unwrap();
        assert_eq!(
            r.status,
            201,
            "{field}: null: {}",
            String::from_utf8_lossy(&r.body)
        );
        items.push(s);
    }
    let r = t
        .requester
        .post_json("/v1/batch/tasks", &json!({"items": items}))
        .await
        .unwrap();
    assert_status!(r, 200);
    for item in support::body(&r)["items"].as_array().unwrap() {
        assert_eq!(item["status"], json!(201), "{item}");
    }
}

/// `POST /v1/tasks` answers what the document says for each status: 201
/// a new task, 200 the existing one for an idempotent resend and a dry
/// run's outcome (the 200 was documented as the dry run's shape alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_answers_the_documented_shape_for_each_status() {
    let t = support::Team::start().await;
    let doc = support::body(&t.d.admin.get("/v1/openapi.json").await.unwrap());
    let conforms = |status: u16, answer: &Value| {
        let mut schema = doc["paths"]["/v1/tasks"]["post"]["responses"][status.to_string()]
            ["content"]["application/json"]["schema"]
            .clone();
        schema["components"] = doc["components"].clone();
        let validator = jsonschema::validator_for(&schema).expect("the document's schema");
        let problems: Vec<String> = validator
            .iter_errors(answer)
            .map(|e| e.to_string())
            .collect();
        assert!(problems.is_empty(), "{status} {answer}: {problems:?}");
    };
    let mut s = support::spec("verb.solve_draft", json!({}));
    s["idempotency_key"] = json!("once");
    let first = t.requester.post_json("/v1/tasks", &s).await.unwrap();
    assert_status!(first, 201);
    conforms(201, &support::body(&first));
    let again = t.requester.post_json("/v1/tasks", &s).await.unwrap();
    assert_status!(again, 200);
    assert_eq!(support::body(&again)["created"], json!(false));
    conforms(200, &support::body(&again));
    let dry = t
        .requester
        .post_json("/v1/tasks?dry_run=true", &s)
        .await
        .unwrap();
    assert_status!(dry, 200);
    assert_eq!(support::body(&dry)["outcome"], json!("unchanged"));
    conforms(200, &support::body(&dry));
}
