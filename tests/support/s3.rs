//! A throwaway S3-compatible object store for tests: the server at
//! `TESSERA_TEST_S3` (an `http://` endpoint URL) when it is set, else a
//! moto server (`moto_server`, Python) this test binary starts itself on
//! a free loopback port, stopped when the test binary exits. Each test
//! takes a fresh bucket of its own on it.
//!
//! The helpers here speak plain HTTP/1.1 to the server with a credentials
//! header that is no signature: moto checks none, but refuses a request
//! on an existing object that carries no `Authorization` at all (an
//! anonymous one, 403).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::pg::{free_port, outliving, shell_quote};

/// What an object key keeps unencoded in a URL path.
const KEY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
/// What a query value keeps unencoded.
const QUERY: &AsciiSet = &KEY.add(b'/');

/// The `Authorization` every request carries (moto checks no signature).
const CREDENTIALS: &str = "AWS4-HMAC-SHA256 \
     Credential=testing/20000101/us-east-1/s3/aws4_request, \
     SignedHeaders=host, Signature=0";

/// The server's endpoint URL, without a trailing slash.
pub fn endpoint() -> &'static str {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT.get_or_init(|| match std::env::var("TESSERA_TEST_S3") {
        Ok(url) if !url.is_empty() => url.trim_end_matches('/').to_string(),
        _ => start_server(),
    })
}

/// A new, empty bucket on the test server: its name.
pub fn fresh_bucket() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // The clock as well as the pid: a server given in TESSERA_TEST_S3
    // outlives test binaries, a later one may get this one's pid, and
    // creating a bucket that exists succeeds (it would not be empty).
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!(
        "t{}-{nanos:x}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    ok("creating a test bucket", "PUT", &format!("/{name}"), b"");
    name
}

/// With `TESSERA_TEST_BACKEND=shared`, the bucket the daemons on `root`
/// keep their noun objects in (one per root, made on first use, so a
/// restarted daemon finds its objects); `None` on the other backends.
pub fn backend_bucket(root: &Path) -> Option<String> {
    if super::nouns_on_root() {
        return None;
    }
    use std::hash::{Hash, Hasher};
    static MADE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut h = std::collections::hash_map::DefaultHasher::new();
    root.hash(&mut h);
    let name = format!("r{:016x}", h.finish());
    let mut made = MADE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !made.contains(&name) {
        ok("creating a test bucket", "PUT", &format!("/{name}"), b"");
        made.push(name.clone());
    }
    Some(name)
}

/// The test server's S3 settings, as a config file's `[objects]` holds
/// them (the bucket's URL aside).
pub fn settings() -> std::collections::BTreeMap<String, toml::Value> {
    [
        ("endpoint", endpoint().to_string()),
        ("access_key_id", "testing".into()),
        ("secret_access_key", "testing".into()),
        ("region", "us-east-1".into()),
        ("allow_http", "true".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), toml::Value::String(v)))
    .collect()
}

/// The environment a daemon needs to keep its objects in `bucket`.
pub fn env(bucket: &str) -> Vec<(&'static str, String)> {
    vec![
        ("TESSERA_OBJECTS_URL", format!("s3://{bucket}")),
        ("AWS_ENDPOINT_URL", endpoint().to_string()),
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ALLOW_HTTP", "true".into()),
    ]
}

/// Every key in `bucket`, in the server's (byte) order.
pub fn object_keys(bucket: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut path = format!("/{bucket}?list-type=2");
    loop {
        let xml = ok("listing a test bucket", "GET", &path, b"");
        let xml = String::from_utf8_lossy(&xml);
        keys.extend(elements(&xml, "Key"));
        if elements(&xml, "IsTruncated").first().map(String::as_str) != Some("true") {
            return keys;
        }
        let token = elements(&xml, "NextContinuationToken")
            .pop()
            .unwrap_or_else(|| panic!("a truncated listing without a token: {xml}"));
        path = format!(
            "/{bucket}?list-type=2&continuation-token={}",
            utf8_percent_encode(&token, QUERY)
        );
    }
}

/// Writes `bytes` as the object `key` in `bucket`, over what is there
/// (a test damaging an object).
pub fn put_raw(bucket: &str, key: &str, bytes: &[u8]) {
    let path = format!("/{bucket}/{}", utf8_percent_encode(key, KEY));
    ok("putting a test object", "PUT", &path, bytes);
}

/// The bytes of the object `key` in `bucket`; `None` when there is none.
pub fn get_raw(bucket: &str, key: &str) -> Option<Vec<u8>> {
    let path = format!("/{bucket}/{}", utf8_percent_encode(key, KEY));
    let url = format!("{}{path}", endpoint());
    let (status, body) = request("GET", &url, b"")
        .unwrap_or_else(|e| panic!("getting a test object: GET {url}: {e}"));
    match status {
        200 => Some(body),
        404 => None,
        s => panic!(
            "getting a test object: GET {url} answered {s}: {}",
            String::from_utf8_lossy(&body)
        ),
    }
}

/// Sends `method path` (`path` on the endpoint) with `body`, for `what`:
/// the answer's body, panicking with the answer when it is not a success.
fn ok(what: &str, method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let url = format!("{}{path}", endpoint());
    let (status, answer) =
        request(method, &url, body).unwrap_or_else(|e| panic!("{what}: {method} {url}: {e}"));
    assert!(
        (200..300).contains(&status),
        "{what}: {method} {url} answered {status}: {}",
        String::from_utf8_lossy(&answer)
    );
    answer
}

/// One HTTP/1.1 exchange with the server at `url` (`http://` only): the
/// answer's status and body.
fn request(method: &str, url: &str, body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| std::io::Error::other("the S3 test helpers speak http:// only"))?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let mut stream = TcpStream::connect(authority)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: {CREDENTIALS}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let bad =
        |why: &str| std::io::Error::other(format!("{why}: {}", String::from_utf8_lossy(&raw)));
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("an answer without the end of its head"))?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("an answer without a status"))?;
    let chunked = head
        .lines()
        .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
    let body = if chunked {
        dechunk(&raw[end + 4..]).ok_or_else(|| bad("a broken chunked answer"))?
    } else {
        raw[end + 4..].to_vec()
    };
    Ok((status, body))
}

/// A chunked body's bytes (moto's server chunks answers of no stated length).
fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&rest[..line]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// The text of every `<tag>` element in `xml`, unescaped.
fn elements(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    xml.split(open.as_str())
        .skip(1)
        .filter_map(|s| s.split_once(close.as_str()))
        .map(|(text, _)| {
            text.replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&apos;", "'")
                .replace("&amp;", "&")
        })
        .collect()
}

/// The installed `moto_server`: on PATH, else in the venv that
/// `scripts/s3-server` installs it into.
fn moto_server() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain(cache.map(|c| c.join("tessera-moto").join("bin")))
        .map(|dir| dir.join("moto_server"))
        .find(|p| p.is_file())
        .expect(
            "these tests need an S3 server: install moto (pip install 'moto[server]') \
             or set TESSERA_TEST_S3 to an endpoint URL such as http://127.0.0.1:5000",
        )
}

/// Starts a moto server for this process; it stops when the process exits.
fn start_server() -> String {
    let moto = moto_server();
    let port = free_port();
    let log = std::env::temp_dir().join(format!("tessera-s3-{}.log", std::process::id()));
    // A watcher shell: runs the server and stops it once this test
    // process is gone, then removes the log (kept while this process
    // lives if the server stopped by itself, for the message below).
    let watcher = format!(
        "{moto} -H 127.0.0.1 -p {port} >{log} 2>&1 & s=$!; \
         while kill -0 {me} 2>/dev/null && kill -0 $s 2>/dev/null; do sleep 0.2; done; \
         kill $s 2>/dev/null; wait $s; kill -0 {me} 2>/dev/null || rm -f {log}",
        moto = shell_quote(&moto.display().to_string()),
        log = shell_quote(&log.display().to_string()),
        me = std::process::id(),
    );
    let watcher = outliving(&watcher);
    let url = format!("http://127.0.0.1:{port}");
    wait_ready(&url, watcher, &log);
    url
}

/// Waits until the server at `url` answers HTTP (any status), panicking
/// with its log when its `watcher` ends first or 30 s pass. The watcher
/// is not waited for after that: it outlives this process on purpose.
fn wait_ready(url: &str, mut watcher: Child, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if request("GET", url, b"").is_ok() {
            return;
        }
        let stopped = watcher.try_wait().unwrap().is_some();
        if stopped || Instant::now() >= deadline {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let _ = std::fs::remove_file(log);
            panic!("the test S3 server (moto) did not start; its log: {text}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
