//! `tessera import PACK --watch`: import, then import again whenever
//! anything under the pack folder changes, until Ctrl-C.
//!
//! File events are only hints: notify can miss files created right after
//! their folder, and a debouncer can hide a removal. So an event carries no
//! information here beyond "look again": every round re-plans the whole
//! pack from its files. An invalid edit prints its diagnostics and leaves
//! the records as they were; a round that changes nothing prints nothing.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use notify_debouncer_mini::notify::RecursiveMode;
use notify_debouncer_mini::{DebounceEventResult, new_debouncer};

use super::outcome::{self, Show};
use super::{Mode, import, planned};
use crate::client::Client;

/// Quiet time after the last event before a round starts.
const DEBOUNCE: Duration = Duration::from_millis(300);

/// Watches `dir` and imports it into the daemon behind `client`.
pub(super) async fn run(dir: &Path, client: &Client) -> anyhow::Result<ExitCode> {
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let mut debouncer = new_debouncer(DEBOUNCE, move |batch: DebounceEventResult| {
        let _ = tx.send(batch);
    })
    .context("starting the file watcher")?;
    debouncer
        .watcher()
        .watch(dir, RecursiveMode::Recursive)
        .with_context(|| format!("watching {}; is it a folder?", dir.display()))?;
    round(dir, client, true).await;
    eprintln!("watching {} for changes; Ctrl-C stops", dir.display());
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            batch = events.recv() => {
                match batch {
                    None => bail!("the file watcher stopped; run the command again"),
                    Some(Err(e)) => eprintln!("watch: {e}; re-planning from the files"),
                    Some(Ok(_)) => {}
                }
                while events.try_recv().is_ok() {}
                round(dir, client, false).await;
            }
            _ = &mut stop => {
                eprintln!("stopped watching {}", dir.display());
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}

/// Re-plans the pack from its files and applies it. The first round shows
/// what changed, like a plain import; later rounds print one summary line
/// (and any failures) only when something changed or failed.
async fn round(dir: &Path, client: &Client, first: bool) {
    let Some(plan) = planned(dir) else {
        eprintln!("the records are left as they were; fix the pack and save again");
        return;
    };
    match import(client, &plan, Mode::Apply).await {
        Ok(done) if first => outcome::print(&done.lines, Show::Changes, &done.summary),
        Ok(done) if done.tally.changed() || done.tally.failed() => {
            outcome::print(&done.lines, Show::Failures, &done.summary);
        }
        Ok(_) => {}
        Err(e) => eprintln!("error: {e:#}; trying again on the next change"),
    }
}
