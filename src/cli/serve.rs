//! `tessera serve`: open the root, bind, print the bound address, serve
//! until SIGINT or SIGTERM, drain, exit 0, within 5 s of the signal: the
//! drain is bounded (`http::DRAIN_TIMEOUT`) and so is the wait for
//! leftover blocking work (`BLOCKING_GRACE`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

use crate::config::Config;
use crate::daemon::Daemon;

/// How long the runtime waits at exit for blocking work that requests
/// left behind (their connections already closed). Durable writes are
/// atomic, so one cut short leaves the root consistent; the journal is
/// flushed before.
const BLOCKING_GRACE: Duration = Duration::from_secs(1);

/// Arguments of `serve`; flags override the config file.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The root directory [default: ./tessera-root].
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// The address to listen on; port 0 picks a free port [default: 127.0.0.1:7700].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// A TOML config file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Keep the queue in this PostgreSQL database instead of the root's
    /// journal (postgres://USER@HOST:PORT/DATABASE); daemons given the
    /// same one serve one queue [config: [queue] url].
    #[arg(long, env = "TESSERA_QUEUE_URL")]
    pub queue_url: Option<String>,
    /// Keep noun objects in this S3-compatible bucket (s3://BUCKET; the
    /// endpoint, region and keys from the AWS_* variables or the config
    /// file's [objects]) and noun refs in the queue's database, so that
    /// daemons given the same two share their nouns; needs --queue-url
    /// [config: [objects] url].
    #[arg(long, env = "TESSERA_OBJECTS_URL")]
    pub objects_url: Option<String>,
}

/// Runs the daemon in the foreground.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(root) = args.root {
        config.root = root;
    }
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(url) = args.queue_url {
        config.queue.url = Some(url);
    }
    if let Some(url) = args.objects_url {
        config.objects.url = Some(url);
    }
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let served = runtime.block_on(async move {
        let daemon = Daemon::open(&config).await?;
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding {}; is another process using it?", config.listen))?;
        let addr = listener.local_addr()?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        // Only once the handlers are in place: a SIGTERM sent on seeing
        // this line drains and exits 0 instead of killing the process.
        println!("listening on http://{addr}");
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received; draining"),
                _ = int.recv() => tracing::info!("SIGINT received; draining"),
            }
        };
        daemon.serve(listener, shutdown).await;
        Ok(ExitCode::SUCCESS)
    });
    runtime.shutdown_timeout(BLOCKING_GRACE);
    served
}
