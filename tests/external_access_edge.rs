//! The access matrix: every route, asked by the admin key, a correctly
//! scoped key, and keys that differ from it by exactly one thing. Each row
//! asserts the exact status, that a refused write wrote nothing, and that a
//! hidden record answers exactly like a missing one.

use crate::support;

use std::collections::HashMap;

use http::Method;
use serde_json::{Value, json};
use support::{TestDaemon, body, files_under};
use tessera::client::{Client, Reply};

const NS: &str = "team";
const SURFACE: &str = "team_example";

/// Issues a key and returns its id and secret.
async fn issue(admin: &Client, spec: Value) -> (String, String) {
    let r = admin.post_json("/v1/keys", &spec).await.unwrap();
    assert_status!(r, 201);
    let b = body(&r);
    (
        b["key_id"].as_str().unwrap().into(),
        b["secret"].as_str().unwrap().into(),
    )
}

fn grants(scopes: &[&str]) -> Value {
    json!({"queues": [], "kinds": [], "effect_classes": [], "scopes": scopes})
}

/// The keys of the matrix, by name.
struct Keys {
    clients: HashMap<&'static str, Client>,
    ids: HashMap<&'static str, String>,
}

impl Keys {
    fn get(&self, name: &str) -> &Client {
        &self.clients[name]
    }
}

async fn setup(d: &TestDaemon) -> Keys {
    let base = [
        format!("namespace:{NS}"),
        format!("surface:{SURFACE}"),
        "nouns:read".into(),
        "cas:write".into(),
    ];
    let without =
        |drop: &str| -> Vec<String> { base.iter().filter(|s| *s != drop).cloned().collect() };
    let with = |extra: &[&str], drop: &str| -> Vec<String> {
        let mut v = without(drop);
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_millis(1500);
    let specs: Vec<(&'static str, Value)> = vec![
        (
            "scoped",
            json!({"label": "team worker", "account_id": "acct-1", "grants": {"scopes": base}}),
        ),
        (
            "same_account",
            json!({"label": "team worker", "account_id": "acct-1", "grants": {"scopes": base}}),
        ),
        (
            "other_ns",
            json!({"label": "x", "grants": {"scopes": with(&["namespace:elsewhere"], "namespace:team")}}),
        ),
        (
            "other_surface",
            json!({"label": "x", "grants": {"scopes": with(&["surface:other_surface"], "surface:team_example")}}),
        ),
        (
            "no_read",
            json!({"label": "x", "grants": {"scopes": without("nouns:read")}}),
        ),
        (
            "no_write",
            json!({"label": "x", "grants": {"scopes": without("cas:write")}}),
        ),
        (
            "label_scope",
            json!({"label": "surface:team_example", "grants": {"scopes": without("surface:team_example")}}),
        ),
        ("revoked", json!({"label": "x", "grants": {"scopes": base}})),
        (
            "expired",
            json!({"label": "x", "grants": {"scopes": base}, "expires_at": expires.to_string()}),
        ),
    ];
    let mut keys = Keys {
        clients: HashMap::new(),
        ids: HashMap::new(),
    };
    for (name, spec) in specs {
        let (id, secret) = issue(&d.admin, spec).await;
        keys.clients.insert(name, d.client(&secret));
        keys.ids.insert(name, id);
    }
    keys.clients.insert("admin", d.admin.clone());
    keys.clients.insert("anonymous", d.admin.anonymous());
    keys.clients.insert("malformed", d.client("not-a-key"));
    let r = d
        .admin
        .delete(&format!("/v1/keys/{}", keys.ids["revoked"]))
        .await
        .unwrap();
    assert_status!(r, 200);

    let scoped = keys.get("scoped");
    let nouns: [(&Client, &str, Value); 5] = [
        (
            scoped,
            "shared",
            json!({"expected_version": 0, "body": {"n": "shared"}}),
        ),
        (
            scoped,
            "private",
            json!({"expected_version": 0, "body": {"n": "private"}, "visibility": "private"}),
        ),
        (
            scoped,
            "allow",
            json!({"expected_version": 0, "body": {"n": "allow"}, "visibility": "allowlist_surfaces", "allowed_surfaces": ["surface:other_surface"]}),
        ),
        (
            &d.admin,
            "public",
            json!({"expected_version": 0, "body": {"n": "public"}, "visibility": "public", "producer_surface": SURFACE}),
        ),
        (
            scoped,
            "quarantined",
            json!({"expected_version": 0, "body": {"n": "quarantined"}}),
        ),
    ];
    for (client, key, env) in nouns {
        let r = client
            .put_json(&format!("/v1/nouns/{NS}/s/{key}"), &env)
            .await
            .unwrap();
        assert_status!(r, 201);
    }
    let r = d
        .admin
        .post_json(
            &format!("/v1/nouns/{NS}/s/quarantined/quarantine"),
            &json!({}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    let wait = (expires - jiff::Timestamp::now()).as_millis().max(0) as u64 + 100;
    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
    keys
}

/// A PUT that changes nothing when allowed (same bytes, skip_unchanged).
fn same(name: &str) -> Value {
    json!({"skip_unchanged": true, "body": {"n": name}})
}

/// A batch of one unchanged noun put.
fn batch_same(name: &str) -> Value {
    json!({"items": [{"namespace": NS, "store": "s", "key": name, "envelope": same(name)}]})
}

struct Row {
    key: &'static str,
    method: Method,
    path: String,
    body: Option<Value>,
    header: Option<(&'static str, &'static str)>,
    status: u16,
}

fn row(key: &'static str, method: Method, path: &str, body: Option<Value>, status: u16) -> Row {
    Row {
        key,
        method,
        path: path.to_string(),
        body,
        header: None,
        status,
    }
}

async fn send(keys: &Keys, r: &Row) -> Reply {
    let bytes = r.body.as_ref().map(|b| bytes::Bytes::from(b.to_string()));
    let headers: Vec<(&str, &str)> = r.header.iter().copied().collect();
    keys.get(r.key)
        .send(r.method.clone(), &r.path, bytes, &headers)
        .await
        .unwrap()
}

fn noun(key: &str) -> String {
    format!("/v1/nouns/{NS}/s/{key}")
}

#[tokio::test(flavor = "multi_thread")]
async fn noun_and_key_routes_allow_exactly_what_was_issued() {
    let d = TestDaemon::start().await;
    let keys = setup(&d).await;
    let get = Method::GET;
    let put = Method::PUT;
    let post = Method::POST;
    let mut rows = vec![
        // GET a surface_only noun.
        row("admin", get.clone(), &noun("shared"), None, 200),
        row("scoped", get.clone(), &noun("shared"), None, 200),
        row("same_account", get.clone(), &noun("shared"), None, 200),
        row("no_write", get.clone(), &noun("shared"), None, 200),
        row("other_ns", get.clone(), &noun("shared"), None, 404),
        row("other_surface", get.clone(), &noun("shared"), None, 404),
        row("no_read", get.clone(), &noun("shared"), None, 403),
        row("label_scope", get.clone(), &noun("shared"), None, 404),
        row("revoked", get.clone(), &noun("shared"), None, 401),
        row("expired", get.clone(), &noun("shared"), None, 401),
        row("anonymous", get.clone(), &noun("shared"), None, 401),
        row("malformed", get.clone(), &noun("shared"), None, 401),
        row(
            "other_ns",
            get.clone(),
            &format!("{}?namespace={NS}", noun("shared")),
            None,
            404,
        ),
        // The version list follows the same rules.
        row(
            "scoped",
            get.clone(),
            &format!("{}/versions", noun("shared")),
            None,
            200,
        ),
        row(
            "other_surface",
            get.clone(),
            &format!("{}/versions", noun("shared")),
            None,
            404,
        ),
        row(
            "no_read",
            get.clone(),
            &format!("{}/versions", noun("shared")),
            None,
            403,
        ),
        row(
            "revoked",
            get.clone(),
            &format!("{}/versions", noun("shared")),
            None,
            401,
        ),
        // Private: the owning key only.
        row("scoped", get.clone(), &noun("private"), None, 200),
        row("same_account", get.clone(), &noun("private"), None, 404),
        row("admin", get.clone(), &noun("private"), None, 200),
        row(
            "same_account",
            get.clone(),
            &format!("{}/versions", noun("private")),
            None,
            404,
        ),
        // Allowlist and public.
        row("other_surface", get.clone(), &noun("allow"), None, 200),
        row("label_scope", get.clone(), &noun("allow"), None, 404),
        row("label_scope", get.clone(), &noun("public"), None, 200),
        row("other_surface", get.clone(), &noun("public"), None, 200),
        row("other_ns", get.clone(), &noun("public"), None, 404),
        // Quarantine: admin only.
        row("scoped", get.clone(), &noun("quarantined"), None, 404),
        row("admin", get.clone(), &noun("quarantined"), None, 200),
        // Writes that change nothing when allowed.
        row(
            "admin",
            put.clone(),
            &noun("shared"),
            Some(same("shared")),
            200,
        ),
        row(
            "scoped",
            put.clone(),
            &noun("shared"),
            Some(same("shared")),
            200,
        ),
        row(
            "same_account",
            put.clone(),
            &noun("shared"),
            Some(same("shared")),
            200,
        ),
        row(
            "no_read",
            put.clone(),
            &noun("shared"),
            Some(same("shared")),
            200,
        ),
        row(
            "no_write",
            put.clone(),
            &noun("shared"),
            Some(same("shared")),
            403,
        ),
        row(
            "other_ns",
            put.clone(),
            &noun("shared"),
            Some(same("shared")),
            404,
        ),
        row(
            "other_surface",
            put.clone(),
            &noun("shared"),
            Some(same("shared")),
            404,
        ),
        // A noun the key sees nothing of is decided as a new one (hidden
        // means missing): this key names no producer surface and holds
        // none to default to, as the put of `new2` below.
        row(
            "label_scope",
            put.clone(),
            &noun("shared"),
            Some(same("shared")),
            400,
        ),
        row(
            "revoked",
            put.clone(),
            &noun("shared"),
            Some(same("shared")),
            401,
        ),
        row(
            "expired",
            put.clone(),
            &noun("shared"),
            Some(same("shared")),
            401,
        ),
        row(
            "scoped",
            put.clone(),
            &noun("private"),
            Some(same("private")),
            200,
        ),
        row(
            "same_account",
            put.clone(),
            &noun("private"),
            Some(same("private")),
            404,
        ),
        row(
            "other_surface",
            put.clone(),
            &noun("allow"),
            Some(same("allow")),
            403,
        ),
        row(
            "label_scope",
            put.clone(),
            &noun("public"),
            Some(same("public")),
            403,
        ),
        row(
            "scoped",
            put.clone(),
            &noun("quarantined"),
            Some(same("quarantined")),
            404,
        ),
        // Real writes that must be refused.
        row(
            "other_surface",
            put.clone(),
            &noun("allow"),
            Some(json!({"expected_version": 1, "body": "x"})),
            403,
        ),
        // To this key the noun has no version: expecting 1 is a conflict
        // with current 0, as for a missing noun.
        row(
            "same_account",
            put.clone(),
            &noun("private"),
            Some(json!({"expected_version": 1, "body": "x"})),
            409,
        ),
        row(
            "scoped",
            put.clone(),
            &noun("shared"),
            Some(json!({"expected_version": 1, "body": "x", "visibility": "public"})),
            403,
        ),
        row(
            "scoped",
            put.clone(),
            &noun("shared"),
            Some(json!({"expected_version": 1, "body": "x", "producer_surface": "other_surface"})),
            400,
        ),
        row(
            "scoped",
            put.clone(),
            &noun("new1"),
            Some(json!({"expected_version": 0, "body": "x", "producer_surface": "other_surface"})),
            403,
        ),
        row(
            "label_scope",
            put.clone(),
            &noun("new2"),
            Some(json!({"expected_version": 0, "body": "x"})),
            400,
        ),
        row(
            "no_write",
            put.clone(),
            &noun("new3"),
            Some(json!({"expected_version": 0, "body": "x"})),
            403,
        ),
        row(
            "other_ns",
            put.clone(),
            &noun("new4"),
            Some(json!({"expected_version": 0, "body": "x"})),
            404,
        ),
        // Quarantine routes.
        row(
            "scoped",
            post.clone(),
            &format!("{}/quarantine", noun("shared")),
            Some(json!({})),
            403,
        ),
        row(
            "scoped",
            post.clone(),
            &format!("{}/unquarantine", noun("quarantined")),
            Some(json!({})),
            403,
        ),
        row(
            "anonymous",
            post.clone(),
            &format!("{}/quarantine", noun("shared")),
            Some(json!({})),
            401,
        ),
        row(
            "admin",
            post.clone(),
            &format!("{}/quarantine", noun("missing")),
            Some(json!({})),
            404,
        ),
        // Batch noun puts: the request is refused as a whole only for a
        // missing credential or scope; each item is then checked as its
        // single route checks it (tests/importer/batch_access.rs has the
        // per-item rows).
        row(
            "anonymous",
            post.clone(),
            "/v1/batch/nouns",
            Some(batch_same("shared")),
            401,
        ),
        row(
            "revoked",
            post.clone(),
            "/v1/batch/nouns",
            Some(batch_same("shared")),
            401,
        ),
        row(
            "expired",
            post.clone(),
            "/v1/batch/nouns",
            Some(batch_same("shared")),
            401,
        ),
        row(
            "no_write",
            post.clone(),
            "/v1/batch/nouns",
            Some(batch_same("shared")),
            403,
        ),
        row(
            "scoped",
            post.clone(),
            "/v1/batch/nouns",
            Some(batch_same("shared")),
            200,
        ),
        row(
            "other_ns",
            post.clone(),
            "/v1/batch/nouns",
            Some(batch_same("shared")),
            200,
        ),
        row(
            "scoped",
            post.clone(),
            "/v1/batch/tasks",
            Some(json!({"items": []})),
            403,
        ),
        row(
            "anonymous",
            post.clone(),
            "/v1/batch/tasks",
            Some(json!({"items": []})),
            401,
        ),
        // Promotion: admin only, whatever else a key holds.
        row(
            "scoped",
            post.clone(),
            "/v1/promotions",
            Some(
                json!({"pin": {"namespace": NS, "store": "s", "key": "public", "version": 1, "sha256": "0".repeat(64)}, "stages": []}),
            ),
            403,
        ),
        row(
            "anonymous",
            post.clone(),
            "/v1/promotions",
            Some(
                json!({"pin": {"namespace": NS, "store": "s", "key": "public", "version": 1, "sha256": "0".repeat(64)}, "stages": []}),
            ),
            401,
        ),
        row(
            "admin",
            post.clone(),
            "/v1/promotions",
            Some(
                json!({"pin": {"namespace": NS, "store": "s", "key": "shared", "version": 1, "sha256": "0".repeat(64)}, "stages": ["t1"]}),
            ),
            422,
        ),
        // Key routes.
        row(
            "scoped",
            post.clone(),
            "/v1/keys",
            Some(json!({"label": "x", "grants": grants(&["admin"])})),
            403,
        ),
        row(
            "revoked",
            post.clone(),
            "/v1/keys",
            Some(json!({"label": "x", "grants": grants(&[])})),
            401,
        ),
        row(
            "admin",
            post.clone(),
            "/v1/keys",
            Some(json!({"label": "x", "grants": grants(&["nouns:write"])})),
            400,
        ),
        row(
            "admin",
            post.clone(),
            "/v1/keys",
            Some(json!({"label": "x", "grants": grants(&["namespace:../x"])})),
            400,
        ),
        row(
            "admin",
            post.clone(),
            "/v1/keys",
            Some(json!({"label": "x", "grants": {"scopes": [], "roles": []}})),
            400,
        ),
        row(
            "admin",
            post.clone(),
            "/v1/keys",
            Some(
                json!({"label": "x", "grants": grants(&[]), "expires_at": "2001-01-01T00:00:00Z"}),
            ),
            400,
        ),
        row("scoped", get.clone(), "/v1/keys", None, 403),
        row("anonymous", get.clone(), "/v1/keys", None, 401),
        row(
            "scoped",
            Method::DELETE,
            &format!("/v1/keys/{}", keys.ids["same_account"]),
            None,
            403,
        ),
        row(
            "admin",
            Method::DELETE,
            "/v1/keys/knosuchkey0000000",
            None,
            404,
        ),
    ];
    // A forged X-Surface-Id header changes nothing.
    for (path, status) in [(noun("shared"), 404), (noun("allow"), 200)] {
        let mut r = row("other_surface", get.clone(), &path, None, status);
        r.header = Some(("x-surface-id", SURFACE));
        rows.push(r);
    }
    let mut forged_put = row(
        "other_surface",
        put.clone(),
        &noun("allow"),
        Some(json!({"expected_version": 1, "body": "y"})),
        403,
    );
    forged_put.header = Some(("x-surface-id", SURFACE));
    rows.push(forged_put);

    for r in &rows {
        let before = files_under(&d.root().join("nouns"));
        let objects = files_under(&d.root().join("objects"));
        let reply = send(&keys, r).await;
        assert_eq!(
            reply.status.as_u16(),
            r.status,
            "{} {} {} as {}: {}",
            r.method,
            r.path,
            r.body.as_ref().map_or(String::new(), Value::to_string),
            r.key,
            String::from_utf8_lossy(&reply.body)
        );
        if r.method != Method::GET && r.path.starts_with("/v1/batch/nouns") && r.status == 200 {
            let item = &body(&reply)["items"][0];
            let want = if r.key == "other_ns" { 404 } else { 200 };
            assert_eq!(
                item["status"],
                json!(want),
                "batch item as {}: {item}",
                r.key
            );
        }
        if r.method != Method::GET
            && r.path.starts_with("/v1/")
            && r.path.contains("nouns")
            && r.status != 200
        {
            assert_eq!(
                files_under(&d.root().join("nouns")),
                before,
                "refused row wrote a ref: {} as {}",
                r.path,
                r.key
            );
            assert_eq!(
                files_under(&d.root().join("objects")),
                objects,
                "refused row wrote an object: {} as {}",
                r.path,
                r.key
            );
        }
        if r.status == 404 && r.method == Method::GET && r.path.starts_with("/v1/nouns") {
            let missing = Row {
                path: r.path.replace("/s/", "/s/no-such-"),
                ..row(r.key, r.method.clone(), "", r.body.clone(), 404)
            };
            let twin = send(&keys, &missing).await;
            assert_eq!(
                (twin.status, &twin.body),
                (reply.status, &reply.body),
                "hidden and missing differ for {} as {}",
                r.path,
                r.key
            );
            let names = |rep: &Reply| {
                let mut v: Vec<String> = rep.headers.keys().map(|k| k.to_string()).collect();
                v.sort();
                v
            };
            assert_eq!(
                names(&twin),
                names(&reply),
                "hidden and missing differ in headers"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_list_without_secrets_record_their_kind_and_revocation_survives_restart() {
    let mut d = TestDaemon::start().await;
    let (id, secret) = issue(&d.admin, json!({"label": "binding", "account_id": "acct-9", "grants": grants(&["namespace:team", "surface:team_example", "nouns:read"])})).await;
    let (plain_id, _) = issue(
        &d.admin,
        json!({"label": "plain", "grants": grants(&["namespace:team", "nouns:read"])}),
    )
    .await;
    let list = d.admin.get("/v1/keys").await.unwrap();
    assert_status!(list, 200);
    let text = String::from_utf8_lossy(&list.body).to_string();
    assert!(
        !text.contains(&secret) && !text.contains("secret"),
        "a listing leaked a secret: {text}"
    );
    let list = body(&list);
    let find = |id: &str| {
        list["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key_id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(find(&id)["principal_kind"], json!("service_binding"));
    assert_eq!(find(&id)["account_id"], json!("acct-9"));
    assert_eq!(find(&plain_id)["principal_kind"], json!("key"));

    match support::pg::backend_url(d.root()) {
        None => {
            let key_file =
                std::fs::read_to_string(d.root().join(format!("auth/keys/{id}.json"))).unwrap();
            assert!(
                !key_file.contains(&secret),
                "the secret itself is never stored"
            );
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(d.root().join(format!("auth/keys/{id}.json")))
                    .unwrap()
                    .permissions(),
            );
            assert_eq!(mode & 0o777, 0o600);
        }
        Some(url) => {
            let db = support::pg::connect(&url).await;
            let row: String = db
                .query_one("SELECT record::text FROM keys WHERE key_id = $1", &[&id])
                .await
                .unwrap()
                .get(0);
            assert!(!row.contains(&secret), "the secret itself is never stored");
        }
    }

    let client = d.client(&secret);
    assert_status!(client.get("/v1/nouns/team/s/none").await.unwrap(), 404);
    assert_status!(
        d.admin.delete(&format!("/v1/keys/{id}")).await.unwrap(),
        200
    );
    assert_status!(
        client.get("/v1/nouns/team/s/none").await.unwrap(),
        401,
        "unauthenticated"
    );
    d.restart().await;
    let client = d.client(&secret);
    assert_status!(
        client.get("/v1/nouns/team/s/none").await.unwrap(),
        401,
        "unauthenticated"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn team_members_add_versions_to_their_surface_and_new_nouns_default_to_their_surface() {
    let d = TestDaemon::start().await;
    let scopes = grants(&[
        "namespace:team",
        "surface:team_example",
        "nouns:read",
        "cas:write",
    ]);
    let (_, a) = issue(&d.admin, json!({"label": "a", "grants": scopes})).await;
    let (_, b) = issue(&d.admin, json!({"label": "b", "grants": scopes})).await;
    let (a, b) = (d.client(&a), d.client(&b));
    let r = a
        .put_json(
            "/v1/nouns/team/s/doc",
            &json!({"expected_version": 0, "body": 1}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    let versions = body(&a.get("/v1/nouns/team/s/doc/versions").await.unwrap());
    assert_eq!(versions["versions"][0]["producer_surface"], json!(SURFACE));
    assert_eq!(versions["versions"][0]["visibility"], json!("surface_only"));
    assert_status!(
        b.put_json(
            "/v1/nouns/team/s/doc",
            &json!({"expected_version": 1, "body": 2})
        )
        .await
        .unwrap(),
        201
    );
    assert_status!(
        b.put_json(
            "/v1/nouns/team/s/doc",
            &json!({"expected_version": 1, "body": 3})
        )
        .await
        .unwrap(),
        409,
        "version_conflict"
    );
    let versions = body(&a.get("/v1/nouns/team/s/doc/versions").await.unwrap());
    assert_eq!(versions["versions"].as_array().unwrap().len(), 2);
}

/// Total bytes of the task journal: a refused request must not grow it.
fn journal_bytes(root: &std::path::Path) -> u64 {
    std::fs::read_dir(root.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn queue_and_task_routes_allow_exactly_what_was_issued() {
    let d = TestDaemon::start().await;
    for q in [
        json!({"name": "work.external"}),
        json!({"name": "work.server", "server": true}),
    ] {
        assert_status!(d.admin.post_json("/v1/queues", &q).await.unwrap(), 201);
    }
    let grant = |scopes: Vec<String>, queues: &[&str], kinds: &[&str]| json!({"queues": queues, "kinds": kinds, "effect_classes": ["read", "write-internal"], "scopes": scopes});
    let team = |extra: &[&str], drop: &str| -> Vec<String> {
        [
            format!("namespace:{NS}"),
            format!("surface:{SURFACE}"),
            "nouns:read".into(),
        ]
        .into_iter()
        .chain(extra.iter().map(|s| s.to_string()))
        .filter(|s| s != drop)
        .collect()
    };
    let q = &["work.external"];
    let k = &["verb.solve_draft"];
    let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_millis(1500);
    let worker_scopes = ["verbs:claim", "verbs:submit"];
    let specs: Vec<(&'static str, Value)> = vec![
        (
            "requester",
            json!({"label": "r", "grants": grant(team(&["verbs:enqueue"], ""), q, k)}),
        ),
        (
            "worker",
            json!({"label": "w", "grants": grant(team(&worker_scopes, ""), q, k)}),
        ),
        (
            "other_ns",
            json!({"label": "w", "grants": grant(team(&["verbs:claim", "verbs:submit", "verbs:enqueue", "namespace:elsewhere"], "namespace:team"), q, k)}),
        ),
        (
            "other_surface",
            json!({"label": "w", "grants": grant(team(&["verbs:claim", "verbs:submit", "verbs:enqueue", "surface:other_surface"], "surface:team_example"), q, k)}),
        ),
        (
            "label_scope",
            json!({"label": "surface:team_example", "grants": grant(team(&["verbs:claim", "verbs:submit"], "surface:team_example"), q, k)}),
        ),
        (
            "no_claim",
            json!({"label": "w", "grants": grant(team(&["verbs:submit"], ""), q, k)}),
        ),
        (
            "no_submit",
            json!({"label": "w", "grants": grant(team(&["verbs:claim"], ""), q, k)}),
        ),
        (
            "no_queue",
            json!({"label": "w", "grants": grant(team(&worker_scopes, ""), &[], k)}),
        ),
        (
            "no_kind",
            json!({"label": "w", "grants": grant(team(&worker_scopes, ""), q, &[])}),
        ),
        (
            "server_named",
            json!({"label": "w", "grants": grant(team(&["verbs:enqueue"], ""), &["work.external", "work.server"], k)}),
        ),
        (
            "revoked",
            json!({"label": "w", "grants": grant(team(&worker_scopes, ""), q, k)}),
        ),
        (
            "expired",
            json!({"label": "w", "grants": grant(team(&worker_scopes, ""), q, k), "expires_at": expires.to_string()}),
        ),
    ];
    let mut keys = Keys {
        clients: HashMap::new(),
        ids: HashMap::new(),
    };
    for (name, spec) in specs {
        let (id, secret) = issue(&d.admin, spec).await;
        keys.clients.insert(name, d.client(&secret));
        keys.ids.insert(name, id);
    }
    keys.clients.insert("admin", d.admin.clone());
    keys.clients.insert("anonymous", d.admin.anonymous());
    assert_status!(
        d.admin
            .delete(&format!("/v1/keys/{}", keys.ids["revoked"]))
            .await
            .unwrap(),
        200
    );

    let task_spec = |extra: Value| {
        let mut s = json!({"namespace": NS, "queue": "work.external", "kind": "verb.solve_draft", "effect_class": "write-internal", "brief": {}});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    let requester = keys.get("requester").clone();
    let mk = |extra: Value| {
        let requester = requester.clone();
        let s = task_spec(extra);
        async move {
            body(&requester.post_json("/v1/tasks", &s).await.unwrap())["task_id"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    let held = mk(json!({})).await;
    let c = keys
        .get("worker")
        .post_json(&format!("/v1/tasks/{held}/claim"), &json!({}))
        .await
        .unwrap();
    assert_status!(c, 200);
    let lease = body(&c)["lease"]["id"].as_str().unwrap().to_string();
    let spare = mk(json!({})).await;
    let wait = (expires - jiff::Timestamp::now()).as_millis().max(0) as u64 + 100;
    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;

    let get = Method::GET;
    let post = Method::POST;
    let t = |id: &str, tail: &str| format!("/v1/tasks/{id}{tail}");
    let lease_body = json!({"lease_id": lease});
    let submit_body = json!({"lease_id": lease, "ok": true});
    let mut rows = vec![
        // Queues.
        row(
            "worker",
            post.clone(),
            "/v1/queues",
            Some(json!({"name": "mine"})),
            403,
        ),
        row(
            "anonymous",
            post.clone(),
            "/v1/queues",
            Some(json!({"name": "mine"})),
            401,
        ),
        row("worker", get.clone(), "/v1/queues", None, 200),
        row("revoked", get.clone(), "/v1/queues", None, 401),
        // Enqueue.
        row(
            "worker",
            post.clone(),
            "/v1/tasks",
            Some(task_spec(json!({}))),
            403,
        ),
        row(
            "requester",
            post.clone(),
            "/v1/tasks",
            Some(task_spec(json!({"kind": "verb.other"}))),
            403,
        ),
        row(
            "requester",
            post.clone(),
            "/v1/tasks",
            Some(task_spec(json!({"queue": "work.server"}))),
            404,
        ),
        row(
            "requester",
            post.clone(),
            "/v1/tasks",
            Some(task_spec(json!({"effect_class": "write-repo"}))),
            403,
        ),
        row(
            "requester",
            post.clone(),
            "/v1/tasks",
            Some(task_spec(json!({"namespace": "elsewhere"}))),
            404,
        ),
        row(
            "requester",
            post.clone(),
            "/v1/tasks",
            Some(task_spec(json!({"producer_surface": "other_surface"}))),
            403,
        ),
        row(
            "requester",
            post.clone(),
            "/v1/tasks",
            Some(task_spec(json!({"visibility_scope": "public"}))),
            403,
        ),
        row(
            "requester",
            post.clone(),
            "/v1/tasks",
            Some(task_spec(
                json!({"tags": ["surface:other_surface", "queue:work.server"], "queue": "work.server"}),
            )),
            404,
        ),
        row(
            "server_named",
            post.clone(),
            "/v1/tasks?dry_run=true",
            Some(task_spec(json!({"queue": "work.server"}))),
            200,
        ),
        row(
            "anonymous",
            post.clone(),
            "/v1/tasks",
            Some(task_spec(json!({}))),
            401,
        ),
        // Reading tasks.
        row("worker", get.clone(), &t(&held, ""), None, 200),
        row("other_ns", get.clone(), &t(&held, ""), None, 404),
        row(
            "other_ns",
            get.clone(),
            &format!("{}?namespace={NS}", t(&held, "")),
            None,
            404,
        ),
        row("other_surface", get.clone(), &t(&held, ""), None, 404),
        row("label_scope", get.clone(), &t(&held, ""), None, 404),
        row("revoked", get.clone(), &t(&held, ""), None, 401),
        row("expired", get.clone(), &t(&held, ""), None, 401),
        row("worker", get.clone(), &t(&held, "/receipts"), None, 200),
        row(
            "other_surface",
            get.clone(),
            &t(&held, "/receipts"),
            None,
            404,
        ),
        // Claims.
        row(
            "no_claim",
            post.clone(),
            "/v1/queues/work.external/claim",
            Some(json!({})),
            403,
        ),
        row(
            "no_queue",
            post.clone(),
            "/v1/queues/work.external/claim",
            Some(json!({})),
            404,
        ),
        row(
            "worker",
            post.clone(),
            "/v1/queues/work.server/claim",
            Some(json!({})),
            404,
        ),
        row(
            "admin",
            post.clone(),
            "/v1/queues/work.server/claim",
            Some(json!({})),
            403,
        ),
        row(
            "other_surface",
            post.clone(),
            "/v1/queues/work.external/claim",
            Some(json!({})),
            204,
        ),
        row(
            "label_scope",
            post.clone(),
            "/v1/queues/work.external/claim",
            Some(json!({})),
            204,
        ),
        row(
            "no_kind",
            post.clone(),
            "/v1/queues/work.external/claim",
            Some(json!({})),
            204,
        ),
        row(
            "worker",
            post.clone(),
            "/v1/queues/nope/claim",
            Some(json!({})),
            404,
        ),
        row(
            "no_claim",
            post.clone(),
            &t(&spare, "/claim"),
            Some(json!({})),
            403,
        ),
        row(
            "no_kind",
            post.clone(),
            &t(&spare, "/claim"),
            Some(json!({})),
            403,
        ),
        row(
            "other_surface",
            post.clone(),
            &t(&spare, "/claim"),
            Some(json!({})),
            404,
        ),
        row(
            "revoked",
            post.clone(),
            &t(&spare, "/claim"),
            Some(json!({})),
            401,
        ),
        // Lease-holding actions.
        row(
            "no_claim",
            post.clone(),
            &t(&held, "/heartbeat"),
            Some(lease_body.clone()),
            403,
        ),
        row(
            "other_surface",
            post.clone(),
            &t(&held, "/heartbeat"),
            Some(lease_body.clone()),
            404,
        ),
        row(
            "worker",
            post.clone(),
            &t(&held, "/heartbeat"),
            Some(json!({"lease_id": "forged"})),
            409,
        ),
        row(
            "other_ns",
            post.clone(),
            &t(&held, "/release"),
            Some(lease_body.clone()),
            404,
        ),
        row(
            "no_submit",
            post.clone(),
            &t(&held, "/submit"),
            Some(submit_body.clone()),
            403,
        ),
        row(
            "other_surface",
            post.clone(),
            &t(&held, "/submit"),
            Some(submit_body.clone()),
            404,
        ),
        row(
            "expired",
            post.clone(),
            &t(&held, "/submit"),
            Some(submit_body.clone()),
            401,
        ),
        row(
            "other_surface",
            post.clone(),
            &t(&held, "/park"),
            Some(json!({"lease_id": lease, "reason": "x"})),
            404,
        ),
        row(
            "no_claim",
            post.clone(),
            &t(&held, "/split"),
            Some(json!({"lease_id": lease, "children": []})),
            403,
        ),
        row(
            "worker",
            post.clone(),
            &t(&held, "/resume"),
            Some(
                json!({"input_ref": {"store": "s", "key": "k", "version": 1, "sha256": "0".repeat(64)}}),
            ),
            403,
        ),
        row(
            "other_surface",
            post.clone(),
            &t(&held, "/resume"),
            Some(
                json!({"input_ref": {"store": "s", "key": "k", "version": 1, "sha256": "0".repeat(64)}}),
            ),
            404,
        ),
        row(
            "worker",
            post.clone(),
            &t(&held, "/cancel"),
            Some(json!({})),
            403,
        ),
        row(
            "other_surface",
            post.clone(),
            &t(&held, "/cancel"),
            Some(json!({})),
            404,
        ),
        // Allowed, last: these change state.
        row(
            "worker",
            post.clone(),
            &t(&held, "/heartbeat"),
            Some(lease_body.clone()),
            200,
        ),
        row(
            "worker",
            post.clone(),
            &t(&held, "/submit"),
            Some(submit_body.clone()),
            201,
        ),
        row(
            "requester",
            post.clone(),
            &t(&spare, "/cancel"),
            Some(json!({})),
            200,
        ),
    ];
    let mut forged = row("other_surface", get.clone(), &t(&held, ""), None, 404);
    forged.header = Some(("x-surface-id", SURFACE));
    rows.insert(0, forged);
    let mut forged_claim = row(
        "other_surface",
        post.clone(),
        "/v1/queues/work.external/claim",
        Some(json!({})),
        204,
    );
    forged_claim.header = Some(("x-surface-id", SURFACE));
    rows.insert(0, forged_claim);

    for r in &rows {
        let journal = journal_bytes(d.root());
        let reply = send(&keys, r).await;
        assert_eq!(
            reply.status.as_u16(),
            r.status,
            "{} {} as {}: {}",
            r.method,
            r.path,
            r.key,
            String::from_utf8_lossy(&reply.body)
        );
        let writes = r.method == Method::POST && !r.path.contains("dry_run");
        if writes && !(200..300).contains(&r.status) || r.status == 204 {
            assert_eq!(
                journal_bytes(d.root()),
                journal,
                "refused {} {} as {} wrote to the journal",
                r.method,
                r.path,
                r.key
            );
        }
        if r.status == 404 && r.path.starts_with("/v1/tasks/") {
            let twin = Row {
                path: r.path.replace(&held, "t999999").replace(&spare, "t999999"),
                ..row(r.key, r.method.clone(), "", r.body.clone(), 404)
            };
            let missing = send(&keys, &twin).await;
            assert_eq!(
                (missing.status, &missing.body),
                (reply.status, &reply.body),
                "hidden and missing tasks differ for {} as {}",
                r.path,
                r.key
            );
        }
    }
    let listed = body(&keys.get("worker").get("/v1/queues").await.unwrap());
    assert_eq!(
        listed["queues"].as_array().unwrap().len(),
        1,
        "a key lists only the queues it was issued"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn worker_routes_take_only_their_own_live_credential() {
    let t = support::Team::start().await;
    let a = support::enqueue(&t.requester, &support::spec("verb.solve_draft", json!({}))).await;
    let b = support::enqueue(&t.requester, &support::spec("verb.solve_draft", json!({}))).await;
    let ca = support::claim(&t.worker, "work.external").await.unwrap();
    let cb = support::claim(&t.worker, "work.external").await.unwrap();
    let handle_a = t.d.admin.with_bearer(ca["handle"].as_str().unwrap());
    let token_b = t.d.admin.with_bearer(cb["token"].as_str().unwrap());
    let routes: [(Method, String); 3] = [
        (Method::GET, "/v1/worker/prompt".into()),
        (Method::POST, "/v1/worker/artifact?name=n.md".into()),
        (Method::POST, "/v1/worker/submit".into()),
    ];
    let worker_key = t.worker.clone();
    for (m, path) in &routes {
        let body = (*m == Method::POST).then(|| bytes::Bytes::from_static(b"x"));
        let as_key = worker_key
            .send(m.clone(), path, body.clone(), &[])
            .await
            .unwrap();
        assert_status!(as_key, 401, "unauthenticated");
        let anon =
            t.d.admin
                .anonymous()
                .send(m.clone(), path, body.clone(), &[])
                .await
                .unwrap();
        assert_status!(anon, 401, "unauthenticated");
        let sep = if path.contains('?') { '&' } else { '?' };
        let other = handle_a
            .send(
                m.clone(),
                &format!("{path}{sep}task_id={b}"),
                body.clone(),
                &[],
            )
            .await
            .unwrap();
        assert_status!(other, 403, "wrong_task");
        let forged = handle_a
            .send(
                m.clone(),
                path,
                body.clone(),
                &[("x-surface-id", "elsewhere")],
            )
            .await
            .unwrap();
        assert!(
            forged.status.is_success(),
            "a header changes nothing: {}",
            forged.status
        );
    }
    assert_eq!(
        support::task(&t.worker, &a).await["state"],
        json!("succeeded")
    );
    let dead =
        t.d.admin
            .anonymous()
            .get("/v1/worker/prompt")
            .await
            .unwrap();
    for (m, path) in &routes {
        let body = (*m == Method::POST).then(|| bytes::Bytes::from_static(b"x"));
        let r = handle_a.send(m.clone(), path, body, &[]).await.unwrap();
        assert_status!(r, 401, "unauthenticated");
        assert_eq!(
            r.body, dead.body,
            "a finished attempt's handle is just dead"
        );
    }
    let lease_b = cb["lease"]["id"].as_str().unwrap();
    assert_status!(
        t.worker
            .post_json(
                &format!("/v1/tasks/{b}/release"),
                &json!({"lease_id": lease_b})
            )
            .await
            .unwrap(),
        200
    );
    for (m, path) in &routes {
        let body = (*m == Method::POST).then(|| bytes::Bytes::from_static(b"x"));
        let r = token_b.send(m.clone(), path, body, &[]).await.unwrap();
        assert_status!(r, 401, "unauthenticated");
        assert_eq!(r.body, dead.body, "a released attempt's token is just dead");
    }
    for (who, status) in [
        (&t.requester, 200),
        (&t.outsider, 404),
        (&t.d.admin.anonymous(), 401),
    ] {
        let r = who.get(&format!("/v1/tasks/{a}/output")).await.unwrap();
        assert_eq!(
            r.status.as_u16(),
            status,
            "{}",
            String::from_utf8_lossy(&r.body)
        );
    }
}

/// One row of the seams table: the class of hole it guards, the key, the
/// request, and the status it must get.
struct Seam {
    class: &'static str,
    key: &'static str,
    method: Method,
    path: String,
    body: Option<Value>,
    status: u16,
}

/// A seam whose body is sent as raw bytes (a worker body), not as JSON.
fn raw_seam(class: &'static str, key: &'static str, path: &str, body: &str, status: u16) -> Seam {
    seam(
        class,
        key,
        Method::POST,
        path,
        Some(json!({ "raw": body })),
        status,
    )
}

fn seam(
    class: &'static str,
    key: &'static str,
    method: Method,
    path: &str,
    body: Option<Value>,
    status: u16,
) -> Seam {
    Seam {
        class,
        key,
        method,
        path: path.to_string(),
        body,
        status,
    }
}

/// A reply's JSON with the fields that name the record asked for removed,
/// so that a hidden record's answer can be compared with a missing one's.
fn anonymized(reply: &Reply, names: &[&str]) -> (u16, String) {
    let mut text = String::from_utf8_lossy(&reply.body).into_owned();
    for n in names {
        text = text.replace(n, "NAME");
    }
    (reply.status.as_u16(), text)
}

/// Where two features meet (pins the daemon reads × visibility, split ×
/// grants, resume × grants, public × writes, hidden × dry runs, lists and
/// idempotency keys), each key does exactly what it was issued. One row
/// per line; rows that change state come last. Hidden records answer byte
/// for byte as missing ones (the pairs after the table).
#[tokio::test(flavor = "multi_thread")]
async fn seams_between_features_allow_exactly_what_was_issued() {
    use support::{NS as TEAM, Team, claim, enqueue, lease, put_noun, spec};
    let t = Team::start().await;
    let admin = t.d.admin.clone();
    let q = json!({"name": "work.elsewhere"});
    assert_status!(admin.post_json("/v1/queues", &q).await.unwrap(), 201);
    let team_scopes = |extra: &[&str]| -> Value {
        let mut s = vec![
            format!("namespace:{TEAM}"),
            "surface:team_example".into(),
            "nouns:read".into(),
        ];
        s.extend(extra.iter().map(|x| x.to_string()));
        json!(s)
    };
    let kinds = json!(["verb.solve_draft", "verb.verify_gate", "verb.compute"]);
    let mut clients: HashMap<&'static str, Client> = HashMap::new();
    for (name, grants) in [
        (
            "claimer",
            json!({"queues": ["work.external", "work.short"], "kinds": kinds, "effect_classes": ["read", "write-internal", "write-repo"], "scopes": team_scopes(&["verbs:claim"])}),
        ),
        (
            "narrow",
            json!({"queues": ["work.external"], "kinds": ["verb.compute"], "effect_classes": ["read", "write-internal"], "scopes": team_scopes(&["verbs:enqueue"])}),
        ),
        (
            "parker",
            json!({"queues": ["work.external"], "kinds": kinds, "effect_classes": ["read", "write-internal"], "scopes": team_scopes(&["verbs:claim", "verbs:enqueue"])}),
        ),
    ] {
        let (_, secret) = issue(&admin, json!({"label": name, "grants": grants})).await;
        clients.insert(name, t.d.client(&secret));
    }
    for (name, c) in [
        ("admin", &admin),
        ("requester", &t.requester),
        ("worker", &t.worker),
        ("resumer", &t.resumer),
        ("outsider", &t.outsider),
    ] {
        clients.insert(name, c.clone());
    }

    // Records: another surface's noun (hidden from the team), a public one,
    // a contract, and tasks to split and to resume.
    let theirs = put_noun(&t.outsider, "work.private", "theirs", json!({"secret": 42})).await;
    let mut missing = theirs.clone();
    missing["key"] = json!("nothere");
    let r = admin.put_json(&format!("/v1/nouns/{TEAM}/work.public/release"), &json!({"expected_version": 0, "visibility": "public", "producer_surface": "team_example", "body": {"v": 1}})).await.unwrap();
    assert_status!(r, 201);
    let parked = enqueue(&t.requester, &spec("verb.solve_draft", json!({}))).await;
    let c = body(
        &clients["parker"]
            .post_json(&format!("/v1/tasks/{parked}/claim"), &json!({}))
            .await
            .unwrap(),
    );
    let park = json!({"lease_id": lease(&c), "reason": "needs input", "needs": {}});
    assert_status!(
        clients["parker"]
            .post_json(&format!("/v1/tasks/{parked}/park"), &park)
            .await
            .unwrap(),
        200
    );
    let parent = enqueue(&t.requester, &spec("verb.compute", json!({}))).await;
    let c = body(
        &clients["claimer"]
            .post_json(&format!("/v1/tasks/{parent}/claim"), &json!({}))
            .await
            .unwrap(),
    );
    let split_lease = lease(&c);
    let their_task = {
        let mut s = spec("verb.compute", json!({}));
        s["producer_surface"] = json!("surface:elsewhere");
        s["idempotency_key"] = json!("shared-key");
        enqueue(&t.outsider, &s).await
    };
    let input = put_noun(&t.resumer, "work.inputs", "fresh", json!({"numbers": [1]})).await;

    let child = |extra: Value| {
        let mut c = json!({"queue": "work.external", "kind": "verb.compute", "effect_class": "read", "brief": {}});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        json!({"lease_id": split_lease, "children": [c]})
    };
    let with_pin = |field: &str, pin: &Value| {
        let mut s = spec("verb.compute", json!({}));
        s["brief"][field] = pin.clone();
        s
    };
    // Worker handles: a claim-only key's, and one of a task that allows
    // `@file:` bodies; a guessed handle and a forged token.
    let claim_only_task = enqueue(&t.requester, &spec("verb.compute", json!({}))).await;
    let c = body(
        &clients["claimer"]
            .post_json(&format!("/v1/tasks/{claim_only_task}/claim"), &json!({}))
            .await
            .unwrap(),
    );
    clients.insert(
        "claim_only_handle",
        t.d.client(c["handle"].as_str().unwrap()),
    );
    let mut files = spec("verb.compute", json!({}));
    files["allow_file_submit"] = json!(true);
    let files_task = enqueue(&t.requester, &files).await;
    let c = body(
        &t.worker
            .post_json(&format!("/v1/tasks/{files_task}/claim"), &json!({}))
            .await
            .unwrap(),
    );
    let files_handle = t.d.client(c["handle"].as_str().unwrap());
    let prompt = body(&files_handle.get("/v1/worker/prompt").await.unwrap());
    let work_dir = prompt["context"]["work_dir"]
        .as_str()
        .unwrap_or("/no/work/dir")
        .to_string();
    clients.insert("file_handle", files_handle);
    clients.insert(
        "guessed_handle",
        t.d.client(&format!("wh-{}", "a".repeat(26))),
    );
    clients.insert(
        "forged_token",
        t.d.client("wt1.eyJ0YXNrX2lkIjoidDEifQ.AAAA"),
    );
    let other_ctx = format!("@file:{}/../../{parent}/ctx/compute.md", work_dir);
    let other_work = format!(
        "@file:{}",
        work_dir.replace(&format!("/{files_task}/"), &format!("/{parked}/"))
    );
    let promotion = json!({"pin": theirs, "stages": [parent]});

    let mut keyed = spec("verb.compute", json!({}));
    keyed["idempotency_key"] = json!("shared-key");
    let (get, post, put) = (Method::GET, Method::POST, Method::PUT);
    let split = format!("/v1/tasks/{parent}/split");
    let resume = format!("/v1/tasks/{parked}/resume");
    let release = format!("/v1/nouns/{TEAM}/work.public/release");
    #[rustfmt::skip]
    let rows = vec![
        seam("brief pins", "requester", post.clone(), "/v1/tasks", Some(with_pin("input_ref", &theirs)), 422),
        seam("brief pins", "requester", post.clone(), "/v1/tasks", Some(with_pin("contract_ref", &theirs)), 422),
        seam("brief pins", "requester", post.clone(), "/v1/tasks?dry_run=true", Some(with_pin("input_ref", &theirs)), 422),
        seam("brief pins", "requester", post.clone(), "/v1/tasks", Some(with_pin("input_ref", &json!({"store": "s"}))), 400),
        seam("public inheritance", "resumer", put.clone(), &release, Some(json!({"expected_version": 1, "body": {"v": 2}})), 403),
        seam("public inheritance", "requester", put.clone(), &release, Some(json!({"expected_version": 1, "visibility": "surface_only", "body": {"v": 2}})), 403),
        seam("public inheritance", "admin", put.clone(), &release, Some(json!({"expected_version": 1, "dry_run": true, "body": {"v": 2}})), 200),
        seam("split grants", "claimer", post.clone(), &split, Some(child(json!({"queue": "work.server"}))), 404),
        seam("split grants", "claimer", post.clone(), &split, Some(child(json!({"queue": "work.elsewhere"}))), 404),
        seam("split grants", "claimer", post.clone(), &split, Some(child(json!({"kind": "verb.other"}))), 403),
        seam("split grants", "claimer", post.clone(), &split, Some(child(json!({"effect_class": "write-repo"}))), 403),
        seam("split grants", "claimer", post.clone(), &split, Some(child(json!({"effect_class": "public"}))), 403),
        seam("split grants", "claimer", post.clone(), &split, Some(child(json!({"priority": 2147483647}))), 403),
        seam("split grants", "claimer", post.clone(), &split, Some(child(json!({"allow_file_submit": true}))), 400),
        seam("split grants", "claimer", post.clone(), &split, Some(child(json!({"work_dir": "tasks"}))), 400),
        seam("split grants", "claimer", post.clone(), &split, Some(child(json!({"placement": "tasks/{task_id}/x"}))), 400),
        seam("split grants", "claimer", post.clone(), &split, Some(child(json!({"brief": {"input_ref": theirs}}))), 422),
        seam("split grants", "claimer", post.clone(), &split, Some(child(json!({"visibility_scope": "public"}))), 422),
        seam("resume grants", "parker", post.clone(), &resume, Some(json!({"input_ref": input})), 403),
        seam("resume grants", "worker", post.clone(), &resume, Some(json!({"input_ref": input})), 403),
        seam("resume grants", "narrow", post.clone(), &resume, Some(json!({"input_ref": input})), 403),
        seam("resume grants", "outsider", post.clone(), &resume, Some(json!({"input_ref": input})), 404),
        seam("resume grants", "resumer", post.clone(), &resume, Some(json!({"input_ref": theirs})), 422),
        seam("hidden = missing", "requester", get.clone(), &format!("/v1/tasks/{their_task}"), None, 404),
        seam("hidden = missing", "worker", post.clone(), "/v1/queues/work.server/claim", Some(json!({})), 404),
        seam("hidden = missing", "requester", post.clone(), "/v1/tasks", Some(keyed), 201),
        seam("worker routes", "claim_only_handle", get.clone(), "/v1/worker/prompt", None, 200),
        raw_seam("worker routes", "claim_only_handle", "/v1/worker/artifact?name=a.md", "part", 200),
        raw_seam("worker routes", "claim_only_handle", "/v1/worker/submit", "done", 403),
        seam("guessing", "guessed_handle", get.clone(), "/v1/worker/prompt", None, 401),
        seam("guessing", "forged_token", get.clone(), "/v1/worker/prompt", None, 401),
        raw_seam("cross-task files", "file_handle", "/v1/worker/artifact?name=x", &other_ctx, 422),
        raw_seam("cross-task files", "file_handle", "/v1/worker/artifact?name=x", &other_work, 422),
        raw_seam("cross-task files", "file_handle", "/v1/worker/artifact?name=x", "@file:/etc/passwd", 422),
        seam("promotion", "requester", post.clone(), "/v1/promotions", Some(promotion.clone()), 403),
        seam("promotion", "admin", post.clone(), "/v1/promotions", Some(promotion), 422),
        seam("split grants", "claimer", post.clone(), &split, Some(child(json!({"priority": -1}))), 200),
        seam("resume grants", "resumer", post.clone(), &resume, Some(json!({"input_ref": input})), 200),
    ];
    let mut broken = Vec::new();
    for r in &rows {
        let bytes = r.body.as_ref().map(|b| match b["raw"].as_str() {
            Some(raw) => bytes::Bytes::from(raw.to_string()),
            None => bytes::Bytes::from(b.to_string()),
        });
        let reply = clients[r.key]
            .send(r.method.clone(), &r.path, bytes, &[])
            .await
            .unwrap();
        if reply.status.as_u16() != r.status {
            broken.push(format!(
                "[{}] {} {} as {}: expected {}, got {} {}",
                r.class,
                r.method,
                r.path,
                r.key,
                r.status,
                reply.status.as_u16(),
                String::from_utf8_lossy(&reply.body)
            ));
        }
    }
    assert!(
        broken.is_empty(),
        "{} row(s) broken:\n{}",
        broken.len(),
        broken.join("\n")
    );

    // Hidden answers exactly as missing.
    let pin_of = |p: &Value| with_pin("input_ref", p);
    let hidden = t
        .requester
        .post_json("/v1/tasks", &pin_of(&theirs))
        .await
        .unwrap();
    let absent = t
        .requester
        .post_json("/v1/tasks", &pin_of(&missing))
        .await
        .unwrap();
    assert_eq!(
        anonymized(&hidden, &["theirs"]),
        anonymized(&absent, &["nothere"]),
        "a hidden pin answers as a missing one"
    );
    let dry = json!({"expected_version": 0, "dry_run": true, "body": {"mine": true}});
    let hidden = t
        .requester
        .put_json(&format!("/v1/nouns/{TEAM}/work.private/theirs"), &dry)
        .await
        .unwrap();
    let absent = t
        .requester
        .put_json(&format!("/v1/nouns/{TEAM}/work.private/nothere"), &dry)
        .await
        .unwrap();
    assert_eq!(
        anonymized(&hidden, &["theirs"]),
        anonymized(&absent, &["nothere"]),
        "a dry-run put on a hidden noun answers as on a missing one"
    );
    let hidden = t
        .worker
        .post_json("/v1/queues/work.server/claim", &json!({}))
        .await
        .unwrap();
    let absent = t
        .worker
        .post_json("/v1/queues/work.nothere/claim", &json!({}))
        .await
        .unwrap();
    assert_eq!(
        anonymized(&hidden, &["work.server"]),
        anonymized(&absent, &["work.nothere"]),
        "a queue the key was not issued answers as an unknown one"
    );

    // Lists and views show only what the key may see.
    let r = t
        .requester
        .put_json(
            &format!("/v1/nouns/{TEAM}/work.notes/draft"),
            &json!({"expected_version": 0, "visibility": "private", "body": {"draft": 1}}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    let r = t
        .requester
        .put_json(
            &format!("/v1/nouns/{TEAM}/work.notes/draft"),
            &json!({"expected_version": 1, "visibility": "surface_only", "body": {"draft": 2}}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    let versions = body(
        &t.resumer
            .get(&format!("/v1/nouns/{TEAM}/work.notes/draft/versions"))
            .await
            .unwrap(),
    );
    let listed: Vec<u64> = versions["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    assert_eq!(
        listed,
        [2],
        "an older private version is not listed to a teammate"
    );
    let queues = body(&t.requester.get("/v1/queues").await.unwrap());
    let external = queues["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "work.external")
        .unwrap();
    let counted: u64 = external["counts"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    let visible = body(
        &t.requester
            .get("/v1/tasks?queue=work.external")
            .await
            .unwrap(),
    )["tasks"]
        .as_array()
        .unwrap()
        .len() as u64;
    assert_eq!(
        counted, visible,
        "queue counts include only tasks the key may see: {external}"
    );
    let mut joined = spec("verb.compute", json!({}));
    joined["depends_on"] = json!([their_task]);
    let joined = enqueue(&admin, &joined).await;
    let view = body(
        &t.requester
            .get(&format!("/v1/tasks/{joined}"))
            .await
            .unwrap(),
    );
    assert_eq!(
        view["upstream"],
        json!([]),
        "a hidden upstream's id is not named: {view}"
    );
    assert!(
        !view.to_string().contains(&format!("\"{their_task}\"")),
        "{view}"
    );
    let kids = body(
        &t.requester
            .get(&format!("/v1/tasks/{parent}"))
            .await
            .unwrap(),
    )["children"]
        .clone();
    let kid = kids[0]["task_id"].as_str().unwrap().to_string();
    let kid_view = body(&t.requester.get(&format!("/v1/tasks/{kid}")).await.unwrap());
    assert_eq!(
        (kid_view["requester"].clone(), kid_view["priority"].clone()),
        (
            body(
                &t.requester
                    .get(&format!("/v1/tasks/{parent}"))
                    .await
                    .unwrap()
            )["requester"]
                .clone(),
            json!(-1)
        ),
        "a child is the requester's, at the priority asked"
    );
    assert!(
        claim(&clients["parker"], "work.external").await.is_some(),
        "the resumed task is claimable again"
    );
}
