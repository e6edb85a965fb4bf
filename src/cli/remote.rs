//! What every client subcommand shares: the daemon address, the key, and a
//! runtime to drive the async client from a synchronous `main`.

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::exit::Usage;
use crate::client::Client;

/// Where the daemon is and which key to use.
#[derive(Debug, Clone, Args)]
pub struct RemoteArgs {
    /// The daemon's base URL.
    #[arg(long, env = "TESSERA_SERVER", default_value = "http://127.0.0.1:7700")]
    pub server: String,
    /// A file holding the key (such as <root>/auth/admin.key); else TESSERA_KEY.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
}

impl RemoteArgs {
    /// A client for the daemon, authenticated with the key from
    /// `--key-file` or the `TESSERA_KEY` environment variable.
    pub fn client(&self) -> anyhow::Result<Client> {
        let key = match &self.key_file {
            Some(path) => std::fs::read_to_string(path).map_err(|e| {
                Usage(format!("cannot read the key file {}: {e}", path.display()))
            })?,
            None => std::env::var("TESSERA_KEY").map_err(|_| {
                Usage(
                    "no key: pass --key-file FILE or set TESSERA_KEY (the first start writes the admin key to <root>/auth/admin.key)".into(),
                )
            })?,
        };
        Ok(Client::new(&self.server).with_bearer(key.trim()))
    }
}

/// Runs an async subcommand on a small runtime.
pub fn block_on(fut: impl Future<Output = anyhow::Result<ExitCode>>) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(fut)
}
