//! The daemon's life: open the root (taking its lock), load keys, serve
//! until the shutdown future resolves, drain, release the root.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::auth::Keyring;
use crate::config::Config;
use crate::http::{self, Ctx};
use crate::store::{self, Access, Store};

/// A daemon whose root is open and locked, ready to serve.
#[derive(Debug)]
pub struct Daemon {
    ctx: Arc<Ctx>,
}

impl Daemon {
    /// Opens the root, creating its layout and the admin key on first start.
    pub fn open(config: &Config) -> Result<Daemon, store::Error> {
        let store = Store::open(&config.root, Access::Exclusive)?;
        let (keyring, admin_key) = Keyring::open(&store)?;
        if let Some(path) = admin_key {
            tracing::info!(path = %path, "created the admin key; its secret is in this file (mode 0600)");
        }
        Ok(Daemon {
            ctx: Arc::new(Ctx {
                store,
                keyring,
                limits: config.limits.clone(),
            }),
        })
    }

    /// Serves on `listener` until `shutdown` resolves, then drains.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let addr = listener
            .local_addr()
            .map_or_else(|_| "?".to_string(), |a: SocketAddr| a.to_string());
        tracing::info!(root = %self.ctx.store.root().path.display(), addr = %addr, "tessera started");
        http::serve(listener, self.ctx.clone(), shutdown).await;
        tracing::info!(root = %self.ctx.store.root().path.display(), "tessera stopped");
    }
}

/// Opens the root and serves on `listener` until `shutdown` resolves.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), store::Error> {
    let daemon = tokio::task::spawn_blocking(move || Daemon::open(&config))
        .await
        .expect("opening the root does not panic")?;
    daemon.serve(listener, shutdown).await;
    Ok(())
}
