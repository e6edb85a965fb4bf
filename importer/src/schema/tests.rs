//! Tests for `schema`: the embedded schema compiles, errors are worded
//! for authors, and the core crate's name rule agrees with the schema's pattern.

use super::*;

fn messages(doc: Doc, value: Value) -> Vec<String> {
    let mut m: Vec<String> = check(doc, &value)
        .into_iter()
        .map(|p| format!("{}: {}", crate::report::field_path(&p.pointer), p.message))
        .collect();
    m.sort();
    m
}

#[test]
fn embedded_schema_compiles_for_every_doc() {
    for doc in [Doc::PackFile, Doc::SectionFile, Doc::ItemsFile, Doc::Task] {
        let _ = check(doc, &json!({}));
    }
}

#[test]
fn schema_errors_are_worded_for_authors() {
    let pack =
        json!({"pack": "p", "version": "1", "namespace": "n", "producer_surface": "surface:s"});
    let with = |extra: Value| {
        let mut v = pack.clone();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let task = |t: Value| with(json!({ "tasks": [t] }));
    let cases: Vec<(Value, &str)> = vec![
        (pack.clone(), ""),
        (
            json!({"version": "1", "namespace": "n", "producer_surface": "s"}),
            "pack: required field is missing",
        ),
        (
            with(json!({"namespce": "x"})),
            "namespce: unknown field; did you mean \"namespace\"?",
        ),
        (
            with(json!({"namespace": "no spaces"})),
            "namespace: \"no spaces\" is not a valid name: use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit",
        ),
        (
            with(json!({"namespace": ".."})),
            "namespace: \"..\" is not a valid name: use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit",
        ),
        (
            with(json!({"producer_surface": "surface:"})),
            "producer_surface: \"surface:\" is not a valid surface: write `name` or `surface:name` (letters, digits, '.', '_', '-')",
        ),
        (
            with(json!({"defaults": {"effect_class": "write_internal"}})),
            "defaults.effect_class: \"write_internal\" is not one of \"read\", \"write-internal\", \"write-repo\", \"public\"; did you mean \"write-internal\"?",
        ),
        (
            task(json!({"id": "a", "brief": {}, "priority": "high"})),
            "tasks[0].priority: expected an integer, found \"high\"",
        ),
        (
            task(json!({"id": "a", "brief": {}, "prioirty": 1})),
            "tasks[0].prioirty: unknown field; did you mean \"priority\"?",
        ),
        (
            task(json!({"id": "a", "brief": {}, "namespace": "x"})),
            "tasks[0].namespace: unknown field; namespace, producer_surface and idempotency_key come from the pack and may not be set here",
        ),
        (
            task(json!({"id": "a"})),
            "tasks[0].brief: required field is missing",
        ),
        (
            task(json!({"id": "a", "brief": {}, "max_attempts": 0})),
            "tasks[0].max_attempts: 0 is less than the minimum 1",
        ),
        (
            task(json!({"id": "a", "brief": {}, "depends_on": ["b", "b"]})),
            "tasks[0].depends_on: lists the same entry twice",
        ),
        (
            with(json!({"nouns": [{"store": "s", "key": "k", "type": "t"}]})),
            "nouns[0]: needs `body` (written inline) or `body_file` (a file in the pack)",
        ),
        (
            with(
                json!({"nouns": [{"store": "s", "key": "k", "type": "t", "body": 1, "body_file": "x"}]}),
            ),
            "nouns[0]: has both `body` and `body_file`; keep one",
        ),
        (
            with(
                json!({"catalog": [{"name": "c", "store": "s", "key": "k", "version": 1, "sha256": "ABC"}]}),
            ),
            "catalog[0].sha256: \"ABC\" is not a sha256: write the 64 lowercase hex digits `sha256sum` prints",
        ),
        (
            with(json!({"templates": [{"id": "t", "brief": {}}]})),
            "templates[0]: needs `items` (written inline) or `items_file` (a file in the pack)",
        ),
    ];
    for (value, want) in cases {
        let got = messages(Doc::PackFile, value.clone()).join("\n");
        assert_eq!(got, want, "value {value}");
    }
}

#[test]
fn the_core_name_rule_agrees_with_the_schema_pattern() {
    let long = "a".repeat(128);
    let too_long = "a".repeat(129);
    let cases = [
        "work.contracts",
        "sum-squares",
        "A_1",
        "0",
        &long,
        &too_long,
        "",
        ".",
        "..",
        ".x",
        "-x",
        "a/b",
        "a b",
        "é",
        "surface:x",
        "a\n",
    ];
    for name in cases {
        let schema_says = check(
            Doc::PackFile,
            &json!({"pack": name, "version": "1", "namespace": "n", "producer_surface": "s"}),
        )
        .is_empty();
        assert_eq!(
            tessera_core::name::is_valid(name),
            schema_says,
            "name {name:?}"
        );
    }
}

#[test]
fn included_files_may_not_set_pack_fields() {
    let got = messages(Doc::SectionFile, json!({"namespace": "x", "tasks": []}));
    assert_eq!(
        got,
        ["namespace: unknown field; only pack.yaml or pack.toml may set it"]
    );
}
