//! `tessera import PACK [--plan] [--watch]`: a seed pack becomes noun and
//! task records through the daemon's HTTP API, under the key given. The
//! command never opens a root; the daemon checks every item as it checks
//! any other client's.
//!
//! One import: `tessera_importer::plan` reads the pack (a pack with any
//! problem prints every diagnostic and writes nothing); `catalog` checks
//! that every catalog pin exists with its hash (else nothing is written);
//! `nouns` puts the nouns; `tasks` enqueues the tasks in dependency layers
//! with refs and `depends_on` resolved. Both go through the batch routes
//! (`send`). With `--plan` every step is a dry run, and an apply is a dry
//! run first, so a conflict or a refusal found there writes nothing.
//! `outcome` prints the plan's warnings (such as a template key holding
//! template syntax), one line per item and a summary (or, with `-o json`,
//! one JSON document); in a `--plan`, `diff` names what differs in each
//! noun that would get a new version and each task that conflicts;
//! `orphans` then lists what earlier imports of the pack created that it
//! no longer has (and with `--prune` cancels such tasks of this key that
//! have not started; other keys' tasks with the pack's label are only
//! noted); `watch` imports again on every settled change.
//!
//! Exit codes: 0 when nothing would change or the import went through; 2
//! when `--plan` finds something to change; 1 for an invalid pack, a
//! missing or different catalog pin, a conflict or any error.

mod catalog;
mod diff;
mod flows;
mod nouns;
mod orphans;
mod outcome;
mod send;
mod tasks;
mod watch;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use tessera_importer::Plan;

use super::remote::RemoteArgs;
use crate::client::Client;
use outcome::{Line, Progress, Show, Tally};

/// `tessera import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The pack folder (holding pack.yaml or pack.toml).
    pub pack: PathBuf,
    /// Print what importing would do to each item, writing nothing; exit 0
    /// when nothing would change, 2 when something would, 1 on error.
    #[arg(long, conflicts_with = "watch")]
    pub plan: bool,
    /// After importing, import again whenever a file in the pack changes,
    /// until Ctrl-C.
    #[arg(long)]
    pub watch: bool,
    /// Cancel the tasks an earlier import of this pack under this key
    /// created that the pack no longer has, while they are pending, queued
    /// or parked (with --plan: show which it would cancel). Tasks other
    /// keys labelled with the pack are noted, never cancelled.
    #[arg(long, conflicts_with = "watch")]
    pub prune: bool,
    /// How to print the outcome: text lines, or one JSON document (for CI).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text, conflicts_with = "watch")]
    pub output: Output,
    /// The daemon and the key.
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// How `tessera import` prints what it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// One line per item and a summary line.
    Text,
    /// `{"entries": [...], "summary": "..."}` on stdout.
    Json,
}

/// Whether an import writes or only asks for dry runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `--plan`: dry runs only.
    Plan,
    /// Write.
    Apply,
}

/// Runs `tessera import`.
pub async fn run(args: ImportArgs) -> anyhow::Result<ExitCode> {
    if args.watch {
        return watch::run(&args.pack, &args.remote.client()?).await;
    }
    let Some(plan) = planned(&args.pack) else {
        return Ok(ExitCode::FAILURE);
    };
    if args.output == Output::Text {
        outcome::print_warnings(&plan.warnings);
    }
    let client = args.remote.client()?;
    let (mode, show) = if args.plan {
        (Mode::Plan, Show::All)
    } else {
        (Mode::Apply, Show::Changes)
    };
    let done = import(&client, &plan, mode, args.plan).await?;
    let items = done.tally.exit_code(mode);
    let found = orphans::run(&client, &plan, mode, args.prune, items).await?;
    match args.output {
        Output::Text => {
            if args.plan {
                print!("{}", flows::render(&plan));
            }
            outcome::print(&done.lines, show, &done.summary);
            found.print();
        }
        Output::Json => outcome::print_json(&plan.warnings, &done.lines, &done.summary, &found),
    }
    Ok(found.code)
}

/// Plans the pack; on problems prints every diagnostic on stdout. Its
/// warnings are left to the caller: a plain import prints them first in
/// text output (JSON output holds them in its document), a watch when they
/// change.
fn planned(dir: &Path) -> Option<Plan> {
    let started = std::time::Instant::now();
    match tessera_importer::plan(dir) {
        Ok(plan) => {
            let elapsed_ms = started.elapsed().as_millis() as u64;
            tracing::debug!(
                elapsed_ms,
                nouns = plan.nouns.len(),
                tasks = plan.tasks.len(),
                "pack planned"
            );
            Some(plan)
        }
        Err(report) => {
            println!("{report}");
            eprintln!(
                "{} problem(s) in the pack {}; nothing was imported",
                report.diagnostics.len(),
                dir.display()
            );
            None
        }
    }
}

/// What one import did (or, in a plan, would do).
struct Imported {
    lines: Vec<Line>,
    tally: Tally,
    summary: String,
}

/// One import of a planned pack: catalog, then nouns, then tasks. An apply
/// is a dry run first: when it finds a conflict or an error, or nothing to
/// change, the import stops there and writes nothing. With `explain`,
/// changed nouns and conflicting tasks say what differs.
async fn import(
    client: &Client,
    plan: &Plan,
    mode: Mode,
    explain: bool,
) -> anyhow::Result<Imported> {
    let missing = catalog::check(client, &plan.catalog).await?;
    if !missing.is_empty() {
        let summary = format!(
            "catalog: {} of {} pins are missing or differ; nothing was written",
            missing.len(),
            plan.catalog.len()
        );
        return Ok(Imported {
            tally: Tally::of(&missing),
            lines: missing,
            summary,
        });
    }
    let (passes, label) = match mode {
        Mode::Plan => (1, "planning"),
        Mode::Apply => (2, "importing"),
    };
    let progress = Progress::new((plan.nouns.len() + plan.tasks.len()) * passes, label);
    let mut lines = items(client, plan, Mode::Plan, explain, &progress).await?;
    let tally = Tally::of(&lines).with_pins(plan.catalog.len());
    if mode == Mode::Plan || tally.failed() || !tally.changed() {
        let summary = match mode {
            Mode::Apply if tally.failed() => {
                lines.retain(Line::failed);
                tally.stopped()
            }
            _ => tally.summary(Mode::Plan),
        };
        return Ok(Imported {
            lines,
            tally,
            summary,
        });
    }
    let lines = items(client, plan, Mode::Apply, false, &progress).await?;
    let tally = Tally::of(&lines).with_pins(plan.catalog.len());
    Ok(Imported {
        summary: tally.summary(Mode::Apply),
        lines,
        tally,
    })
}

/// The nouns, then the tasks, each a line.
async fn items(
    client: &Client,
    plan: &Plan,
    mode: Mode,
    explain: bool,
    progress: &Progress,
) -> anyhow::Result<Vec<Line>> {
    let started = std::time::Instant::now();
    let (mut lines, pins) = nouns::put_all(client, plan, mode, progress).await?;
    if explain {
        nouns::explain(client, plan, &mut lines).await;
    }
    let nouns_ms = started.elapsed().as_millis() as u64;
    lines.extend(tasks::enqueue_all(client, plan, &pins, mode, explain, progress).await?);
    let tasks_ms = started.elapsed().as_millis() as u64 - nouns_ms;
    tracing::debug!(?mode, nouns_ms, tasks_ms, "import pass");
    Ok(lines)
}
