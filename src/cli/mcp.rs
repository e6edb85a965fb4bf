//! `tessera mcp`: the MCP server on stdin/stdout, a client of a running
//! daemon (`--daemon URL` or `TESSERA_SERVER`). Tool calls become HTTP
//! API requests with the key from `--key-file` / `TESSERA_KEY` and the
//! handle from `--handle` / `TESSERA_HANDLE` (a worker tool's `handle`
//! argument overrides it). A claim still waiting when stdin closes stops
//! (`mcp::InputEnd`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use rmcp::ServiceExt;

use super::exit::Usage;
use crate::client::Client;
use crate::mcp::{Credentials, Remote, Server};

/// Where the daemon is and which credentials the tools send.
///
/// The daemon's URL is `--daemon`, not the `--server` the other
/// subcommands take: `tessera mcp` runs under MCP clients and tools whose
/// own command lines take `--server` (the MCP Inspector's `npx
/// @modelcontextprotocol/inspector tessera mcp --server URL` read it as
/// its own flag), and none of the Inspector's flags (`--server`,
/// `--config`, `-e`, `--cli`, `--method`, `--tool-name`, `--tool-arg`,
/// `--transport`, `--header`, `--target`) is used here. `--server` is
/// still read, hidden, for command lines written before.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// The daemon's base URL (else TESSERA_SERVER).
    ///
    /// Not `--server`, which the MCP Inspector takes as its own: run it as
    /// `npx @modelcontextprotocol/inspector tessera mcp --daemon URL`.
    #[arg(
        long = "daemon",
        alias = "server",
        value_name = "URL",
        env = "TESSERA_SERVER",
        default_value = "http://127.0.0.1:7700"
    )]
    pub daemon: String,
    /// A file holding the key for the key tools; else TESSERA_KEY, else none.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// A `wh-` handle for the worker tools.
    #[arg(long, env = "TESSERA_HANDLE", hide_env_values = true)]
    pub handle: Option<String>,
}

/// Serves MCP on stdio until the client closes stdin.
pub async fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let key = match &args.key_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| Usage(format!("cannot read the key file {}: {e}", path.display())))?,
        ),
        None => std::env::var("TESSERA_KEY").ok(),
    };
    let credentials = Credentials {
        key: key.map(|k| k.trim().to_string()).filter(|k| !k.is_empty()),
        handle: args.handle.filter(|h| !h.is_empty()),
    };
    let api = Arc::new(Remote(Client::new(&args.daemon)));
    let (stdin, stdout) = rmcp::transport::stdio();
    let (stdin, input) = crate::mcp::watch_input(stdin);
    let server = Server::new(api, credentials).reading(input);
    let running = server
        .serve((stdin, stdout))
        .await
        .context("starting the MCP session on stdio")?;
    running.waiting().await.context("serving MCP on stdio")?;
    Ok(ExitCode::SUCCESS)
}
