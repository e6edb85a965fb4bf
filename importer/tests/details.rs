//! Importer details an author met (issue 32): template syntax in a map key
//! was copied literally without a word (it now plans with a warning at the
//! key's line); a `.json` body file starting with a byte order mark was
//! refused as "expected value at line 1 column 1" while YAML and TOML
//! files with one were read (it is now skipped); a TOML dotted key too deep
//! for the toml parser was reported at line 1 (it is now reported at its
//! own line).

use serde_json::json;
mod common;

use common::{plan_err, plan_ok, temp_pack};
use tessera_importer::{Diagnostic, NounBody};

const HEAD: &str = "pack: p\nversion: '1'\nnamespace: ns\nproducer_surface: surface:s\n\
defaults: {queue: q, effect_class: read, visibility_scope: surface_only}\n";

/// `text` with a UTF-8 byte order mark in front.
fn bom(text: &str) -> Vec<u8> {
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend_from_slice(text.as_bytes());
    bytes
}

#[test]
fn a_template_key_with_template_syntax_is_kept_as_written_with_a_warning() {
    let pack = format!(
        "{HEAD}templates:\n  - id: t\n    kind: k\n    items: [{{id: a, n: x}}, {{id: b, n: y}}]\n    brief:\n      \"{{{{ item.n }}}}\": 1\n      v: \"{{{{ item.n }}}}\"\n      deep:\n        - {{\"{{% if true %}}k{{% endif %}}\": 2}}\n"
    );
    let dir = temp_pack(&[("pack.yaml", pack.into_bytes())]);
    let p = plan_ok(dir.path());
    let briefs: Vec<_> = p
        .tasks
        .iter()
        .map(|t| serde_json::from_str::<serde_json::Value>(t.spec.brief.get()).unwrap())
        .collect();
    assert_eq!(
        briefs,
        [
            json!({"{{ item.n }}": 1, "v": "x", "deep": [{"{% if true %}k{% endif %}": 2}]}),
            json!({"{{ item.n }}": 1, "v": "y", "deep": [{"{% if true %}k{% endif %}": 2}]}),
        ],
        "keys are copied as written, values are rendered"
    );
    let shown: Vec<String> = p.warnings.iter().map(Diagnostic::to_string).collect();
    assert_eq!(
        shown,
        [
            "pack.yaml:11: templates[0].brief[\"{{ item.n }}\"]: the key \"{{ item.n }}\" holds template syntax, but only values are expanded: every task gets this key as written; put the varying part in a value",
            "pack.yaml:14: templates[0].brief.deep[0][\"{% if true %}k{% endif %}\"]: the key \"{% if true %}k{% endif %}\" holds template syntax, but only values are expanded: every task gets this key as written; put the varying part in a value",
        ],
        "one warning per key, not per item"
    );

    // A plain task's strings are never templates: no warning there.
    let plain =
        format!("{HEAD}tasks:\n  - id: t\n    kind: k\n    brief: {{\"{{{{ x }}}}\": 1}}\n");
    let dir = temp_pack(&[("pack.yaml", plain.into_bytes())]);
    assert!(plan_ok(dir.path()).warnings.is_empty());
}

#[test]
fn json_body_files_may_start_with_a_byte_order_mark_like_yaml_and_toml() {
    let nouns = "nouns:\n  - {store: s, key: j, type: t, body_file: b.json}\n  - {store: s, key: y, type: t, body_file: b.yaml}\n  - {store: s, key: t, type: t, body_file: b.toml}\n";
    let dir = temp_pack(&[
        ("pack.yaml", bom(&format!("{HEAD}{nouns}"))),
        ("b.json", bom("{\"a\": 1, \"b\": [\"x\"]}\n")),
        ("b.yaml", bom("a: 1\nb: [x]\n")),
        ("b.toml", bom("a = 1\nb = [\"x\"]\n")),
    ]);
    let p = plan_ok(dir.path());
    for noun in &p.nouns {
        assert_eq!(
            noun.body,
            NounBody::Json(json!({"a": 1, "b": ["x"]})),
            "{}",
            noun.key
        );
    }

    // A broken one still names its file and line.
    std::fs::write(dir.path().join("b.json"), bom("{\"a\": 1,\n \"b\": }\n")).unwrap();
    let report = plan_err(dir.path());
    assert!(
        report.starts_with("b.json:2: json: not valid JSON: expected value at line 2"),
        "{report}"
    );
}

#[test]
fn a_toml_dotted_key_too_deep_for_the_parser_is_reported_at_its_line() {
    let key = |n: usize| {
        (0..n)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(".")
    };
    let head = "pack = \"p\"\nversion = \"1\"\nnamespace = \"ns\"\nproducer_surface = \"s\"\n\n[[nouns]]\nstore = \"s\"\nkey = \"k\"\ntype = \"t\"\n";
    // (the rest of pack.toml, the report)
    let cases = [
        (
            format!("body.{} = 1\n", key(200)),
            "pack.toml:10: toml: a dotted key of 201 parts nests deeper than 64 levels",
        ),
        (
            format!("\n[nouns.body.{}]\nx = 1\n", key(2000)),
            "pack.toml:11: toml: a dotted key of 2002 parts nests deeper than 64 levels",
        ),
        (
            format!("body.{} = 1\n", key(70)),
            "pack.toml:10: toml: nested deeper than 64 levels",
        ),
    ];
    for (rest, want) in cases {
        let dir = temp_pack(&[("pack.toml", format!("{head}{rest}").into_bytes())]);
        assert_eq!(plan_err(dir.path()), want);
    }
}
