//! Orphans (issue 16): after a task is renamed or removed in a pack, the
//! old task stayed queued without a word and a worker claimed it first.
//! The plan now lists what an earlier import of the pack created that the
//! pack no longer has; `--prune` cancels such tasks while they are
//! pending, queued or parked, never a running one; nouns are reported,
//! not deleted; a noun two packs write gets a warning.

use std::path::Path;

use serde_json::json;

use super::Env;
use crate::assert_lines;
use crate::support::{NS, body, claim, claimed_id, task};

/// Writes `pack.yaml` of pack `name` with these nouns and tasks.
fn write_pack(dir: &Path, name: &str, nouns: &str, tasks: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let text = format!(
        "pack: {name}\nversion: \"1\"\nnamespace: {NS}\nproducer_surface: surface:team_example\n\
         defaults: {{queue: work.external, effect_class: write-internal, visibility_scope: surface_only}}\n\
         nouns:\n{nouns}tasks:\n{tasks}"
    );
    std::fs::write(dir.join("pack.yaml"), text).unwrap();
}

const KEEP_NOUN: &str = "  - {store: work.inputs, key: keep, type: noun.input, body: {n: 1}}\n";
const OLD_NOUN: &str = "  - {store: work.inputs, key: old, type: noun.input, body: {n: 2}}\n";
const KEEP_TASK: &str = "  - {id: keep, kind: verb.solve_draft, brief: {a: 1}}\n";
const OLD_TASKS: &str = concat!(
    "  - {id: queued-old, kind: verb.solve_draft, brief: {a: 2}}\n",
    "  - {id: claimed-old, kind: verb.solve_draft, priority: 100, brief: {a: 3}}\n",
    "  - {id: pending-old, kind: verb.verify_gate, depends_on: [claimed-old], brief: {a: 4}}\n",
);
const RENAMED_TASK: &str = "  - {id: queued-new, kind: verb.solve_draft, brief: {a: 2}}\n";

/// The id of the task with the pack-local id `local`.
async fn id_of(env: &Env, local: &str) -> String {
    let key = format!("seed:tidy:{local}");
    let tasks = env.tasks().await;
    let t = tasks
        .iter()
        .find(|t| t["idempotency_key"] == key.as_str())
        .unwrap_or_else(|| panic!("no task {key}"));
    t["task_id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_task_is_an_orphan_and_prune_cancels_only_tasks_that_have_not_started() {
    let env = Env::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("tidy");
    write_pack(
        &pack,
        "tidy",
        &format!("{KEEP_NOUN}{OLD_NOUN}"),
        &format!("{KEEP_TASK}{OLD_TASKS}"),
    );
    let first = env.import(&pack, &[]).await;
    assert_eq!(first.code, 0, "{first:?}");
    let claimed = claim(&env.d.admin, "work.external").await.unwrap();
    let running = id_of(&env, "claimed-old").await;
    assert_eq!(claimed_id(&claimed), running);
    let (queued, pending) = (
        id_of(&env, "queued-old").await,
        id_of(&env, "pending-old").await,
    );

    write_pack(
        &pack,
        "tidy",
        KEEP_NOUN,
        &format!("{KEEP_TASK}{RENAMED_TASK}"),
    );
    let plan = env.import(&pack, &["--plan"]).await;
    assert_eq!(plan.code, 2, "{plan:?}");
    let orphans = [
        format!("orphan       task  queued-old  ({queued}, queued): no longer in the pack; --prune would cancel it"),
        format!("orphan       task  claimed-old  ({running}, claimed): no longer in the pack; running, so --prune leaves it"),
        format!("orphan       task  pending-old  ({pending}, pending): no longer in the pack; --prune would cancel it"),
        "orphan       noun  work.inputs/old  (version 1): no longer in the pack; nouns are never deleted".into(),
        "orphans: 3 tasks, 1 nouns no longer in the pack".to_string(),
    ];
    let tail = plan.stdout.lines().skip(4).collect::<Vec<_>>().join("\n");
    assert_lines!(tail, orphans);
    assert_eq!(task(&env.d.admin, &queued).await["state"], "queued");

    // For CI, the same findings in the one JSON document.
    let json = env.import(&pack, &["--plan", "-o", "json"]).await;
    assert_eq!(json.code, 2, "{json:?}");
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).expect("one JSON document");
    let found: Vec<(String, String, String)> = doc["orphans"]["entries"]
        .as_array()
        .expect("orphan entries")
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("kind"), s("id"), s("outcome"))
        })
        .collect();
    let want = |k: &str, i: &str| (k.to_string(), i.to_string(), "orphan".to_string());
    assert_eq!(
        found,
        [
            want("orphan_task", "queued-old"),
            want("orphan_task", "claimed-old"),
            want("orphan_task", "pending-old"),
            want("orphan_noun", "work.inputs/old"),
        ],
        "{doc:#}"
    );
    assert_eq!(
        doc["orphans"]["summary"],
        "orphans: 3 tasks, 1 nouns no longer in the pack"
    );

    let apply = env.import(&pack, &["--prune"]).await;
    assert_eq!(apply.code, 0, "{apply:?}");
    assert!(
        apply.stdout.contains(&format!(
            "cancelled    task  queued-old  ({queued}, queued): no longer in the pack"
        )) && apply.stdout.contains(&format!(
            "cancelled    task  pending-old  ({pending}, pending): no longer in the pack"
        )),
        "{apply:?}"
    );
    assert_eq!(
        apply.summary(),
        "orphans: 3 tasks, 1 nouns no longer in the pack; 2 tasks cancelled"
    );
    assert_eq!(task(&env.d.admin, &queued).await["state"], "cancelled");
    assert_eq!(task(&env.d.admin, &pending).await["state"], "cancelled");
    assert_eq!(task(&env.d.admin, &running).await["state"], "claimed");
    assert_eq!(
        env.versions("work.inputs", "old").await,
        1,
        "nouns are never deleted"
    );
    let renamed = id_of(&env, "queued-new").await;
    assert_eq!(task(&env.d.admin, &renamed).await["source_pack"], "tidy");

    let again = env.import(&pack, &["--plan", "--prune"]).await;
    assert_eq!(
        again.code, 0,
        "only a running orphan is left: nothing to prune {again:?}"
    );
    assert_eq!(
        again.summary(),
        "orphans: 1 tasks (2 more ended and are left as they are), 1 nouns no longer in the pack"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pack_behind_each_record_is_kept_across_a_restart() {
    let mut env = Env::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("tidy");
    write_pack(&pack, "tidy", KEEP_NOUN, KEEP_TASK);
    let first = env.import(&pack, &[]).await;
    assert_eq!(first.code, 0, "{first:?}");
    env.d.restart().await;
    let id = id_of(&env, "keep").await;
    assert_eq!(task(&env.d.admin, &id).await["source_pack"], "tidy");
    let r = env
        .d
        .admin
        .get(&format!("/v1/nouns/{NS}/work.inputs/keep/versions"))
        .await
        .unwrap();
    assert_eq!(body(&r)["versions"][0]["source_pack"], "tidy");
    let r = env
        .d
        .admin
        .get(&format!("/v1/tasks?source_pack=tidy&namespace={NS}"))
        .await
        .unwrap();
    assert_eq!(body(&r)["tasks"].as_array().unwrap().len(), 1);
    let r = env
        .d
        .admin
        .get("/v1/tasks?source_pack=other")
        .await
        .unwrap();
    assert_eq!(body(&r)["tasks"], json!([]));
    let r = env.d.admin.get("/v1/nouns?source_pack=tidy").await.unwrap();
    let listed = body(&r);
    assert_eq!(listed["nouns"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["nouns"][0]["key"], "keep");
    assert_eq!(listed["nouns"][0]["source_packs"], json!(["tidy"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_with_if_state_leaves_a_task_in_another_state_alone() {
    let env = Env::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("tidy");
    write_pack(&pack, "tidy", KEEP_NOUN, KEEP_TASK);
    let first = env.import(&pack, &[]).await;
    assert_eq!(first.code, 0, "{first:?}");
    let id = claimed_id(&claim(&env.d.admin, "work.external").await.unwrap());
    let refused = env
        .importer
        .post_json(
            &format!("/v1/tasks/{id}/cancel?if_state=pending,queued,parked"),
            &json!({}),
        )
        .await
        .unwrap();
    assert_status!(refused, 409, "invalid_state");
    assert_eq!(body(&refused)["error"]["details"]["state"], "claimed");
    assert_eq!(task(&env.d.admin, &id).await["state"], "claimed");
    let bad = env
        .importer
        .post_json(
            &format!("/v1/tasks/{id}/cancel?if_state=running"),
            &json!({}),
        )
        .await
        .unwrap();
    assert_status!(bad, 400, "invalid_query");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_packs_writing_one_noun_get_a_warning_in_the_plan() {
    let env = Env::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (tidy, other) = (dir.path().join("tidy"), dir.path().join("other"));
    write_pack(&tidy, "tidy", KEEP_NOUN, KEEP_TASK);
    let first = env.import(&tidy, &[]).await;
    assert_eq!(first.code, 0, "{first:?}");
    let other_noun = "  - {store: work.inputs, key: keep, type: noun.input, body: {n: 7}}\n";
    write_pack(
        &other,
        "other",
        other_noun,
        "  - {id: other, kind: verb.solve_draft, brief: {b: 1}}\n",
    );

    let plan = env.import(&other, &["--plan"]).await;
    assert_eq!(plan.code, 2, "{plan:?}");
    assert_eq!(
        plan.summary(),
        "warning      noun  work.inputs/keep: also written by pack tidy; pack tidy wrote the latest version (1); two packs writing one noun replace each other's versions"
    );
    assert_eq!(env.import(&other, &[]).await.code, 0);
    let replan = env.import(&tidy, &["--plan"]).await;
    assert_eq!(replan.code, 2, "tidy would write its body back {replan:?}");
    assert_eq!(
        replan.summary(),
        "warning      noun  work.inputs/keep: also written by pack other; pack other wrote the latest version (2); two packs writing one noun replace each other's versions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_without_nouns_read_still_imports_and_is_told_nouns_were_not_checked() {
    let env = Env::start().await;
    let secret = Env::issue(&env.d, super::importer_grants(&["nouns:read"])).await;
    std::fs::write(&env.key_file, secret).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("tidy");
    write_pack(&pack, "tidy", KEEP_NOUN, KEEP_TASK);
    let run = env.import(&pack, &["--prune"]).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.summary(),
        "note         nouns were not checked for orphans or other packs: listing them needs nouns:read"
    );
}

/// A second key with the importer's grants: any key that may enqueue in
/// the namespace may label its own tasks with any pack.
struct Squatter {
    client: tessera::client::Client,
    key_id: String,
    /// Its tasks labelled `tidy`: one enqueued alone, two in a batch (one
    /// of them under the idempotency key of the owner's genuine orphan).
    tasks: Vec<String>,
}

/// Issues the squatter's key and has it enqueue its labelled tasks, as a
/// single enqueue and as a batch.
async fn squat(env: &Env) -> Squatter {
    let secret = Env::issue(&env.d, super::importer_grants(&[])).await;
    let client = env.d.client(&secret);
    let alone = crate::support::spec("verb.solve_draft", json!({"squat": 1}));
    let r = client
        .post_json("/v1/tasks?source_pack=tidy", &alone)
        .await
        .unwrap();
    assert_status!(r, 201);
    let mut tasks = vec![body(&r)["task_id"].as_str().unwrap().to_string()];
    let mut same_key = crate::support::spec("verb.solve_draft", json!({"squat": 2}));
    same_key["idempotency_key"] = json!("seed:tidy:queued-old");
    let plain = crate::support::spec("verb.verify_gate", json!({"squat": 3}));
    let r = client
        .post_json(
            "/v1/batch/tasks?source_pack=tidy",
            &json!({"items": [same_key, plain]}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    for item in body(&r)["items"].as_array().unwrap() {
        assert_eq!(item["status"], 201, "{item}");
        tasks.push(item["result"]["task_id"].as_str().unwrap().to_string());
    }
    let key_id = task(&env.d.admin, &tasks[0]).await["requester"]
        .as_str()
        .unwrap()
        .to_string();
    Squatter {
        client,
        key_id,
        tasks,
    }
}

/// Asserts each of the squatter's tasks is still queued.
async fn untouched(env: &Env, s: &Squatter) {
    for id in &s.tasks {
        assert_eq!(
            task(&env.d.admin, id).await["state"],
            "queued",
            "another key's task {id}"
        );
    }
}

/// Other keys' labelled tasks (the squatter's) are one note, never
/// orphans: a plan and an apply with `--prune` exit as if they were not
/// there, they stay queued, and the owner's genuine orphans are still
/// found and pruned. `admin` imports with the admin key, which may cancel
/// anyone's task, and still must not cancel these.
async fn labelled_by_another_key(admin: bool) {
    let env = Env::start().await;
    if admin {
        std::fs::copy(env.d.root().join("auth/admin.key"), &env.key_file).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("tidy");
    let with_old =
        format!("{KEEP_TASK}  - {{id: queued-old, kind: verb.solve_draft, brief: {{a: 2}}}}\n");
    write_pack(&pack, "tidy", KEEP_NOUN, &with_old);
    let first = env.import(&pack, &[]).await;
    assert_eq!(first.code, 0, "{first:?}");
    let s = squat(&env).await;
    let note = format!(
        "note         tasks {}: labelled with pack tidy by key {}, not by this key; not orphans of this import, so --prune leaves them",
        s.tasks.join(", "),
        s.key_id
    );

    // The pack as imported: nothing of this key is an orphan.
    let plan = env.import(&pack, &["--plan", "--prune"]).await;
    assert_eq!(plan.code, 0, "nothing of this key to prune {plan:?}");
    assert_eq!(plan.summary(), note, "{plan:?}");
    let json = env
        .import(&pack, &["--plan", "--prune", "-o", "json"])
        .await;
    assert_eq!(json.code, 0, "{json:?}");
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).expect("one JSON document");
    assert_eq!(
        doc["orphans"],
        json!({"entries": [{"kind": "other_key_tasks", "id": s.key_id, "outcome": "note"}], "summary": null}),
        "{doc:#}"
    );
    let apply = env.import(&pack, &["--prune"]).await;
    assert_eq!(apply.code, 0, "{apply:?}");
    assert_eq!(apply.summary(), note, "{apply:?}");
    untouched(&env, &s).await;

    // A genuine orphan of this key is still found and pruned, beside them.
    let old = id_of(&env, "queued-old").await;
    write_pack(&pack, "tidy", KEEP_NOUN, KEEP_TASK);
    let plan = env.import(&pack, &["--plan", "--prune"]).await;
    assert_eq!(plan.code, 2, "{plan:?}");
    assert!(plan.stdout.contains(&note), "{plan:?}");
    assert_eq!(
        plan.summary(),
        "orphans: 1 tasks, 0 nouns no longer in the pack",
        "{plan:?}"
    );
    let apply = env.import(&pack, &["--prune"]).await;
    assert_eq!(apply.code, 0, "{apply:?}");
    assert!(
        apply.stdout.contains(&format!(
            "cancelled    task  queued-old  ({old}, queued): no longer in the pack"
        )) && apply.stdout.contains(&note),
        "{apply:?}"
    );
    assert_eq!(
        apply.summary(),
        "orphans: 1 tasks, 0 nouns no longer in the pack; 1 tasks cancelled"
    );
    assert_eq!(task(&env.d.admin, &old).await["state"], "cancelled");
    untouched(&env, &s).await;
    let again = env.import(&pack, &["--plan", "--prune"]).await;
    assert_eq!(again.code, 0, "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_keys_tasks_labelled_with_the_pack_are_a_note_not_orphans() {
    labelled_by_another_key(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_import_does_not_prune_another_keys_labelled_tasks() {
    labelled_by_another_key(true).await;
}

/// The states of `ids`, as admin sees them.
async fn states(env: &Env, ids: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for id in ids {
        out.push(
            task(&env.d.admin, id).await["state"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    out
}

/// `POST /v1/tasks/{action}` by `source_pack=tidy` as `c`: the ids it
/// acted on, sorted.
async fn bulk(c: &tessera::client::Client, action: &str) -> Vec<String> {
    let r = c
        .post_json(
            &format!("/v1/tasks/{action}"),
            &json!({"namespace": NS, "source_pack": "tidy"}),
        )
        .await
        .unwrap();
    assert_status!(r, 200);
    let mut ids: Vec<String> = body(&r)["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

/// The bulk routes select by `source_pack` too; they act only on tasks
/// the caller may cancel or retry (its own, or any for admin), so neither
/// key's bulk call touches the other's labelled tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_cancel_and_retry_by_source_pack_act_only_on_the_callers_own_tasks() {
    let env = Env::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("tidy");
    write_pack(
        &pack,
        "tidy",
        KEEP_NOUN,
        &format!("{KEEP_TASK}{RENAMED_TASK}"),
    );
    let first = env.import(&pack, &[]).await;
    assert_eq!(first.code, 0, "{first:?}");
    let mut owner = vec![id_of(&env, "keep").await, id_of(&env, "queued-new").await];
    owner.sort();
    let s = squat(&env).await;
    let mut theirs = s.tasks.clone();
    theirs.sort();

    assert_eq!(bulk(&s.client, "cancel").await, theirs);
    assert_eq!(states(&env, &owner).await, ["queued", "queued"]);
    assert_eq!(bulk(&env.importer, "cancel").await, owner);
    assert_eq!(bulk(&s.client, "retry").await, theirs);
    assert_eq!(states(&env, &owner).await, ["cancelled", "cancelled"]);
    untouched(&env, &s).await;
    assert_eq!(bulk(&env.importer, "retry").await, owner);
    assert_eq!(states(&env, &owner).await, ["queued", "queued"]);
}
