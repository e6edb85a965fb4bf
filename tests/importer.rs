//! `tessera import` over real HTTP: the in-process daemon on 127.0.0.1 and
//! the real binary, with an issued importer key. Plan, apply and re-apply;
//! YAML and TOML give the same records; every invalid pack fails with its
//! expected report and writes nothing; catalog pins gate the import;
//! conflicts stop an import before it writes. The batch routes' access
//! rows are in `importer/batch_access.rs`, watch mode in `importer/watch.rs`,
//! orphans, `--prune` and shared nouns in `importer/orphans.rs`, and
//! what a plan says about edits in `importer/plans.rs`.

use crate::support;

#[path = "importer/batch_access.rs"]
mod batch_access;
#[path = "importer/orphans.rs"]
mod orphans;
#[path = "importer/packs.rs"]
mod packs;
#[path = "importer/plans.rs"]
mod plans;
#[path = "importer/watch.rs"]
mod watch;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use support::{NS, SURFACE, TestDaemon, body, files_under};
use tempfile::TempDir;
use tessera::client::Client;

/// How long one run of the binary may take before the test fails.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// A daemon with queue `work.external`, and an importer key written to a file.
pub(crate) struct Env {
    pub(crate) d: TestDaemon,
    pub(crate) importer: Client,
    pub(crate) key_file: PathBuf,
    _keys: TempDir,
}

/// What one run of `tessera import` printed, and its exit code.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// The last stdout line: the summary.
    pub(crate) fn summary(&self) -> &str {
        self.stdout.lines().last().unwrap_or_default()
    }
}

/// The grants of the importer key, without the scopes in `drop`.
pub(crate) fn importer_grants(drop: &[&str]) -> Value {
    let scopes: Vec<String> = [
        format!("namespace:{NS}"),
        format!("surface:{SURFACE}"),
        "nouns:read".into(),
        "cas:write".into(),
        "verbs:enqueue".into(),
    ]
    .into_iter()
    .filter(|s| !drop.contains(&s.as_str()))
    .collect();
    json!({
        "queues": ["work.external"],
        "kinds": ["verb.solve_draft", "verb.verify_gate"],
        "effect_classes": ["write-internal"],
        "scopes": scopes,
    })
}

impl Env {
    pub(crate) async fn start() -> Env {
        Env::start_with(|_| {}).await
    }

    /// Starts with an adjusted daemon config.
    pub(crate) async fn start_with(adjust: impl FnOnce(&mut tessera::config::Config)) -> Env {
        let d = TestDaemon::start_with(adjust).await;
        let r = d
            .admin
            .post_json("/v1/queues", &json!({"name": "work.external"}))
            .await
            .unwrap();
        assert_status!(r, 201);
        let secret = Env::issue(&d, importer_grants(&[])).await;
        let keys = tempfile::tempdir().unwrap();
        let key_file = keys.path().join("importer.key");
        std::fs::write(&key_file, format!("{secret}\n")).unwrap();
        Env {
            importer: d.client(&secret),
            d,
            key_file,
            _keys: keys,
        }
    }

    /// Issues a key with `grants` and returns its secret.
    pub(crate) async fn issue(d: &TestDaemon, grants: Value) -> String {
        let r = d
            .admin
            .post_json("/v1/keys", &json!({"label": "importer", "grants": grants}))
            .await
            .unwrap();
        assert_status!(r, 201);
        body(&r)["secret"].as_str().unwrap().to_string()
    }

    /// The command line of `tessera import PACK ARGS` against this daemon.
    pub(crate) fn command(&self, pack: &Path, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tessera"));
        cmd.arg("import")
            .arg(pack)
            .args(args)
            .args(["--server", self.d.admin.base(), "--key-file"])
            .arg(&self.key_file)
            .env_remove("TESSERA_KEY")
            .env_remove("TESSERA_SERVER")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `tessera import PACK ARGS` to the end.
    pub(crate) async fn import(&self, pack: &Path, args: &[&str]) -> Run {
        let out = tokio::time::timeout(RUN_LIMIT, self.command(pack, args).output())
            .await
            .expect("tessera import finished in time")
            .expect("tessera import ran");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Every file under the root's `nouns/`, `objects/` and `journal/`,
    /// with its size and modification time: equal before and after means
    /// nothing was written.
    pub(crate) fn written(&self) -> Vec<(String, u64, SystemTime)> {
        let mut out = Vec::new();
        for area in ["nouns", "objects", "journal"] {
            let dir = self.d.root().join(area);
            for file in files_under(&dir) {
                let meta = std::fs::metadata(dir.join(&file)).unwrap();
                out.push((
                    format!("{area}/{file}"),
                    meta.len(),
                    meta.modified().unwrap(),
                ));
            }
        }
        out
    }

    /// Every task, as admin sees it.
    pub(crate) async fn tasks(&self) -> Vec<Value> {
        let r = self.d.admin.get("/v1/tasks?limit=1000").await.unwrap();
        assert_status!(r, 200);
        body(&r)["tasks"].as_array().unwrap().clone()
    }

    /// The versions of a noun in the team namespace (0 when missing).
    pub(crate) async fn versions(&self, store: &str, key: &str) -> usize {
        let r = self
            .d
            .admin
            .get(&format!("/v1/nouns/{NS}/{store}/{key}/versions"))
            .await
            .unwrap();
        match r.status.as_u16() {
            404 => 0,
            _ => body(&r)["versions"].as_array().unwrap().len(),
        }
    }
}

/// `seeds/<name>` in this repository.
pub(crate) fn seeds(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(name)
}

/// Copies a pack folder (plain files and folders) into `to`.
pub(crate) fn copy_pack(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for file in files_under(from) {
        let target = to.join(&file);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(from.join(&file), target).unwrap();
    }
}

/// Asserts two texts are equal line by line, printing both when not.
#[macro_export]
macro_rules! assert_lines {
    ($got:expr, $want:expr) => {{
        let got: Vec<&str> = $got.lines().collect();
        let owned = $want;
        let want: Vec<&str> = owned.iter().map(|s| -> &str { s.as_ref() }).collect();
        assert!(
            got == want,
            "output differs\n--- got:\n{}\n--- want:\n{}",
            got.join("\n"),
            want.join("\n")
        );
    }};
}
