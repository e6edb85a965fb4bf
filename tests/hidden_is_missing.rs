//! Hidden means missing, everywhere (DESIGN.md, "Credentials, grants,
//! visibility"): what a key may not see answers exactly as what does not
//! exist, on every route that shows the same thing. Three oracles broke
//! that rule:
//!
//! 1. A noun version the key may not see answered `not_found` where one
//!    never written answered `version_not_found`; "the latest", version
//!    lists, compare-and-swap, dry runs and pins looked at versions the
//!    key may not see (a key without `nouns:read` was told which pinned
//!    nouns exist).
//! 2. `/v1/events` ids were one counter (`<run>-<n>`) shared by every
//!    reader, so a reader could count the events it may not see, and
//!    resume at ids it was never sent to find out which exist.
//! 3. A queue answers `unknown_queue` to a key not issued it, yet task
//!    views, lists, `?queue=` filters, task events and claim and resume
//!    refusals named it to a key that may see the task.
//!
//! Each test compares the hidden case's answer with the missing case's,
//! byte for byte once the names asked are swapped, across the routes that
//! show it (HTTP, `/mcp`, `tessera mcp` on stdio, the CLI, export), and
//! again after a restart where the state persists.

use crate::support;

use std::process::{Output, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};
use support::sse::{Sse, Stream};
use support::*;
use tessera::client::{Client, Reply};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

// ------------------------------------------------------------ comparing

/// An answer as compared: status, the headers a noun read sets, and the
/// body with each `(from, to)` name swapped and timestamps blanked (two
/// records are never written at the same instant).
fn answer(r: &Reply, swaps: &[(&str, &str)]) -> String {
    let text = swapped(&String::from_utf8_lossy(&r.body), swaps);
    let body = match serde_json::from_str::<Value>(&text) {
        Ok(mut v) => {
            blank_times(&mut v);
            v.to_string()
        }
        Err(_) => text,
    };
    format!(
        "{} {:?} {:?} {:?}\n{body}",
        r.status.as_u16(),
        r.header("content-type"),
        r.header("x-tessera-version"),
        r.header("x-tessera-sha256"),
    )
}

fn swapped(text: &str, swaps: &[(&str, &str)]) -> String {
    swaps
        .iter()
        .fold(text.to_string(), |t, (from, to)| t.replace(from, to))
}

fn blank_times(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k.ends_with("_at") {
                    *x = json!("<time>");
                } else {
                    blank_times(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(blank_times),
        _ => {}
    }
}

/// Sends `method path [body]` as `c`, where `{k}` in both stands for the
/// noun key asked.
async fn ask(c: &Client, method: &Method, path: &str, body: Option<&str>, k: &str) -> Reply {
    let path = path.replace("{k}", k);
    let body = body.map(|b| Bytes::from(b.replace("{k}", k)));
    c.send(method.clone(), &path, body, &[]).await.unwrap()
}

/// Asks the same of the hidden name and the missing one; the answers must
/// be the same once the missing name is read as the hidden one.
async fn same_answer(
    c: &Client,
    method: Method,
    path: &str,
    body: Option<&str>,
    (hidden, missing): (&str, &str),
) -> String {
    let h = ask(c, &method, path, body, hidden).await;
    let m = ask(c, &method, path, body, missing).await;
    let (h, m) = (answer(&h, &[]), answer(&m, &[(missing, hidden)]));
    assert_eq!(
        h, m,
        "{method} {path} {body:?}: the hidden {hidden} (left) must answer as the missing {missing} (right)"
    );
    h
}

// ------------------------------------------------------- the noun cases

/// v1 readable by the team, v2 private to the requester.
const HIDDEN: &str = "hidden-after";
/// v1 only, the same bytes as `HIDDEN`'s v1.
const MISSING: &str = "never-after";
/// One version, private to the requester.
const HIDDEN_ALL: &str = "hidden-all";
/// Never written.
const MISSING_ALL: &str = "never-all";

/// Writes the nouns; the sha256 of `HIDDEN` v2 and of `HIDDEN_ALL` v1.
async fn nouns(t: &Team) -> (String, String) {
    let put = |key: &str, env: Value| {
        let c = t.requester.clone();
        let path = format!("/v1/nouns/{NS}/docs/{key}");
        async move {
            let r = c.put_json(&path, &env).await.unwrap();
            assert_status!(r, 201);
            body(&r)["sha256"].as_str().unwrap().to_string()
        }
    };
    put(HIDDEN, json!({"expected_version": 0, "body": {"draft": 1}})).await;
    let sha2 = put(
        HIDDEN,
        json!({"expected_version": 1, "body": {"draft": 2}, "visibility": "private"}),
    )
    .await;
    put(
        MISSING,
        json!({"expected_version": 0, "body": {"draft": 1}}),
    )
    .await;
    let sha_all = put(
        HIDDEN_ALL,
        json!({"expected_version": 0, "body": {"draft": 9}, "visibility": "private"}),
    )
    .await;
    (sha2, sha_all)
}

/// The reads of a noun, `{k}` its key: as a version, a pin, the latest,
/// the version list.
fn reads(sha: &str) -> Vec<String> {
    [
        "?version=2",
        "?version=2&sha256={sha}",
        "?version=1",
        "?version=1&sha256={sha}",
        "?version=99",
        "",
        "/versions",
    ]
    .iter()
    .map(|q| format!("/v1/nouns/{NS}/docs/{{k}}{}", q.replace("{sha}", sha)))
    .collect()
}

/// A task spec whose `brief.input_ref` pins `{k}` at `version`/`sha`.
fn pinning(version: u64, sha: &str) -> String {
    let mut s = spec("verb.compute", json!({}));
    s["brief"]["input_ref"] =
        json!({"namespace": NS, "store": "docs", "key": "{k}", "version": version, "sha256": sha});
    s.to_string()
}

/// A version the key may not see answers as one never written, on every
/// path that looks a version up: reads (a version, a pin, the latest, the
/// list), the listing, puts (compare-and-swap, `skip_unchanged`, dry
/// runs, batches), the pins of an enqueue, a resume and a submit, the
/// worker's noun route, `/mcp` and `tessera mcp`, the CLI; and after a
/// restart. The one answer that cannot match, a real write after a
/// version the key does not see, is the answer a write to a noun it sees
/// nothing of gets, and writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_noun_version_the_key_may_not_see_answers_as_one_never_written() {
    let mut t = Team::start().await;
    let (sha2, sha_all) = nouns(&t).await;
    let partly = (HIDDEN, MISSING);
    let wholly = (HIDDEN_ALL, MISSING_ALL);

    // Reads, by a key of the team that is not the owner.
    for path in reads(&sha2) {
        same_answer(&t.worker, Method::GET, &path, None, partly).await;
    }
    for path in reads(&sha_all) {
        same_answer(&t.worker, Method::GET, &path, None, wholly).await;
    }
    let latest = ask(
        &t.worker,
        &Method::GET,
        &format!("/v1/nouns/{NS}/docs/{{k}}"),
        None,
        HIDDEN,
    )
    .await;
    assert_status!(latest, 200);
    assert_eq!(latest.header("x-tessera-version"), Some("1"));

    // The listing shows the same latest version and packs.
    let list = t
        .worker
        .get(&format!("/v1/nouns?namespace={NS}&store=docs"))
        .await
        .unwrap();
    assert_status!(list, 200);
    let listed = body(&list)["nouns"].as_array().unwrap().clone();
    let entry = |key: &str| {
        let mut e = listed
            .iter()
            .find(|n| n["key"] == key)
            .unwrap_or_else(|| panic!("{key} listed: {listed:?}"))
            .clone();
        blank_times(&mut e);
        e.to_string()
    };
    assert_eq!(
        entry(HIDDEN),
        swapped(&entry(MISSING), &[(MISSING, HIDDEN)])
    );
    assert!(!listed.iter().any(|n| n["key"] == HIDDEN_ALL), "{listed:?}");

    // Writes: compare-and-swap, skip_unchanged and dry runs look only at
    // what the writer sees (none of these writes anything).
    let put = format!("/v1/nouns/{NS}/docs/{{k}}");
    for env in [
        r#"{"expected_version": 5, "body": {"draft": 3}}"#,
        r#"{"expected_version": 2, "body": {"draft": 3}}"#,
        r#"{"expected_version": 1, "dry_run": true, "body": {"draft": 3}}"#,
        r#"{"expected_version": 0, "dry_run": true, "body": {"draft": 3}}"#,
        r#"{"expected_version": 2, "dry_run": true, "body": {"draft": 3}}"#,
        r#"{"skip_unchanged": true, "body": {"draft": 1}}"#,
        r#"{"skip_unchanged": true, "dry_run": true, "body": {"draft": 3}}"#,
    ] {
        same_answer(&t.resumer, Method::PUT, &put, Some(env), partly).await;
    }
    for env in [
        r#"{"expected_version": 3, "body": {"draft": 3}}"#,
        r#"{"expected_version": 1, "body": {"draft": 3}}"#,
        r#"{"expected_version": 0, "dry_run": true, "body": {"draft": 3}}"#,
        r#"{"expected_version": 1, "dry_run": true, "body": {"draft": 3}}"#,
        r#"{"skip_unchanged": true, "dry_run": true, "body": {"draft": 9}}"#,
    ] {
        same_answer(&t.resumer, Method::PUT, &put, Some(env), wholly).await;
    }
    let batch = format!(
        r#"{{"items": [
            {{"namespace": "{NS}", "store": "docs", "key": "{{k}}", "envelope": {{"expected_version": 5, "body": {{"draft": 3}}}}}},
            {{"namespace": "{NS}", "store": "docs", "key": "{{k}}", "envelope": {{"expected_version": 1, "dry_run": true, "body": {{"draft": 3}}}}}}
        ]}}"#
    );
    same_answer(
        &t.resumer,
        Method::POST,
        "/v1/batch/nouns",
        Some(&batch),
        partly,
    )
    .await;

    // The write that would follow v1 cannot happen: it answers as a
    // write to a noun the key sees nothing of, and tells no version.
    let follow = ask(
        &t.resumer,
        &Method::PUT,
        &put,
        Some(r#"{"expected_version": 1, "body": {"draft": 3}}"#),
        HIDDEN,
    )
    .await;
    let create = ask(
        &t.resumer,
        &Method::PUT,
        &put,
        Some(r#"{"expected_version": 0, "body": {"draft": 3}}"#),
        HIDDEN_ALL,
    )
    .await;
    assert_status!(follow, 404, "not_found");
    assert_eq!(
        answer(&follow, &[]),
        answer(&create, &[(HIDDEN_ALL, HIDDEN)])
    );
    let versions = |key: &str| {
        let admin = t.d.admin.clone();
        let path = format!("/v1/nouns/{NS}/docs/{key}/versions");
        async move {
            body(&admin.get(&path).await.unwrap())["versions"]
                .as_array()
                .unwrap()
                .len()
        }
    };
    assert_eq!((versions(HIDDEN).await, versions(HIDDEN_ALL).await), (2, 1));

    // Pins: an enqueue's (and its dry run's), as the requesting key.
    for (version, sha) in [(2, &sha2), (1, &sha2), (99, &sha2)] {
        let task = pinning(version, sha);
        for route in ["/v1/tasks", "/v1/tasks?dry_run=true"] {
            same_answer(&t.resumer, Method::POST, route, Some(&task), partly).await;
        }
    }
    same_answer(
        &t.resumer,
        Method::POST,
        "/v1/tasks",
        Some(&pinning(1, &sha_all)),
        wholly,
    )
    .await;
    // A key without nouns:read is refused every pin alike, whether the
    // noun exists or not.
    let blind = blind_key(&t).await;
    let refusal = same_answer(
        &blind,
        Method::POST,
        "/v1/tasks",
        Some(&pinning(1, &sha_all)),
        wholly,
    )
    .await;
    let visible = ask(
        &blind,
        &Method::POST,
        "/v1/tasks",
        Some(&pinning(1, &sha_all)),
        MISSING,
    )
    .await;
    assert_eq!(
        refusal,
        answer(&visible, &[(MISSING, HIDDEN_ALL)]),
        "a noun this key could otherwise read"
    );

    // A resume's input and a submit's outputs, as the resumer and the
    // submitter read them.
    let parked = enqueue(&t.requester, &spec("verb.compute", json!({}))).await;
    let c = claim_by_id(&t.worker, &parked).await;
    let r = t
        .worker
        .post_json(
            &format!("/v1/tasks/{parked}/park"),
            &json!({"lease_id": lease(&c), "reason": "needs input"}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    let pin = |version: u64, sha: &str| json!({"namespace": NS, "store": "docs", "key": "{k}", "version": version, "sha256": sha});
    for (version, sha) in [(2, &sha2), (1, &sha2)] {
        let resume = json!({"input_ref": pin(version, sha)}).to_string();
        let path = format!("/v1/tasks/{parked}/resume");
        same_answer(&t.resumer, Method::POST, &path, Some(&resume), partly).await;
    }
    let working = enqueue(&t.requester, &spec("verb.compute", json!({}))).await;
    let c = claim_by_id(&t.worker, &working).await;
    for (version, sha) in [(2, &sha2), (1, &sha2)] {
        let sub = json!({"lease_id": lease(&c), "ok": true, "outputs": [pin(version, sha)]});
        let path = format!("/v1/tasks/{working}/submit");
        same_answer(
            &t.worker,
            Method::POST,
            &path,
            Some(&sub.to_string()),
            partly,
        )
        .await;
    }

    // The worker's noun route: a pinned version the claimant may not see
    // answers as a version no pin names.
    let mut pinned = spec("verb.compute", json!({}));
    pinned["brief"]["input_ref"] =
        json!({"namespace": NS, "store": "docs", "key": HIDDEN, "version": 2, "sha256": sha2});
    let pinned = enqueue(&t.requester, &pinned).await;
    let c = claim_by_id(&t.worker, &pinned).await;
    let holder = t.d.client(c["handle"].as_str().unwrap());
    let worker_read = |q: &str| {
        let (holder, path) = (
            holder.clone(),
            format!("/v1/worker/nouns/{NS}/docs/{HIDDEN}{q}"),
        );
        async move { answer(&holder.get(&path).await.unwrap(), &[]) }
    };
    assert_eq!(
        worker_read(&format!("?version=2&sha256={sha2}")).await,
        worker_read("?version=99").await
    );

    // MCP, over /mcp and tessera mcp on stdio: put_noun relays the API.
    let resumer = t.resumer.bearer().unwrap().to_string();
    let base = t.d.admin.base().to_string();
    let put_args = |k: &str, env: Value| {
        let mut a = env;
        a["namespace"] = json!(NS);
        a["store"] = json!("docs");
        a["key"] = json!(k);
        a
    };
    for (env, refused) in [
        (json!({"expected_version": 5, "body": {"draft": 3}}), true),
        (
            json!({"expected_version": 1, "dry_run": true, "body": {"draft": 3}}),
            false,
        ),
    ] {
        let calls = [
            ("put_noun", put_args(HIDDEN, env.clone())),
            ("put_noun", put_args(MISSING, env.clone())),
        ];
        for got in [
            http_mcp(&t.d.admin, &resumer, &calls).await,
            stdio_mcp(&base, &resumer, &calls).await,
        ] {
            let mut got: Vec<Value> = got
                .into_iter()
                .map(|mut v| {
                    blank_times(&mut v);
                    v
                })
                .collect();
            let m = swapped(&got.pop().unwrap().to_string(), &[(MISSING, HIDDEN)]);
            let h = got.pop().unwrap();
            assert_eq!(h["isError"], json!(refused), "put_noun {env}: {h}");
            assert_eq!(h.to_string(), m, "put_noun {env}");
        }
    }

    // The CLI prints what the daemon says.
    let worker = t.worker.bearer().unwrap().to_string();
    let noun = format!("{NS}/docs/{{k}}");
    for (args, says) in [
        (
            vec!["noun", "get", &noun, "--version", "2"],
            "version_not_found",
        ),
        (
            vec!["noun", "get", &noun, "--version", "99"],
            "version_not_found",
        ),
        (vec!["noun", "get", &noun], "version 1 sha256"),
        (vec!["noun", "versions", &noun], "created_by"),
    ] {
        let got = same_cli(&base, &worker, &args, partly);
        assert!(got.contains(says), "tessera {args:?}: {got}");
    }
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), br#"{"draft": 3}"#).unwrap();
    let f = file.path().to_str().unwrap();
    for (expected, more, says) in [
        ("5", None, "version_conflict"),
        ("2", None, "version_conflict"),
        ("1", Some("--dry-run"), "version 2"),
    ] {
        let mut args = vec![
            "noun",
            "put",
            &noun,
            "--file",
            f,
            "--expected-version",
            expected,
        ];
        args.extend(more);
        let got = same_cli(&base, &resumer, &args, partly);
        assert!(got.contains(says), "tessera {args:?}: {got}");
    }

    // After a restart the noun refs are read back from disk.
    t.d.restart().await;
    for path in reads(&sha2) {
        same_answer(&t.worker, Method::GET, &path, None, partly).await;
    }
    for path in reads(&sha_all) {
        same_answer(&t.worker, Method::GET, &path, None, wholly).await;
    }
    same_answer(
        &t.resumer,
        Method::PUT,
        &put,
        Some(r#"{"expected_version": 5, "body": {"draft": 3}}"#),
        partly,
    )
    .await;
}

/// A key of the team that may enqueue but was not issued `nouns:read`.
async fn blind_key(t: &Team) -> Client {
    let r = t
        .d
        .admin
        .post_json(
            "/v1/keys",
            &json!({"label": "blind", "grants": {
                "queues": ["work.external"], "kinds": ["verb.compute"], "effect_classes": ["write-internal"],
                "scopes": [format!("namespace:{NS}"), format!("surface:{SURFACE}"), "verbs:enqueue"]}}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    t.d.client(body(&r)["secret"].as_str().unwrap())
}

/// Claims task `id` by id.
async fn claim_by_id(c: &Client, id: &str) -> Value {
    let r = c
        .post_json(&format!("/v1/tasks/{id}/claim"), &json!({}))
        .await
        .unwrap();
    assert_status!(r, 200);
    body(&r)
}

// ------------------------------------------------------------ MCP, CLI

/// The JSON-RPC handshake every MCP session opens with.
fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "hidden-is-missing", "version": "1"}}})
}

/// Each tool call's result over the daemon's `/mcp`, as `bearer`.
async fn http_mcp(admin: &Client, bearer: &str, calls: &[(&str, Value)]) -> Vec<Value> {
    let c = admin.with_bearer(bearer);
    let headers = [
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let post = |message: Value| {
        let c = c.clone();
        async move {
            let r = c
                .send(
                    Method::POST,
                    "/mcp",
                    Some(message.to_string().into()),
                    &headers,
                )
                .await
                .unwrap();
            assert!(
                r.status.is_success(),
                "{}",
                String::from_utf8_lossy(&r.body)
            );
            let text = String::from_utf8_lossy(&r.body).into_owned();
            let data = text
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("data:"))
                .map_or(text.clone(), |d| d.trim().to_string());
            serde_json::from_str::<Value>(&data).unwrap_or(Value::Null)
        }
    };
    post(initialize()).await;
    post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    let mut out = Vec::new();
    for (i, (name, arguments)) in calls.iter().enumerate() {
        let got = post(
            json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}),
        )
        .await;
        out.push(got["result"].clone());
    }
    out
}

/// Each tool call's result from `tessera mcp` on stdio, holding `key`.
async fn stdio_mcp(base: &str, key: &str, calls: &[(&str, Value)]) -> Vec<Value> {
    // `--server` on purpose: the hidden alias kept for command lines
    // written before `--daemon` must still reach the daemon.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["mcp", "--server", base])
        .env_remove("TESSERA_HANDLE")
        .env("TESSERA_KEY", key)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn tessera mcp");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut messages = vec![
        initialize(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ];
    for (i, (name, arguments)) in calls.iter().enumerate() {
        messages.push(
            json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}),
        );
    }
    let mut out = Vec::new();
    for message in messages {
        let id = message.get("id").cloned();
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        stdin.write_all(&line).await.unwrap();
        stdin.flush().await.unwrap();
        let Some(id) = id else { continue };
        loop {
            let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
                .await
                .expect("an answer in time")
                .unwrap()
                .expect("tessera mcp closed its stdout");
            let got: Value = serde_json::from_str(&line).unwrap();
            if got["id"] == id {
                if id != json!(0) {
                    out.push(got["result"].clone());
                }
                break;
            }
        }
    }
    drop(stdin);
    let _ = child.wait().await;
    out
}

/// Runs `tessera ARGS` against `base` with `key`.
fn cli(base: &str, key: &str, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .env("TESSERA_SERVER", base)
        .env("TESSERA_KEY", key)
        .output()
        .expect("run tessera")
}

/// What a CLI run shows: its exit status, stdout and stderr, with the
/// `YYYY-MM-DDTHH:MM:SSZ` times it prints blanked.
fn shown(out: &Output, swaps: &[(&str, &str)]) -> String {
    let text = swapped(
        &format!(
            "{:?}\n{}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        swaps,
    );
    let shape = b"dddd-dd-ddTdd:dd:ddZ";
    let b = text.as_bytes();
    let (mut out, mut last, mut i) = (String::new(), 0, 0);
    while i + shape.len() <= b.len() {
        let stamp = shape.iter().zip(&b[i..]).all(|(p, c)| match p {
            b'd' => c.is_ascii_digit(),
            _ => p == c,
        });
        if stamp {
            out.push_str(&text[last..i]);
            out.push_str("<time>");
            i += shape.len();
            last = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&text[last..]);
    out
}

/// `tessera ARGS` (with `{k}` for the name) prints the same for the
/// hidden name as for the missing one; what it printed.
fn same_cli(base: &str, key: &str, args: &[&str], (hidden, missing): (&str, &str)) -> String {
    let run = |k: &str| {
        let args: Vec<String> = args.iter().map(|a| a.replace("{k}", k)).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(base, key, &args)
    };
    let h = shown(&run(hidden), &[]);
    assert_eq!(
        h,
        shown(&run(missing), &[(missing, hidden)]),
        "tessera {args:?}"
    );
    h
}

// ------------------------------------------------------------ events

fn queued(ev: &Sse, id: &str) -> bool {
    ev.event == "task" && ev.data["task_id"] == id && ev.data["state"] == "queued"
}

/// Ids a reader could derive from `id` if ids counted: its trailing
/// number, or the whole id read as hex, a few steps either way.
fn neighbours(id: &str) -> Vec<String> {
    let mut out = Vec::new();
    let digits = id.len() - id.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits > 0 && digits <= 18 {
        let (head, n) = id.split_at(id.len() - digits);
        let n: i64 = n.parse().unwrap();
        out.extend(
            (-3..=3)
                .filter(|d| *d != 0 && n + d >= 0)
                .map(|d| format!("{head}{}", n + d)),
        );
    }
    if !id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        let n = u128::from_str_radix(id, 16).unwrap();
        let width = id.len();
        for d in 1..=3u128 {
            out.push(format!("{:0width$x}", n.wrapping_add(d)));
            out.push(format!("{:0width$x}", n.wrapping_sub(d)));
        }
    }
    out.retain(|g| g != id);
    out
}

/// How a stream opened with `Last-Event-ID: last` starts: its first event.
async fn first_event(base: &str, key: &str, last: &str) -> String {
    let mut s = Stream::open(base, key, Some(last)).await;
    match s.next(2).await {
        Some(ev) => format!("{} {}", ev.event, ev.data),
        None => "nothing".into(),
    }
}

/// Checks that no id derivable from `id` names a place in the stream: each
/// resumes exactly as an id never issued does (a reset).
async fn no_neighbour_resumes(base: &str, key: &str, id: &str) {
    let never = first_event(base, key, "never-issued").await;
    assert!(never.starts_with("reset "), "{never}");
    for guess in neighbours(id) {
        assert_eq!(
            first_event(base, key, &guess).await,
            never,
            "{guess}, guessed from the id {id}, must answer as an id never issued"
        );
    }
}

/// The outsider's own task (another surface than the team's).
fn outsiders(brief: Value) -> Value {
    let mut s = spec("verb.compute", brief);
    s["producer_surface"] = json!("surface:elsewhere");
    s
}

/// Event ids are the events', not a count: the ids a reader is sent say
/// nothing of the events between them that it may not see, and no id
/// derived from one it was sent resumes (each answers as an id never
/// issued), while its own ids resume with nothing lost or doubled.
#[tokio::test(flavor = "multi_thread")]
async fn event_ids_count_nothing_a_reader_may_not_see() {
    let t = Team::start().await;
    let base = t.d.admin.base().to_string();
    let outsider = t.outsider.bearer().unwrap().to_string();
    let mut admin = Stream::open(&base, &t.d.admin_key, None).await;
    let mut watch = Stream::open(&base, &outsider, None).await;

    let a = enqueue(&t.outsider, &outsiders(json!({"n": "a"}))).await;
    let mut hidden = Vec::new();
    for i in 0..5 {
        hidden.push(enqueue(&t.requester, &spec("verb.compute", json!({"i": i}))).await);
    }
    let b = enqueue(&t.outsider, &outsiders(json!({"n": "b"}))).await;

    let seen = watch.until(|e| queued(e, &b)).await;
    let ids: Vec<String> = seen.iter().map(|e| e.id.clone().unwrap()).collect();
    assert_eq!(seen.len(), 2, "only its own tasks: {seen:?}");
    let all = admin.until(|e| queued(e, &b)).await;
    let hidden_ids: Vec<String> = all
        .iter()
        .filter(|e| hidden.iter().any(|h| queued(e, h)))
        .map(|e| e.id.clone().unwrap())
        .collect();
    assert_eq!(hidden_ids.len(), 5, "{all:?}");
    assert_eq!(
        all.iter().find(|e| queued(e, &a)).unwrap().id.as_ref(),
        Some(&ids[0]),
        "an id is the event's, whoever reads it"
    );

    for id in &ids {
        no_neighbour_resumes(&base, &outsider, id).await;
    }
    // Its own id resumes: the hidden events are skipped, B comes once.
    let mut again = Stream::open(&base, &outsider, Some(&ids[0])).await;
    let next = again.next(5).await.unwrap();
    assert!(queued(&next, &b), "{next:?}");
    assert!(again.next(1).await.is_none(), "nothing doubled");
}

/// A reader cut off for falling behind is told a place to resume from
/// that is none of the events' ids (not the last one it took, which it
/// may not have been sent), cannot be stepped to another, and resumes
/// with nothing lost or doubled.
#[tokio::test(flavor = "multi_thread")]
async fn a_lagged_reader_resumes_from_a_place_that_names_no_event() {
    let t = Team::start_with(|c| c.limits.events_backlog = 2).await;
    let base = t.d.admin.base().to_string();
    let outsider = t.outsider.bearer().unwrap().to_string();
    let mut watch = Stream::open(&base, &outsider, None).await;
    let a = enqueue(&t.outsider, &outsiders(json!({"n": "a"}))).await;
    let got = watch.until(|e| queued(e, &a)).await;
    let received: Vec<String> = got.iter().filter_map(|e| e.id.clone()).collect();
    let mut lagged = None;
    for round in 0..10 {
        let items: Vec<Value> = (0..200)
            .map(|i| spec("verb.compute", json!({"round": round, "i": i})))
            .collect();
        enqueue_batch(&t.requester, &items).await;
        while let Some(ev) = watch.next(1).await {
            assert_eq!(ev.event, "lagged", "nothing hidden is sent: {ev:?}");
            lagged = Some(ev);
        }
        if lagged.is_some() {
            break;
        }
    }
    let lagged = lagged.expect("the reader fell behind");
    let resume = lagged.data["resume_from"].as_str().unwrap().to_string();
    assert!(
        !received.contains(&resume),
        "{resume} is not an event it was sent"
    );
    no_neighbour_resumes(&base, &outsider, &resume).await;

    let b = enqueue(&t.outsider, &outsiders(json!({"n": "b"}))).await;
    let mut again = Stream::open(&base, &outsider, Some(&resume)).await;
    let next = again.next(5).await.unwrap();
    assert!(queued(&next, &b), "resumed without a reset: {next:?}");
    assert!(again.next(1).await.is_none(), "nothing doubled");
}

// ------------------------------------------------------------ queues

/// Queues the watcher was not issued, and a name never provisioned.
const NOT_ISSUED: [&str; 2] = ["work.short", "work.server"];
const NEVER: &str = "never.provisioned";

/// A key issued one queue of several: it sees the team's tasks (by
/// namespace and surface) on queues it was not issued.
async fn watcher(t: &Team) -> Client {
    let r = t
        .d
        .admin
        .post_json(
            "/v1/keys",
            &json!({"label": "watcher", "grants": {
                "queues": ["work.external"], "kinds": ["verb.compute"], "effect_classes": ["write-internal"],
                "scopes": [format!("namespace:{NS}"), format!("surface:{SURFACE}"), "nouns:read", "verbs:enqueue", "verbs:claim"]}}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    t.d.client(body(&r)["secret"].as_str().unwrap())
}

/// A key of the team issued the server queue by name.
async fn server_key(t: &Team) -> Client {
    let r = t
        .d
        .admin
        .post_json(
            "/v1/keys",
            &json!({"label": "server", "grants": {
                "queues": ["work.server"], "kinds": ["verb.compute"], "effect_classes": ["write-internal"],
                "scopes": [format!("namespace:{NS}"), format!("surface:{SURFACE}"), "nouns:read", "verbs:enqueue", "verbs:claim", "verbs:submit"]}}),
        )
        .await
        .unwrap();
    assert_status!(r, 201);
    t.d.client(body(&r)["secret"].as_str().unwrap())
}

/// Asserts that `text` names no queue the watcher was not issued.
fn names_none(what: &str, text: &str) {
    for q in NOT_ISSUED {
        assert!(!text.contains(q), "{what} names {q}: {text}");
    }
}

/// A queue the key was not issued is left out of everything it is shown,
/// as a queue never provisioned is: task views (`queue: null`), lists and
/// their `?queue=` filter, claim and resume refusals, task events,
/// `/v1/queues` and `/v1/status`, MCP `get_task` (over `/mcp` and stdio),
/// the CLI and export; and again after a restart. Admin still sees every
/// name.
#[tokio::test(flavor = "multi_thread")]
async fn a_queue_the_key_was_not_issued_is_named_nowhere_it_looks() {
    let mut t = Team::start().await;
    let w = watcher(&t).await;
    let server = server_key(&t).await;
    let watcher_key = w.bearer().unwrap().to_string();
    let base = t.d.admin.base().to_string();
    let mut events = Stream::open(&base, &watcher_key, None).await;

    let mut on_short = spec("verb.compute", json!({"on": "short"}));
    on_short["queue"] = json!("work.short");
    let short = enqueue(&t.requester, &on_short).await;
    let mut on_server = spec("verb.compute", json!({"on": "server"}));
    on_server["queue"] = json!("work.server");
    let on_server_id = enqueue(&server, &on_server).await;
    let mine = enqueue(
        &t.requester,
        &spec("verb.compute", json!({"on": "external"})),
    )
    .await;
    let hidden = [short.clone(), on_server_id.clone()];

    // Parked tasks, for the resume refusal.
    let c = claim_by_id(&t.worker, &short).await;
    let park = |c: Value, who: Client, id: String| async move {
        let r = who
            .post_json(
                &format!("/v1/tasks/{id}/park"),
                &json!({"lease_id": lease(&c), "reason": "needs input"}),
            )
            .await
            .unwrap();
        assert_status!(r, 200);
    };
    park(c, t.worker.clone(), short.clone()).await;
    let c = claim_by_id(&server, &on_server_id).await;
    park(c, server.clone(), on_server_id.clone()).await;

    let check_views = |w: Client| {
        let (hidden, mine) = (hidden.clone(), mine.clone());
        async move {
            for id in &hidden {
                let v = task(&w, id).await;
                assert_eq!(v["queue"], Value::Null, "{v}");
                names_none(&format!("GET /v1/tasks/{id}"), &v.to_string());
            }
            assert_eq!(task(&w, &mine).await["queue"], json!("work.external"));
            let all = w.get("/v1/tasks").await.unwrap();
            assert_status!(all, 200);
            assert_eq!(body(&all)["tasks"].as_array().unwrap().len(), 3);
            names_none("GET /v1/tasks", &String::from_utf8_lossy(&all.body));
            let never = w.get(&format!("/v1/tasks?queue={NEVER}")).await.unwrap();
            for q in NOT_ISSUED {
                let got = w.get(&format!("/v1/tasks?queue={q}")).await.unwrap();
                assert_eq!(answer(&got, &[]), answer(&never, &[]), "?queue={q}");
            }
            for route in ["/v1/queues", "/v1/status"] {
                let r = w.get(route).await.unwrap();
                assert_status!(r, 200);
                names_none(route, &String::from_utf8_lossy(&r.body));
            }
        }
    };
    check_views(w.clone()).await;
    let admin_view = task(&t.d.admin, &short).await;
    assert_eq!(
        admin_view["queue"],
        json!("work.short"),
        "admin sees every name"
    );

    // Naming the queue answers as a queue never provisioned.
    for q in NOT_ISSUED {
        let swap = [(NEVER, q)];
        let claim = |queue: &str| {
            let (w, path) = (w.clone(), format!("/v1/queues/{queue}/claim"));
            async move { w.post_json(&path, &json!({})).await.unwrap() }
        };
        assert_eq!(
            answer(&claim(q).await, &[]),
            answer(&claim(NEVER).await, &swap)
        );
        let enqueue_on = |queue: &str| {
            let mut s = spec("verb.compute", json!({}));
            s["queue"] = json!(queue);
            let w = w.clone();
            async move { w.post_json("/v1/tasks", &s).await.unwrap() }
        };
        assert_eq!(
            answer(&enqueue_on(q).await, &[]),
            answer(&enqueue_on(NEVER).await, &swap)
        );
    }
    // Acting on a task it sees, on such a queue: refused without the name,
    // the same for either queue.
    for action in ["claim", "resume"] {
        let mut refusals = Vec::new();
        for id in &hidden {
            let req = if action == "claim" {
                json!({})
            } else {
                json!({"input_ref": null})
            };
            let r = w
                .post_json(&format!("/v1/tasks/{id}/{action}"), &req)
                .await
                .unwrap();
            assert_status!(r, 403, "forbidden");
            names_none(
                &format!("POST /v1/tasks/{id}/{action}"),
                &String::from_utf8_lossy(&r.body),
            );
            refusals.push(answer(&r, &[]));
        }
        assert_eq!(refusals[0], refusals[1], "{action}");
    }

    // Task events carry no name it was not issued.
    let seen = events.until(|e| queued(e, &mine)).await;
    for id in &hidden {
        let ev = seen
            .iter()
            .find(|e| e.data["task_id"] == json!(id))
            .unwrap_or_else(|| panic!("{id} in {seen:?}"));
        assert_eq!(ev.data["queue"], Value::Null, "{ev:?}");
    }
    for ev in &seen {
        names_none("an event", &ev.raw);
    }

    // MCP get_task, over /mcp and on stdio.
    let calls: Vec<(&str, Value)> = hidden
        .iter()
        .map(|id| ("get_task", json!({"task_id": id})))
        .collect();
    for got in [
        http_mcp(&t.d.admin, &watcher_key, &calls).await,
        stdio_mcp(&base, &watcher_key, &calls).await,
    ] {
        for (result, id) in got.iter().zip(&hidden) {
            assert_eq!(result["isError"], json!(false), "{result}");
            assert!(result.to_string().contains(id.as_str()), "{result}");
            names_none("MCP get_task", &result.to_string());
        }
    }

    // The CLI and export.
    for id in &hidden {
        for format in ["table", "json"] {
            let out = cli(&base, &watcher_key, &["task", "show", id, "-o", format]);
            assert!(out.status.success(), "{}", shown(&out, &[]));
            names_none("tessera task show", &shown(&out, &[]));
        }
    }
    let never = cli(
        &base,
        &watcher_key,
        &["task", "list", "--queue", NEVER, "-o", "json"],
    );
    for q in NOT_ISSUED {
        let got = cli(
            &base,
            &watcher_key,
            &["task", "list", "--queue", q, "-o", "json"],
        );
        assert_eq!(
            shown(&got, &[]),
            shown(&never, &[]),
            "task list --queue {q}"
        );
    }
    let export = |queue: &str| {
        let dir = tempfile::tempdir().unwrap();
        let out = cli(
            &base,
            &watcher_key,
            &["export", dir.path().to_str().unwrap(), "--queue", queue],
        );
        assert!(out.status.success(), "{}", shown(&out, &[]));
        let files: Vec<(String, Vec<u8>)> = files_under(dir.path())
            .into_iter()
            .map(|f| {
                let bytes = std::fs::read(dir.path().join(&f)).unwrap();
                (f, bytes)
            })
            .collect();
        let stdout = swapped(
            &String::from_utf8_lossy(&out.stdout),
            &[(dir.path().to_str().unwrap(), "DIR"), (queue, "Q")],
        );
        (out.status.code(), stdout, files)
    };
    for q in NOT_ISSUED {
        assert_eq!(export(q), export(NEVER), "export --queue {q}");
    }

    // After a restart the tasks are replayed from the journal.
    t.d.restart().await;
    check_views(w.clone()).await;
}
