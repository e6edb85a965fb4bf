//! Test support: a real daemon on 127.0.0.1:0 with a temporary root, either
//! in-process (`TestDaemon`) or as a child process that can be SIGKILLed and
//! restarted (`DaemonProcess`), plus helpers that read like the domain.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;
use tessera::client::{Client, Reply};
use tessera::config::Config;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Asserts a reply's status, printing the body when it differs.
#[macro_export]
macro_rules! assert_status {
    ($reply:expr, $status:expr) => {{
        let r = &$reply;
        assert_eq!(
            r.status.as_u16(),
            $status,
            "unexpected status; body: {}",
            String::from_utf8_lossy(&r.body)
        );
    }};
    ($reply:expr, $status:expr, $code:expr) => {{
        let r = &$reply;
        assert_eq!(
            (r.status.as_u16(), r.error_code().as_deref()),
            ($status, Some($code)),
            "unexpected answer; body: {}",
            String::from_utf8_lossy(&r.body)
        );
    }};
}

/// A daemon running in this process.
pub struct TestDaemon {
    /// The temporary root (removed on drop).
    pub root: TempDir,
    /// A client holding the admin key.
    pub admin: Client,
    /// The admin secret.
    pub admin_key: String,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestDaemon {
    /// Starts a daemon on a fresh temporary root.
    pub async fn start() -> TestDaemon {
        Self::start_with(|_| {}).await
    }

    /// Starts a daemon after `adjust` edits the default config.
    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> TestDaemon {
        let root = tempfile::tempdir().expect("temp root");
        let (admin, admin_key, shutdown, task) = launch(root.path(), adjust).await;
        TestDaemon {
            root,
            admin,
            admin_key,
            shutdown: Some(shutdown),
            task: Some(task),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// A client with another credential.
    pub fn client(&self, bearer: &str) -> Client {
        self.admin.with_bearer(bearer)
    }

    /// Stops gracefully and waits for the root's lock to be released.
    pub async fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("daemon task");
        }
    }

    /// Stops and starts again on the same root.
    pub async fn restart(&mut self) {
        self.stop().await;
        let (admin, admin_key, shutdown, task) = launch(self.root.path(), |_| {}).await;
        self.admin = admin;
        self.admin_key = admin_key;
        self.shutdown = Some(shutdown);
        self.task = Some(task);
    }
}

async fn launch(
    root: &Path,
    adjust: impl FnOnce(&mut Config),
) -> (
    Client,
    String,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let mut config = Config {
        root: root.to_path_buf(),
        ..Config::default()
    };
    adjust(&mut config);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        tessera::daemon::run(config, listener, async {
            let _ = rx.await;
        })
        .await
        .expect("daemon runs");
    });
    let base = format!("http://{addr}");
    let anon = Client::new(&base);
    for _ in 0..200 {
        if anon.get("/healthz").await.is_ok_and(|r| r.status == 200) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let key = std::fs::read_to_string(root.join("auth/admin.key"))
        .expect("admin key written on first start")
        .trim()
        .to_string();
    (anon.with_bearer(&key), key, tx, task)
}

/// The daemon binary as a child process, for SIGKILL and signal tests.
pub struct DaemonProcess {
    /// The child.
    pub child: Child,
    /// The admin client.
    pub admin: Client,
    /// The bound address.
    pub base: String,
    /// What the daemon wrote to stderr, once it has exited.
    stderr_path: PathBuf,
}

impl DaemonProcess {
    /// Spawns `tessera serve --root ROOT --listen 127.0.0.1:0` and waits for its address.
    pub fn spawn(root: &Path) -> DaemonProcess {
        let stderr_path = root.with_extension(format!("stderr.{}", std::process::id()));
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["serve", "--listen", "127.0.0.1:0", "--root"])
            .arg(root)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn tessera");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the address line");
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let key = std::fs::read_to_string(root.join("auth/admin.key")).expect("admin key");
        DaemonProcess {
            child,
            admin: Client::new(&base).with_bearer(key.trim()),
            base,
            stderr_path,
        }
    }

    /// SIGKILL, then reap.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// Sends a signal by name (TERM, INT) with the `kill` command.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill command");
        assert!(status.success());
    }

    /// Waits for exit and returns the status and what it logged.
    pub fn wait(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().expect("wait");
        let log = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let _ = std::fs::remove_file(&self.stderr_path);
        (status, log)
    }
}

/// A noun put envelope creating version 1 with a JSON body.
pub fn create(body: Value) -> Value {
    json!({"expected_version": 0, "body": body})
}

/// Every file under `dir`, relative, sorted (for "nothing was written" checks).
pub fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            if entry.file_type().expect("type").is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// The JSON body of a reply, panicking with the text when it is not JSON.
pub fn body(reply: &Reply) -> Value {
    serde_json::from_slice(&reply.body)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&reply.body)))
}
