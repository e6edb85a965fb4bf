//! `tessera import --watch`: the binary picks up an edited file and a new
//! file in a new folder (events are hints; it re-plans from the files), and
//! an invalid edit prints its diagnostics and changes nothing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use crate::support::{NS, SURFACE, eventually};
use crate::{Env, RUN_LIMIT};

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

    let mut child = env
        .command(pack, &["--watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn tessera import --watch");
    let out = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let sink = out.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            sink.lock().unwrap().push(line);
        }
    });
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
