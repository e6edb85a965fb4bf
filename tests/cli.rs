//! The `tessera` command as an operator uses it: noun and key subcommands
//! against a running daemon, their output, and the files they write.

use crate::support;

use std::process::{Command, Output};

use support::TestDaemon;

fn tessera(d: &TestDaemon, key: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .env("TESSERA_SERVER", d.admin.base())
        .env("TESSERA_KEY", key)
        .output()
        .expect("run tessera")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "tessera failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn noun_put_get_and_versions_round_trip_through_the_cli() {
    let d = TestDaemon::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("numbers.json");
    std::fs::write(&file, br#"{"numbers": [3, 4, 12]}"#).unwrap();
    let f = file.to_str().unwrap();
    let key = d.admin_key.clone();
    let put = ok(&tessera(
        &d,
        &key,
        &[
            "noun",
            "put",
            "team/work.inputs/numbers",
            "--file",
            f,
            "--expected-version",
            "0",
            "--type",
            "noun.input",
        ],
    ));
    assert!(
        put.starts_with("team/work.inputs/numbers: create version 1 sha256 "),
        "{put}"
    );
    let got = ok(&tessera(
        &d,
        &key,
        &["noun", "get", "team/work.inputs/numbers"],
    ));
    assert_eq!(got, "{\n  \"numbers\": [\n    3,\n    4,\n    12\n  ]\n}\n");
    let raw = dir.path().join("blob.bin");
    std::fs::write(&raw, [0u8, 159, 146, 150]).unwrap();
    ok(&tessera(
        &d,
        &key,
        &[
            "noun",
            "put",
            "team/blobs/b",
            "--file",
            raw.to_str().unwrap(),
            "--raw",
            "--expected-version",
            "0",
        ],
    ));
    let out = dir.path().join("back.bin");
    ok(&tessera(
        &d,
        &key,
        &[
            "noun",
            "get",
            "team/blobs/b",
            "--output",
            out.to_str().unwrap(),
        ],
    ));
    assert_eq!(std::fs::read(&out).unwrap(), [0u8, 159, 146, 150]);
    let conflict = tessera(
        &d,
        &key,
        &[
            "noun",
            "put",
            "team/work.inputs/numbers",
            "--file",
            f,
            "--expected-version",
            "0",
        ],
    );
    assert!(!conflict.status.success());
    assert!(
        String::from_utf8_lossy(&conflict.stderr).contains("version_conflict"),
        "{}",
        String::from_utf8_lossy(&conflict.stderr)
    );
    let versions = ok(&tessera(
        &d,
        &key,
        &["noun", "versions", "team/work.inputs/numbers"],
    ));
    assert_eq!(
        versions.lines().count(),
        2,
        "a header and one version: {versions}"
    );
    let bad = tessera(&d, &key, &["noun", "get", "team/numbers"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("NAMESPACE/STORE/KEY"));
    let not_json = tessera(
        &d,
        &key,
        &[
            "noun",
            "put",
            "team/blobs/c",
            "--file",
            raw.to_str().unwrap(),
            "--expected-version",
            "0",
        ],
    );
    assert!(
        String::from_utf8_lossy(&not_json.stderr).contains("--raw"),
        "the error says what to do next"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn key_issue_writes_a_private_secret_file_and_list_and_revoke_work() {
    let d = TestDaemon::start().await;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("worker.key");
    let key = d.admin_key.clone();
    let issued = ok(&tessera(
        &d,
        &key,
        &[
            "key",
            "issue",
            "--label",
            "team worker",
            "--scope",
            "namespace:team",
            "--scope",
            "surface:team_example",
            "--scope",
            "nouns:read",
            "--queue",
            "work.external",
            "--kind",
            "verb.solve_draft",
            "--effect-class",
            "write-internal",
            "--secret-file",
            secret.to_str().unwrap(),
        ],
    ));
    assert!(
        issued.contains("service_binding") && issued.contains("not shown again"),
        "{issued}"
    );
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&secret).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let worker_secret = std::fs::read_to_string(&secret).unwrap();
    assert!(
        !issued.contains(worker_secret.trim()),
        "the secret went to the file, not stdout"
    );
    let key_id = issued.split_whitespace().next().unwrap().to_string();
    let listed = ok(&tessera(&d, &key, &["key", "list"]));
    assert!(listed.contains(&key_id) && !listed.contains(worker_secret.trim()));
    let unknown = tessera(
        &d,
        &key,
        &["key", "issue", "--label", "x", "--scope", "nouns:write"],
    );
    assert!(
        !unknown.status.success()
            && String::from_utf8_lossy(&unknown.stderr).contains("unknown scope")
    );
    ok(&tessera(&d, &key, &["key", "revoke", &key_id]));
    let refused = tessera(&d, worker_secret.trim(), &["noun", "get", "team/s/k"]);
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let again = tessera(
        &d,
        &key,
        &[
            "key",
            "issue",
            "--label",
            "y",
            "--secret-file",
            secret.to_str().unwrap(),
        ],
    );
    assert!(
        !again.status.success(),
        "an existing secret file is never overwritten"
    );
}
