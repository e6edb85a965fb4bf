//! The noun store over real HTTP: round trips, byte-exact reads, hashes
//! anyone can check, compare-and-swap, names and traversal, planted
//! symlinks, corruption, and the daemon's own lifecycle.

use crate::support;

use std::path::Path;
use std::process::Command;

use base64::Engine;
use serde_json::{Value, json};
use support::{DaemonProcess, TestDaemon, body, create, files_under};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn object_file(root: &Path, sha: &str) -> std::path::PathBuf {
    root.join("objects/sha256").join(&sha[..2]).join(&sha[2..])
}

#[tokio::test(flavor = "multi_thread")]
async fn json_round_trip_is_canonical_and_the_object_file_hashes_to_its_name() {
    if !support::nouns_on_root() {
        // Shared nouns have no object files or ref files under the root
        // (tests/shared_nouns.rs checks their bucket and rows).
        return;
    }
    let d = TestDaemon::start().await;
    let put = d
        .admin
        .put_json(
            "/v1/nouns/team/work.inputs/numbers",
            &create(json!({"z": 1, "a": [3, 4]})),
        )
        .await
        .unwrap();
    assert_status!(put, 201);
    let put = body(&put);
    assert_eq!(
        (put["version"].clone(), put["outcome"].clone()),
        (json!(1), json!("create"))
    );
    let sha = put["sha256"].as_str().unwrap().to_string();

    let get = d
        .admin
        .get("/v1/nouns/team/work.inputs/numbers")
        .await
        .unwrap();
    assert_status!(get, 200);
    let canonical = "{\n  \"a\": [\n    3,\n    4\n  ],\n  \"z\": 1\n}\n";
    assert_eq!(String::from_utf8_lossy(&get.body), canonical);
    assert_eq!(get.header("x-tessera-version"), Some("1"));
    assert_eq!(get.header("x-tessera-sha256"), Some(sha.as_str()));
    assert_eq!(get.header("etag"), Some(format!("\"{sha}\"").as_str()));
    assert_eq!(get.header("content-type"), Some("application/json"));

    let out = Command::new("sha256sum")
        .arg(object_file(d.root(), &sha))
        .output()
        .unwrap();
    let printed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(printed.split_whitespace().next(), Some(sha.as_str()));
}

#[tokio::test(flavor = "multi_thread")]
async fn bytes_are_stored_and_served_exactly() {
    if !support::nouns_on_root() {
        // Shared nouns have no object files or ref files under the root
        // (tests/shared_nouns.rs checks their bucket and rows).
        return;
    }
    let d = TestDaemon::start().await;
    let bytes: Vec<u8> = (0..=255u8).chain([0, 0, 10, 13, 255]).collect();
    let put = d
        .admin
        .put_json(
            "/v1/nouns/team/blobs/all-bytes",
            &json!({"expected_version": 0, "body_base64": b64(&bytes), "media_type": "image/x-test"}),
        )
        .await
        .unwrap();
    assert_status!(put, 201);
    let get = d.admin.get("/v1/nouns/team/blobs/all-bytes").await.unwrap();
    assert_eq!(get.body.as_ref(), bytes.as_slice());
    assert_eq!(get.header("content-type"), Some("image/x-test"));
    let on_disk = std::fs::read(object_file(
        d.root(),
        body(&put)["sha256"].as_str().unwrap(),
    ))
    .unwrap();
    assert_eq!(on_disk, bytes);
}

#[tokio::test(flavor = "multi_thread")]
async fn versions_pins_and_compare_and_swap() {
    let d = TestDaemon::start().await;
    let url = "/v1/nouns/team/s/k";
    assert_status!(d.admin.put_json(url, &create(json!(1))).await.unwrap(), 201);
    let conflict = d.admin.put_json(url, &create(json!(2))).await.unwrap();
    assert_status!(conflict, 409, "version_conflict");
    assert_eq!(body(&conflict)["error"]["details"]["current"], json!(1));
    let v2 = d
        .admin
        .put_json(url, &json!({"expected_version": 1, "body": 2}))
        .await
        .unwrap();
    assert_status!(v2, 201);
    let v2 = body(&v2);
    assert_eq!(v2["version"], json!(2));

    let v1 = d.admin.get(&format!("{url}?version=1")).await.unwrap();
    assert_eq!(v1.body.as_ref(), b"1\n");
    let sha1 = v1.header("x-tessera-sha256").unwrap().to_string();
    let pinned = d
        .admin
        .get(&format!("{url}?version=1&sha256={sha1}"))
        .await
        .unwrap();
    assert_status!(pinned, 200);
    let wrong = d
        .admin
        .get(&format!("{url}?version=2&sha256={sha1}"))
        .await
        .unwrap();
    assert_status!(wrong, 409, "pin_mismatch");
    assert_status!(
        d.admin.get(&format!("{url}?version=3")).await.unwrap(),
        404,
        "version_not_found"
    );
    assert_status!(
        d.admin.get(&format!("{url}?sha256=abc")).await.unwrap(),
        400,
        "invalid_query"
    );

    let list = body(&d.admin.get(&format!("{url}/versions")).await.unwrap());
    let versions: Vec<u64> = list["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, [1, 2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn skip_unchanged_and_dry_run_say_what_would_happen() {
    let d = TestDaemon::start().await;
    let url = "/v1/nouns/team/s/k";
    let cases = [
        (
            json!({"dry_run": true, "expected_version": 0, "body": {"a": 1}}),
            "create",
            200,
        ),
        (
            json!({"expected_version": 0, "body": {"a": 1}}),
            "create",
            201,
        ),
        (
            json!({"dry_run": true, "skip_unchanged": true, "body": {"a": 1}}),
            "unchanged",
            200,
        ),
        (
            json!({"skip_unchanged": true, "body": {"a": 1}}),
            "unchanged",
            200,
        ),
        (
            json!({"dry_run": true, "skip_unchanged": true, "body": {"a": 2}}),
            "new_version",
            200,
        ),
        (
            json!({"dry_run": true, "expected_version": 0, "body": {"a": 2}}),
            "conflict",
            200,
        ),
        (
            json!({"skip_unchanged": true, "body": {"a": 2}}),
            "new_version",
            201,
        ),
    ];
    for (env, outcome, status) in cases {
        let r = d.admin.put_json(url, &env).await.unwrap();
        assert_status!(r, status);
        assert_eq!(body(&r)["outcome"], json!(outcome), "for {env}");
    }
    let list = body(&d.admin.get(&format!("{url}/versions")).await.unwrap());
    assert_eq!(
        list["versions"].as_array().unwrap().len(),
        2,
        "dry runs and unchanged puts wrote nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_requests_are_400_or_413_and_write_nothing() {
    let d = TestDaemon::start_with(|c| c.limits.max_body_bytes = 1024).await;
    let before = files_under(d.root());
    let url = "/v1/nouns/team/s/k";
    let cases: Vec<(&[u8], u16, &str)> = vec![
        (
            b"{\"expected_version\":0,\"body\":1,\"extra\":true}",
            400,
            "unknown_field",
        ),
        (b"{\"expected_version\":0,\"body\":", 400, "malformed_json"),
        (b"not json", 400, "malformed_json"),
        (
            b"{\"expected_version\":\"zero\",\"body\":1}",
            400,
            "invalid_body",
        ),
        (b"{\"body\":1}", 400, "missing_field"),
        (b"{\"expected_version\":0}", 400, "invalid_body"),
        (
            b"{\"expected_version\":0,\"body\":1,\"body_base64\":\"AA==\"}",
            400,
            "invalid_body",
        ),
        (
            b"{\"expected_version\":0,\"body_base64\":\"***\"}",
            400,
            "invalid_body",
        ),
        (
            b"{\"expected_version\":0,\"body\":1,\"type\":\"../x\"}",
            400,
            "invalid_name",
        ),
        (
            b"{\"expected_version\":0,\"body\":1,\"media_type\":\"a\\nb\"}",
            400,
            "invalid_media_type",
        ),
        (
            b"{\"expected_version\":0,\"body\":1,\"visibility\":\"everyone\"}",
            400,
            "invalid_body",
        ),
    ];
    for (raw, status, code) in cases {
        let r = d
            .admin
            .send(
                http::Method::PUT,
                url,
                Some(bytes::Bytes::from_static(raw)),
                &[],
            )
            .await
            .unwrap();
        assert_status!(r, status, code);
    }
    let syntax = d
        .admin
        .send(
            http::Method::PUT,
            url,
            Some(bytes::Bytes::from_static(b"{\n  \"body\": ]")),
            &[],
        )
        .await
        .unwrap();
    assert_status!(syntax, 400, "malformed_json");
    assert_eq!(
        body(&syntax)["error"]["details"],
        json!({"line": 2, "column": 11})
    );
    let big = json!({"expected_version": 0, "body": "x".repeat(2000)});
    assert_status!(
        d.admin.put_json(url, &big).await.unwrap(),
        413,
        "body_too_large"
    );
    assert_eq!(files_under(d.root()), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_names_and_traversal_attempts_touch_nothing() {
    let d = TestDaemon::start().await;
    let before = files_under(d.root());
    let env = create(json!({"x": 1}));
    let long = "a".repeat(129);
    let cases: Vec<(String, u16)> = vec![
        ("/v1/nouns/team/s/..".into(), 400),
        ("/v1/nouns/team/../k".into(), 400),
        ("/v1/nouns/team/s/%2e%2e".into(), 400),
        ("/v1/nouns/%2E%2E/s/k".into(), 400),
        ("/v1/nouns/team/s/.".into(), 400),
        ("/v1/nouns/team/s/a%2Fb".into(), 400),
        ("/v1/nouns/team/s/..%2F..%2Fetc".into(), 400),
        ("/v1/nouns/team/s/a%5Cb".into(), 400),
        ("/v1/nouns/team/s/a%00b".into(), 400),
        ("/v1/nouns/team//k".into(), 400),
        ("/v1/nouns/%2Fetc/s/k".into(), 400),
        ("/v1/nouns/team/s/.hidden".into(), 400),
        ("/v1/nouns/team/s/%C3%A9".into(), 400),
        ("/v1/nouns/team/s/%FF".into(), 400),
        (format!("/v1/nouns/team/s/{long}"), 400),
        ("/v1/nouns//etc/passwd".into(), 400),
        ("/v1/nouns/team/s/../../k".into(), 404),
        ("/v1/nouns/team/s/k/../../../x".into(), 404),
    ];
    for (path, status) in &cases {
        let put = d.admin.put_json(path, &env).await.unwrap();
        assert_eq!(
            put.status.as_u16(),
            *status,
            "PUT {path}: {}",
            String::from_utf8_lossy(&put.body)
        );
        let get = d.admin.get(path).await.unwrap();
        assert!(
            matches!(get.status.as_u16(), 400 | 404),
            "GET {path}: {}",
            get.status
        );
    }
    assert_eq!(
        files_under(d.root()),
        before,
        "a rejected name wrote a file"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_planted_symlink_pointing_outside_is_not_followed() {
    if !support::nouns_on_root() {
        // Shared nouns have no object files or ref files under the root
        // (tests/shared_nouns.rs checks their bucket and rows).
        return;
    }
    let d = TestDaemon::start().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("k.json"), b"{\"secret\": true}").unwrap();
    std::fs::create_dir_all(d.root().join("nouns/team")).unwrap();
    std::os::unix::fs::symlink(outside.path(), d.root().join("nouns/team/s")).unwrap();

    let read = d.admin.get("/v1/nouns/team/s/k").await.unwrap();
    assert!(!String::from_utf8_lossy(&read.body).contains("secret"));
    assert_ne!(read.status.as_u16(), 200);
    let write = d
        .admin
        .put_json("/v1/nouns/team/s/other", &create(json!(1)))
        .await
        .unwrap();
    assert_ne!(write.status.as_u16(), 201);
    let outside_files: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        outside_files,
        ["k.json"],
        "nothing was written outside the root"
    );
    assert_eq!(
        std::fs::read(outside.path().join("k.json")).unwrap(),
        b"{\"secret\": true}"
    );

    // An object fan-out directory pointing outside is refused as well.
    let put = body(
        &d.admin
            .put_json("/v1/nouns/team/t/k", &create(json!("hello")))
            .await
            .unwrap(),
    );
    let sha = put["sha256"].as_str().unwrap().to_string();
    let fan = d.root().join("objects/sha256").join(&sha[..2]);
    std::fs::create_dir_all(outside.path().join("fan")).unwrap();
    std::fs::copy(
        fan.join(&sha[2..]),
        outside.path().join("fan").join(&sha[2..]),
    )
    .unwrap();
    std::fs::remove_dir_all(&fan).unwrap();
    std::os::unix::fs::symlink(outside.path().join("fan"), &fan).unwrap();
    let mut d = d;
    d.restart().await;
    let read = d.admin.get("/v1/nouns/team/t/k").await.unwrap();
    assert_ne!(
        read.status.as_u16(),
        200,
        "an object behind an outside symlink was served"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flipped_byte_fails_the_read_and_fsck() {
    if !support::nouns_on_root() {
        // Shared nouns have no object files or ref files under the root
        // (tests/shared_nouns.rs checks their bucket and rows).
        return;
    }
    let mut d = TestDaemon::start().await;
    let put = body(
        &d.admin
            .put_json("/v1/nouns/team/s/k", &create(json!({"n": 12345})))
            .await
            .unwrap(),
    );
    let sha = put["sha256"].as_str().unwrap();
    let fsck = || support::offline(&["fsck"], d.root());
    let clean = fsck();
    assert!(
        clean.status.success(),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );

    let file = object_file(d.root(), sha);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[5] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();

    let read = d.admin.get("/v1/nouns/team/s/k").await.unwrap();
    assert_status!(read, 500, "corrupt_object");
    assert!(!read.body.windows(5).any(|w| w == b"12345" || w == b"12245"));
    let dirty = fsck();
    assert_eq!(dirty.status.code(), Some(1));
    let report = String::from_utf8_lossy(&dirty.stdout);
    assert!(
        report.contains(&format!("objects/sha256/{}/{}", &sha[..2], &sha[2..])),
        "{report}"
    );
    assert!(report.contains("nouns/team/s/k.json"), "{report}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sixteen_concurrent_writers_on_one_key_leave_no_gap_and_no_duplicate() {
    let d = TestDaemon::start().await;
    let url = "/v1/nouns/team/s/contended";
    const WRITERS: usize = 16;
    const EACH: usize = 8;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let client = d.admin.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..EACH {
                loop {
                    let current = client.get(&format!("{url}/versions")).await.unwrap();
                    let current = if current.status == 404 {
                        0
                    } else {
                        body(&current)["versions"].as_array().unwrap().len() as u64
                    };
                    let env = json!({"expected_version": current, "body": {"writer": w, "i": i}});
                    let r = client.put_json(url, &env).await.unwrap();
                    match r.status.as_u16() {
                        201 => {
                            acked.push(body(&r)["version"].as_u64().unwrap());
                            break;
                        }
                        409 => continue,
                        s => panic!("unexpected {s}: {}", String::from_utf8_lossy(&r.body)),
                    }
                }
            }
            acked
        }));
    }
    let mut acked: Vec<u64> = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    acked.sort();
    let expected: Vec<u64> = (1..=(WRITERS * EACH) as u64).collect();
    assert_eq!(acked, expected, "every version acknowledged exactly once");

    let list = body(&d.admin.get(&format!("{url}/versions")).await.unwrap());
    let mut seen = std::collections::HashSet::new();
    for (i, v) in list["versions"].as_array().unwrap().iter().enumerate() {
        assert_eq!(v["version"], json!(i + 1));
        let got = d
            .admin
            .get(&format!("{url}?version={}", i + 1))
            .await
            .unwrap();
        let value: Value = serde_json::from_slice(&got.body).unwrap();
        assert!(seen.insert(value.to_string()), "body {value} stored twice");
    }
    assert_eq!(seen.len(), WRITERS * EACH);
}

#[test]
fn one_daemon_per_root_and_sigterm_drains_and_exits_zero() {
    let root = tempfile::tempdir().unwrap();
    let first = DaemonProcess::spawn(root.path());
    let second = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert!(!second.status.success());
    let message = String::from_utf8_lossy(&second.stderr);
    assert!(
        message.contains(&format!("pid {}", first.child.id())),
        "the refusal names the holder: {message}"
    );

    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(root.path().join("auth/admin.key"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let secret = std::fs::read_to_string(root.path().join("auth/admin.key")).unwrap();

    first.signal("TERM");
    let (status, log) = first.wait();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.contains("auth/admin.key"),
        "the log names the key file: {log}"
    );
    assert!(
        !log.contains(secret.trim()),
        "the log must never hold the secret"
    );
    assert!(
        log.contains("tessera started") && log.contains("tessera stopped"),
        "{log}"
    );
}

#[test]
fn unauthenticated_requests_are_401_and_healthz_is_open() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = TestDaemon::start().await;
        let anon = d.admin.anonymous();
        assert_status!(anon.get("/healthz").await.unwrap(), 200);
        assert_status!(
            anon.get("/v1/nouns/a/b/c").await.unwrap(),
            401,
            "unauthenticated"
        );
        let bad = d.client("tsk_kdeadbeefdeadbeef_00");
        assert_status!(
            bad.get("/v1/nouns/a/b/c").await.unwrap(),
            401,
            "unauthenticated"
        );
        let r = anon
            .send(
                http::Method::GET,
                "/v1/nouns/a/b/c",
                None,
                &[("authorization", "Basic abc")],
            )
            .await
            .unwrap();
        assert_status!(r, 401, "unauthenticated");
        assert_status!(d.admin.get("/v1/nope").await.unwrap(), 404, "no_route");
    });
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]
        /// No request body, however broken, makes a route answer 5xx or
        /// drop the connection.
        #[test]
        fn random_bodies_never_cause_a_server_error(
            bodies in proptest::collection::vec(prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..256),
                "\\{(\"[a-z_]{1,12}\": (null|true|1|\"x\"|\\[\\]|\\{\\}), ?){0,6}\\}".prop_map(String::into_bytes),
            ], 12),
        ) {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async {
                let d = TestDaemon::start().await;
                d.admin.post_json("/v1/queues", &json!({"name": "q"})).await.unwrap();
                let routes = [
                    (http::Method::PUT, "/v1/nouns/team/s/k"),
                    (http::Method::POST, "/v1/keys"),
                    (http::Method::POST, "/v1/queues"),
                    (http::Method::POST, "/v1/tasks"),
                    (http::Method::POST, "/v1/queues/q/claim"),
                    (http::Method::POST, "/v1/tasks/t1/submit"),
                    (http::Method::POST, "/v1/tasks/t1/split"),
                    (http::Method::POST, "/v1/batch/nouns"),
                    (http::Method::POST, "/v1/batch/tasks"),
                    (http::Method::POST, "/v1/promotions"),
                    (http::Method::POST, "/v1/worker/submit"),
                    (http::Method::POST, "/v1/nouns/team/s/k/quarantine"),
                ];
                for ((method, path), body) in routes.iter().zip(&bodies) {
                    let r = d.admin.send(method.clone(), path, Some(bytes::Bytes::from(body.clone())), &[]).await.expect("an answer");
                    assert!(r.status.as_u16() < 500, "{method} {path} answered {} to {:?}: {}", r.status, String::from_utf8_lossy(body), String::from_utf8_lossy(&r.body));
                    if !r.status.is_success() {
                        assert!(r.error_code().is_some(), "error bodies have a code");
                    }
                }
            });
        }
    }
}

#[test]
fn sigterm_lets_an_in_flight_request_finish() {
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(root.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let admin = d.admin.clone();
    rt.block_on(async {
        let r = admin
            .post_json("/v1/queues", &json!({"name": "q"}))
            .await
            .unwrap();
        assert_eq!(r.status, 201);
    });
    let poll = rt.spawn(async move {
        admin
            .post_json("/v1/queues/q/claim", &json!({"wait_ms": 1500}))
            .await
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    d.signal("TERM");
    let answer = rt
        .block_on(poll)
        .unwrap()
        .expect("the in-flight long poll gets its answer");
    assert_eq!(
        answer.status, 204,
        "the long poll is answered as having found nothing, not cut off"
    );
    let (status, log) = d.wait();
    assert_eq!(status.code(), Some(0), "{log}");
}
