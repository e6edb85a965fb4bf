//! What the benchmarks share: a daemon in this process, on a temporary
//! root and `127.0.0.1:0`, on its own runtime thread.

use std::time::Duration;

use tessera::client::Client;

/// A running daemon: its admin client and its root (removed on drop).
pub struct Daemon {
    /// A client holding the admin key.
    pub admin: Client,
    /// The temporary root.
    pub root: tempfile::TempDir,
}

/// Starts a daemon on a fresh temporary root.
pub fn start() -> Daemon {
    let root = tempfile::tempdir().expect("temp root");
    let config = tessera::config::Config {
        root: root.path().to_path_buf(),
        ..Default::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("daemon runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            tx.send(listener.local_addr().expect("addr"))
                .expect("send addr");
            tessera::daemon::run(config, listener, std::future::pending())
                .await
                .expect("daemon");
        });
    });
    let addr = rx.recv().expect("daemon address");
    let key_path = root.path().join("auth/admin.key");
    while !key_path.exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(50));
    let key = std::fs::read_to_string(key_path).expect("admin key");
    Daemon {
        admin: Client::new(&format!("http://{addr}")).with_bearer(key.trim()),
        root,
    }
}
