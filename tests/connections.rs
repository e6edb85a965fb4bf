//! Connections are bounded and stopping is prompt.
//!
//! What broke: idle connections were never timed out, so about 20,000
//! unauthenticated idle connections used up the daemon's file descriptors
//! and `/healthz` stopped answering; each large body in flight held up to
//! 8 MB, and 128 at once peaked at 1 GB; and a SIGTERM waited for every
//! long-poll claim to run its course (up to 30 s).
//!
//! Every test talks to a real daemon on 127.0.0.1 over raw TCP where the
//! point is what a misbehaving client does.

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{DaemonProcess, TestDaemon, body, create};
use tessera::client::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The address behind a client's base URL.
fn addr_of(c: &Client) -> SocketAddr {
    c.base()
        .strip_prefix("http://")
        .expect("an http base")
        .parse()
        .expect("a socket address")
}

/// Reads until the daemon closes the connection (or `limit` passes);
/// returns what arrived and how long it took, `None` when it stayed open.
async fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (String, Option<Duration>) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = limit.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), None),
            Ok(Ok(0) | Err(_)) => {
                return (
                    String::from_utf8_lossy(&got).into_owned(),
                    Some(start.elapsed()),
                );
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one response (head and `Content-Length` body) without waiting
/// for the connection to close.
async fn read_response(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("a response within 5 s")
            .expect("read");
        assert!(n > 0, "closed before a whole response: {text:?}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Entries in /proc/<pid>/fd.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// The client side of the flood needs more descriptors than the default.
fn raise_own_open_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    l.current = l.maximum;
    setrlimit(Resource::Nofile, l).unwrap();
}

/// How long a request took and its answer.
async fn timed(
    f: impl std::future::Future<Output = tessera::client::Reply>,
) -> (Duration, tessera::client::Reply) {
    let start = Instant::now();
    let r = f.await;
    (start.elapsed(), r)
}

const CAP: usize = 500;
const FLOOD: usize = 3_000;

#[test]
fn an_idle_flood_six_times_the_cap_leaves_healthz_and_reads_answering_with_fds_bounded() {
    raise_own_open_file_limit();
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn_with_config(
        root.path(),
        &format!("[limits]\nmax_connections = {CAP}\n"),
    );
    let key = std::fs::read_to_string(root.path().join("auth/admin.key")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let r = d
            .admin
            .put_json("/v1/nouns/team/s/k", &create(json!({"n": 1})))
            .await
            .unwrap();
        assert_status!(r, 201);
        let before = open_fds(d.pid());
        let addr = addr_of(&d.admin);
        let mut flood = Vec::with_capacity(FLOOD);
        for _ in 0..FLOOD {
            flood.push(TcpStream::connect(addr).await.expect("connect"));
        }

        let (took, r) = timed(async { Client::new(&d.base).get("/healthz").await.unwrap() }).await;
        assert_status!(r, 200);
        assert!(took < Duration::from_secs(1), "/healthz took {took:?}");
        let reader = Client::new(&d.base).with_bearer(key.trim());
        let (read_took, r) = timed(async { reader.get("/v1/nouns/team/s/k").await.unwrap() }).await;
        assert_status!(r, 200);
        assert_eq!(body(&r), json!({"n": 1}));
        assert!(
            read_took < Duration::from_secs(1),
            "the read took {read_took:?}"
        );

        let during = open_fds(d.pid());
        eprintln!(
            "held {FLOOD} idle connections against a cap of {CAP}: /healthz {took:?}, \
             noun read {read_took:?}, daemon fds {before} before, {during} during"
        );
        assert!(
            during <= before + CAP + 32,
            "{during} descriptors open with a cap of {CAP} ({before} before the flood)"
        );
        let r = reader.get("/metrics").await.unwrap();
        assert_status!(r, 200);
        let text = String::from_utf8(r.body.to_vec()).unwrap();
        let evicted = support::sample(&text, "tessera_connections_evicted_total");
        assert!(
            evicted >= Some((FLOOD - CAP) as f64),
            "the flood pushed itself out: {evicted:?}"
        );
        let open = support::sample(&text, "tessera_connections_open");
        assert!(open <= Some(CAP as f64), "{open:?} open, cap {CAP}");
        drop(flood);
    });
    d.signal("TERM");
    let (status, log) = d.wait_within(Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{log}");
    assert!(
        log.contains("closed the connection idle longest"),
        "evictions are logged: {log}"
    );
}

#[test]
fn a_half_sent_head_and_an_idle_keep_alive_connection_are_closed_after_the_header_timeout() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = TestDaemon::start_with(|c| c.limits.header_timeout_ms = 300).await;
        let addr = addr_of(&d.admin);

        let mut half = TcpStream::connect(addr).await.unwrap();
        half.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
            .await
            .unwrap();
        let (_, closed) = read_until_closed(&mut half, Duration::from_secs(5)).await;
        let closed = closed.expect("a half-sent head is closed");
        assert!(
            (Duration::from_millis(250)..Duration::from_secs(2)).contains(&closed),
            "closed after {closed:?}"
        );

        let mut kept = TcpStream::connect(addr).await.unwrap();
        kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .await
            .unwrap();
        assert!(read_response(&mut kept).await.starts_with("HTTP/1.1 200"));
        let (_, closed) = read_until_closed(&mut kept, Duration::from_secs(5)).await;
        let closed = closed.expect("an idle keep-alive connection is closed");
        assert!(
            (Duration::from_millis(250)..Duration::from_secs(2)).contains(&closed),
            "closed {closed:?} after its last answer"
        );

        // The timeout bounds waiting for a head, not a request in flight.
        let r = d
            .admin
            .post_json("/v1/queues", &json!({"name": "q"}))
            .await
            .unwrap();
        assert_status!(r, 201);
        let (took, r) = timed(async {
            d.admin
                .post_json("/v1/queues/q/claim", &json!({"wait_ms": 900}))
                .await
                .unwrap()
        })
        .await;
        assert_status!(r, 204);
        assert!(took >= Duration::from_millis(850), "{took:?}");
    });
}

/// Sends a noun put's head and the first `sent` bytes of its body, and
/// returns the connection and the rest of the body.
async fn start_put(
    addr: SocketAddr,
    key: &str,
    path: &str,
    size: usize,
    sent: usize,
) -> (TcpStream, Vec<u8>) {
    let body = serde_json::to_vec(&create(json!({"pad": "x".repeat(size)}))).unwrap();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body[..sent]).await.unwrap();
    (s, body[sent..].to_vec())
}

#[test]
fn bodies_past_the_in_flight_budget_answer_busy_until_the_held_ones_finish() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = TestDaemon::start_with(|c| c.limits.max_body_bytes_in_flight = 1024 * 1024).await;
        let addr = addr_of(&d.admin);
        let key = d.admin_key.clone();
        // Two bodies of 200 KB hold 400 KB; parsed, each will take about
        // 2.5 times its size (`budget::parsed_cost`), which both fit.
        let put = |path, size, sent| start_put(addr, &key, path, size, sent);
        let (mut first, first_rest) = put("/v1/nouns/team/s/a", 200_000, 1_000).await;
        let (mut second, second_rest) = put("/v1/nouns/team/s/b", 200_000, 1_000).await;
        tokio::time::sleep(Duration::from_millis(500)).await;

        let (mut third, _) = put("/v1/nouns/team/s/c", 700_000, 0).await;
        let answer = read_response(&mut third).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("retry-after: 1\r\n"),
            "{answer}"
        );
        let json_body: Value =
            serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(json_body["error"]["code"], "busy");
        assert!(
            json_body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("retry"),
            "{json_body}"
        );

        // A chunked body reserves as it arrives: about 610 KiB are left,
        // the tenth 64 KiB chunk is past them.
        let mut chunked = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "PUT /v1/nouns/team/s/d HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {key}\r\n\
             Transfer-Encoding: chunked\r\n\r\n"
        );
        chunked.write_all(head.as_bytes()).await.unwrap();
        for _ in 0..10 {
            chunked.write_all(b"10000\r\n").await.unwrap();
            chunked.write_all(&[b' '; 0x10000]).await.unwrap();
            chunked.write_all(b"\r\n").await.unwrap();
        }
        let answer = read_response(&mut chunked).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("\"busy\""), "{answer}");

        for (s, rest) in [(&mut first, first_rest), (&mut second, second_rest)] {
            s.write_all(&rest).await.unwrap();
            let answer = read_response(s).await;
            assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
        }
        let r = d
            .admin
            .put_json(
                "/v1/nouns/team/s/c",
                &create(json!({"pad": "x".repeat(200_000)})),
            )
            .await
            .unwrap();
        assert_status!(r, 201);
    });
}

#[test]
fn at_the_cap_with_every_connection_busy_a_new_one_is_refused_with_503() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = TestDaemon::start_with(|c| c.limits.max_connections = 4).await;
        let r = d
            .admin
            .post_json("/v1/queues", &json!({"name": "q"}))
            .await
            .unwrap();
        assert_status!(r, 201);
        // A poll connected but not yet through its head is idle, so a
        // probe that comes first closes it, and its next try may find the
        // probe's request in flight and be refused: such a poll asks again.
        let polls: Vec<_> = (0..4)
            .map(|_| {
                let c = Client::new(d.admin.base()).with_bearer(&d.admin_key);
                tokio::spawn(async move {
                    for _ in 0..50 {
                        let claim = json!({"wait_ms": 5000});
                        match c.post_json("/v1/queues/q/claim", &claim).await {
                            Ok(r) if r.status != 503 => return r,
                            _ => tokio::time::sleep(Duration::from_millis(20)).await,
                        }
                    }
                    panic!("a long poll was never served");
                })
            })
            .collect();

        let mut answers = Vec::new();
        let refusal = loop {
            let mut probe = TcpStream::connect(addr_of(&d.admin)).await.unwrap();
            probe
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let (answer, closed) = read_until_closed(&mut probe, Duration::from_secs(2)).await;
            assert!(closed.is_some(), "the probe's connection is closed");
            if answer.starts_with("HTTP/1.1 503") {
                break answer;
            }
            answers.push(answer);
            assert!(answers.len() < 40, "never refused: {answers:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        for header in ["Retry-After: 1\r\n", "Connection: close\r\n"] {
            assert!(refusal.contains(header), "{refusal:?}");
        }

        for poll in polls {
            assert_status!(poll.await.unwrap(), 204);
        }
        let r = d.admin.get("/metrics").await.unwrap();
        assert_status!(r, 200);
        let text = String::from_utf8(r.body.to_vec()).unwrap();
        let refused = support::sample(&text, "tessera_connections_refused_total");
        assert!(refused >= Some(1.0), "{text}");
        assert_status!(d.admin.anonymous().get("/healthz").await.unwrap(), 200);
    });
}

/// How long after the signal the daemon must be gone (the README's bound).
const STOP_BOUND: Duration = Duration::from_secs(5);

#[test]
fn sigterm_answers_long_polls_at_once_closes_idle_connections_and_exits_within_the_bound() {
    let root = tempfile::tempdir().unwrap();
    let d = DaemonProcess::spawn(root.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let admin = d.admin.clone();
    let task_id = rt.block_on(async {
        for q in ["q", "other"] {
            let r = admin
                .post_json("/v1/queues", &json!({"name": q}))
                .await
                .unwrap();
            assert_status!(r, 201);
        }
        let r = admin
            .put_json(
                "/v1/nouns/team/s/kept",
                &create(json!({"acknowledged": true})),
            )
            .await
            .unwrap();
        assert_status!(r, 201);
        let r = admin
            .post_json(
                "/v1/tasks",
                &json!({"namespace": "team", "queue": "other", "kind": "verb.compute",
                        "effect_class": "write-internal", "producer_surface": "team",
                        "brief": {"keep": true}}),
            )
            .await
            .unwrap();
        assert_status!(r, 201);
        body(&r)["task_id"].as_str().unwrap().to_string()
    });
    let key = std::fs::read_to_string(root.path().join("auth/admin.key")).unwrap();
    let polls: Vec<_> = (0..8)
        .map(|_| {
            let c = Client::new(&d.base).with_bearer(key.trim());
            rt.spawn(async move {
                let r = c
                    .post_json("/v1/queues/q/claim", &json!({"wait_ms": 30000}))
                    .await
                    .unwrap();
                (r, Instant::now())
            })
        })
        .collect();
    let addr = addr_of(&d.admin);
    let (mut idle, mut half) = rt.block_on(async {
        let idle = TcpStream::connect(addr).await.unwrap();
        let mut half = TcpStream::connect(addr).await.unwrap();
        half.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        (idle, half)
    });

    let signalled = Instant::now();
    d.signal("TERM");
    rt.block_on(async {
        for poll in polls {
            let (r, at) = poll.await.unwrap();
            assert_status!(r, 204);
            let after = at - signalled;
            assert!(
                after < Duration::from_secs(2),
                "a long poll answered {after:?} after the signal"
            );
        }
        for s in [&mut idle, &mut half] {
            let (_, closed) = read_until_closed(s, Duration::from_secs(2)).await;
            assert!(
                closed.is_some(),
                "idle and half-sent connections are closed"
            );
        }
    });
    let (status, log) = d.wait_within(STOP_BOUND + Duration::from_secs(5));
    let took = signalled.elapsed();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{log}");
    assert!(took < STOP_BOUND, "exited {took:?} after the signal: {log}");
    eprintln!("8 long polls answered and the daemon exited {took:?} after SIGTERM");

    let again = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        let r = again.admin.get("/v1/nouns/team/s/kept").await.unwrap();
        assert_status!(r, 200);
        assert_eq!(body(&r), json!({"acknowledged": true}));
        let r = again
            .admin
            .get(&format!("/v1/tasks/{task_id}"))
            .await
            .unwrap();
        assert_status!(r, 200);
    });
    again.signal("TERM");
    let (status, log) = again.wait_within(Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{log}");
}

/// How a refused request's connection ended.
#[derive(Debug, PartialEq)]
enum After {
    /// It answered a second request.
    Kept,
    /// The answer said `Connection: close`, and the daemon then closed.
    Closed,
}

/// Sends `head` (then `body`, in a second write after `gap`), reads the
/// answer, and sees what the connection does next: a second request must
/// be answered, unless the answer said `Connection: close`, after which
/// the daemon must close. Anything else (closing without saying so,
/// saying so and staying open) fails.
async fn refused_then(addr: SocketAddr, head: &str, body: &[u8], gap: Duration) -> (u16, After) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    if !body.is_empty() {
        tokio::time::sleep(gap).await;
        // The daemon may have answered and closed already: a write then
        // fails, which is no answer in itself.
        let _ = s.write_all(body).await;
    }
    let answer = read_response(&mut s).await;
    let status: u16 = answer[9..12].parse().unwrap();
    let says_close = answer
        .split("\r\n\r\n")
        .next()
        .unwrap()
        .lines()
        .any(|l| l.eq_ignore_ascii_case("connection: close"));
    if says_close {
        let (_, closed) = read_until_closed(&mut s, Duration::from_secs(3)).await;
        assert!(closed.is_some(), "{status}: said close and stayed open");
        return (status, After::Closed);
    }
    let again = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    let sent = s.write_all(again.as_bytes()).await;
    assert!(
        sent.is_ok(),
        "{status}: closed without saying `Connection: close`"
    );
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            other => panic!(
                "{status}: closed (or silent) after the answer without saying `Connection: close`: {other:?}; answer was {answer:?}"
            ),
        }
    }
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    (status, After::Kept)
}

/// One refusal kind: its name, the request (head, body), the status it
/// gets, and what the connection must do after (`None`: either).
type Refusal = (&'static str, (String, Vec<u8>), u16, Option<After>);

/// Regression: after some refusals the daemon closed a kept-alive
/// connection without sending `Connection: close` (14 of 20 trials): a
/// refusal answered before the body was read left hyper to drop the
/// connection once the answer was out. Now a small unread body is read
/// and thrown away, so the connection stays usable; past that, the
/// answer says `Connection: close` and the daemon closes. Each refusal
/// kind, twenty times, with the body in the head's packet and after it.
#[test]
fn every_refusal_either_keeps_the_connection_or_says_it_closes() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = TestDaemon::start_with(|c| {
            c.limits.max_body_bytes = 4096;
            c.limits.header_timeout_ms = 500;
        })
        .await;
        let addr = addr_of(&d.admin);
        let key = &d.admin_key;
        let json = |path: &str, auth: bool, body: &str| {
            let auth = if auth {
                format!("Authorization: Bearer {key}\r\n")
            } else {
                String::new()
            };
            (
                format!(
                    "POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                ),
                body.as_bytes().to_vec(),
            )
        };
        let big = "x".repeat(100_000);
        let spec = r#"{"namespace":"ns","queue":"q","kind":"verb.k","effect_class":"read","producer_surface":"s","brief":{}}"#;
        let cases: Vec<Refusal> = vec![
            ("413 declared too large", json("/v1/tasks", true, &big), 413, Some(After::Closed)),
            ("400 malformed JSON", json("/v1/tasks", true, "{nope"), 400, Some(After::Kept)),
            ("401 no key, with a body", json("/v1/tasks", false, spec), 401, Some(After::Kept)),
            ("401 no key, a large body", json("/v1/tasks", false, &"y".repeat(3000)), 401, None),
            ("404 no route, with a body", json("/v1/nowhere", true, spec), 404, Some(After::Kept)),
            ("422 unknown queue", json("/v1/tasks", true, spec), 404, None),
            (
                "415 /mcp as text",
                (
                    format!("POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Type: text/plain\r\nAccept: application/json, text/event-stream\r\nContent-Length: 5\r\n\r\n"),
                    b"hello".to_vec(),
                ),
                400,
                Some(After::Kept),
            ),
        ];
        for (what, (head, body), status, after) in &cases {
            for trial in 0..20 {
                let gap = Duration::from_millis(if trial % 2 == 0 { 0 } else { 20 });
                let (got, how) = if trial % 2 == 0 {
                    let mut whole = head.clone().into_bytes();
                    whole.extend_from_slice(body);
                    refused_then(addr, &String::from_utf8(whole).unwrap(), b"", gap).await
                } else {
                    refused_then(addr, head, body, gap).await
                };
                assert!(
                    got == *status || (*what == "422 unknown queue" && got == 422),
                    "{what}: {got}"
                );
                if let Some(after) = after {
                    assert_eq!(&how, after, "{what}, trial {trial}");
                }
            }
        }

        // A body that stops halfway: 408, said and closed.
        let head = format!("PUT /v1/nouns/ns/s/k HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nContent-Length: 100\r\n\r\n{{\"body\":");
        let (got, how) = refused_then(addr, &head, b"", Duration::ZERO).await;
        assert_eq!((got, how), (408, After::Closed));
        // A request hyper cannot parse: 400, said and closed.
        let (got, how) = refused_then(addr, "NOT HTTP AT ALL\r\n\r\n", b"", Duration::ZERO).await;
        assert_eq!((got, how), (400, After::Closed));
    });
}
