//! Whole packs through the binary: plan, apply, re-apply; YAML = TOML; the
//! invalid corpus; catalog pins; conflicts found before anything is written.

use serde_json::json;
use tessera::store::{Sha256, canonical_json};
use tessera_importer::NounBody;

use super::{Env, copy_pack, seeds};
use crate::assert_lines;
use crate::support::{NS, body};

const EXAMPLE_PLAN: [&str; 7] = [
    "create       noun  work.contracts/sum-squares  (nouns/contract.yaml:5)",
    "create       noun  work.inputs/numbers         (nouns/inputs.yaml:4)",
    "create       task  solve                       (tasks/solve.yaml:3)",
    "create       task  verify.schema               (tasks/verify.yaml:17)",
    "create       task  verify.non-negative         (tasks/verify.yaml:20)",
    "create       task  verify.recompute            (tasks/verify.yaml:23)",
    "plan: 6 create, 0 new version, 0 unchanged, 0 conflict, 0 error (2 nouns, 4 tasks); nothing written, run without --plan to apply",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_then_apply_then_reapply_writes_nothing_and_plans_clean() {
    let env = Env::start().await;
    let pack = seeds("frontier-example");
    let empty = env.written();

    let plan = env.import(&pack, &["--plan"]).await;
    assert_eq!(plan.code, 2, "{plan:?}");
    assert_lines!(plan.stdout, EXAMPLE_PLAN);
    assert_eq!(env.written(), empty, "a plan writes nothing");

    let apply = env.import(&pack, &[]).await;
    assert_eq!(apply.code, 0, "{apply:?}");
    let mut applied: Vec<String> = EXAMPLE_PLAN[..6].iter().map(|l| l.to_string()).collect();
    applied.push(
        "import: 6 create, 0 new version, 0 unchanged, 0 conflict, 0 error (2 nouns, 4 tasks)"
            .into(),
    );
    assert_lines!(apply.stdout, applied);
    let after_apply = env.written();
    assert_eq!(env.tasks().await.len(), 4);

    let again = env.import(&pack, &[]).await;
    assert_eq!(again.code, 0, "{again:?}");
    assert_lines!(
        again.stdout,
        ["nothing to change: 2 nouns, 4 tasks unchanged"]
    );
    assert_eq!(env.written(), after_apply, "a re-apply writes nothing");
    assert_eq!(env.tasks().await.len(), 4);

    let replan = env.import(&pack, &["--plan"]).await;
    assert_eq!(replan.code, 0, "{replan:?}");
    assert_eq!(
        replan.summary(),
        "nothing to change: 2 nouns, 4 tasks unchanged"
    );
    assert!(
        replan
            .stdout
            .starts_with("unchanged    noun  work.contracts/sum-squares")
    );
}

/// The pin of version 1 of a noun, as a brief carries it.
async fn pin(env: &Env, store: &str, key: &str) -> serde_json::Value {
    let r = env
        .d
        .admin
        .get(&format!("/v1/nouns/{NS}/{store}/{key}"))
        .await
        .unwrap();
    json!({"store": store, "key": key, "version": 1, "sha256": r.header("x-tessera-sha256").unwrap()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn briefs_get_the_pins_the_import_wrote_and_depends_on_gets_task_ids() {
    let env = Env::start().await;
    assert_eq!(env.import(&seeds("frontier-example"), &[]).await.code, 0);
    let contract = pin(&env, "work.contracts", "sum-squares").await;
    let input = pin(&env, "work.inputs", "numbers").await;
    let tasks = env.tasks().await;
    let by_key = |k: &str| {
        tasks
            .iter()
            .find(|t| t["idempotency_key"] == format!("seed:frontier-example:{k}"))
            .unwrap_or_else(|| panic!("no task {k}"))
    };
    let solve = by_key("solve");
    assert_eq!(solve["brief"]["contract_ref"], contract);
    assert_eq!(solve["brief"]["input_ref"], input);
    assert_eq!(solve["state"], "queued");
    for check in ["schema", "non-negative", "recompute"] {
        let verify = by_key(&format!("verify.{check}"));
        assert_eq!(verify["brief"]["contract_ref"], contract);
        assert_eq!(verify["upstream"][0]["task_id"], solve["task_id"]);
        assert_eq!(verify["state"], "pending");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_toml_pack_plans_nothing_to_change_after_the_yaml_one_with_equal_hashes() {
    let env = Env::start().await;
    assert_eq!(env.import(&seeds("frontier-example"), &[]).await.code, 0);
    let written = env.written();
    let toml = seeds("frontier-example-toml");
    let plan = env.import(&toml, &["--plan"]).await;
    assert_eq!(plan.code, 0, "{plan:?}");
    assert_eq!(
        plan.summary(),
        "nothing to change: 2 nouns, 4 tasks unchanged"
    );
    let apply = env.import(&toml, &[]).await;
    assert_eq!(apply.code, 0, "{apply:?}");
    assert_eq!(env.written(), written);
    let toml_plan = tessera_importer::plan(&toml).unwrap();
    for noun in &toml_plan.nouns {
        let NounBody::Json(value) = &noun.body else {
            panic!("the example's nouns are JSON")
        };
        let r = env
            .d
            .admin
            .get(&format!("/v1/nouns/{NS}/{}/{}", noun.store, noun.key))
            .await
            .unwrap();
        assert_eq!(
            r.header("x-tessera-sha256").unwrap(),
            Sha256::of(&canonical_json(value)).hex(),
            "{}/{}",
            noun.store,
            noun.key
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_invalid_pack_fails_with_its_expected_report_and_writes_nothing() {
    let env = Env::start().await;
    let before = env.written();
    let mut cases: Vec<_> = std::fs::read_dir(seeds("invalid"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 20, "the invalid corpus is missing");
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let args: &[&str] = if i % 2 == 0 { &[] } else { &["--plan"] };
        let run = env.import(case, args).await;
        let want = std::fs::read_to_string(case.join("expected.txt")).unwrap();
        let told = run.stderr.contains("nothing was imported");
        if run.code != 1 || run.stdout.trim_end() != want.trim_end() || !told {
            failures.push(format!(
                "--- {} {args:?}: exit {}, stderr {:?}\nwant:\n{}\ngot:\n{}",
                case.display(),
                run.code,
                run.stderr,
                want.trim_end(),
                run.stdout.trim_end()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(env.written(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_catalog_fails_before_the_example_and_with_a_tampered_hash() {
    let env = Env::start().await;
    let release = seeds("frontier-release");
    let empty = env.written();
    let before = env.import(&release, &[]).await;
    assert_eq!(before.code, 1, "{before:?}");
    assert_lines!(
        before.stdout,
        [
            "error        pin   sum-squares-contract  (catalog.yaml:5): conformance-routing/work.contracts/sum-squares does not exist, or this key may not read it; import the pack that writes it first",
            "catalog: 1 of 1 pins are missing or differ; nothing was written",
        ]
    );
    assert_eq!(env.written(), empty);

    assert_eq!(env.import(&seeds("frontier-example"), &[]).await.code, 0);
    for args in [&[][..], &["--plan"]] {
        let after = env.import(&release, args).await;
        assert_eq!(after.code, 0, "{after:?}");
        assert_eq!(
            after.summary(),
            "nothing to change: 0 nouns, 0 tasks unchanged; its catalog pin holds"
        );
    }

    let tmp = tempfile::tempdir().unwrap();
    let tampered = tmp.path().join("release");
    copy_pack(&release, &tampered);
    let catalog = std::fs::read_to_string(tampered.join("catalog.yaml")).unwrap();
    let good = "5f5beefa0e939d50dedb4c42dedbe6a911d4b680574c7279aa5a71c61e494a82";
    let bad = "0".repeat(64);
    std::fs::write(
        tampered.join("catalog.yaml"),
        catalog.replace(good, &bad)
            + "nouns:\n  - {store: work.notes, key: release, type: noun.note, body: {n: 1}}\n",
    )
    .unwrap();
    let written = env.written();
    let run = env.import(&tampered, &[]).await;
    assert_eq!(run.code, 1, "{run:?}");
    assert_lines!(
        run.stdout,
        [
            format!(
                "error        pin   sum-squares-contract  (catalog.yaml:5): conformance-routing/work.contracts/sum-squares version 1 has sha256 {good}, not {bad}; the catalog must pin the stored bytes"
            ),
            "catalog: 1 of 1 pins are missing or differ; nothing was written".into(),
        ]
    );
    assert_eq!(env.written(), written, "the pack's noun was not written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_a_pinned_noun_plans_a_new_version_and_conflicts_and_apply_writes_nothing() {
    let env = Env::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("example");
    copy_pack(&seeds("frontier-example"), &pack);
    assert_eq!(env.import(&pack, &[]).await.code, 0);
    let contract = pack.join("nouns/contract.yaml");
    let text = std::fs::read_to_string(&contract).unwrap();
    std::fs::write(&contract, text.replace("max_items: 1000", "max_items: 999")).unwrap();
    let written = env.written();

    let plan = env.import(&pack, &["--plan"]).await;
    assert_eq!(plan.code, 1, "{plan:?}");
    let lines: Vec<&str> = plan.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "new version  noun  work.contracts/sum-squares  (nouns/contract.yaml:5)"
    );
    assert_eq!(lines[1], "    /body/operation/bounds/max_items: 1000 → 999");
    assert_eq!(
        lines[2],
        "unchanged    noun  work.inputs/numbers         (nouns/inputs.yaml:4)"
    );
    assert!(
        lines[3]
            .starts_with("conflict     task  solve                       (tasks/solve.yaml:3): t")
            && lines[3].contains(
                " already holds the idempotency key seed:frontier-example:solve with another spec"
            ),
        "{}",
        lines[3]
    );
    assert!(
        lines[4].starts_with("    /brief/contract_ref"),
        "the pin the new version would change: {}",
        lines[4]
    );
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("conflict ")).count(),
        4
    );
    assert_eq!(
        plan.summary(),
        "plan: 0 create, 1 new version, 1 unchanged, 4 conflict, 0 error (2 nouns, 4 tasks); nothing written, and an import would stop at the conflicts and errors above"
    );

    let apply = env.import(&pack, &[]).await;
    assert_eq!(apply.code, 1, "{apply:?}");
    let shown: Vec<&str> = apply.stdout.lines().collect();
    assert_eq!(
        shown.len(),
        5,
        "only the four conflicts and the summary: {shown:?}"
    );
    assert!(
        shown[..4]
            .iter()
            .all(|l| l.starts_with("conflict     task"))
    );
    assert!(
        apply
            .summary()
            .starts_with("import stopped before writing anything: 0 create, 1 new version"),
        "{}",
        apply.summary()
    );
    assert_eq!(env.written(), written);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_gaining_a_new_upstream_conflicts_while_new_dependents_are_created() {
    let env = Env::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path();
    let head = format!(
        "pack: grow\nversion: \"1\"\nnamespace: {NS}\nproducer_surface: {}\n\
         defaults: {{queue: work.external, kind: verb.solve_draft, effect_class: write-internal, visibility_scope: surface_only}}\n",
        crate::support::SURFACE
    );
    let v1 =
        format!("{head}tasks:\n  - {{id: a, brief: {{n: 1}}}}\n  - {{id: b, brief: {{n: 2}}}}\n");
    std::fs::write(pack.join("pack.yaml"), v1).unwrap();
    assert_eq!(env.import(pack, &[]).await.code, 0);
    let v2 = format!(
        "{head}tasks:\n  - {{id: a, brief: {{n: 1}}}}\n  - {{id: c, brief: {{n: 3}}}}\n  - {{id: b, brief: {{n: 2}}, depends_on: [c]}}\n  - {{id: d, brief: {{n: 4}}, depends_on: [c, a]}}\n"
    );
    std::fs::write(pack.join("pack.yaml"), v2).unwrap();
    let plan = env.import(pack, &["--plan"]).await;
    assert_eq!(plan.code, 1, "{plan:?}");
    let lines: Vec<&str> = plan.stdout.lines().collect();
    assert_eq!(lines[0], "unchanged    task  a  (pack.yaml:7)");
    assert_eq!(lines[1], "create       task  c  (pack.yaml:8)");
    assert!(
        lines[2].starts_with("conflict     task  b  (pack.yaml:9): t")
            && lines[2].contains(" already holds")
            && lines[2].ends_with(
                "an upstream task or a pinned noun version would be created, which changes its spec"
            ),
        "{}",
        lines[2]
    );
    assert_eq!(
        lines[3], "    /depends_on: [] → [\"(new task c)\"]",
        "the plan names the upstream b would gain"
    );
    assert_eq!(lines[4], "create       task  d  (pack.yaml:10)");
    let b = lines[2]
        .split(": ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the conflict names b's task");
    let r = env.d.admin.get(&format!("/v1/tasks/{b}")).await.unwrap();
    assert_eq!(body(&r)["upstream"], json!([]), "nothing was enqueued");
}
