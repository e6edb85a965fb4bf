//! Tests for `raw`: scalar resolution, line maps, limits, and YAML = TOML.

use super::*;
use serde_json::json;

fn yaml(text: &str) -> Result<Raw, ParseError> {
    parse(Format::Yaml, text, &mut Budget::new())
}

#[test]
fn yaml_scalars_follow_the_core_schema() {
    let cases: &[(&str, Value)] = &[
        ("a: 1", json!({"a": 1})),
        ("a: -7", json!({"a": -7})),
        ("a: +7", json!({"a": 7})),
        ("a: 0x1F", json!({"a": 31})),
        ("a: 0o17", json!({"a": 15})),
        ("a: 1.5", json!({"a": 1.5})),
        ("a: 1e3", json!({"a": 1000.0})),
        ("a: .5", json!({"a": 0.5})),
        ("a: true", json!({"a": true})),
        ("a: False", json!({"a": false})),
        ("a: ~", json!({"a": null})),
        ("a:", json!({"a": null})),
        ("a: yes", json!({"a": "yes"})),
        ("a: '1'", json!({"a": "1"})),
        ("a: !!str 1", json!({"a": "1"})),
        ("a: 1.2.3", json!({"a": "1.2.3"})),
        (
            "a: 2025-01-01T00:00:00Z",
            json!({"a": "2025-01-01T00:00:00Z"}),
        ),
        (
            "a: 18446744073709551615",
            json!({"a": 18446744073709551615u64}),
        ),
        ("1: x", json!({"1": "x"})),
        ("", Value::Null),
    ];
    for (text, want) in cases {
        assert_eq!(&yaml(text).expect(text).value, want, "yaml {text:?}");
    }
}

#[test]
fn values_json_cannot_hold_are_refused_with_a_line() {
    let cases = [
        ("a: 1\nb: .nan", 2, ".nan cannot be stored as JSON"),
        ("a: .inf", 1, ".inf cannot be stored as JSON"),
        ("a: 99999999999999999999", 1, "does not fit in 64 bits"),
        ("a: !custom x", 1, "YAML tag `!custom` is not supported"),
        ("a: 1\na: 2", 2, "duplicate key \"a\""),
        ("a: 1\n---\nb: 2", 2, "one YAML document"),
        ("a: *nope", 1, "unknown anchor"),
        ("? [1]\n: x", 1, "keys must be plain strings"),
    ];
    for (text, line, needle) in cases {
        let e = yaml(text).expect_err(text);
        assert_eq!(e.line, line, "yaml {text:?}: {e:?}");
        assert!(e.message.contains(needle), "yaml {text:?}: {e:?}");
    }
}

#[test]
fn yaml_lines_point_at_keys_and_items() {
    let text = "pack: p\ntasks:\n  - id: a\n    brief:\n      x: 1\n  - id: b\n";
    let raw = yaml(text).unwrap();
    let cases = [
        ("", 1),
        ("/pack", 1),
        ("/tasks", 2),
        ("/tasks/0", 3),
        ("/tasks/0/brief", 4),
        ("/tasks/0/brief/x", 5),
        ("/tasks/0/brief/x/deeper", 5),
        ("/tasks/1", 6),
        ("/tasks/1/id", 6),
    ];
    for (pointer, line) in cases {
        assert_eq!(raw.lines.line(pointer), line, "pointer {pointer:?}");
    }
}

#[test]
fn toml_lines_point_at_keys_and_tables() {
    let text = "pack = \"p\"\n\n[[tasks]]\nid = \"a\"\n[tasks.brief]\nx = [\n  1,\n  2,\n]\n\n[[tasks]]\nid = \"b\"\n";
    let raw = parse(Format::Toml, text, &mut Budget::new()).unwrap();
    let cases = [
        ("/pack", 1),
        ("/tasks/0", 3),
        ("/tasks/0/id", 4),
        ("/tasks/0/brief/x", 6),
        ("/tasks/0/brief/x/1", 8),
        ("/tasks/1", 11),
        ("/tasks/1/id", 12),
    ];
    for (pointer, line) in cases {
        assert_eq!(raw.lines.line(pointer), line, "pointer {pointer:?}");
    }
}

#[test]
fn yaml_and_toml_give_the_same_value() {
    let y = "a: 1\nb: [1.5, x, true]\nc:\n  d: 2025-01-01T00:00:00Z\n  e: 0x10\n";
    let t = "a = 1\nb = [1.5, \"x\", true]\n[c]\nd = 2025-01-01T00:00:00Z\ne = 0x10\n";
    assert_eq!(
        yaml(y).unwrap().value,
        parse(Format::Toml, t, &mut Budget::new()).unwrap().value
    );
}

#[test]
fn toml_errors_carry_the_parser_line() {
    let e = parse(Format::Toml, "a = 1\nb = = 2\n", &mut Budget::new()).unwrap_err();
    assert_eq!(e.line, 2, "{e:?}");
    let e = parse(Format::Toml, "a = 1\na = 2\n", &mut Budget::new()).unwrap_err();
    assert_eq!(e.line, 2, "{e:?}");
}

#[test]
fn alias_bombs_stop_before_they_expand() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let e = yaml(&text).unwrap_err();
    assert!(e.message.contains("aliases expand to more than"), "{e:?}");
}

#[test]
fn small_aliases_are_copied() {
    let raw = yaml("base: &b {q: work}\none: *b\ntwo: *b\n").unwrap();
    assert_eq!(raw.value["two"], json!({"q": "work"}));
    assert_eq!(raw.lines.line("/two/q"), 3);
}

#[test]
fn deep_nesting_is_refused_in_both_formats() {
    let deep_yaml = format!("a: {}{}", "[".repeat(100), "]".repeat(100));
    assert!(
        yaml(&deep_yaml)
            .unwrap_err()
            .message
            .contains("deeper than")
    );
    let deep_toml = format!("a = {}{}", "[".repeat(100), "]".repeat(100));
    assert!(parse(Format::Toml, &deep_toml, &mut Budget::new()).is_err());
    let ok_yaml = format!("a: {}{}", "[".repeat(60), "]".repeat(60));
    assert!(yaml(&ok_yaml).is_ok());
}

#[test]
fn merge_keys_follow_yaml_1_1() {
    let cases: &[(&str, Value)] = &[
        (
            "b: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3",
            json!({"b": {"x": 1, "y": 2}, "m": {"x": 1, "y": 3}}),
        ),
        (
            "m:\n  y: 3\n  <<: {x: 1, y: 2}",
            json!({"m": {"x": 1, "y": 3}}),
        ),
        (
            "m:\n  <<: [{x: 1}, {x: 2, z: 2}]",
            json!({"m": {"x": 1, "z": 2}}),
        ),
        ("m:\n  '<<': 1", json!({"m": {"<<": 1}})),
    ];
    for (text, want) in cases {
        assert_eq!(&yaml(text).expect(text).value, want, "yaml {text:?}");
    }
    let refused = [
        ("m:\n  <<: 1", 2, "`<<` merges a map"),
        ("m:\n  <<: [{x: 1}, 2]", 2, "`<<` merges a map"),
        ("m:\n  <<: {x: 1}\n  <<: {y: 1}", 3, "a second `<<`"),
    ];
    for (text, line, needle) in refused {
        let e = yaml(text).expect_err(text);
        assert_eq!(e.line, line, "yaml {text:?}: {e:?}");
        assert!(e.message.contains(needle), "yaml {text:?}: {e:?}");
    }
}

#[test]
fn aliases_count_their_bytes_against_the_pack_budget() {
    let text = format!("a: &a {}\nb: *a\nc: *a\n", "x".repeat(1000));
    let mut budget = Budget::new();
    parse(Format::Yaml, &text, &mut budget).unwrap();
    assert!(budget.used() >= 3000, "{}", budget.used());
    let mut nearly_full = Budget::new();
    nearly_full.take(MAX_PACK_BYTES - 2500).unwrap();
    let e = parse(Format::Yaml, &text, &mut nearly_full).unwrap_err();
    assert_eq!(e.line, 3, "{e:?}");
}

#[test]
fn deep_dotted_toml_keys_are_refused_at_their_line() {
    let key = |n: usize| {
        (0..n)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(".")
    };
    // (text, line, message part): toml refuses keys of 81 parts and more
    // itself, without a place; shorter ones pass it and meet our depth.
    let cases = [
        (
            format!("a = 1\n\n{} = 1\n", key(70)),
            3,
            "nested deeper than 64",
        ),
        (
            format!("a = 1\n\n{} = 1\n", key(81)),
            3,
            "a dotted key of 81 parts",
        ),
        (
            format!("a = 1\n[t]\nb = 2\n{} = 1\n", key(200)),
            4,
            "of 200 parts",
        ),
        (
            format!("a = 1\n\n\n[{}]\nx = 1\n", key(2000)),
            4,
            "of 2000 parts",
        ),
        (format!("a = 1\n[[{}]]\n", key(90)), 2, "of 90 parts"),
        (
            format!("a = {{ b = 1 }}\nc = {{ {} = 1 }}\n", key(100)),
            2,
            "of 100 parts",
        ),
        (
            format!("s = \"\"\"\nx.y = 1\n\"\"\"\n{} = 1\n", key(100)),
            4,
            "of 100 parts",
        ),
        (
            format!(
                "a = {}{}\n{} = 1\n",
                "[".repeat(300),
                "]".repeat(300),
                key(100)
            ),
            1,
            "max recursion depth",
        ),
    ];
    for (text, line, needle) in cases {
        let e = parse(Format::Toml, &text, &mut Budget::new()).expect_err(&text[..40]);
        assert_eq!(e.line, line, "{:?}: {e:?}", &text[..40]);
        assert!(e.message.contains(needle), "{:?}: {e:?}", &text[..40]);
    }
    let quoted = format!("\"{}\" = 1\n", key(200));
    assert!(parse(Format::Toml, &quoted, &mut Budget::new()).is_ok());
}
