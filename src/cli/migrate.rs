//! `tessera migrate`: bring a queue database's schema to this binary's
//! version, or with `--dry-run` show what would run and change nothing
//! (exit 2 when something would).

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::exit;
use crate::database::{self, Database, schema};

/// Arguments of `migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The queue database, as postgres://USER@HOST:PORT/DATABASE.
    #[arg(long, env = "TESSERA_QUEUE_URL")]
    pub queue_url: String,
    /// Show the schema's version and the migrations that would run; write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs the migrations, or shows them.
pub fn run(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let db = Database::connect(&args.queue_url).await.map_err(usage)?;
        if args.dry_run {
            let plan = schema::plan(&db).await?;
            println!(
                "{}: schema at version {} of {}",
                db.at(),
                plan.current,
                schema::latest()
            );
            for m in &plan.pending {
                println!("would apply {:>4}  {}", m.version, m.name);
            }
            if plan.pending.is_empty() {
                println!("nothing to apply");
                return Ok(ExitCode::SUCCESS);
            }
            return Ok(ExitCode::from(exit::USAGE));
        }
        let ran = schema::migrate(&db).await?;
        for m in &ran {
            println!("applied {:>4}  {}", m.version, m.name);
        }
        println!("{}: schema at version {}", db.at(), schema::latest());
        Ok(ExitCode::SUCCESS)
    })
}

/// A URL that is not one is a usage problem (exit 2); the rest exit 1.
fn usage(e: database::Error) -> anyhow::Error {
    match e {
        database::Error::BadUrl(_) => exit::Usage(e.to_string()).into(),
        e => e.into(),
    }
}
