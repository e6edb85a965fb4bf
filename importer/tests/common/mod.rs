//! Helpers the importer's test files share: a temporary pack folder, and
//! planning one that must plan or must fail.
#![allow(dead_code)]

use std::path::Path;

use tessera_importer::{Plan, plan};

/// A temporary pack folder with these files (text or bytes).
pub fn temp_pack<B: AsRef<[u8]>>(files: &[(&str, B)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    dir
}

/// The plan of `dir`, which must plan.
pub fn plan_ok(dir: &Path) -> Plan {
    plan(dir).unwrap_or_else(|report| panic!("{} should plan:\n{report}", dir.display()))
}

/// The report's text when the pack must fail.
pub fn plan_err(dir: &Path) -> String {
    match plan(dir) {
        Ok(_) => panic!("{} should not plan", dir.display()),
        Err(report) => report.to_string(),
    }
}
