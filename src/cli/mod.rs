//! The `tessera` command: subcommands and their arguments. `serve`,
//! `fsck` and `recover` work on a root directly; every other subcommand is a thin client
//! of a running daemon's HTTP API. Exit codes are in `cli/exit.rs`.

mod enqueue;
pub mod exit;
mod export;
mod fsck;
mod import;
mod key;
mod mcp;
mod migrate;
mod noun;
mod queue;
mod recover;
mod remote;
mod serve;
mod status;
mod table;
mod task;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::DEFAULT_ROOT;

/// Exit codes of the client subcommands, shown under `--help`.
const EXIT_CODES: &str = "Exit codes (client subcommands): 0 done; 1 the daemon refused \
(its status, code, message and a next step are printed) or another failure; 2 usage \
(a bad flag, an unreadable or invalid input file, no key, a malformed key or handle); \
3 the daemon cannot be reached. `tessera import` exits 2 when a plan would change something.";

/// Routes agent work through versioned nouns and leased verbs.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start the daemon on a root (created with its layout on first start).
    Serve(serve::ServeArgs),
    /// Re-hash every object and check every noun ref under a root.
    Fsck {
        /// The root directory.
        #[arg(long, default_value = DEFAULT_ROOT)]
        root: PathBuf,
        /// The queue's PostgreSQL database, when the daemon keeps the
        /// queue there (`serve --queue-url`): its tasks and receipts are
        /// checked instead of the root's journal.
        #[arg(long, env = "TESSERA_QUEUE_URL")]
        queue_url: Option<String>,
        /// The bucket of the nouns' objects, when the daemons share their
        /// nouns (`serve --objects-url s3://BUCKET`; endpoint and keys from
        /// the AWS_* variables): every noun version in the queue's
        /// database is checked against its object there.
        #[arg(long, env = "TESSERA_OBJECTS_URL")]
        objects_url: Option<String>,
    },
    /// Show every blocker that stops the daemon from starting; with
    /// `--salvage` keep every journal record before the damage, with
    /// `--accept-loss` accept lost keys, a lost token secret and
    /// unreferenced objects (the daemon must be stopped).
    Recover {
        /// The root directory.
        #[arg(long, default_value = DEFAULT_ROOT)]
        root: PathBuf,
        /// Keep what precedes the damage and move the rest to journal/salvaged/.
        #[arg(long)]
        salvage: bool,
        /// Accept what cannot be restored: record lost keys as revoked, make
        /// a lost token secret again, move unreferenced objects aside.
        #[arg(long)]
        accept_loss: bool,
        /// The queue's PostgreSQL database, when the daemon keeps the
        /// queue there: its tasks say what `auth/` must hold.
        #[arg(long, env = "TESSERA_QUEUE_URL")]
        queue_url: Option<String>,
    },
    /// Read and write nouns through a running daemon.
    #[command(subcommand)]
    Noun(noun::NounCommand),
    /// Issue, list and revoke keys through a running daemon (admin key).
    #[command(subcommand)]
    Key(key::KeyCommand),
    /// Import a seed pack (nouns, tasks, catalog pins) through a running
    /// daemon; `--plan` shows what would change and writes nothing.
    Import(import::ImportArgs),
    /// Write the nouns the key may read (and the tasks of chosen queues)
    /// as a folder of canonical JSON files to review in git.
    #[command(after_help = EXIT_CODES)]
    Export(export::ExportArgs),
    /// Create, list and show queues through a running daemon.
    #[command(subcommand, after_help = EXIT_CODES)]
    Queue(queue::QueueCommand),
    /// Enqueue, list, inspect, cancel, retry and release tasks through a
    /// running daemon.
    #[command(subcommand, after_help = EXIT_CODES)]
    Task(task::TaskCommand),
    /// Per queue: counts by state, oldest queued task, live leases; the
    /// daemon's health, journal size and free disk (admin).
    #[command(after_help = EXIT_CODES)]
    Status(status::StatusArgs),
    /// Serve the Model Context Protocol on stdin/stdout: Tessera's agent
    /// and worker calls as MCP tools, sent to a running daemon.
    Mcp(mcp::McpArgs),
    /// Bring a PostgreSQL queue database's schema to this binary's
    /// version; `--dry-run` shows what would run and writes nothing.
    Migrate(migrate::MigrateArgs),
}

/// Runs a parsed command line; a failure is printed to stderr and
/// answered with its exit code ([`exit::report`]).
pub fn run(cli: Cli) -> ExitCode {
    dispatch(cli).unwrap_or_else(|e| exit::report(&e))
}

fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Fsck {
            root,
            queue_url,
            objects_url,
        } => fsck::run(&root, queue_url.as_deref(), objects_url.as_deref()),
        Command::Recover {
            root,
            salvage,
            accept_loss,
            queue_url,
        } => recover::run(&root, queue_url.as_deref(), salvage, accept_loss),
        Command::Noun(cmd) => remote::block_on(noun::run(cmd)),
        Command::Key(cmd) => remote::block_on(key::run(cmd)),
        Command::Import(args) => remote::block_on(import::run(args)),
        Command::Export(args) => remote::block_on(export::run(args)),
        Command::Queue(cmd) => remote::block_on(queue::run(cmd)),
        Command::Task(cmd) => remote::block_on(task::run(cmd)),
        Command::Status(args) => remote::block_on(status::run(args)),
        Command::Mcp(args) => remote::block_on(mcp::run(args)),
        Command::Migrate(args) => migrate::run(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_subcommand_has_unique_well_formed_arguments() {
        super::Cli::command().debug_assert();
    }
}
