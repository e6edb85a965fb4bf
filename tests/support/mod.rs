//! Test support: a real daemon on 127.0.0.1:0 with a temporary root, either
//! in-process (`TestDaemon`) or as a child process that can be SIGKILLed and
//! restarted (`DaemonProcess`), plus helpers that read like the domain.

pub mod flow;
pub mod netns;
pub mod pg;
pub mod relay;
pub mod s3;
pub mod sse;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// Whether the suite runs against the embedded backend (the root's
/// journal), not PostgreSQL (`TESSERA_TEST_BACKEND=postgres`, or
/// `shared`: the queue and the noun refs in PostgreSQL, the objects in
/// S3): what only the journal has (its files, `recover`, a full disk
/// refusing task changes) is checked there.
pub fn embedded() -> bool {
    !matches!(
        std::env::var("TESSERA_TEST_BACKEND").as_deref(),
        Ok("postgres" | "shared")
    )
}

/// Whether the suite's nouns are shared (`TESSERA_TEST_BACKEND=shared`):
/// their objects in S3 and their refs in PostgreSQL, not files under
/// the root; what only the root's noun files have (ref files, the noun
/// log, objects on disk) is checked elsewhere.
pub fn nouns_on_root() -> bool {
    std::env::var("TESSERA_TEST_BACKEND").as_deref() != Ok("shared")
}

/// Whether the object `sha` (hex) is stored for the daemon on `root`:
/// as a file under it, or in its bucket when the nouns are shared.
pub fn object_stored(root: &Path, sha: &str) -> bool {
    let key = format!("objects/sha256/{}/{}", &sha[..2], &sha[2..]);
    root.join(&key).exists()
        || s3::backend_bucket(root).is_some_and(|b| s3::get_raw(&b, &key).is_some())
}

/// A daemon running in this process.
pub struct TestDaemon {
    /// The temporary root (removed on drop).
    pub root: TempDir,
    /// A client holding the admin key.
    pub admin: Client,
    /// The admin secret.
    pub admin_key: String,
    /// The listening socket, kept across restarts so the address stays ours
    /// (a freed port can be taken by another test's outgoing connection).
    socket: std::net::TcpListener,
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
        let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        socket.set_nonblocking(true).expect("nonblocking");
        let (admin, admin_key, shutdown, task) = launch(root.path(), &socket, adjust).await;
        TestDaemon {
            root,
            admin,
            admin_key,
            socket,
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

    /// Stops and starts again on the same root and address, so existing
    /// clients keep working.
    pub async fn restart(&mut self) {
        self.restart_with(|_| {}).await;
    }

    /// Stops and starts again with an adjusted config.
    pub async fn restart_with(&mut self, adjust: impl FnOnce(&mut Config)) {
        self.stop().await;
        let (admin, admin_key, shutdown, task) =
            launch(self.root.path(), &self.socket, adjust).await;
        self.admin = admin;
        self.admin_key = admin_key;
        self.shutdown = Some(shutdown);
        self.task = Some(task);
    }
}

async fn launch(
    root: &Path,
    socket: &std::net::TcpListener,
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
    config.queue.url = pg::backend_url(root);
    if let Some(bucket) = s3::backend_bucket(root) {
        config.objects.url = Some(format!("s3://{bucket}"));
        config.objects.settings = s3::settings();
    }
    adjust(&mut config);
    let listener =
        TcpListener::from_std(socket.try_clone().expect("clone the socket")).expect("listener");
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
    // A daemon that failed to start would leave the test's requests
    // waiting on a socket nobody answers: fail with its error instead.
    let task = if task.is_finished() {
        task.await.expect("the daemon failed to start");
        panic!("the daemon stopped right after starting");
    } else {
        task
    };
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
    /// Its config file, removed with the stderr file.
    config_path: PathBuf,
}

impl DaemonProcess {
    /// Spawns `tessera serve --root ROOT --listen 127.0.0.1:0` and waits for its address.
    pub fn spawn(root: &Path) -> DaemonProcess {
        Self::spawn_with_config(root, "")
    }

    /// Spawns with its queue in the PostgreSQL database at `queue_url`,
    /// its admin client using the key in its root's `auth/admin.key` (the
    /// first daemon on a database writes it there).
    pub fn spawn_shared(root: &Path, queue_url: &str) -> DaemonProcess {
        Self::launch(root, "", Some(queue_url))
    }

    /// Spawns with its queue and noun refs in the database at
    /// `queue_url` and its noun objects in the test S3 server's `bucket`
    /// (`serve --objects-url`), with `first`'s admin key, or writing its
    /// own when it is the first.
    pub fn spawn_sharing(
        root: &Path,
        queue_url: &str,
        bucket: &str,
        first: Option<&DaemonProcess>,
    ) -> DaemonProcess {
        Self::spawn_sharing_with(root, "", queue_url, bucket, first)
    }

    /// Spawns another daemon on the database at `queue_url`, whose admin
    /// client uses `first`'s admin key: the keys are the database's, so
    /// this one writes none.
    pub fn spawn_shared_beside(
        root: &Path,
        queue_url: &str,
        first: &DaemonProcess,
    ) -> DaemonProcess {
        Self::launch_as(root, "", Some(queue_url), Some(first.admin_key()))
    }

    /// [`DaemonProcess::spawn_sharing`] with `config` (TOML) as its
    /// `--config` file.
    pub fn spawn_sharing_with(
        root: &Path,
        config: &str,
        queue_url: &str,
        bucket: &str,
        first: Option<&DaemonProcess>,
    ) -> DaemonProcess {
        let key = first.map(|f| f.admin_key());
        let shared = (Some(queue_url), Some(bucket));
        Self::launch_with(root, config, shared, key, &[], "127.0.0.1:0")
    }

    /// The secret its admin client sends.
    pub fn admin_key(&self) -> &str {
        self.admin.bearer().expect("an admin client has a key")
    }

    /// Spawns with `config` (TOML) as its `--config` file, written beside
    /// the root.
    pub fn spawn_with_config(root: &Path, config: &str) -> DaemonProcess {
        Self::launch(root, config, pg::backend_url(root).as_deref())
    }

    /// Spawns on the database at `queue_url` with its command run through
    /// `wrap` (say `ip netns exec NS`) and listening on `listen`, with
    /// `first`'s admin key, or writing its own when it is the first.
    pub fn spawn_shared_at(
        root: &Path,
        queue_url: &str,
        first: Option<&DaemonProcess>,
        wrap: &[&str],
        listen: &str,
    ) -> DaemonProcess {
        let key = first.map(|f| f.admin_key());
        Self::launch_at(root, "", Some(queue_url), key, wrap, listen)
    }

    fn launch(root: &Path, config: &str, queue_url: Option<&str>) -> DaemonProcess {
        Self::launch_as(root, config, queue_url, None)
    }

    fn launch_as(
        root: &Path,
        config: &str,
        queue_url: Option<&str>,
        key: Option<&str>,
    ) -> DaemonProcess {
        Self::launch_at(root, config, queue_url, key, &[], "127.0.0.1:0")
    }

    fn launch_at(
        root: &Path,
        config: &str,
        queue_url: Option<&str>,
        key: Option<&str>,
        wrap: &[&str],
        listen: &str,
    ) -> DaemonProcess {
        let bucket = queue_url.and_then(|_| s3::backend_bucket(root));
        Self::launch_with(
            root,
            config,
            (queue_url, bucket.as_deref()),
            key,
            wrap,
            listen,
        )
    }

    /// Spawns with its queue in the database at `queue_url` and its noun
    /// objects in `bucket` of the test S3 server, when given.
    fn launch_with(
        root: &Path,
        config: &str,
        (queue_url, bucket): (Option<&str>, Option<&str>),
        key: Option<&str>,
        wrap: &[&str],
        listen: &str,
    ) -> DaemonProcess {
        let stderr_path = root.with_extension(format!("stderr.{}", std::process::id()));
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let config_path = root.with_extension(format!("config.{}.toml", std::process::id()));
        std::fs::write(&config_path, config).expect("config file");
        let bin = env!("CARGO_BIN_EXE_tessera");
        let mut serve = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        if let Some(url) = queue_url {
            serve.env("TESSERA_QUEUE_URL", url);
        }
        if let Some(bucket) = bucket {
            serve.envs(s3::env(bucket));
        }
        let mut child = serve
            .args(["serve", "--listen", listen, "--config"])
            .arg(&config_path)
            .arg("--root")
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
        let Some(base) = line
            .trim()
            .strip_prefix("listening on ")
            .map(str::to_string)
        else {
            let _ = child.wait();
            let log = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            panic!("the daemon did not start (first line {line:?}); its log:\n{log}");
        };
        let key = match key {
            Some(k) => k.to_string(),
            None => std::fs::read_to_string(root.join("auth/admin.key")).expect("admin key"),
        };
        DaemonProcess {
            child,
            admin: Client::new(&base).with_bearer(key.trim()),
            base,
            stderr_path,
            config_path,
        }
    }

    /// SIGKILL, then reap.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
        let _ = std::fs::remove_file(&self.config_path);
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

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits at most `limit` for exit; returns the status (`None`: still
    /// running after `limit`, then SIGKILLed) and what it logged.
    pub fn wait_within(mut self, limit: Duration) -> (Option<std::process::ExitStatus>, String) {
        let deadline = std::time::Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break Some(status);
            }
            if std::time::Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let log = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let _ = std::fs::remove_file(&self.stderr_path);
        let _ = std::fs::remove_file(&self.config_path);
        (status, log)
    }

    /// Waits for exit and returns the status and what it logged.
    pub fn wait(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().expect("wait");
        let log = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let _ = std::fs::remove_file(&self.stderr_path);
        let _ = std::fs::remove_file(&self.config_path);
        (status, log)
    }
}

/// A daemon still running when its test ends (or panics) is SIGKILLed
/// and reaped, so no test leaves one behind.
impl Drop for DaemonProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.config_path);
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

/// A team in one namespace: requester, worker and resumer keys sharing a
/// surface, with explicit queue, kind, namespace and action grants, and
/// an outsider of another surface. Queues `work.external` and the server
/// queue `work.server` are provisioned.
pub struct Team {
    /// The daemon.
    pub d: TestDaemon,
    /// Enqueues and owns the work.
    pub requester: Client,
    /// Claims and submits.
    pub worker: Client,
    /// Resumes parked tasks; neither requester nor worker.
    pub resumer: Client,
    /// Same namespace, another surface.
    pub outsider: Client,
    /// Key ids by role.
    pub ids: std::collections::HashMap<&'static str, String>,
}

/// The team's namespace and surface.
pub const NS: &str = "conformance-routing";
/// The team's surface.
pub const SURFACE: &str = "team_example";

impl Team {
    /// Starts a daemon and provisions the team.
    pub async fn start() -> Team {
        Self::start_with(|_| {}).await
    }

    /// Starts with an adjusted config.
    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> Team {
        let d = TestDaemon::start_with(adjust).await;
        for q in [
            json!({"name": "work.external", "lease_ttl_s": 30, "max_attempts": 3, "backoff": {"base_ms": 50, "cap_ms": 200}}),
            json!({"name": "work.server", "lease_ttl_s": 30, "max_attempts": 3, "server": true}),
            json!({"name": "work.short", "lease_ttl_s": 1, "max_attempts": 2, "backoff": {"base_ms": 50, "cap_ms": 100}}),
        ] {
            let r = d.admin.post_json("/v1/queues", &q).await.unwrap();
            assert_status!(r, 201);
        }
        let kinds = json!(["verb.solve_draft", "verb.verify_gate", "verb.compute"]);
        let queues = json!(["work.external", "work.short"]);
        let effects = json!(["read", "write-internal", "write-repo"]);
        let common = [
            format!("namespace:{NS}"),
            format!("surface:{SURFACE}"),
            "nouns:read".into(),
            "cas:write".into(),
        ];
        let with = |extra: &[&str]| -> Vec<String> {
            common
                .iter()
                .cloned()
                .chain(extra.iter().map(|s| s.to_string()))
                .collect()
        };
        let roles: [(&'static str, Value); 4] = [
            (
                "requester",
                json!({"label": "requester", "account_id": "acct-team", "grants": {"queues": queues, "kinds": kinds, "effect_classes": effects, "scopes": with(&["verbs:enqueue"])}}),
            ),
            (
                "worker",
                json!({"label": "worker", "account_id": "acct-team", "grants": {"queues": queues, "kinds": kinds, "effect_classes": effects, "scopes": with(&["verbs:claim", "verbs:submit"])}}),
            ),
            (
                "resumer",
                json!({"label": "resumer", "grants": {"queues": queues, "kinds": kinds, "effect_classes": effects, "scopes": with(&["verbs:enqueue"])}}),
            ),
            (
                "outsider",
                json!({"label": "outsider", "grants": {"queues": queues, "kinds": kinds, "effect_classes": effects, "scopes": [format!("namespace:{NS}"), "surface:elsewhere", "nouns:read", "cas:write", "verbs:claim", "verbs:submit", "verbs:enqueue"]}}),
            ),
        ];
        let mut clients = std::collections::HashMap::new();
        let mut ids = std::collections::HashMap::new();
        for (role, spec) in roles {
            let r = d.admin.post_json("/v1/keys", &spec).await.unwrap();
            assert_status!(r, 201);
            let b = body(&r);
            clients.insert(role, d.client(b["secret"].as_str().unwrap()));
            ids.insert(role, b["key_id"].as_str().unwrap().to_string());
        }
        Team {
            requester: clients.remove("requester").unwrap(),
            worker: clients.remove("worker").unwrap(),
            resumer: clients.remove("resumer").unwrap(),
            outsider: clients.remove("outsider").unwrap(),
            ids,
            d,
        }
    }
}

/// A task spec in the team's namespace on `work.external`.
pub fn spec(kind: &str, brief: Value) -> Value {
    json!({
        "namespace": NS,
        "queue": "work.external",
        "kind": kind,
        "effect_class": "write-internal",
        "producer_surface": format!("surface:{SURFACE}"),
        "visibility_scope": "surface_only",
        "brief": brief,
    })
}

/// Enqueues and returns the new task id.
pub async fn enqueue(c: &Client, spec: &Value) -> String {
    let r = c.post_json("/v1/tasks", spec).await.unwrap();
    assert_status!(r, 201);
    body(&r)["task_id"].as_str().unwrap().to_string()
}

/// Enqueues `items` in one batch and returns the batch's answer.
pub async fn enqueue_batch(c: &Client, items: &[Value]) -> Value {
    let r = c
        .post_json("/v1/batch/tasks", &json!({ "items": items }))
        .await
        .unwrap();
    assert_status!(r, 200);
    body(&r)
}

/// Claims the next task on `queue` (no waiting); `None` on 204.
pub async fn claim(c: &Client, queue: &str) -> Option<Value> {
    let r = c
        .post_json(&format!("/v1/queues/{queue}/claim"), &json!({}))
        .await
        .unwrap();
    match r.status.as_u16() {
        200 => Some(body(&r)),
        204 => None,
        s => panic!("claim answered {s}: {}", String::from_utf8_lossy(&r.body)),
    }
}

/// The lease id of a claim.
pub fn lease(claim: &Value) -> String {
    claim["lease"]["id"].as_str().unwrap().to_string()
}

/// The task id of a claim.
pub fn claimed_id(claim: &Value) -> String {
    claim["task"]["task_id"].as_str().unwrap().to_string()
}

/// Submits and returns the reply.
pub async fn submit(c: &Client, id: &str, lease: &str, ok: bool, outputs: Value) -> Reply {
    c.post_json(
        &format!("/v1/tasks/{id}/submit"),
        &json!({"lease_id": lease, "ok": ok, "outputs": outputs}),
    )
    .await
    .unwrap()
}

/// A task as its viewer sees it.
pub async fn task(c: &Client, id: &str) -> Value {
    let r = c.get(&format!("/v1/tasks/{id}")).await.unwrap();
    assert_status!(r, 200);
    body(&r)
}

/// Puts a JSON noun in the team namespace and returns its pin.
pub async fn put_noun(c: &Client, store: &str, key: &str, body_value: Value) -> Value {
    let r = c
        .put_json(
            &format!("/v1/nouns/{NS}/{store}/{key}"),
            &json!({"skip_unchanged": true, "body": body_value}),
        )
        .await
        .unwrap();
    assert!(
        r.status == 200 || r.status == 201,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let b = body(&r);
    json!({"namespace": NS, "store": store, "key": key, "version": b["version"], "sha256": b["sha256"]})
}

/// Waits until `f` holds, polling every 20 ms, for at most `secs` seconds.
pub async fn eventually<F, Fut>(secs: u64, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !f().await {
        assert!(
            std::time::Instant::now() < deadline,
            "condition not reached in {secs} s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What an offline command printed: its stdout, then its stderr.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A start on `root` that must be refused: what it printed.
pub fn refused_start(root: &Path) -> String {
    let out = offline(&["serve", "--listen", "127.0.0.1:0"], root);
    assert!(!out.status.success(), "the daemon started: {}", text(&out));
    text(&out)
}

/// Runs `tessera ARGS --root ROOT` (an offline command: fsck, recover) to
/// its end, at most 30 s; with the root's queue database on the
/// PostgreSQL backend.
pub fn offline(args: &[&str], root: &Path) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tessera"));
    if let Some(url) = pg::backend_url(root) {
        command.env("TESSERA_QUEUE_URL", url);
    }
    if let Some(bucket) = s3::backend_bucket(root) {
        command.envs(s3::env(&bucket));
    }
    let mut child = command
        .args(args)
        .arg("--root")
        .arg(root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tessera");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tessera {args:?} did not finish in 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Asserts that `tessera fsck` finds nothing wrong under `root`.
pub fn fsck_is_clean(root: &Path) {
    let out = offline(&["fsck"], root);
    assert!(
        out.status.success(),
        "fsck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An acknowledged put: its URL, version, sha256 and the body sent.
pub type AckedPut = (String, u64, String, Value);

/// Sixteen clients put `versions` versions per key (new stores, new
/// fan-out directories, ref files swapped with their shadows) into a
/// daemon on `root` until it is SIGKILLed after `ms`; what was
/// acknowledged.
pub fn puts_then_kill(
    root: &Path,
    rt: &tokio::runtime::Runtime,
    round: u64,
    versions: u64,
    ms: u64,
) -> Vec<AckedPut> {
    let daemon = DaemonProcess::spawn(root);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..16)
        .map(|c| {
            let admin = daemon.admin.clone();
            let stop = stop.clone();
            rt.spawn(async move {
                let mut mine = Vec::new();
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let url = format!("/v1/nouns/r{round}/c{c}/k{}", i / versions);
                    let sent = json!({"round": round, "c": c, "i": i, "pad": "x".repeat(100 + (i as usize % 7) * 50)});
                    let env = json!({"expected_version": i % versions, "body": sent});
                    match admin.put_json(&url, &env).await {
                        Ok(r) if r.status == 201 => {
                            let b = body(&r);
                            let sha = b["sha256"].as_str().unwrap().to_string();
                            mine.push((url, b["version"].as_u64().unwrap(), sha, sent));
                        }
                        Ok(r) => panic!(
                            "unexpected {}: {}",
                            r.status,
                            String::from_utf8_lossy(&r.body)
                        ),
                        Err(_) => break, // killed mid-request: not acknowledged
                    }
                    i += 1;
                }
                mine
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(ms));
    daemon.kill();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    clients
        .into_iter()
        .flat_map(|c| rt.block_on(c).unwrap())
        .collect()
}

/// Reads every acknowledged version back by pin and compares its bytes'
/// hash and its body with what was sent.
pub fn check_puts(root: &Path, rt: &tokio::runtime::Runtime, acked: &[AckedPut]) {
    let daemon = DaemonProcess::spawn(root);
    rt.block_on(async {
        for (url, version, sha, sent) in acked {
            let r = daemon
                .admin
                .get(&format!("{url}?version={version}&sha256={sha}"))
                .await
                .unwrap();
            assert_eq!(
                r.status,
                200,
                "{url} v{version} was acknowledged but is gone: {}",
                String::from_utf8_lossy(&r.body)
            );
            assert_eq!(
                tessera::store::Sha256::of(&r.body).hex(),
                *sha,
                "{url} v{version} reads back other bytes"
            );
            let got: Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(&got, sent, "{url} v{version} reads back another body");
        }
    });
    daemon.kill();
}

/// The value of the `/metrics` sample line `name` (labels included,
/// exactly) in `text`.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}
