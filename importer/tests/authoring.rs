//! What seed-pack authors rely on beyond the pack format: a CRLF checkout
//! plans the same records, lists that mean sets may be reordered, merge
//! keys work, JSON body files keep numbers exact and refuse repeated keys,
//! and a pack that would expand past `MAX_PACK_BYTES` fails at a file and
//! line quickly instead of exhausting memory.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
mod common;

use common::{plan_err, plan_ok, temp_pack};
use tessera_core::{CheckPolicy, UpstreamFailure};
use tessera_importer::{MAX_PACK_BYTES, NounBody, Plan};

const HEAD: &str = "pack: p\nversion: '1'\nnamespace: ns\nproducer_surface: surface:s\n\
defaults: {queue: q, effect_class: read, visibility_scope: surface_only}\n";

/// Copies a folder, giving every file CRLF line ends.
fn crlf_copy(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            crlf_copy(&entry.path(), &target);
        } else {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            assert!(!text.contains('\r'), "{}", entry.path().display());
            std::fs::write(target, text.replace('\n', "\r\n")).unwrap();
        }
    }
}

#[test]
fn a_crlf_checkout_plans_the_same_records() {
    for name in ["frontier-example-toml", "frontier-example"] {
        let seeds = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../seeds")
            .join(name);
        let copy = tempfile::tempdir().unwrap();
        crlf_copy(&seeds, copy.path());
        assert_eq!(plan_ok(copy.path()), plan_ok(&seeds), "{name}");
    }
}

#[test]
fn reordered_sets_plan_the_same_specs() {
    let pack = |tags: &str, cohorts: &str, deps: &str| {
        temp_pack(&[(
            "pack.yaml",
            format!(
                "{HEAD}tasks:\n- {{id: a, kind: k, brief: {{}}}}\n- {{id: b, kind: k, brief: {{}}}}\n\
                 - {{id: c, kind: k, brief: {{}}, tags: {tags}, target_cohorts: {cohorts}, depends_on: {deps}}}\n"
            ),
        )])
    };
    let one = plan_ok(pack("[x, y]", "[all, beta]", "[a, b]").path());
    let two = plan_ok(pack("[y, x]", "[beta, all]", "[b, a]").path());
    let c = |p: &Plan| p.tasks.iter().find(|t| t.id == "c").unwrap().clone();
    assert_eq!(c(&one).spec, c(&two).spec);
    assert_eq!(c(&one).depends_on, c(&two).depends_on);
    assert_eq!(*c(&one).spec.traits.tags, ["x", "y"]);
    let three = plan_ok(pack("[x]", "[all, beta]", "[a, b]").path());
    assert_ne!(c(&one).spec, c(&three).spec);
}

#[test]
fn merge_keys_merge_and_written_keys_win() {
    let dir = temp_pack(&[(
        "pack.yaml",
        format!(
            "{HEAD}nouns:\n- store: s\n  key: k\n  type: t\n  body:\n    base: &base {{a: 1, b: 2}}\n    \
             more: &more {{b: 3, c: 4}}\n    one:\n      <<: *base\n      a: 9\n    \
             two:\n      <<: [*more, *base]\n    literal:\n      \"<<\": 1\n"
        ),
    )]);
    let p = plan_ok(dir.path());
    let NounBody::Json(body) = &p.nouns[0].body else {
        panic!("a JSON body")
    };
    assert_eq!(body["one"], json!({"a": 9, "b": 2}));
    assert_eq!(body["two"], json!({"a": 1, "b": 3, "c": 4}));
    assert_eq!(body["literal"], json!({"<<": 1}));
    let bad = temp_pack(&[(
        "pack.yaml",
        format!("{HEAD}nouns:\n- store: s\n  key: k\n  type: t\n  body:\n    <<: 5\n"),
    )]);
    let report = plan_err(bad.path());
    assert!(report.contains("pack.yaml:11:"), "{report}");
    assert!(report.contains("`<<` merges a map"), "{report}");
}

#[test]
fn json_body_files_keep_numbers_exact_and_refuse_repeated_keys() {
    let noun =
        |file: &str| format!("{HEAD}nouns: [{{store: s, key: k, type: t, body_file: {file}}}]\n");
    let exact = temp_pack(&[
        ("pack.yaml", noun("b.json")),
        (
            "b.json",
            "{\"n\": 18446744073709551615, \"m\": -9223372036854775808}".into(),
        ),
    ]);
    let p = plan_ok(exact.path());
    assert_eq!(
        p.nouns[0].body,
        NounBody::Json(json!({"n": 18446744073709551615u64, "m": i64::MIN}))
    );
    let cases = [
        (
            "{\n  \"n\": 123456789012345678901234567890\n}",
            "b.json:2: json:",
            "does not fit in 64 bits",
        ),
        (
            "{\n  \"a\": 1,\n  \"a\": 2\n}",
            "b.json:3: json:",
            "duplicate key \"a\"",
        ),
    ];
    for (text, at, message) in cases {
        let dir = temp_pack(&[("pack.yaml", noun("b.json")), ("b.json", text.into())]);
        let report = plan_err(dir.path());
        assert!(
            report.contains(at) && report.contains(message),
            "{text}: {report}"
        );
    }
}

/// Plans `dir`, which must fail within a few seconds with `want` in the
/// report (the failure comes before the expansion is built).
fn fails_fast(dir: &Path, want: &[&str]) {
    let started = Instant::now();
    let report = plan_err(dir);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    for w in want {
        assert!(report.contains(w), "want {w:?} in:\n{report}");
    }
}

#[test]
fn an_aliased_megabyte_fails_at_its_line_before_expanding() {
    let big = "x".repeat(1024 * 1024);
    let aliases: String = (0..1000).map(|i| format!("    c{i}: *big\n")).collect();
    let dir = temp_pack(&[(
        "pack.yaml",
        format!(
            "{HEAD}nouns:\n- store: s\n  key: k\n  type: t\n  body:\n    a: &big {big}\n{aliases}"
        ),
    )]);
    let mib = MAX_PACK_BYTES / (1024 * 1024);
    // The alias that crosses the limit: the file's 10 lines, then one per MiB.
    let line = 10 + mib;
    fails_fast(
        dir.path(),
        &[
            &format!("pack.yaml:{line}: yaml:"),
            &format!("more than {mib} MiB"),
        ],
    );
}

/// A pack with one template of this brief text over `items` items.
fn template_pack(text: &str, items: usize) -> tempfile::TempDir {
    let items: String = (0..items)
        .map(|i| format!("    - {{id: i{i}, x: {}}}\n", "y".repeat(1000)))
        .collect();
    temp_pack(&[(
        "pack.yaml",
        format!(
            "{HEAD}templates:\n  - id: t\n    kind: k\n    brief: {{text: \"{text}\", x: \"{{{{ item.x }}}}\"}}\n    items:\n{items}"
        ),
    )])
}

#[test]
fn a_two_megabyte_template_fails_at_the_template_before_copying() {
    let dir = template_pack(&"z".repeat(2 * 1024 * 1024), 100);
    let mib = MAX_PACK_BYTES / (1024 * 1024);
    fails_fast(
        dir.path(),
        &[
            "pack.yaml:7: templates[0]:",
            &format!("more than {mib} MiB"),
        ],
    );
}

#[test]
fn a_rendering_stops_at_its_limit() {
    let dir = template_pack(&"{{ item.x }}".repeat(20_000), 1);
    fails_fast(
        dir.path(),
        &[
            "pack.yaml:9:",
            "for item",
            "expands to more than 1048576 bytes",
        ],
    );
}

#[test]
fn the_readme_merge_key_example_plans_as_described() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../seeds/README.md"))
            .unwrap();
    let start = readme
        .find("```yaml\ntasks:\n  - id: check-a")
        .expect("the example")
        + 8;
    let block = &readme[start..start + readme[start..].find("```").unwrap()];
    let p = plan_ok(temp_pack(&[("pack.yaml", format!("{HEAD}{block}"))]).path());
    let spec = |id: &str| p.tasks.iter().find(|t| t.id == id).unwrap().spec.clone();
    assert_eq!(
        (
            spec("check-a").kind.to_string(),
            spec("check-a").traits.priority
        ),
        ("verb.verify".to_string(), 5)
    );
    assert_eq!(
        (
            spec("check-b").kind.to_string(),
            spec("check-b").traits.priority
        ),
        ("verb.verify".to_string(), 9)
    );
}

/// A task sets any trait (`on_upstream_failure` among them, from the task
/// or from the pack's defaults), read as the daemon reads it: the rest at
/// their defaults, whole numbers as integers, a bad value refused.
#[test]
fn a_task_sets_any_trait_and_the_spec_carries_them_all() {
    let dir = temp_pack(&[(
        "pack.yaml",
        "pack: p\nversion: '1'\nnamespace: ns\nproducer_surface: surface:s\n\
         defaults: {queue: q, effect_class: read, visibility_scope: surface_only, on_upstream_failure: cancel}\n\
         tasks:\n- {id: a, kind: k, brief: {}, priority: 2.0, check_policy: strict}\n\
         - {id: b, kind: k, brief: {}, on_upstream_failure: run, depends_on: [a]}\n"
            .to_string(),
    )]);
    let p = plan_ok(dir.path());
    let spec = |id: &str| p.tasks.iter().find(|t| t.id == id).unwrap().spec.clone();
    let a = spec("a").traits;
    assert_eq!(
        (a.priority, a.check_policy, a.on_upstream_failure),
        (2, CheckPolicy::Strict, UpstreamFailure::Cancel)
    );
    assert_eq!((a.tags.len(), a.lease_ttl_s), (0, None));
    assert_eq!(spec("b").traits.on_upstream_failure, UpstreamFailure::Run);
    let bad = temp_pack(&[(
        "pack.yaml",
        format!("{HEAD}tasks:\n- {{id: a, kind: k, brief: {{}}, on_upstream_failure: later}}\n"),
    )]);
    let error = plan_err(bad.path());
    assert!(error.contains("on_upstream_failure"), "{error}");
}

/// A spec the daemon would refuse for a rule its schema cannot say (a tag
/// longer than the daemon keeps) is refused at plan time, at its task,
/// naming the field: the importer checks the spec by the same rules.
#[test]
fn a_spec_the_daemon_would_refuse_fails_the_plan_at_its_task() {
    let long = "t".repeat(300);
    let dir = temp_pack(&[(
        "pack.yaml",
        format!("{HEAD}tasks:\n- {{id: a, kind: k, brief: {{}}, tags: [{long}]}}\n"),
    )]);
    let error = plan_err(dir.path());
    assert!(
        error.contains("pack.yaml:") && error.contains("tags: at most 64 tags"),
        "{error}"
    );
}
