//! SIGKILL the daemon in the middle of a write load, restart it on the same
//! root, and check that every acknowledged write is there with its hash.

mod support;

use std::time::Duration;

use serde_json::json;
use support::{DaemonProcess, body};

#[test]
fn every_acknowledged_noun_version_survives_sigkill() {
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut acked: Vec<(String, u64, String)> = Vec::new();
    for round in 0..4u64 {
        let daemon = DaemonProcess::spawn(root.path());
        let admin = daemon.admin.clone();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = (0..8)
            .map(|w| {
                let admin = admin.clone();
                let stop = stop.clone();
                rt.spawn(async move {
                    let mut mine = Vec::new();
                    let url = format!("/v1/nouns/load/w{w}/key");
                    let mut version = 0;
                    let current = admin.get(&format!("{url}/versions")).await.unwrap();
                    if current.status == 200 {
                        version = body(&current)["versions"].as_array().unwrap().len() as u64;
                    }
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let env = json!({"expected_version": version, "body": {"round": round, "v": version + 1, "pad": "x".repeat(512)}});
                        match admin.put_json(&url, &env).await {
                            Ok(r) if r.status == 201 => {
                                let b = body(&r);
                                version = b["version"].as_u64().unwrap();
                                mine.push((url.clone(), version, b["sha256"].as_str().unwrap().to_string()));
                            }
                            Ok(r) => panic!("unexpected {}: {}", r.status, String::from_utf8_lossy(&r.body)),
                            Err(_) => break, // killed mid-request: not acknowledged
                        }
                    }
                    mine
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300 + 150 * round));
        daemon.kill();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in writers {
            acked.extend(rt.block_on(w).unwrap());
        }
    }
    assert!(
        acked.len() > 20,
        "the load wrote too little to prove anything: {}",
        acked.len()
    );

    let daemon = DaemonProcess::spawn(root.path());
    rt.block_on(async {
        for (url, version, sha) in &acked {
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
        }
    });
    daemon.kill();
    let fsck = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["fsck", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stdout)
    );
}
