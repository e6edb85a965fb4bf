//! The fault matrix: every kind of file the root holds × five faults
//! (a flipped byte, truncated to half, cut at a record, missing, a zeroed
//! page). For every cell `tessera fsck` exits 1, and the daemon either
//! refuses to start naming the file, or starts with nothing acknowledged
//! lost (every acknowledged task, receipt, noun version and key as it was
//! acknowledged), or, for bytes kept nowhere else (an object, a pack of
//! receipts), refuses to serve them, never serving other bytes. The test
//! prints the matrix it found.
//!
//! What broke before: 13 of 158 storage faults lost acknowledged data
//! silently (or under a "never acknowledged" torn-tail warning) and fsck
//! exited 0 for every one of them.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{body, offline};
use tessera::client::Client;
use tessera::store::log::segment;

/// A small journal, so a run makes several segments and a fold.
const CONFIG: &str = "[queue]\njournal_segment_mib = 1\nfold_journal_mib = 1\n";

/// What the workload had acknowledged.
#[derive(Clone, Debug, Default)]
struct Acked {
    /// Task id and the state it was acknowledged in.
    tasks: Vec<(String, String)>,
    /// Task id and a receipt sha256 it was acknowledged with.
    receipts: Vec<(String, String)>,
    /// Noun URL, version, sha256 and body.
    nouns: Vec<(String, u64, String, Value)>,
    /// A worker key's secret.
    key: String,
}

/// A daemon started on a root: running, or refused with what it logged.
enum Start {
    Running { child: Child, admin: Box<Client> },
    Refused(String),
}

fn start(root: &Path) -> Start {
    let log = root.with_extension("stderr");
    let cfg = root.with_extension("toml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg("--root")
        .arg(root)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    match line.trim().strip_prefix("listening on ") {
        Some(base) => {
            let key = std::fs::read_to_string(root.join("auth/admin.key")).unwrap();
            let admin = Client::new(base).with_bearer(key.trim());
            Start::Running {
                child,
                admin: Box::new(admin),
            }
        }
        None => {
            let _ = child.wait();
            Start::Refused(std::fs::read_to_string(&log).unwrap_or_default())
        }
    }
}

fn kill(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn running(root: &Path) -> (Child, Client) {
    match start(root) {
        Start::Running { child, admin } => (child, *admin),
        Start::Refused(log) => panic!("the daemon did not start: {log}"),
    }
}

async fn enqueue(c: &Client, brief: Value) -> String {
    let spec = json!({"namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read", "producer_surface": "s", "visibility_scope": "surface_only", "brief": brief});
    let r = c.post_json("/v1/tasks", &spec).await.unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    body(&r)["task_id"].as_str().unwrap().to_string()
}

/// Claims the next task as `c` and submits it through the key route.
async fn cycle(c: &Client, acked: &mut Acked) {
    let claim = c.post_json("/v1/queues/q/claim", &json!({})).await.unwrap();
    assert_eq!(
        claim.status,
        200,
        "{}",
        String::from_utf8_lossy(&claim.body)
    );
    let claim = body(&claim);
    let id = claim["task"]["task_id"].as_str().unwrap().to_string();
    let r = c
        .post_json(
            &format!("/v1/tasks/{id}/submit"),
            &json!({"lease_id": claim["lease"]["id"], "ok": true}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let sha = body(&r)["receipt_sha256"].as_str().unwrap().to_string();
    acked.receipts.push((id.clone(), sha));
    for t in &mut acked.tasks {
        if t.0 == id {
            t.1 = "succeeded".into();
        }
    }
}

/// Puts version `v` of noun `k` of `store` (`r<k>` in `settled`, put in
/// the first run only, so its ref is in no noun log).
async fn put(c: &Client, store: &str, k: usize, v: u64, acked: &mut Acked) {
    let prefix = if store == "settled" { "r" } else { "k" };
    let url = format!("/v1/nouns/ns/{store}/{prefix}{k}");
    let sent = json!({"store": store, "k": k, "v": v, "pad": "p".repeat(300)});
    let r = c
        .put_json(
            &url,
            &json!({"expected_version": v - 1, "producer_surface": "s", "body": sent}),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let sha = body(&r)["sha256"].as_str().unwrap().to_string();
    acked.nouns.push((url, v, sha, sent));
}

/// Builds the root every cell starts from: a first run (many tasks, so
/// segments are sealed and folded into a snapshot; receipts; noun
/// versions; a worker key; a ctx-dir) stopped gracefully, then a second
/// run killed with its journal and noun log segments open.
fn prepare(rt: &tokio::runtime::Runtime, root: &Path) -> Acked {
    let mut acked = Acked::default();
    let (child, admin) = running(root);
    rt.block_on(async {
        let r = admin.post_json("/v1/queues", &json!({"name": "q"})).await.unwrap();
        assert_eq!(r.status, 201);
        let grants = json!({"queues": ["q"], "kinds": ["verb.k"], "effect_classes": ["read"],
            "scopes": ["namespace:ns", "surface:s", "nouns:read", "cas:write", "verbs:claim", "verbs:submit", "verbs:enqueue"]});
        let r = admin.post_json("/v1/keys", &json!({"label": "worker", "grants": grants})).await.unwrap();
        acked.key = body(&r)["secret"].as_str().unwrap().to_string();
        for i in 0..100 {
            let id = enqueue(&admin, json!({"i": i, "pad": "x".repeat(1000)})).await;
            acked.tasks.push((id, "queued".into()));
        }
        let worker = admin.with_bearer(&acked.key);
        for _ in 0..20 {
            cycle(&worker, &mut acked).await;
        }
        // One worker-route submit, for a ctx-dir.
        let claim = body(&worker.post_json("/v1/queues/q/claim", &json!({})).await.unwrap());
        let id = claim["task"]["task_id"].as_str().unwrap().to_string();
        let handle = admin.with_bearer(claim["handle"].as_str().unwrap());
        let r = handle.post_bytes("/v1/worker/submit", bytes::Bytes::from_static(b"projected body")).await.unwrap();
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        acked.receipts.push((id.clone(), body(&r)["receipt_sha256"].as_str().unwrap().into()));
        for t in &mut acked.tasks {
            if t.0 == id {
                t.1 = "succeeded".into();
            }
        }
        for k in 0..10 {
            for v in 1..=2 {
                put(&admin, "s", k, v, &mut acked).await;
            }
        }
        for k in 0..3 {
            put(&admin, "settled", k, 1, &mut acked).await;
        }
        // Enough after them that a fold covers the segments holding the
        // receipts, whose sole copy is then their pack.
        for i in 100..2500 {
            let id = enqueue(&admin, json!({"i": i, "pad": "x".repeat(1000)})).await;
            acked.tasks.push((id, "queued".into()));
        }
        // Wait for the fold: a snapshot, and the segments it covers gone.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !root.join("journal/snapshot.jsonl").exists() {
            assert!(Instant::now() < deadline, "no fold");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let mut child = child;
    assert!(child.wait().unwrap().success());

    let (child, admin) = running(root);
    rt.block_on(async {
        let worker = admin.with_bearer(&acked.key);
        for i in 0..200 {
            let id = enqueue(&admin, json!({"run": 2, "i": i, "pad": "y".repeat(1000)})).await;
            acked.tasks.push((id, "queued".into()));
        }
        for _ in 0..5 {
            cycle(&worker, &mut acked).await;
        }
        // A live claim, so the token secret is in use.
        let claim = body(
            &worker
                .post_json("/v1/queues/q/claim", &json!({}))
                .await
                .unwrap(),
        );
        let id = claim["task"]["task_id"].as_str().unwrap().to_string();
        for t in &mut acked.tasks {
            if t.0 == id {
                t.1 = "claimed".into();
            }
        }
        for k in 0..10 {
            put(&admin, "s", k, 3, &mut acked).await;
        }
    });
    kill(child);
    acked
}

/// Whether a daemon on `root` has everything acknowledged, as it was;
/// `Err` says what is gone or different. Bytes kept nowhere else (an
/// object, a receipt in a pack) may be refused but never served wrong.
async fn has_everything(admin: &Client, acked: &Acked, lossy_bytes: bool) -> Result<(), String> {
    for (id, state) in &acked.tasks {
        let r = admin.get(&format!("/v1/tasks/{id}")).await.unwrap();
        if r.status != 200 {
            return Err(format!("task {id} is gone ({})", r.status));
        }
        let got = body(&r)["state"].as_str().unwrap_or_default().to_string();
        let moved_on = state == "claimed" && (got == "queued" || got == "claimed");
        if got != *state && !moved_on {
            return Err(format!("task {id} is {got}, acknowledged {state}"));
        }
    }
    for (id, sha) in &acked.receipts {
        let r = admin
            .get(&format!("/v1/tasks/{id}/receipts"))
            .await
            .unwrap();
        let listed = r.status == 200 && body(&r)["receipts"].to_string().contains(sha.as_str());
        if !(listed || lossy_bytes && refused_as_damage(&r)) {
            return Err(format!(
                "receipt {sha} of {id}: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
    }
    for (url, version, sha, sent) in &acked.nouns {
        let r = admin
            .get(&format!("{url}?version={version}&sha256={sha}"))
            .await
            .unwrap();
        if r.status == 200 {
            let got: Value =
                serde_json::from_slice(&r.body).map_err(|e| format!("{url} v{version}: {e}"))?;
            if got != *sent {
                return Err(format!("{url} v{version} reads back other bytes"));
            }
        } else if !(lossy_bytes && refused_as_damage(&r)) {
            return Err(format!(
                "{url} v{version} is gone ({} {})",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
    }
    let r = admin
        .with_bearer(&acked.key)
        .get("/v1/tasks?limit=1")
        .await
        .unwrap();
    if r.status != 200 {
        return Err(format!("the worker key no longer works ({})", r.status));
    }
    Ok(())
}

/// Whether an answer refuses bytes the root no longer holds whole, saying
/// so (or, for a noun whose ref file is gone, as a missing noun: fsck then
/// lists its objects as named by no ref).
fn refused_as_damage(r: &tessera::client::Reply) -> bool {
    let code = r.error_code().unwrap_or_default();
    [
        "corrupt_ref",
        "corrupt_object",
        "object_missing",
        "not_found",
    ]
    .contains(&code.as_str())
}

/// One kind of file: a name for the matrix, and where it is in a root.
struct Kind {
    name: &'static str,
    find: fn(&Path) -> PathBuf,
    /// Its bytes are kept nowhere else: a read may be refused.
    sole_copy: bool,
    /// Derived from other files (rebuilt when it does not hold): damage
    /// to it is no damage to the root, and fsck need not fail.
    derived: bool,
}

fn files_in(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    out.retain(|p| p.extension().is_some_and(|x| x == ext));
    out.sort();
    out
}

/// The noun log segment that holds records.
fn noun_segment(root: &Path) -> PathBuf {
    files_in(&root.join("journal/nouns"), "log")
        .into_iter()
        .find(|p| {
            let bytes = std::fs::read(p).unwrap();
            segment::read::<std::io::Error>(&bytes[..], |_, _| Ok(()))
                .unwrap()
                .records
                > 0
        })
        .expect("a noun log segment with records")
}

fn first_file(dir: &Path) -> PathBuf {
    let mut stack = vec![dir.to_path_buf()];
    let mut found = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if !p.file_name().unwrap().to_string_lossy().starts_with('.') {
                found.push(p);
            }
        }
    }
    found.sort();
    found
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no file under {}", dir.display()))
}

/// A kind of file whose bytes are kept elsewhere too, or checked whole.
const fn kind(name: &'static str, find: fn(&Path) -> PathBuf) -> Kind {
    Kind {
        name,
        find,
        sole_copy: false,
        derived: false,
    }
}

const KINDS: &[Kind] = &[
    kind("journal segment, open", |r| {
        files_in(&r.join("journal"), "log").pop().unwrap()
    }),
    kind("journal segment, sealed", |r| {
        files_in(&r.join("journal"), "log")
            .into_iter()
            .next()
            .unwrap()
    }),
    kind("journal reach", |r| r.join("journal/reach.json")),
    kind("journal snapshot", |r| r.join("journal/snapshot.jsonl")),
    kind("noun log segment", noun_segment),
    kind("noun log reach", |r| r.join("journal/nouns/reach.json")),
    kind("noun ref file, in the noun log", |r| {
        r.join("nouns/ns/s/k0.json")
    }),
    Kind {
        sole_copy: true,
        ..kind("noun ref file, settled", |r| {
            r.join("nouns/ns/settled/r0.json")
        })
    },
    Kind {
        sole_copy: true,
        ..kind("object", |r| first_file(&r.join("objects/sha256")))
    },
    Kind {
        sole_copy: true,
        ..kind("object pack", |r| {
            files_in(&r.join("objects/packs"), "pack").remove(0)
        })
    },
    Kind {
        derived: true,
        ..kind("object pack index", |r| {
            files_in(&r.join("objects/packs"), "idx").remove(0)
        })
    },
    kind("key record", |r| first_file(&r.join("auth/keys"))),
    kind("token secret", |r| r.join("auth/token.secret")),
    kind("ctx-dir file", |r| first_file(&r.join("workspace"))),
];

const FAULTS: &[&str] = &[
    "flip",
    "truncate",
    "cut at a record",
    "missing",
    "zero page",
];

/// The length of `bytes` without its trailing zeros (preallocated space).
fn written(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1)
}

/// Where records (log records, or lines) start in `bytes`.
fn record_starts(bytes: &[u8], log: bool) -> Vec<usize> {
    if log {
        let mut at = 0;
        let mut out = Vec::new();
        while at + segment::HEADER <= bytes.len() {
            let n = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            if n == 0 {
                break;
            }
            out.push(at);
            at += segment::HEADER + n;
        }
        return out;
    }
    std::iter::once(0)
        .chain(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .filter(|i| *i < written(bytes))
        .collect()
}

fn damage(path: &Path, fault: &str) {
    let bytes = std::fs::read(path).unwrap();
    let end = written(&bytes);
    let log = path.extension().is_some_and(|x| x == "log");
    let mut out = bytes.clone();
    match fault {
        "flip" => out[end / 2] ^= 0x10,
        "truncate" => out.truncate(end / 2),
        "cut at a record" => {
            let starts = record_starts(&bytes, log);
            let cut = starts.last().copied().filter(|c| *c > 0).unwrap_or(end / 2);
            out.truncate(cut);
        }
        "missing" => {
            std::fs::remove_file(path).unwrap();
            return;
        }
        "zero page" => {
            let page = (end / 2) / 4096 * 4096;
            let stop = (page + 4096).min(out.len());
            for b in &mut out[page..stop] {
                *b = 0;
            }
        }
        other => unreachable!("{other}"),
    }
    std::fs::write(path, &out).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn every_file_kind_under_every_fault_is_refused_or_loses_nothing_and_fsck_sees_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let base = tempfile::tempdir().unwrap();
    let template = base.path().join("template");
    let acked = prepare(&rt, &template);
    assert!(
        offline(&["fsck"], &template).status.success(),
        "the template is clean"
    );
    let mut matrix = Vec::new();
    let mut broken = Vec::new();
    for kind in KINDS {
        for fault in FAULTS {
            let root = base.path().join("cell");
            let _ = std::fs::remove_dir_all(&root);
            copy_dir(&template, &root);
            let target = (kind.find)(&root);
            let rel = target.strip_prefix(&root).unwrap().display().to_string();
            damage(&target, fault);
            let fsck = offline(&["fsck"], &root);
            let fsck_says = String::from_utf8_lossy(&fsck.stdout).into_owned();
            let outcome = match start(&root) {
                Start::Refused(log) if log.contains(&rel) => "refused naming it".to_string(),
                Start::Refused(log) => {
                    broken.push(format!(
                        "[{} × {fault}] refused without naming {rel}: {log}",
                        kind.name
                    ));
                    "refused, file not named".into()
                }
                Start::Running { child, admin } => {
                    let checked = rt.block_on(has_everything(&admin, &acked, kind.sole_copy));
                    kill(child);
                    match checked {
                        Ok(()) => "nothing lost".to_string(),
                        Err(what) => {
                            broken.push(format!(
                                "[{} × {fault}] started and lost: {what}",
                                kind.name
                            ));
                            format!("LOST: {what}")
                        }
                    }
                }
            };
            if fsck.status.code() != Some(1) && !kind.derived {
                broken.push(format!(
                    "[{} × {fault}] fsck exited {:?}: {fsck_says}",
                    kind.name,
                    fsck.status.code()
                ));
            }
            matrix.push(format!(
                "| {} ({rel}) | {fault} | {} | {outcome} |",
                kind.name,
                fsck.status.code().map_or("-".into(), |c| c.to_string())
            ));
        }
    }
    println!("| file | fault | fsck | start |\n| --- | --- | --- | --- |");
    for row in &matrix {
        println!("{row}");
    }
    assert!(
        broken.is_empty(),
        "{} cell(s) broken:\n{}",
        broken.len(),
        broken.join("\n")
    );
}
