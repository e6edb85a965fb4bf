//! Every broken pack in `seeds/invalid/<case>/` must fail with exactly the
//! report in its `expected.txt`. Adding a case is adding a folder; run with
//! `TESSERA_BLESS=1` to write the expected text of new cases, then read it
//! before committing.

use std::path::Path;

#[test]
fn every_invalid_pack_reports_exactly_its_expected_text() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../seeds/invalid");
    let bless = std::env::var_os("TESSERA_BLESS").is_some();
    let mut cases: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 20,
        "expected the invalid corpus in {}",
        root.display()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let got = match tessera_importer::plan(case) {
            Ok(_) => "(planned without errors)".to_owned(),
            Err(report) => {
                assert!(!report.diagnostics.is_empty(), "{name}: an empty report");
                report.to_string()
            }
        };
        let expected_path = case.join("expected.txt");
        if bless && !expected_path.exists() {
            std::fs::write(&expected_path, format!("{got}\n")).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if got != want.trim_end_matches('\n') {
            failures.push(format!(
                "--- {name}\nexpected:\n{}\ngot:\n{got}\n",
                want.trim_end()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
