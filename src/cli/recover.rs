//! `tessera recover --root DIR [--salvage]`: what to do when the daemon
//! refuses to start on a damaged journal. Without `--salvage` it reads
//! only and shows the damage and what salvaging would drop; with it, it
//! keeps every record before the damage, moves the rest to
//! `journal/salvaged/` (nothing is deleted) and compacts, so the daemon
//! starts again. The daemon must be stopped (it holds the root's lock).

use std::path::Path;
use std::process::ExitCode;

use crate::config::QueueLimits;
use crate::queue::recover::{self, OnFinding};
use crate::queue::snapshot::Image;
use crate::store::{Access, Store};

/// Exit 0 when the journal is clean or was salvaged, 1 when damage was
/// found and left as it is, 2 (an error) when it cannot be salvaged.
pub fn run(root: &Path, salvage: bool) -> anyhow::Result<ExitCode> {
    let access = if salvage {
        Access::Exclusive
    } else {
        Access::ReadOnly
    };
    let store = Store::open(root, access)?;
    let on = if salvage {
        OnFinding::Salvage
    } else {
        OnFinding::Report
    };
    let limits = QueueLimits::default().split_limits();
    let (state, next, rec, finding) = recover::replay(&store, limits, on)?;
    let Some(finding) = finding else {
        println!(
            "journal: clean ({} tasks in the snapshot, {} records replayed{})",
            rec.snapshot_tasks,
            rec.records,
            if rec.torn_tail {
                "; a torn final record, never acknowledged, is cut when the daemon starts"
            } else {
                ""
            }
        );
        return Ok(ExitCode::SUCCESS);
    };
    println!("damage: {finding}");
    if salvage {
        recover::compact(&store, &Image::of(&state), next, &|| false)?;
        println!(
            "salvaged: kept the {} record(s) before the damage ({} tasks); moved {} record(s) to journal/salvaged/; the daemon can start",
            rec.records,
            state.tasks.len(),
            finding.following
        );
        return Ok(ExitCode::SUCCESS);
    }
    if finding.salvageable {
        println!(
            "salvaging would keep the {} record(s) before the damage and move the damaged record and the {} after it to journal/salvaged/ (run again with --salvage, with the daemon stopped)",
            rec.records, finding.following
        );
    } else {
        println!("this cannot be salvaged: restore the file from a backup");
    }
    Ok(ExitCode::FAILURE)
}
