//! No input makes `plan` panic or hang: random bytes, random nesting, huge
//! strings and mutations of the real example packs all end in a Plan or a
//! Report, and a Report always has at least one located diagnostic. Random
//! dependency graphs either plan in an order that puts every upstream first
//! or report a cycle.

use std::path::Path;

use proptest::prelude::*;
mod common;

use common::temp_pack;
use tessera_importer::{Plan, Report, plan};

const HEAD: &str = "pack: p\nversion: '1'\nnamespace: ns\nproducer_surface: s\ndefaults: {queue: q, kind: k, effect_class: read, visibility_scope: public}\n";

/// Plans `dir` twice: the result must be the same, and a report must
/// locate every problem.
fn plan_checked(dir: &Path) -> Result<Plan, Report> {
    let first = plan(dir);
    assert_eq!(first, plan(dir), "planning is deterministic");
    if let Err(report) = &first {
        assert!(!report.diagnostics.is_empty());
        for d in &report.diagnostics {
            assert!(
                d.line >= 1 && !d.field.is_empty() && !d.message.is_empty(),
                "{d:?}"
            );
        }
    }
    first
}

fn example_files(name: &str) -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../seeds")
        .join(name);
    let mut out = Vec::new();
    for rel in [
        "pack.yaml",
        "pack.toml",
        "nouns/contract.yaml",
        "nouns/contract.toml",
        "tasks/verify.yaml",
        "tasks/verify.toml",
        "nouns/inputs.yaml",
        "nouns/inputs.toml",
        "tasks/solve.yaml",
        "tasks/solve.toml",
        "inputs/numbers.json",
    ] {
        if let Ok(bytes) = std::fs::read(root.join(rel)) {
            out.push((rel.to_owned(), bytes));
        }
    }
    out
}

/// A nested YAML or TOML value, `depth` levels deep, in mixed styles.
fn nested(depth: usize, toml: bool, styles: &[u8]) -> String {
    let mut s = String::from("1");
    for i in 0..depth {
        s = match (toml, styles[i % styles.len()] % 3) {
            (false, 0) => format!("[{s}]"),
            (false, 1) => format!("{{k: {s}}}"),
            (false, _) => format!("[{s}, x]"),
            (true, 0) => format!("[{s}]"),
            (true, 1) => format!("{{ k = {s} }}"),
            (true, _) => format!("[{s}, \"x\"]"),
        };
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048), which in 0usize..5) {
        let body_pack = format!("{HEAD}nouns: [{{store: s, key: k, type: t, body_file: b.yaml}}]\n");
        let items_pack = format!("{HEAD}templates: [{{id: t, brief: {{x: '{{{{ item.x }}}}'}}, items_file: items.toml}}]\n");
        let included = format!("{HEAD}include: ['more/*.yaml']\n");
        let dir = match which {
            0 => temp_pack(&[("pack.yaml", &bytes)]),
            1 => temp_pack(&[("pack.toml", &bytes)]),
            2 => temp_pack(&[("pack.yaml", body_pack.as_bytes()), ("b.yaml", &bytes)]),
            3 => temp_pack(&[("pack.yaml", items_pack.as_bytes()), ("items.toml", &bytes)]),
            _ => temp_pack(&[("pack.yaml", included.as_bytes()), ("more/x.yaml", &bytes)]),
        };
        let _ = plan_checked(dir.path());
    }

    #[test]
    fn random_nesting_never_panics(depth in 0usize..300, toml in any::<bool>(), styles in proptest::collection::vec(any::<u8>(), 1..8)) {
        let value = nested(depth, toml, &styles);
        let dir = if toml {
            let text = format!("pack = 'p'\nversion = '1'\nnamespace = 'ns'\nproducer_surface = 's'\n[[nouns]]\nstore = 's'\nkey = 'k'\ntype = 't'\nbody = {value}\n");
            temp_pack(&[("pack.toml", text.as_bytes())])
        } else {
            let text = format!("{HEAD}nouns: [{{store: s, key: k, type: t, body: {value}}}]\n");
            temp_pack(&[("pack.yaml", text.as_bytes())])
        };
        let result = plan_checked(dir.path());
        // Within the limit it plans; past it, it reports (never both ways).
        if depth + 3 <= 64 {
            prop_assert!(result.is_ok(), "depth {depth}: {}", result.unwrap_err());
        }
        if depth > 80 {
            prop_assert!(result.is_err(), "depth {depth} planned");
        }
    }

    #[test]
    fn mutated_example_packs_never_panic(
        toml in any::<bool>(),
        file in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut files = example_files(if toml { "frontier-example-toml" } else { "frontier-example" });
        let target = file.index(files.len());
        let bytes = &mut files[target].1;
        for (at, byte, op) in edits {
            let i = at.index(bytes.len().max(1)).min(bytes.len());
            match op {
                0 if i < bytes.len() => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ if i < bytes.len() => { bytes.remove(i); }
                _ => {}
            }
        }
        let refs: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
        let _ = plan_checked(temp_pack(&refs).path());
    }

    #[test]
    fn dependencies_plan_upstream_first_or_report_a_cycle(edges in proptest::collection::vec(proptest::collection::vec(0usize..12, 0..3), 1..12)) {
        let n = edges.len();
        let mut text = format!("{HEAD}tasks:\n");
        for (i, ups) in edges.iter().enumerate() {
            let mut ups: Vec<usize> = ups.iter().map(|u| u % n).collect();
            ups.sort();
            ups.dedup();
            let deps: Vec<String> = ups.iter().map(|u| format!("t{u}")).collect();
            text.push_str(&format!("  - {{id: t{i}, brief: {{}}, depends_on: [{}]}}\n", deps.join(", ")));
        }
        let dir = temp_pack(&[("pack.yaml", text.as_bytes())]);
        match plan_checked(dir.path()) {
            Ok(p) => {
                let pos = |id: &str| p.tasks.iter().position(|t| t.id == id).unwrap();
                for t in &p.tasks {
                    for up in &t.depends_on {
                        prop_assert!(pos(up) < pos(&t.id), "{} before its upstream {}", t.id, up);
                    }
                }
                prop_assert_eq!(p.tasks.len(), n);
            }
            Err(report) => {
                prop_assert!(report.diagnostics.iter().all(|d| d.message.starts_with("dependency cycle: ")), "{}", report);
            }
        }
    }
}

proptest! {
    // Each case plans megabytes twice, so fewer cases; the cost is linear.
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn huge_strings_never_panic(len in 0usize..3_000_000, ch in prop::sample::select(vec!['x', '{', '}', '\'', '"', 'é', '\n'])) {
        let s: String = std::iter::repeat_n(ch, len).collect();
        let quoted = serde_json::to_string(&s).unwrap(); // a valid YAML double-quoted scalar
        let text = format!("{HEAD}nouns: [{{store: s, key: k, type: t, body: {quoted}}}]\ntasks: [{{id: a, brief: {{x: {quoted}}}}}]\n");
        let dir = temp_pack(&[("pack.yaml", text.as_bytes())]);
        let p = plan_checked(dir.path()).expect("a long string is just a string");
        prop_assert_eq!(p.tasks[0].spec.full_json()["brief"]["x"].as_str().map(str::len), Some(s.len()));
    }
}

#[test]
fn a_file_over_the_size_limit_is_refused_without_reading_it_all() {
    let big = vec![b'#'; 16 * 1024 * 1024 + 1];
    let dir = temp_pack(&[("pack.yaml", &big)]);
    let report = plan(dir.path()).unwrap_err();
    assert_eq!(
        report.to_string(),
        "pack.yaml:1: file: is larger than 16 MiB"
    );
}

#[cfg(unix)]
#[test]
fn a_fifo_is_refused_instead_of_blocking() {
    let dir = temp_pack(&[(
        "pack.yaml",
        format!("{HEAD}nouns: [{{store: s, key: k, type: t, body_file: pipe.md}}]\n").as_bytes(),
    )]);
    let status = std::process::Command::new("mkfifo")
        .arg(dir.path().join("pipe.md"))
        .status();
    if !status.is_ok_and(|s| s.success()) {
        return; // no mkfifo here; nothing to prove
    }
    let report = plan(dir.path()).unwrap_err();
    assert_eq!(
        report.to_string(),
        "pack.yaml:6: nouns[0].body_file: \"pipe.md\" is not a regular file"
    );
}
