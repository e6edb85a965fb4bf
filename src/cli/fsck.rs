//! `tessera fsck`: check a root offline and print each problem with its
//! path: every object and noun ref (`store::fsck`), every journal record's
//! checksum and order and the snapshot's checksum (a replay that changes
//! nothing), every receipt the queue names, and every ctx-dir against the
//! latest receipt that says it was written there.

use std::path::Path;
use std::process::ExitCode;

use crate::config::QueueLimits;
use crate::queue::Receipt;
use crate::queue::recover::{self, OnFinding};
use crate::store::{Access, Store, fsck};
use crate::worker::audit;

/// Checks the root; exit 1 when any problem is found.
pub fn run(root: &Path) -> anyhow::Result<ExitCode> {
    let store = Store::open(root, Access::ReadOnly)?;
    let report = fsck::check(&store)?;
    let mut problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    let mut receipts = 0u64;
    match recover::replay(
        &store,
        QueueLimits::default().split_limits(),
        OnFinding::Report,
    ) {
        Err(e) => problems.push(e.to_string()),
        Ok((state, _, rec, finding)) => {
            problems.extend(finding.map(|f| f.to_string()));
            for t in state.tasks.values() {
                let mut read = Vec::with_capacity(t.receipts.len());
                // A receipt still carried only by its journal record may be
                // the one that wrote a ctx-dir: the task's ctx-dirs are
                // checked once the next start has written it out.
                let mut unread = false;
                for sha in &t.receipts {
                    receipts += 1;
                    match Receipt::read(&store, sha) {
                        Ok(receipt) => read.push(receipt),
                        Err(_) if rec.journal_receipts.contains(sha) => unread = true,
                        Err(e) => {
                            unread = true;
                            problems.push(format!("receipt {sha} of task {}: {e}", t.id));
                        }
                    }
                }
                if unread {
                    continue;
                }
                for receipt in audit::latest_written(read) {
                    if let Err(e) = audit::check_ctx(&store, &receipt) {
                        let path = receipt.projection.map(|p| p.path).unwrap_or_default();
                        problems.push(format!("{path}: {e} (task {})", t.id));
                    }
                }
            }
        }
    }
    for problem in &problems {
        println!("{problem}");
    }
    if report.noun_log_records > 0 {
        println!(
            "the noun log holds {} record(s) the next start writes into their files (until then a ref file may lag its log)",
            report.noun_log_records
        );
    }
    println!(
        "checked {} objects, {} noun refs, the journal and {receipts} receipts: {}",
        report.objects,
        report.refs,
        match problems.len() {
            0 => "clean".to_string(),
            n => format!("{n} problem(s)"),
        }
    );
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
