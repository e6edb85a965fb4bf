//! What a plan says about an edited pack: a metadata edit with the same
//! body is a new version (it used to plan as unchanged, so visibility could
//! not be tightened from a pack), a changed noun names its changed fields
//! with old → new values, a task conflict names the spec fields that
//! differ, reordered sets change nothing, and `--plan -o json` prints the
//! same entries as one JSON document. An item past the daemon's limits
//! fails on its own line naming the limit (it used to end the import with
//! "cannot reach the daemon"). A task that conflicts because a noun it
//! refers to would get a new version shows that version's pin (it used to
//! show `→ null`), and one that would gain a new upstream names it; a
//! template key holding template syntax is a warning in text and JSON.

use serde_json::Value;

use super::Env;
use crate::support::{NS, SURFACE};

/// A pack with one noun and one task, their fields as given.
fn write_pack(dir: &std::path::Path, visibility: &str, n: u32, tags: &str, priority: u32) {
    std::fs::write(
        dir.join("pack.yaml"),
        format!(
            "pack: edited\nversion: \"1\"\nnamespace: {NS}\nproducer_surface: {SURFACE}\n\
             defaults: {{queue: work.external, effect_class: write-internal, visibility_scope: surface_only}}\n\
             nouns:\n  - {{store: work.inputs, key: a, type: noun.input, visibility: {visibility}, body: {{n: {n}, keep: true}}}}\n\
             tasks:\n  - {{id: t, kind: verb.solve_draft, tags: {tags}, priority: {priority}, brief: {{contract: c}}}}\n"
        ),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_show_metadata_edits_changed_fields_and_conflicting_spec_fields() {
    let env = Env::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path();
    write_pack(pack, "surface_only", 1, "[x, y]", 1);
    let first = env.import(pack, &[]).await;
    assert_eq!(first.code, 0, "{first:?}");

    // Sets in another order: nothing to change.
    write_pack(pack, "surface_only", 1, "[y, x]", 1);
    let same = env.import(pack, &["--plan"]).await;
    assert_eq!(same.code, 0, "{same:?}");
    assert!(same.summary().starts_with("nothing to change"), "{same:?}");

    // Visibility tightened, same body: a new version, planned and applied.
    write_pack(pack, "private", 1, "[x, y]", 1);
    let plan = env.import(pack, &["--plan"]).await;
    assert_eq!(plan.code, 2, "{plan:?}");
    assert!(
        plan.stdout.contains("new version  noun  work.inputs/a"),
        "{plan:?}"
    );
    assert!(
        plan.stdout
            .contains("\n    /visibility: \"surface_only\" → \"private\""),
        "{plan:?}"
    );
    let apply = env.import(pack, &[]).await;
    assert_eq!(apply.code, 0, "{apply:?}");
    assert_eq!(env.versions("work.inputs", "a").await, 2);
    let again = env.import(pack, &["--plan"]).await;
    assert_eq!(
        again.code, 0,
        "a metadata edit applied is unchanged after: {again:?}"
    );

    // A body field and a task field changed: both named, in JSON too.
    write_pack(pack, "private", 2, "[x, y]", 5);
    let plan = env.import(pack, &["--plan"]).await;
    assert_eq!(plan.code, 1, "a conflict fails the plan: {plan:?}");
    assert!(plan.stdout.contains("\n    /body/n: 1 → 2"), "{plan:?}");
    assert!(!plan.stdout.contains("/body/keep"), "{plan:?}");
    assert!(plan.stdout.contains("conflict     task  t"), "{plan:?}");
    assert!(plan.stdout.contains("\n    /priority: 1 → 5"), "{plan:?}");

    let json = env.import(pack, &["--plan", "-o", "json"]).await;
    assert_eq!(json.code, 1, "{json:?}");
    let doc: Value = serde_json::from_str(&json.stdout).expect("one JSON document");
    let entries = doc["entries"].as_array().unwrap();
    let noun = entries.iter().find(|e| e["kind"] == "noun").unwrap();
    assert_eq!(noun["outcome"], "new_version", "{doc:#}");
    assert_eq!(noun["id"], "work.inputs/a");
    assert_eq!(noun["source"]["file"], "pack.yaml");
    assert_eq!(
        noun["changes"],
        serde_json::json!([{"pointer": "/body/n", "old": 1, "new": 2}])
    );
    let task = entries.iter().find(|e| e["kind"] == "task").unwrap();
    assert_eq!(task["outcome"], "conflict");
    assert_eq!(
        task["changes"],
        serde_json::json!([{"pointer": "/priority", "old": 1, "new": 5}])
    );
    assert!(
        doc["summary"].as_str().unwrap().starts_with("plan: "),
        "{doc:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_past_the_daemons_limits_fails_naming_the_item_and_the_limit() {
    // Items up to 1 KiB, requests up to 4 KiB: a 6 KiB noun fits neither.
    let env = Env::start_with(|c| c.limits.max_body_bytes = 1024).await;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("pack.yaml"),
        format!(
            "pack: big\nversion: \"1\"\nnamespace: {NS}\nproducer_surface: {SURFACE}\n\
             nouns:\n  - {{store: s, key: small, type: t, body: {{n: 1}}}}\n  - {{store: s, key: big, type: t, body: {{text: {}}}}}\n",
            "x".repeat(6 * 1024)
        ),
    )
    .unwrap();
    let run = env.import(tmp.path(), &["--plan"]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(!run.stderr.contains("cannot reach"), "{run:?}");
    let big = run
        .stdout
        .lines()
        .find(|l| l.contains("s/big"))
        .unwrap_or_else(|| panic!("a line for s/big: {run:?}"));
    assert!(big.starts_with("error"), "{big}");
    assert!(big.contains("413 body_too_large"), "{big}");
    assert!(
        big.contains("past the daemon's request limit: its 4096-byte limit"),
        "{big}"
    );
    assert!(run.stdout.contains("create       noun  s/small"), "{run:?}");
}

/// A pack with noun `a` (body `{n}`) and task `t` referring to it, and a
/// task `u` depending on `t` and on each of `ups`.
fn write_repin_pack(dir: &std::path::Path, n: u32, ups: &[&str]) {
    let mut text = format!(
        "pack: repin\nversion: \"1\"\nnamespace: {NS}\nproducer_surface: {SURFACE}\n\
         defaults: {{queue: work.external, effect_class: write-internal, visibility_scope: surface_only}}\n\
         nouns:\n  - {{store: work.inputs, key: a, type: noun.input, body: {{n: {n}}}}}\n\
         tasks:\n  - {{id: t, kind: verb.solve_draft, brief: {{contract: {{noun: work.inputs/a}}}}}}\n  \
         - {{id: u, kind: verb.solve_draft, depends_on: [t{}], brief: {{x: 1}}}}\n",
        ups.iter().map(|u| format!(", {u}")).collect::<String>()
    );
    for u in ups {
        text.push_str(&format!(
            "  - {{id: {u}, kind: verb.solve_draft, brief: {{x: 1}}}}\n"
        ));
    }
    std::fs::write(dir.join("pack.yaml"), text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_on_a_repinned_noun_shows_the_new_pin_and_new_upstreams() {
    let env = Env::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path();
    write_repin_pack(pack, 1, &[]);
    let first = env.import(pack, &[]).await;
    assert_eq!(first.code, 0, "{first:?}");
    let tasks = env.tasks().await;
    let old_sha = tasks
        .iter()
        .find_map(|t| t["brief"]["contract"]["sha256"].as_str())
        .unwrap_or_else(|| panic!("t's pin: {tasks:#?}"))
        .to_owned();

    write_repin_pack(pack, 2, &["v"]);
    let plan = env.import(pack, &["--plan"]).await;
    assert_eq!(plan.code, 1, "{plan:?}");
    assert!(!plan.stdout.contains("→ null"), "{}", plan.stdout);
    assert!(
        plan.stdout.contains("\n    /brief/contract/version: 1 → 2"),
        "{}",
        plan.stdout
    );
    let short: String = format!("\"{old_sha}\"").chars().take(39).collect();
    assert!(
        plan.stdout
            .contains(&format!("\n    /brief/contract/sha256: {short}… → \"")),
        "{}",
        plan.stdout
    );
    let u = tasks
        .iter()
        .find(|t| t["idempotency_key"] == "seed:repin:u")
        .unwrap();
    let t_id = u["upstream"][0]["task_id"].as_str().unwrap();
    assert!(
        plan.stdout.contains(&format!(
            "\n    /depends_on: [\"{t_id}\"] → [\"(new task v)\",\"{t_id}\"]"
        )),
        "{}",
        plan.stdout
    );

    let json = env.import(pack, &["--plan", "-o", "json"]).await;
    let doc: Value = serde_json::from_str(&json.stdout).expect("one JSON document");
    let entries = doc["entries"].as_array().unwrap();
    let t = entries.iter().find(|e| e["id"] == "t").unwrap();
    let changes = t["changes"].as_array().unwrap();
    let pointers: Vec<&str> = changes
        .iter()
        .map(|c| c["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(
        pointers,
        ["/brief/contract/sha256", "/brief/contract/version"],
        "{doc:#}"
    );
    assert_eq!(changes[0]["old"], old_sha.as_str());
    assert_eq!(
        changes[1],
        serde_json::json!({"pointer": "/brief/contract/version", "old": 1, "new": 2})
    );
    assert!(
        changes[0]["new"]
            .as_str()
            .is_some_and(|s| s.len() == 64 && s != old_sha),
        "the new pin's sha256: {doc:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_key_with_template_syntax_is_a_warning_in_the_plan() {
    let env = Env::start().await;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("pack.yaml"),
        format!(
            "pack: keys\nversion: \"1\"\nnamespace: {NS}\nproducer_surface: {SURFACE}\n\
             defaults: {{queue: work.external, effect_class: write-internal, visibility_scope: surface_only}}\n\
             templates:\n  - id: t\n    kind: verb.solve_draft\n    items: [{{id: a, n: x}}]\n    \
         brief:\n      \"{{{{ item.n }}}}\": 1\n"
        ),
    )
    .unwrap();
    let warning = "pack.yaml:11: templates[0].brief[\"{{ item.n }}\"]: the key \"{{ item.n }}\" holds template syntax, but only values are expanded: every task gets this key as written; put the varying part in a value";
    let plan = env.import(tmp.path(), &["--plan"]).await;
    assert_eq!(plan.code, 2, "a warning does not fail the plan: {plan:?}");
    assert_eq!(
        plan.stdout.lines().next(),
        Some(format!("warning: {warning}").as_str()),
        "{plan:?}"
    );
    let json = env.import(tmp.path(), &["--plan", "-o", "json"]).await;
    let doc: Value = serde_json::from_str(&json.stdout).expect("one JSON document");
    assert_eq!(
        doc["warnings"],
        serde_json::json!([{
            "file": "pack.yaml",
            "line": 11,
            "field": "templates[0].brief[\"{{ item.n }}\"]",
            "message": warning.split_once("]: ").unwrap().1,
        }])
    );
    let apply = env.import(tmp.path(), &[]).await;
    assert_eq!(apply.code, 0, "{apply:?}");
    assert!(apply.stdout.starts_with("warning: "), "{apply:?}");
}
