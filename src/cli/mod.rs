//! The `tessera` command: subcommands and their arguments. `serve`,
//! `fsck` and `recover` work on a root directly; every other subcommand is a thin client
//! of a running daemon's HTTP API.

mod fsck;
mod import;
mod key;
mod noun;
mod recover;
mod remote;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::DEFAULT_ROOT;

/// Routes agent work through versioned nouns and leased verbs.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about)]
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
    },
    /// Show journal damage that stops the daemon from starting, and with
    /// `--salvage` keep every record before it (the daemon must be stopped).
    Recover {
        /// The root directory.
        #[arg(long, default_value = DEFAULT_ROOT)]
        root: PathBuf,
        /// Keep what precedes the damage and move the rest to journal/salvaged/.
        #[arg(long)]
        salvage: bool,
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
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Fsck { root } => fsck::run(&root),
        Command::Recover { root, salvage } => recover::run(&root, salvage),
        Command::Noun(cmd) => remote::block_on(noun::run(cmd)),
        Command::Key(cmd) => remote::block_on(key::run(cmd)),
        Command::Import(args) => remote::block_on(import::run(args)),
    }
}
