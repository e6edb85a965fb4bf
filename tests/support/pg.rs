//! A throwaway PostgreSQL for tests: the cluster at `TESSERA_TEST_PG`
//! (a superuser URL) when it is set, else one this test binary starts
//! itself from the installed server (Debian's `postgresql` package), on
//! a free loopback port, stopped and removed when the test binary exits.
//! Each test takes a fresh database of its own on it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The cluster's superuser URL, without a database.
fn cluster() -> &'static str {
    static CLUSTER: OnceLock<String> = OnceLock::new();
    CLUSTER.get_or_init(|| match std::env::var("TESSERA_TEST_PG") {
        Ok(url) if !url.is_empty() => url.trim_end_matches('/').to_string(),
        // Its own thread: waiting for the server runs a runtime of its own.
        _ => std::thread::spawn(start_cluster).join().unwrap(),
    })
}

/// A new, empty database on the test cluster: its URL.
pub async fn fresh_database() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = tokio::task::spawn_blocking(cluster).await.unwrap();
    let name = format!(
        "t{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    let (client, conn) =
        tokio_postgres::connect(&format!("{base}/postgres"), tokio_postgres::NoTls)
            .await
            .expect("connecting to the test cluster");
    tokio::spawn(conn);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("creating a test database");
    format!("{base}/{name}")
}

/// A task's spec as SQL for rows written by hand (queue `q1`, namespace
/// `ns1`, kind `k1`, effect class `read`), with `brief` (SQL) as its
/// brief: what a claim reads back as the task.
pub fn spec_sql(brief: &str) -> String {
    format!(
        "json_build_object('namespace', 'ns1', 'queue', 'q1', 'kind', 'k1', \
         'effect_class', 'read', 'brief', {brief})"
    )
}

/// Runs `sql` on the database at `url` (test setup and inspection).
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connecting to a test database");
    tokio::spawn(conn);
    client
}

/// The newest installed server's `bin` directory.
fn server_bin() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop().expect(
        "these tests need PostgreSQL: install it (Debian: apt-get install postgresql) \
         or set TESSERA_TEST_PG to a superuser URL such as postgres://postgres@127.0.0.1:5432",
    )
}

/// Starts a cluster for this process; it stops when the process exits.
fn start_cluster() -> String {
    let bin = server_bin();
    let dir = std::env::temp_dir().join(format!("tessera-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    // initdb refuses to run as root: the cluster then belongs to `postgres`.
    let as_server = as_postgres(&dir);
    let data = dir.join("data");
    let init: Vec<String> = as_server
        .iter()
        .cloned()
        .chain(
            [
                &bin.join("initdb").display().to_string(),
                "-D",
                &data.display().to_string(),
                "-U",
                "tessera",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ]
            .map(String::from),
        )
        .collect();
    let out = Command::new(&init[0]).args(&init[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = free_port();
    let server = as_server
        .iter()
        .cloned()
        .chain([
            bin.join("postgres").display().to_string(),
            "-D".into(),
            data.display().to_string(),
            "-k".into(),
            dir.display().to_string(),
            "-c".into(),
            "listen_addresses=127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
            "-c".into(),
            "max_connections=200".into(),
            "-c".into(),
            "fsync=on".into(),
            "-c".into(),
            "synchronous_commit=on".into(),
        ])
        .map(|a| shell_quote(&a))
        .collect::<Vec<_>>()
        .join(" ");
    // A watcher shell: runs the server and stops it (then removes the
    // cluster) once this test process is gone.
    let watcher = format!(
        "{server} >{log} 2>&1 & pg=$!; \
         while kill -0 {me} 2>/dev/null && kill -0 $pg 2>/dev/null; do sleep 0.2; done; \
         kill -INT $pg 2>/dev/null; wait $pg; rm -rf {dir}",
        log = shell_quote(&dir.join("log").display().to_string()),
        me = std::process::id(),
        dir = shell_quote(&dir.display().to_string()),
    );
    #[expect(
        clippy::zombie_processes,
        reason = "the watcher outlives this process on purpose: it stops the server after it"
    )]
    outliving(&watcher);
    let url = format!("postgres://tessera@127.0.0.1:{port}");
    wait_ready(&url, &dir);
    url
}

/// The command prefix that runs a program as `postgres` when this
/// process is root (and hands it `dir`), else nothing.
fn as_postgres(dir: &Path) -> Vec<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    if !root {
        return Vec::new();
    }
    let chown = Command::new("chown")
        .args(["postgres:postgres", &dir.display().to_string()])
        .status()
        .unwrap();
    assert!(chown.success(), "chown of the test cluster's folder failed");
    [
        "setpriv",
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--",
    ]
    .map(String::from)
    .to_vec()
}

fn wait_ready(url: &str, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    loop {
        let up = rt.block_on(async {
            tokio_postgres::connect(&format!("{url}/postgres"), tokio_postgres::NoTls)
                .await
                .is_ok()
        });
        if up {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the test cluster did not start in 30 s; its log: {}",
            std::fs::read_to_string(dir.join("log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `s` quoted for `sh`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A loopback port free now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `script` with `sh` in the background: a watcher that starts a
/// test server and stops it once this process is gone, so it outlives
/// this process on purpose and is never waited for (the caller may look
/// whether it ended early).
pub fn outliving(script: &str) -> std::process::Child {
    Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The queue database of a daemon on `root` when the suite runs against
/// PostgreSQL (`TESSERA_TEST_BACKEND=postgres`), made on first use: one
/// per root, so a daemon started again on its root finds its queue.
/// `None` on the embedded backend.
#[allow(
    dead_code,
    reason = "the integration tests' daemons use it; the bench that shares this file does not"
)]
pub fn backend_url(root: &Path) -> Option<String> {
    if !matches!(
        std::env::var("TESSERA_TEST_BACKEND").as_deref(),
        Ok("postgres" | "shared")
    ) {
        return None;
    }
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    root.hash(&mut h);
    let name = format!("r{:016x}", h.finish());
    let base = cluster().to_string();
    let url = format!("{base}/{name}");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let client = connect(&format!("{base}/postgres")).await;
            let exists = client
                .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
                .await
                .unwrap()
                .is_some();
            if !exists {
                client
                    .batch_execute(&format!("CREATE DATABASE {name}"))
                    .await
                    .expect("creating a test database");
            }
        });
    })
    .join()
    .unwrap();
    Some(url)
}
