//! The headers every answer carries, over real HTTP: `nosniff` on every
//! answer of every route (errors, streams and `/mcp` included), and the
//! sandboxing Content-Security-Policy on every answer but the overview
//! site's files. A noun stored as `text/html` (or a raw output part that
//! holds markup) opened in a browser must run nothing: the writer chooses
//! the media type, not what the browser may do with it.

use crate::support;

use http::Method;
use serde_json::json;
use support::*;
use tessera::client::Reply;
use tessera::http::headers::SANDBOX;
use tessera::http::routes::ROUTES;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Markup a writer may store: opened in a browser, it must not run.
const PAGE: &str = "<html><script>document.title='ran'</script><p>hello</p></html>";

/// The site's files name their own policy; everything else is sandboxed.
fn is_site(path: &str) -> bool {
    path == "/" || path.starts_with("/ui/")
}

/// Asserts `nosniff` and the policy `path` must carry on an answer.
fn protected(what: &str, path: &str, nosniff: Option<&str>, csp: Option<&str>) {
    assert_eq!(nosniff, Some("nosniff"), "{what}: nosniff");
    if is_site(path) {
        let csp = csp.unwrap_or_default();
        assert!(csp.starts_with("default-src 'self'"), "{what}: {csp}");
    } else {
        assert_eq!(csp, Some(SANDBOX), "{what}: the sandbox policy");
    }
}

fn check(what: &str, path: &str, r: &Reply) {
    let what = format!("{what} ({})", r.status);
    protected(
        &what,
        path,
        r.header("x-content-type-options"),
        r.header("content-security-policy"),
    );
}

/// A route template with each `{name}` segment filled in.
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

/// The head of the answer to `method path` (for a stream, whose body
/// never ends): its header lines.
async fn head(base: &str, method: &str, path: &str, bearer: Option<&str>) -> String {
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = bearer.map_or(String::new(), |b| format!("authorization: Bearer {b}\r\n"));
    let req = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\n{auth}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the head ended");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// The value of header `name` (lowercase) in a head.
fn header_in<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[tokio::test]
async fn every_route_answers_nosniff_and_only_the_site_may_run() {
    let d = TestDaemon::start().await;
    let anon = d.admin.anonymous();
    let base = d.admin.base().to_string();
    for r in ROUTES {
        let path = concrete(r.endpoint.path);
        let what = format!("{} {}", r.endpoint.method, r.endpoint.path);
        if r.endpoint.path == "/v1/events" {
            for bearer in [None, Some(d.admin_key.as_str())] {
                let h = head(&base, r.endpoint.method.as_str(), &path, bearer).await;
                let what = format!("{what}: {h}");
                let nosniff = header_in(&h, "x-content-type-options");
                let csp = header_in(&h, "content-security-policy");
                protected(&what, &path, nosniff, csp);
            }
            continue;
        }
        for c in [&anon, &d.admin] {
            let body = (r.endpoint.method != Method::GET).then(|| "{}".into());
            let reply = c
                .send(r.endpoint.method.clone(), &path, body, &[])
                .await
                .unwrap();
            check(&what, &path, &reply);
        }
    }
    // No route, an invented method, a path that is not UTF-8, a 304.
    for (method, path) in [
        ("GET", "/nowhere"),
        ("BREW", "/v1/tasks"),
        ("GET", "/v1/tasks/%FF"),
        ("DELETE", "/"),
    ] {
        let m = Method::from_bytes(method.as_bytes()).unwrap();
        let reply = d.admin.send(m, path, None, &[]).await.unwrap();
        check(&format!("{method} {path}"), "/v1", &reply);
    }
    let page = anon.get("/").await.unwrap();
    let etag = page.header("etag").unwrap().to_string();
    let again = anon
        .send(Method::GET, "/", None, &[("if-none-match", &etag)])
        .await
        .unwrap();
    assert_status!(again, 304);
    check("GET / again", "/", &again);
}

#[tokio::test]
async fn noun_bytes_and_raw_parts_in_a_writer_media_type_are_sandboxed() {
    let team = Team::start().await;
    let encoded = base64_of(PAGE.as_bytes());
    let noun = format!("/v1/nouns/{NS}/work.inputs/page");
    let r = team
        .requester
        .put_json(
            &noun,
            &json!({"expected_version": 0, "media_type": "text/html", "body_base64": encoded}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    let pin = json!({"namespace": NS, "store": "work.inputs", "key": "page",
        "version": 1, "sha256": body(&r)["sha256"]});

    let read = team.worker.get(&noun).await.unwrap();
    assert_status!(read, 200);
    assert_eq!(read.header("content-type"), Some("text/html"));
    assert_eq!(&read.body[..], PAGE.as_bytes(), "the exact bytes");
    check("GET a text/html noun", &noun, &read);
    let read = team.worker.get(&format!("{noun}?version=1")).await.unwrap();
    check("GET a text/html noun by version", &noun, &read);

    // Through a claim: the worker's noun read, a staged part holding
    // markup, and the task's raw output part.
    let id = enqueue(
        &team.requester,
        &spec("verb.compute", json!({"input_ref": pin})),
    )
    .await;
    let c = claim(&team.worker, "work.external").await.unwrap();
    assert_eq!(claimed_id(&c), id);
    let handle = team.d.client(c["handle"].as_str().unwrap());
    let worker_noun = format!("/v1/worker/nouns/{NS}/work.inputs/page");
    let read = handle.get(&worker_noun).await.unwrap();
    assert_status!(read, 200);
    assert_eq!(read.header("content-type"), Some("text/html"));
    check("GET the worker's noun read", &worker_noun, &read);
    for (path, what) in [
        ("/v1/worker/prompt", "the prompt"),
        ("/v1/worker/parts", "the parts"),
    ] {
        let r = handle.get(path).await.unwrap();
        assert_status!(r, 200);
        check(what, path, &r);
    }
    let r = handle
        .post_bytes("/v1/worker/artifact?name=page.html", PAGE.as_bytes())
        .await
        .unwrap();
    assert_status!(r, 200);
    check("staging a part", "/v1/worker/artifact", &r);
    let r = handle
        .post_bytes("/v1/worker/submit", PAGE.as_bytes())
        .await
        .unwrap();
    assert!(
        r.status.is_success(),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    check("submitting", "/v1/worker/submit", &r);

    let output = format!("/v1/tasks/{id}/output");
    for query in ["?path=%24.parts%5B%22page.html%22%5D", "?path=%24.out", ""] {
        let r = team
            .requester
            .get(&format!("{output}{query}"))
            .await
            .unwrap();
        assert_status!(r, 200);
        check(&format!("GET {output}{query}"), &output, &r);
        if !query.is_empty() {
            assert_eq!(&r.body[..], PAGE.as_bytes(), "{query}: the raw part");
        }
    }

    // /mcp's own answer, as every other.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "tessera-test", "version": "1"}}});
    let r = team
        .requester
        .send(
            Method::POST,
            "/mcp",
            Some(serde_json::to_vec(&init).unwrap().into()),
            &[("accept", "application/json, text/event-stream")],
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    check("POST /mcp initialize", "/mcp", &r);
}

/// Standard base64 of `bytes`.
fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
