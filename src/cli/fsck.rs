//! `tessera fsck`: check a root offline and print each problem with its path.

use std::path::Path;
use std::process::ExitCode;

use crate::store::{Access, Store, fsck};

/// Checks the root; exit 1 when any problem is found.
pub fn run(root: &Path) -> anyhow::Result<ExitCode> {
    let store = Store::open(root, Access::ReadOnly)?;
    let report = fsck::check(&store)?;
    for problem in &report.problems {
        println!("{problem}");
    }
    println!(
        "checked {} objects and {} noun refs: {}",
        report.objects,
        report.refs,
        match report.problems.len() {
            0 => "clean".to_string(),
            n => format!("{n} problem(s)"),
        }
    );
    Ok(if report.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
