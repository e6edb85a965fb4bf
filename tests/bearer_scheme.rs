//! The `Authorization` scheme is case-insensitive (RFC 9110 §11.1):
//! `bearer <key>` and `BEARER <key>` were answered `401` because the
//! credential was read with a case-sensitive `Bearer ` prefix, on the key
//! routes, the worker routes and, by a second copy of the rule, `/mcp`.
//! Every surface now reads it by one rule.

use crate::support;

use http::Method;
use serde_json::{Value, json};
use support::*;
use tessera::client::{Client, Reply};

/// The spellings of the scheme a client may send.
const SCHEMES: [&str; 4] = ["Bearer", "bearer", "BEARER", "bEaReR"];

/// Issues a key for the team's queue and kinds that may enqueue and claim;
/// returns its secret.
async fn key(t: &Team) -> String {
    let scopes = json!([
        format!("namespace:{NS}"),
        format!("surface:{SURFACE}"),
        "nouns:read",
        "verbs:enqueue",
        "verbs:claim",
        "verbs:submit"
    ]);
    let grants = json!({
        "queues": ["work.external"],
        "kinds": ["verb.solve_draft"],
        "effect_classes": ["write-internal"],
        "scopes": scopes
    });
    let r =
        t.d.admin
            .post_json("/v1/keys", &json!({"label": "schemes", "grants": grants}))
            .await
            .unwrap();
    assert_status!(r, 201);
    body(&r)["secret"].as_str().unwrap().to_string()
}

/// A request whose `Authorization` header is exactly `authorization`.
async fn send(
    c: &Client,
    authorization: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Reply {
    let mut headers = vec![("authorization", authorization)];
    if path == "/mcp" {
        headers.push(("accept", "application/json, text/event-stream"));
        headers.push(("mcp-protocol-version", "2025-11-25"));
    }
    let body = body.map(|b| b.to_string().into());
    c.anonymous()
        .send(method, path, body, &headers)
        .await
        .unwrap()
}

/// A `tools/call` over `/mcp` with `authorization`; the tool's result.
async fn tool(c: &Client, authorization: &str, name: &str, arguments: Value) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}});
    let r = send(c, authorization, Method::POST, "/mcp", Some(call)).await;
    assert_status!(r, 200);
    body(&r)["result"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bearer_scheme_is_read_in_any_case_on_key_worker_and_mcp_routes() {
    let t = Team::start().await;
    let secret = key(&t).await;
    let c = &t.d.admin;
    let id = enqueue(
        &t.d.client(&secret),
        &spec("verb.solve_draft", json!({"n": 1})),
    )
    .await;
    let claimed = claim(&t.d.client(&secret), "work.external")
        .await
        .expect("the task");
    let handle = claimed["handle"].as_str().unwrap().to_string();

    for scheme in SCHEMES {
        let as_key = format!("{scheme} {secret}");
        let as_handle = format!("{scheme} {handle}");
        let r = send(c, &as_key, Method::GET, &format!("/v1/tasks/{id}"), None).await;
        assert_status!(r, 200);
        assert_eq!(body(&r)["task_id"], json!(id), "{scheme}");
        let r = send(c, &as_key, Method::GET, "/v1/queues", None).await;
        assert_status!(r, 200);
        let r = send(c, &as_handle, Method::GET, "/v1/worker/prompt", None).await;
        assert_status!(r, 200);
        assert_eq!(body(&r)["task_id"], json!(id), "{scheme}");
        let r = send(
            c,
            &as_handle,
            Method::POST,
            "/v1/worker/heartbeat",
            Some(json!({})),
        )
        .await;
        assert_status!(r, 200);

        let got = tool(c, &as_key, "get_task", json!({"task_id": id})).await;
        assert_eq!(got["isError"], json!(false), "{scheme}: {got}");
        assert_eq!(got["structuredContent"]["task_id"], json!(id));
        let prompt = tool(c, &as_handle, "get_prompt", json!({})).await;
        assert_eq!(prompt["isError"], json!(false), "{scheme}: {prompt}");
        assert_eq!(prompt["structuredContent"]["task_id"], json!(id));
    }

    // Other schemes, and a scheme glued to its token, stay refused.
    for wrong in [
        format!("Basic {secret}"),
        format!("bearer{secret}"),
        "bearer ".to_string(),
    ] {
        let r = send(c, &wrong, Method::GET, &format!("/v1/tasks/{id}"), None).await;
        assert_status!(r, 401, "unauthenticated");
        let r = send(c, &wrong, Method::GET, "/v1/worker/prompt", None).await;
        assert_status!(r, 401, "unauthenticated");
        let got = tool(c, &wrong, "get_task", json!({"task_id": id})).await;
        assert_eq!(got["isError"], json!(true), "{wrong}: {got}");
        assert_eq!(got["structuredContent"]["status"], json!(401), "{got}");
    }
}
