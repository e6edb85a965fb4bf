//! A key or handle holding a control character (issue 32) was reported
//! as "daemon unreachable": the client built its `Authorization` header
//! from it, failed before sending, and said the daemon could not be
//! reached. Now the client says the credential is malformed (naming the
//! character, never the credential) and sends nothing; and a daemon sent
//! such a header answers 400 or 401, never a 5xx, with the API's error
//! body when the request reaches it.

use crate::support;

use std::process::Command;

use support::*;
use tessera::client::ClientError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Credentials no header can carry, and the character each names.
const MALFORMED: [(&str, &str); 3] = [
    (
        "wh-abc\u{1}def",
        "character 7 is U+0001 (a control character)",
    ),
    ("wh-abc\ndef", "character 7 is U+000A (a control character)"),
    ("wh-abcdéf", "character 8 is U+00E9 (not ASCII)"),
];

#[tokio::test(flavor = "multi_thread")]
async fn the_client_says_a_malformed_credential_is_malformed_and_sends_nothing() {
    let d = TestDaemon::start().await;
    for (credential, named) in MALFORMED {
        let got = d.client(credential).get("/v1/queues").await;
        match got {
            Err(ClientError::MalformedCredential(problem)) => {
                assert_eq!(problem, named, "{credential:?}");
            }
            other => panic!("{credential:?}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_says_the_key_is_malformed_not_that_the_daemon_is_unreachable() {
    let d = TestDaemon::start().await;
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["queue", "list", "--server", d.admin.base()])
        .env("TESSERA_KEY", "tk-abc\u{1}def")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(
        out.status.code(),
        Some(2),
        "nothing was sent, so it is usage (2), not refused (1) or unreachable (3): {stderr}"
    );
    assert!(
        stderr.contains("the key or handle is malformed: character 7 is U+0001"),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot reach"), "{stderr}");
}

/// Sends a raw request whose `Authorization` value is `bearer` (bytes);
/// answers the status line's code and the body.
async fn raw(d: &TestDaemon, bearer: &[u8]) -> (u16, String) {
    let addr = d.admin.base().trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req =
        b"GET /v1/queues HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer "
            .to_vec();
    req.extend_from_slice(bearer);
    req.extend_from_slice(b"\r\n\r\n");
    s.write_all(&req).await.unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    (status, body.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_answers_a_bearer_with_a_bad_character_400_or_401() {
    let d = TestDaemon::start().await;
    for bearer in [
        &b"wh-abc\x01def"[..],
        b"wh-abc\x7fdef",
        b"wh-abc\xe9def",
        b"wh-abc\tdef",
    ] {
        let (status, body) = raw(&d, bearer).await;
        assert!(
            status == 400 || status == 401,
            "{bearer:?}: {status} {body}"
        );
        if status == 401 {
            assert!(
                body.contains("\"code\":\"unauthenticated\""),
                "{bearer:?}: {body}"
            );
        }
    }
}
