//! `tessera status`: the daemon at a glance, from `GET /v1/status`: per
//! queue the key may see, counts by state, the oldest queued task's wait
//! and the live leases; then the health, and for an admin key the
//! journal's size and the disk's free space.

use std::process::ExitCode;

use clap::Args;

use super::queue::state_headers;
use super::remote::RemoteArgs;
use super::table::{self, Format, OutputArgs, Table};
use crate::paths;
use crate::queue::TaskState;
use crate::wire::Status;

/// Arguments of `status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    out: OutputArgs,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// Runs `status`.
pub async fn run(a: StatusArgs) -> anyhow::Result<ExitCode> {
    let status: Status = a
        .remote
        .client()?
        .get(&paths::STATUS.at(&[]))
        .await?
        .success()?
        .json()?;
    table::print(a.out.output, &status, queues);
    if a.out.output == Format::Table {
        println!();
        print!("{}", daemon(&status).render());
    }
    Ok(ExitCode::SUCCESS)
}

/// One row per queue.
fn queues(s: &Status) -> Table {
    let mut headers = vec!["QUEUE".to_string()];
    headers.extend(state_headers());
    headers.extend(["OLDEST_QUEUED".into(), "LIVE_LEASES".into()]);
    let mut t = Table::new(&headers);
    for q in &s.queues {
        let mut row = vec![q.name.to_string()];
        row.extend(
            TaskState::ALL
                .iter()
                .map(|st| q.counts.get(st.as_str()).copied().unwrap_or(0).to_string()),
        );
        row.push(
            q.oldest_queued_since
                .map_or("-".into(), |at| table::ago(at, s.now)),
        );
        row.push(q.live_leases.to_string());
        t.row(row);
    }
    t
}

/// The daemon's own lines: health, and storage when the key may see it.
fn daemon(s: &Status) -> Table {
    let mut t = Table::new(&["DAEMON", "VALUE"]);
    let health = match &s.health.storage {
        Some(i) => format!(
            "{} ({} since {}: {})",
            s.health.status, i.writer, i.since, i.cause
        ),
        None => s.health.status.clone(),
    };
    t.row(vec!["health".into(), health]);
    t.row(vec!["version".into(), s.health.version.clone()]);
    match &s.storage {
        Some(st) => {
            t.row(vec!["journal".into(), table::bytes(st.journal_bytes)]);
            t.row(vec![
                "disk_free".into(),
                format!(
                    "{} of {}",
                    table::bytes(st.disk_free_bytes),
                    table::bytes(st.disk_total_bytes)
                ),
            ]);
            let f = &st.folds;
            let mut folds = format!("{} done, {} failed", f.done, f.failed);
            if f.done > 0 {
                folds += &format!(", the last {} ms for {} tasks", f.last_ms, f.last_tasks);
            }
            if f.due {
                folds += "; one is due";
            }
            t.row(vec!["folds".into(), folds]);
        }
        None => t.row(vec!["storage".into(), "shown to admin keys only".into()]),
    }
    t
}
