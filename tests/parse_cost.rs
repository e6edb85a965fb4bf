//! Regression: JSON bodies cost about 20 times their size in memory once
//! parsed, outside the body budget, so N concurrent maximum-size bodies
//! could take 20 times `max_body_bytes_in_flight`. The budget now holds a
//! body's parsed cost too (`http::budget::parsed_cost`); here each shape
//! of JSON is parsed in a child process whose peak memory measures what
//! parsing takes, and the estimate must bound it; over HTTP a body whose bytes fit the budget
//! but whose parsed form does not is refused (`503 busy` while others
//! hold the budget, `413` when it could never fit).

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::TestDaemon;
use tessera::http::budget::parsed_cost;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The daemon's allocator (`src/main.rs`): what parsing takes is measured
/// with the allocator that takes it. (With the system's, the peak moved
/// with how the process had allocated before, by the size of a
/// reallocation, not with the parse.)
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Shapes of JSON, each a few MB.
const SHAPES: usize = 10;

/// Shape `i`: its name and its text (built alone, so that a measuring
/// child holds no freed memory that parsing could reuse unseen).
fn shape(i: usize) -> (&'static str, String) {
    let n = 400_000;
    match i {
        0 => ("zeros", format!("[{}0]", "0,".repeat(n * 2))),
        1 => (
            "tiny objects",
            format!("[{}{{}}]", "{\"a\":1},".repeat(n / 2)),
        ),
        2 => ("empty objects", format!("[{}{{}}]", "{},".repeat(n))),
        3 => ("empty arrays", format!("[{}[]]", "[],".repeat(n))),
        4 => (
            "one-letter strings",
            format!("[{}\"x\"]", "\"x\",".repeat(n)),
        ),
        5 => (
            "a wide object",
            serde_json::to_string(
                &(0..n / 2)
                    .map(|i| (format!("k{i}"), json!(i)))
                    .collect::<serde_json::Map<_, _>>(),
            )
            .unwrap(),
        ),
        6 => (
            "a long string",
            serde_json::to_string(&"y".repeat(n * 8)).unwrap(),
        ),
        7 => (
            "escapes",
            serde_json::to_string(&"\"\\\n".repeat(n)).unwrap(),
        ),
        8 => ("floats", format!("[{}1.5]", "1.5e10,".repeat(n / 2))),
        _ => (
            "nested pairs",
            format!("[{}0]", "[0,[1,{\"k\":[2]}]],".repeat(n / 8)),
        ),
    }
}

/// The peak resident set size of this process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// In a child process (this test binary, run again for one shape): the
/// peak memory parsing the shape as a `Value` takes, printed.
#[test]
fn measure_one_shape() {
    let Ok(i) = std::env::var("TESSERA_MEASURE_SHAPE") else {
        return;
    };
    let (_, text) = shape(i.parse().unwrap());
    // Resets the peak to the current resident size (Linux clear_refs).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = peak_rss();
    let v: Value = serde_json::from_slice(text.as_bytes()).unwrap();
    let after = peak_rss();
    println!("\nPARSED {}", after - before);
    drop(v);
}

#[test]
fn the_parsed_cost_estimate_bounds_what_parsing_takes() {
    if std::fs::write("/proc/self/clear_refs", "5").is_err() {
        eprintln!("skipping: /proc/self/clear_refs is not writable here");
        return;
    }
    // The test's name in this binary: its module path without the crate.
    let (_, module) = module_path!().split_once("::").unwrap();
    let measure = format!("{module}::measure_one_shape");
    for i in 0..SHAPES {
        let (what, text) = shape(i);
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &measure, "--nocapture", "--test-threads", "1"])
            .env("TESSERA_MEASURE_SHAPE", i.to_string())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        let took: u64 = said
            .lines()
            .find_map(|l| l.split("PARSED ").nth(1))
            .unwrap_or_else(|| panic!("{what}: {said}"))
            .trim()
            .parse()
            .unwrap();
        let estimate = parsed_cost(text.as_bytes());
        eprintln!(
            "{what}: {} bytes, {took} parsed, {estimate} estimated",
            text.len()
        );
        assert!(
            estimate >= took,
            "{what}: {} bytes took {took} parsed, estimated {estimate}",
            text.len()
        );
        assert!(
            estimate <= took * 8,
            "{what}: the estimate {estimate} is far above the {took} bytes it took"
        );
    }
}

/// Starts a noun put that declares `len` bytes and sends only a few, so
/// its reservation holds that much of the budget.
async fn hold(addr: &str, key: &str, len: usize) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "PUT /v1/nouns/ns/s/held HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n{{"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s
}

#[test]
fn a_body_whose_parsed_form_does_not_fit_the_budget_is_refused() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let d = TestDaemon::start_with(|c| {
            c.limits.max_body_bytes_in_flight = 1024 * 1024;
            c.limits.max_body_bytes = 1024 * 1024;
        })
        .await;
        let addr = d.admin.base().strip_prefix("http://").unwrap().to_string();
        let zeros = |n: usize| json!({"expected_version": 0, "body": vec![0; n]});

        // Alone, 4 KB of zeros (2,000 values) fit.
        let r = d.admin.put_json("/v1/nouns/ns/s/a", &zeros(2_000)).await.unwrap();
        assert_status!(r, 201);

        // With 900 KiB of the budget held by a body on its way, their bytes
        // would still fit but their parsed form does not: busy, retry.
        let mut held = hold(&addr, &d.admin_key, 900 * 1024).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        for (key, via) in [("b", "put"), ("c", "batch")] {
            let r = match via {
                "put" => d.admin.put_json(&format!("/v1/nouns/ns/s/{key}"), &zeros(2_000)).await,
                _ => {
                    let items = json!({"items": [{"namespace": "ns", "store": "s", "key": key, "envelope": zeros(2_000)}]});
                    d.admin.post_json("/v1/batch/nouns", &items).await
                }
            }
            .unwrap();
            assert_status!(r, 503, "busy");
        }
        held.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), held.read_to_end(&mut rest)).await;
        drop(held);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = d.admin.put_json("/v1/nouns/ns/s/b", &zeros(2_000)).await.unwrap();
        assert_status!(r, 201);

        // 400 KB of zeros fit the body limit and the budget as bytes, but
        // parsed they would take many times the whole budget: never.
        let r = d.admin.put_json("/v1/nouns/ns/s/d", &zeros(200_000)).await.unwrap();
        assert_status!(r, 413, "body_too_large");
        assert!(
            r.value()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("parsed"),
            "{}",
            String::from_utf8_lossy(&r.body)
        );
    });
}
