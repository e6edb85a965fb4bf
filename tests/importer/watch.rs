//! `tessera import --watch`: the binary picks up an edited file and a new
//! file in a new folder (events are hints; it re-plans from the files), and
//! an invalid edit prints its diagnostics and changes nothing. It rests:
//! with no edit it sends no request at all (its own reads of the pack used
//! to wake it: ~67 requests per 10 s), a burst of 100 saves leaves one
//! version, and a pack folder replaced by a rename is still watched. The
//! pack's warnings are printed once, and again only when they change.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use super::{Env, RUN_LIMIT};
use crate::support::{NS, SURFACE, eventually};

/// `tessera import PACK --watch`, started, with the lines it prints
/// gathered as they come.
fn watch(env: &Env, pack: &std::path::Path) -> (tokio::process::Child, Lines) {
    let mut child = env
        .command(pack, &["--watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn tessera import --watch");
    let out: Lines = Arc::new(Mutex::new(Vec::new()));
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let sink = out.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            sink.lock().unwrap().push(line);
        }
    });
    (child, out)
}

/// What a watcher printed so far, line by line.
type Lines = Arc<Mutex<Vec<String>>>;

fn noun_file(key: &str, n: u32) -> String {
    format!("nouns:\n  - {{store: work.inputs, key: {key}, type: noun.input, body: {{n: {n}}}}}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_picks_up_an_edit_and_a_new_file_and_an_invalid_edit_changes_nothing() {
    let env = Env::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path();
    std::fs::write(
        pack.join("pack.yaml"),
        format!("pack: watched\nversion: \"1\"\nnamespace: {NS}\nproducer_surface: {SURFACE}\ninclude: [\"nouns/**/*.yaml\"]\n"),
    )
    .unwrap();
    std::fs::create_dir(pack.join("nouns")).unwrap();
    std::fs::write(pack.join("nouns/a.yaml"), noun_file("a", 1)).unwrap();

    let (mut child, out) = watch(&env, pack);
    let printed = |prefix: &'static str| {
        let out = out.clone();
        move || {
            let found = out.lock().unwrap().iter().any(|l| l.starts_with(prefix));
            async move { found }
        }
    };
    let limit = RUN_LIMIT.as_secs();

    eventually(limit, || async {
        env.versions("work.inputs", "a").await == 1
    })
    .await;
    eventually(limit, printed("import: 1 create")).await;

    std::fs::write(pack.join("nouns/a.yaml"), noun_file("a", 2)).unwrap();
    eventually(limit, || async {
        env.versions("work.inputs", "a").await == 2
    })
    .await;
    eventually(
        limit,
        printed("import: 0 create, 1 new version, 0 unchanged"),
    )
    .await;

    std::fs::create_dir(pack.join("nouns/more")).unwrap();
    std::fs::write(pack.join("nouns/more/b.yaml"), noun_file("b", 1)).unwrap();
    eventually(limit, || async {
        env.versions("work.inputs", "b").await == 1
    })
    .await;

    let written = env.written();
    std::fs::write(
        pack.join("nouns/a.yaml"),
        "nouns:\n  - {store: work.inputs, key: a, body: {n: 3}}\n",
    )
    .unwrap();
    eventually(
        limit,
        printed("nouns/a.yaml:2: nouns[0].type: required field is missing"),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(env.written(), written, "an invalid edit changes nothing");
    assert_eq!(env.versions("work.inputs", "a").await, 2);

    child.kill().await.expect("stop the watcher");
}

/// Requests the daemon has answered on the batch routes (the only routes
/// an import of nouns uses), from `GET /metrics`.
async fn batch_requests(env: &Env) -> f64 {
    let r = env.d.admin.get("/metrics").await.unwrap();
    let text = String::from_utf8_lossy(&r.body).into_owned();
    text.lines()
        .filter(|l| {
            l.starts_with("tessera_http_request_duration_seconds_count{")
                && l.contains("route=\"/v1/batch/")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_rests_when_idle_settles_bursts_and_follows_a_replaced_folder() {
    let env = Env::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("pack");
    let write_pack = |dir: &std::path::Path, n: u32| {
        std::fs::create_dir_all(dir.join("nouns")).unwrap();
        std::fs::write(
            dir.join("pack.yaml"),
            format!("pack: watched\nversion: \"1\"\nnamespace: {NS}\nproducer_surface: {SURFACE}\ninclude: [\"nouns/*.yaml\"]\n"),
        )
        .unwrap();
        std::fs::write(dir.join("nouns/a.yaml"), noun_file("a", n)).unwrap();
    };
    write_pack(&pack, 1);
    let mut child = env
        .command(&pack, &["--watch"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn tessera import --watch");
    let limit = RUN_LIMIT.as_secs();
    eventually(limit, || async {
        env.versions("work.inputs", "a").await == 1
    })
    .await;

    // Idle: no edit, no request, over a quiet interval.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = batch_requests(&env).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        batch_requests(&env).await,
        before,
        "an idle watch sends nothing"
    );

    // A burst of 100 saves, 5 ms apart, settles into one version.
    for n in 2..=101 {
        std::fs::write(pack.join("nouns/a.yaml"), noun_file("a", n)).unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eventually(limit, || async {
        env.versions("work.inputs", "a").await == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        env.versions("work.inputs", "a").await,
        2,
        "one version for the burst"
    );
    let settled = batch_requests(&env).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        batch_requests(&env).await,
        settled,
        "idle again after the burst"
    );

    // The pack folder replaced by a rename over it (as a checkout might).
    let next = tmp.path().join("next");
    write_pack(&next, 200);
    std::fs::rename(pack.join("nouns"), tmp.path().join("old-nouns")).unwrap();
    std::fs::remove_file(pack.join("pack.yaml")).unwrap();
    std::fs::remove_dir(&pack).unwrap();
    std::fs::rename(&next, &pack).unwrap();
    eventually(limit, || async {
        env.versions("work.inputs", "a").await == 3
    })
    .await;
    std::fs::write(pack.join("nouns/a.yaml"), noun_file("a", 300)).unwrap();
    eventually(limit, || async {
        env.versions("work.inputs", "a").await == 4
    })
    .await;

    child.kill().await.expect("stop the watcher");
}

/// A pack with noun `a` (body `n`) and `templates` templates, each with a
/// brief key holding template syntax (one warning each).
fn write_warned_pack(pack: &std::path::Path, n: u32, templates: usize) {
    let mut yaml = format!(
        "pack: warned\nversion: \"1\"\nnamespace: {NS}\nproducer_surface: {SURFACE}\n\
         include: [\"nouns/*.yaml\"]\n\
         defaults: {{queue: work.external, effect_class: write-internal, visibility_scope: surface_only}}\n\
         templates:\n"
    );
    for t in 0..templates {
        yaml.push_str(&format!(
            "  - id: t{t}\n    kind: verb.solve_draft\n    items: [{{id: a, n: x}}]\n    \
             brief:\n      \"{{{{ item.n }}}}\": 1\n"
        ));
    }
    std::fs::create_dir_all(pack.join("nouns")).unwrap();
    std::fs::write(pack.join("pack.yaml"), yaml).unwrap();
    std::fs::write(pack.join("nouns/a.yaml"), noun_file("a", n)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_the_packs_warnings_once_and_again_when_they_change() {
    let env = Env::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path();
    write_warned_pack(pack, 1, 1);
    let (mut child, out) = watch(&env, pack);
    let count = |prefix: &str| {
        out.lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with(prefix))
            .count()
    };
    let first = "warning: pack.yaml:";
    let t0 = "warning: pack.yaml:12: templates[0].brief[\"{{ item.n }}\"]: the key";
    let t1 = "warning: pack.yaml:17: templates[1].brief[\"{{ item.n }}\"]: the key";
    let limit = RUN_LIMIT.as_secs();

    eventually(limit, || async { count("import: 2 create") == 1 }).await;
    assert_eq!(count(first), 1, "{:#?}", out.lock().unwrap());
    assert_eq!(count(t0), 1, "{:#?}", out.lock().unwrap());

    // An edit that leaves the warnings as they were: the round imports and
    // says so, the warning is not repeated (it is printed before the import).
    write_warned_pack(pack, 2, 1);
    eventually(limit, || async {
        env.versions("work.inputs", "a").await == 2
    })
    .await;
    eventually(limit, || async { count("import: ") == 2 }).await;
    assert_eq!(
        count(first),
        1,
        "an unchanged warning is not repeated: {:#?}",
        out.lock().unwrap()
    );

    // A second template with the same kind of key: the set changed, so it
    // is printed again, whole.
    write_warned_pack(pack, 2, 2);
    eventually(limit, || async { count("import: ") == 3 }).await;
    assert_eq!(env.tasks().await.len(), 2);
    assert_eq!(count(t1), 1, "{:#?}", out.lock().unwrap());
    assert_eq!(count(t0), 2, "{:#?}", out.lock().unwrap());
    assert_eq!(count(first), 3, "{:#?}", out.lock().unwrap());

    child.kill().await.expect("stop the watcher");
}
