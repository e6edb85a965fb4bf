//! The packs in `seeds/` plan as designed: the frontier example, its TOML
//! twin (same Plan apart from sources), the release catalog (its pin is the
//! hash of the contract's canonical JSON), template ids that stay stable
//! when items are appended, and a table of smaller rules on temporary packs.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
mod common;

use common::{plan_ok, temp_pack};
use tessera_importer::{NounBody, Plan, Source, plan};

fn seeds(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../seeds")
        .join(name)
}

fn without_sources(mut p: Plan) -> Plan {
    p.nouns
        .iter_mut()
        .for_each(|n| n.source = Source::default());
    p.tasks
        .iter_mut()
        .for_each(|t| t.source = Source::default());
    p.catalog
        .iter_mut()
        .for_each(|c| c.source = Source::default());
    p
}

/// The store's canonical JSON: sorted keys, two-space indent, trailing
/// newline. Keys are sorted here explicitly, so the result does not depend
/// on serde_json's map features.
fn canonical(v: &Value) -> Vec<u8> {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    let mut out = serde_json::to_string_pretty(&sorted(v))
        .unwrap()
        .into_bytes();
    out.push(b'\n');
    out
}

#[test]
fn frontier_example_plans_as_designed() {
    let p = plan_ok(&seeds("frontier-example"));
    assert_eq!(p.pack.name, "frontier-example");
    assert_eq!(p.pack.namespace, "conformance-routing");
    assert_eq!(p.pack.producer_surface, "team_example");

    let nouns: Vec<(&str, &str, &str)> = p
        .nouns
        .iter()
        .map(|n| (n.store.as_str(), n.key.as_str(), n.noun_type.as_str()))
        .collect();
    assert_eq!(
        nouns,
        [
            ("work.contracts", "sum-squares", "noun.skill_pack"),
            ("work.inputs", "numbers", "noun.input")
        ]
    );
    assert_eq!(
        p.nouns[1].body,
        NounBody::Json(json!({"numbers": [3, 4, 12, 5, 1, 7]}))
    );
    assert_eq!(
        p.nouns[0].source,
        Source {
            file: "nouns/contract.yaml".into(),
            line: 5
        }
    );

    let ids: Vec<&str> = p.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "solve",
            "verify.schema",
            "verify.non-negative",
            "verify.recompute"
        ]
    );
    let solve = &p.tasks[0];
    assert_eq!(solve.idempotency_key, "seed:frontier-example:solve");
    assert_eq!(solve.spec.full_json()["queue"], "work.external");
    assert_eq!(solve.spec.full_json()["kind"], "verb.solve_draft");
    assert_eq!(solve.spec.full_json()["effect_class"], "write-internal");
    assert_eq!(solve.spec.full_json()["visibility_scope"], "surface_only");
    assert_eq!(solve.spec.full_json()["namespace"], "conformance-routing");
    assert_eq!(solve.spec.full_json()["producer_surface"], "team_example");
    assert_eq!(
        solve.spec.full_json()["idempotency_key"],
        "seed:frontier-example:solve"
    );
    assert!(
        solve.spec.depends_on.is_empty(),
        "upstream ids are the apply's"
    );
    let refs: Vec<(&str, &str, &str)> = solve
        .noun_refs
        .iter()
        .map(|r| (r.pointer.as_str(), r.store.as_str(), r.key.as_str()))
        .collect();
    assert_eq!(
        refs,
        [
            ("/contract_ref", "work.contracts", "sum-squares"),
            ("/input_ref", "work.inputs", "numbers")
        ]
    );

    for t in &p.tasks[1..] {
        assert_eq!(t.spec.full_json()["kind"], "verb.verify_gate");
        assert_eq!(t.depends_on, ["solve"]);
        assert_eq!(t.noun_refs.len(), 2);
    }
    assert_eq!(
        p.tasks[2].spec.full_json()["brief"]["check"],
        "result_is_non_negative"
    );
    assert_eq!(
        p.tasks[2].spec.full_json()["tags"],
        json!(["category:verb.verify_gate", "check:result_is_non_negative"])
    );
    assert_eq!(
        p.tasks[2].source,
        Source {
            file: "tasks/verify.yaml".into(),
            line: 20
        }
    );
}

#[test]
fn yaml_and_toml_packs_plan_the_same_apart_from_sources() {
    let yaml = without_sources(plan_ok(&seeds("frontier-example")));
    let toml = without_sources(plan_ok(&seeds("frontier-example-toml")));
    if yaml != toml {
        panic!(
            "YAML and TOML plans differ\nYAML:\n{}\nTOML:\n{}",
            serde_json::to_string_pretty(&yaml).unwrap(),
            serde_json::to_string_pretty(&toml).unwrap()
        );
    }
}

#[test]
fn release_catalog_pins_the_canonical_contract_body() {
    let example = plan_ok(&seeds("frontier-example"));
    let NounBody::Json(contract) = &example.nouns[0].body else {
        panic!("the contract is a JSON noun");
    };
    let sha = hex::encode(Sha256::digest(canonical(contract)));
    let release = plan_ok(&seeds("frontier-release"));
    assert_eq!(release.catalog.len(), 1);
    let pin = &release.catalog[0];
    assert_eq!(
        (
            pin.namespace.as_str(),
            pin.store.as_str(),
            pin.key.as_str(),
            pin.version
        ),
        ("conformance-routing", "work.contracts", "sum-squares", 1)
    );
    assert_eq!(
        pin.sha256, sha,
        "update seeds/frontier-release/catalog.yaml to the contract's sha256"
    );
}

const TEMPLATE_PACK: &str = "pack: p\nversion: '1'\nnamespace: ns\nproducer_surface: s\ndefaults: {queue: q, kind: verb.x, effect_class: read, visibility_scope: private}\ntemplates:\n  - id: t\n    brief: {n: '{{ item.n }}'}\n    items:\n";

#[test]
fn appending_an_item_keeps_earlier_ids_and_specs() {
    let before = format!("{TEMPLATE_PACK}      - {{id: a, n: 1}}\n      - {{n: 2}}\n");
    let after = format!("{before}      - {{id: c, n: 3}}\n      - {{n: 4}}\n");
    let before = plan_ok(temp_pack(&[("pack.yaml", &before)]).path());
    let after = plan_ok(temp_pack(&[("pack.yaml", &after)]).path());
    let ids: Vec<&str> = after.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t.a", "t.1", "t.c", "t.3"]);
    assert_eq!(before.tasks[..], after.tasks[..2]);
}

/// A rule: its name, the pack's files, and what the plan must show.
type Rule<'a> = (&'a str, Vec<(&'a str, String)>, fn(&Plan));

#[test]
fn rules_table() {
    let head = "pack: p\nversion: '1'\nnamespace: ns\nproducer_surface: surface:s\n";
    let cases: Vec<Rule> = vec![
        (
            "a markdown body_file is kept as bytes, its line ends LF",
            vec![
                (
                    "pack.yaml",
                    format!("{head}nouns: [{{store: s, key: k, type: t, body_file: doc/a.md}}]\n"),
                ),
                ("doc/a.md", "# A\r\nbytes\n".into()),
            ],
            |p| {
                assert_eq!(
                    p.nouns[0].body,
                    NounBody::Bytes {
                        bytes: b"# A\nbytes\n".to_vec(),
                        media_type: "text/markdown".into()
                    }
                )
            },
        ),
        (
            "a TOML body_file becomes JSON",
            vec![
                (
                    "pack.yaml",
                    format!("{head}nouns: [{{store: s, key: k, type: t, body_file: b.toml}}]\n"),
                ),
                ("b.toml", "a = 1\n".into()),
            ],
            |p| assert_eq!(p.nouns[0].body, NounBody::Json(json!({"a": 1}))),
        ),
        (
            "surfaces lose their surface: prefix",
            vec![(
                "pack.yaml",
                format!(
                    "{head}nouns: [{{store: s, key: k, type: t, body: 1, allowed_surfaces: [surface:a, b]}}]\n"
                ),
            )],
            |p| {
                assert_eq!(p.pack.producer_surface, "s");
                assert_eq!(p.nouns[0].allowed_surfaces, ["a", "b"]);
            },
        ),
        (
            "a catalog pin defaults to the pack's namespace",
            vec![(
                "pack.yaml",
                format!(
                    "{head}catalog: [{{name: c, store: s, key: k, version: 2, sha256: {}}}]\n",
                    "a".repeat(64)
                ),
            )],
            |p| {
                assert_eq!(
                    (p.catalog[0].namespace.as_str(), p.catalog[0].version),
                    ("ns", 2)
                )
            },
        ),
        (
            "items come from an items_file, sources point at the item",
            vec![
                (
                    "pack.yaml",
                    format!(
                        "{head}defaults: {{queue: q, kind: k, effect_class: read, visibility_scope: public}}\ntemplates: [{{id: t, brief: {{x: '{{{{ item.x }}}}'}}, items_file: items.toml}}]\n"
                    ),
                ),
                (
                    "items.toml",
                    "[[items]]\nx = 'one'\n\n[[items]]\nid = 7\nx = 'two'\n".into(),
                ),
            ],
            |p| {
                let got: Vec<(&str, Value, usize)> = p
                    .tasks
                    .iter()
                    .map(|t| {
                        (
                            t.id.as_str(),
                            t.spec.full_json()["brief"]["x"].clone(),
                            t.source.line,
                        )
                    })
                    .collect();
                assert_eq!(got, [("t.0", json!("one"), 1), ("t.7", json!("two"), 4)]);
                assert_eq!(p.tasks[0].source.file, Path::new("items.toml"));
            },
        ),
        (
            "tasks come in dependency order, ties in source order",
            vec![(
                "pack.yaml",
                format!(
                    "{head}defaults: {{queue: q, kind: k, effect_class: read, visibility_scope: public}}\ntasks:\n  - {{id: c, brief: {{}}, depends_on: [b]}}\n  - {{id: a, brief: {{}}}}\n  - {{id: b, brief: {{}}, depends_on: [a]}}\n  - {{id: d, brief: {{}}}}\n"
                ),
            )],
            |p| {
                assert_eq!(
                    p.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
                    ["a", "b", "c", "d"]
                )
            },
        ),
        (
            "full pins and look-alikes in a brief are left alone",
            vec![(
                "pack.yaml",
                format!(
                    "{head}defaults: {{queue: q, kind: k, effect_class: read, visibility_scope: public}}\ntasks: [{{id: a, brief: {{pin: {{store: s, key: k, version: 1, sha256: x}}, other: {{noun: x, note: y}}}}}}]\n"
                ),
            )],
            |p| assert!(p.tasks[0].noun_refs.is_empty()),
        ),
        (
            "strings without template syntax are copied exactly",
            vec![(
                "pack.yaml",
                format!(
                    "{head}defaults: {{queue: q, kind: k, effect_class: read, visibility_scope: public}}\ntemplates: [{{id: t, brief: {{a: \"keep {{ this }}\\n\", b: \"{{{{ item.v }}}}\\n\"}}, items: [{{v: x}}]}}]\n"
                ),
            )],
            |p| {
                assert_eq!(
                    p.tasks[0].spec.full_json()["brief"],
                    json!({"a": "keep { this }\n", "b": "x\n"})
                )
            },
        ),
        (
            "a nested lookup uses the item's top field",
            vec![(
                "pack.yaml",
                format!(
                    "{head}defaults: {{queue: q, kind: k, effect_class: read, visibility_scope: public}}\ntemplates: [{{id: t, brief: {{x: '{{{{ item.a.b }}}}'}}, items: [{{a: {{b: deep}}}}]}}]\n"
                ),
            )],
            |p| assert_eq!(p.tasks[0].spec.full_json()["brief"]["x"], "deep"),
        ),
        (
            "hidden files and folders are not included",
            vec![
                ("pack.yaml", format!("{head}include: ['**/*.yaml']\n")),
                (".git/x.yaml", "junk: [".into()),
                (
                    "n/a.yaml",
                    "nouns: [{store: s, key: k, type: t, body: 1}]\n".into(),
                ),
            ],
            |p| assert_eq!(p.nouns.len(), 1),
        ),
    ];
    for (name, files, check) in cases {
        let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
        let dir = temp_pack(&files);
        match plan(dir.path()) {
            Ok(p) => check(&p),
            Err(report) => panic!("case {name:?} should plan, got:\n{report}"),
        }
    }
}

/// The fenced blocks of `seeds/README.md` written in `lang`, in order.
fn readme_blocks(lang: &str) -> Vec<String> {
    let text = std::fs::read_to_string(seeds("README.md")).unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l == format!("```{lang}") => current = Some(String::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

#[test]
fn readme_example_plans_the_same_in_yaml_and_toml() {
    let yaml = readme_blocks("yaml");
    let toml = readme_blocks("toml");
    let yaml =
        plan_ok(temp_pack(&[("pack.yaml", &yaml[0]), ("nouns/greet.yaml", &yaml[1])]).path());
    let toml =
        plan_ok(temp_pack(&[("pack.toml", &toml[0]), ("nouns/greet.toml", &toml[1])]).path());
    let ids: Vec<&str> = yaml.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["solve", "check.en", "check.fr"]);
    assert_eq!(without_sources(yaml), without_sources(toml));
}

#[test]
fn raw_blocks_keep_braces_literally() {
    let head = "pack: p\nversion: '1'\nnamespace: ns\nproducer_surface: s\ndefaults: {queue: q, kind: k, effect_class: read, visibility_scope: public}\n";
    let text = format!(
        "{head}templates: [{{id: t, brief: {{x: '{{% raw %}}{{{{{{% endraw %}} {{{{ item.v }}}}'}}, items: [{{v: a}}]}}]\n"
    );
    let p = plan_ok(temp_pack(&[("pack.yaml", &text)]).path());
    assert_eq!(p.tasks[0].spec.full_json()["brief"]["x"], "{{ a");
}

#[test]
fn blueprint_flow_expands_into_steps_that_consume_their_upstreams() {
    let p = plan_ok(&seeds("blueprint-flow"));
    let ids: Vec<&str> = p.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["change.design", "change.implement", "change.review"]);
    let review = &p.tasks[2];
    assert_eq!(review.depends_on, ["change.design", "change.implement"]);
    assert_eq!(
        review.spec.full_json()["placement"],
        json!("flows/{task_id}")
    );
    assert_eq!(review.spec.full_json()["check_policy"], json!("strict"));
    assert_eq!(review.spec.full_json()["kind"], json!("verb.review"));
    assert_eq!(
        review.spec.full_json()["brief"]["consumes"],
        json!({
            "plan": {"step": "design", "path": "$.parts[\"plan.md\"]"},
            "patch": {"step": "implement", "path": "$.parts[\"patch.diff\"]"},
            "notes": {"step": "implement", "path": "$.out"},
        })
    );
    assert_eq!(review.spec.full_json()["brief"]["step"], json!("review"));
    assert_eq!(p.tasks[0].spec.full_json()["brief"].get("consumes"), None);
    assert_eq!(p.tasks[1].depends_on, ["change.design"]);

    assert_eq!(p.flows.len(), 1);
    let flow = &p.flows[0];
    assert_eq!(flow.id, "change");
    assert_eq!(flow.source.line, 19);
    let steps: Vec<(&str, &str, usize)> = flow
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.task_id.as_str(), s.consumes.len()))
        .collect();
    assert_eq!(
        steps,
        [
            ("design", "change.design", 0),
            ("implement", "change.implement", 1),
            ("review", "change.review", 3)
        ]
    );
    assert_eq!(
        flow.steps[1].consumes[0].path,
        tessera_importer::Address::Part("plan.md".into())
    );
}
