//! A key request naming a scope the daemon does not know was answered
//! `400 invalid_body` (serde's "unknown scope ... at line 1 column 60"),
//! while the README's error table gives `invalid_grant` for grants that
//! cannot be issued (issue 32). It is now `400 invalid_grant` naming the
//! scope and its place (`details.field`); a body of the wrong shape stays
//! `invalid_body`, and nothing is issued either way.
//!
//! The first fix parsed the body a second time when serde refused it and
//! answered `invalid_grant` whenever an unknown scope was among the
//! causes, so a body too deep or of the wrong shape that also held one
//! was told about the scope, not its shape. The body is now parsed once
//! (scopes as text) and its scopes checked after: the shape's error wins.

use crate::support;

use serde_json::{Value, json};
use support::*;

/// A key request with these scopes.
fn request(scopes: Value) -> Value {
    json!({"label": "scopes", "grants": {"queues": ["work.external"], "scopes": scopes}})
}

/// How many keys the daemon lists.
async fn keys(d: &TestDaemon) -> usize {
    let r = d.admin.get("/v1/keys").await.unwrap();
    assert_status!(r, 200);
    body(&r)["keys"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_scope_is_an_invalid_grant_naming_it() {
    let d = TestDaemon::start().await;
    let before = keys(&d).await;
    // (scopes, status, code, details.field, message part)
    let cases: &[(Value, u16, &str, Option<&str>, &str)] = &[
        (
            json!(["nouns:read", "nouns:write"]),
            400,
            "invalid_grant",
            Some("grants.scopes[1]"),
            "unknown scope \"nouns:write\"; scopes are namespace:X, surface:X, nouns:read",
        ),
        (
            json!(["ADMIN"]),
            400,
            "invalid_grant",
            Some("grants.scopes[0]"),
            "unknown scope \"ADMIN\"",
        ),
        (
            json!([format!("namespace:{NS}"), "namespace:../x", "verbs:fly"]),
            400,
            "invalid_grant",
            Some("grants.scopes[1]"),
            "unknown scope \"namespace:../x\"",
        ),
        (
            json!(["surface:"]),
            400,
            "invalid_grant",
            Some("grants.scopes[0]"),
            "unknown scope \"surface:\"",
        ),
        (json!([7]), 400, "invalid_body", None, "expected a string"),
        (
            json!("nouns:read"),
            400,
            "invalid_body",
            None,
            "expected a sequence",
        ),
    ];
    for (scopes, status, code, field, message) in cases {
        let r = d
            .admin
            .post_json("/v1/keys", &request(scopes.clone()))
            .await
            .unwrap();
        let got = body(&r);
        assert_eq!(r.status.as_u16(), *status, "{scopes}: {got}");
        assert_eq!(got["error"]["code"], *code, "{scopes}: {got}");
        assert_eq!(
            got["error"]["details"]["field"].as_str(),
            *field,
            "{scopes}: {got}"
        );
        let said = got["error"]["message"].as_str().unwrap_or_default();
        assert!(said.contains(message), "{scopes}: {got}");
    }
    assert_eq!(keys(&d).await, before, "nothing was issued");

    // Another field's mistake is still that field's.
    let r = d
        .admin
        .post_json(
            "/v1/keys",
            &json!({"label": "x", "grants": {"scopes": ["nouns:read"], "roles": []}}),
        )
        .await
        .unwrap();
    assert_status!(r, 400);
    assert_eq!(r.error_code().as_deref(), Some("unknown_field"));

    let r = d
        .admin
        .post_json("/v1/keys", &request(json!(["nouns:read", "verbs:claim"])))
        .await
        .unwrap();
    assert_status!(r, 201);
    assert_eq!(
        body(&r)["grants"]["scopes"],
        json!(["nouns:read", "verbs:claim"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_too_deep_or_of_the_wrong_shape_is_told_so_even_with_an_unknown_scope() {
    let d = TestDaemon::start().await;
    let before = keys(&d).await;
    let deep = (0..70).fold(json!(1), |inner, _| json!([inner]));
    // (body, code)
    let cases: &[(Value, &str)] = &[
        (
            json!({"label": "x", "owner": deep, "grants": {"scopes": ["nouns:write"]}}),
            "too_deep",
        ),
        (
            json!({"label": 7, "grants": {"scopes": ["nouns:write"]}}),
            "invalid_body",
        ),
        (
            json!({"label": "x", "grants": {"scopes": ["nouns:write", 7]}}),
            "invalid_body",
        ),
        (
            json!({"label": "x", "grants": {"scopes": ["nouns:write"], "roles": []}}),
            "unknown_field",
        ),
        (
            json!({"grants": {"scopes": ["nouns:write"]}}),
            "invalid_body",
        ),
    ];
    for (request, code) in cases {
        let r = d.admin.post_json("/v1/keys", request).await.unwrap();
        let got = body(&r);
        assert_eq!(
            (r.status.as_u16(), got["error"]["code"].as_str()),
            (400, Some(*code)),
            "{request}: {got}"
        );
    }
    assert_eq!(keys(&d).await, before, "nothing was issued");
}
