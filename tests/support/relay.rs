//! A TCP relay to the test database or S3 server that a test cuts and
//! restores: cut, it drops every connection it carries and refuses new
//! ones (the server went away); stalled, it keeps them open and passes
//! nothing either way until restored (a partition, where packets go
//! unanswered).

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the relay does with what it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Pass,
    Cut,
    Stall,
}

/// A running relay; it stops with the test's runtime.
pub struct Relay {
    /// The port it listens on.
    pub port: u16,
    mode: Arc<watch::Sender<(Mode, u64)>>,
}

impl Relay {
    /// Relays from `bind` (an address and port 0) to the server of `url`
    /// (a database's or an S3 endpoint's), whose address it takes from
    /// the URL.
    pub async fn start(bind: &str, url: &str) -> Relay {
        let to = host_port(url).to_string();
        let listener = TcpListener::bind(bind).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(watch::Sender::new((Mode::Pass, 0u64)));
        let watch = mode.clone();
        tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    return;
                };
                if watch.borrow().0 == Mode::Cut {
                    continue;
                }
                let (to, mode) = (to.clone(), watch.subscribe());
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(&to).await else {
                        return;
                    };
                    carry(inbound, outbound, mode).await;
                });
            }
        });
        Relay { port, mode }
    }

    /// `url` with its host and port replaced by this relay's at `host`.
    pub fn url(&self, url: &str, host: &str) -> String {
        url.replacen(host_port(url), &format!("{host}:{}", self.port), 1)
    }

    /// Drops every connection and refuses new ones until restored.
    pub fn cut(&self) {
        self.mode.send_modify(|(m, n)| {
            *m = Mode::Cut;
            *n += 1;
        });
    }

    /// Passes nothing either way, keeping connections open, until
    /// restored.
    pub fn stall(&self) {
        self.mode.send_modify(|(m, _)| *m = Mode::Stall);
    }

    /// Carries again.
    pub fn restore(&self) {
        self.mode.send_modify(|(m, _)| *m = Mode::Pass);
    }
}

/// The `host:port` of a `postgres://user@host:port/db` URL.
fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split_once('@').map_or(rest, |(_, r)| r);
    rest.split('/').next().unwrap()
}

async fn carry(a: TcpStream, b: TcpStream, mode: watch::Receiver<(Mode, u64)>) {
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    let cuts = mode.borrow().1;
    tokio::select! {
        () = pass(ar, bw, mode.clone(), cuts) => {}
        () = pass(br, aw, mode, cuts) => {}
    }
}

/// Copies `from` to `to` while passing, holds what it read while
/// stalled, and ends at a cut.
async fn pass(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<(Mode, u64)>,
    cuts: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = mode.wait_for(|(_, n)| *n != cuts) => return,
        };
        let open = mode
            .wait_for(|(m, n)| *n != cuts || *m == Mode::Pass)
            .await
            .map(|v| v.1 == cuts);
        if !matches!(open, Ok(true)) || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
