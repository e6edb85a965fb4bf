//! Wake-ups across daemons: each daemon sends at most one `NOTIFY` per
//! channel per tick for everything it committed in that tick, and each
//! listens on a connection of its own; a listener that misses one still
//! polls.
//!
//! Never a `NOTIFY` inside the transaction that changes state:
//! PostgreSQL serialises the commits of notifying transactions, which
//! defeats group commit (the groundwork measured 30–65% of throughput
//! lost, and one WAL fsync per commit instead of one per six).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;

use crate::database::{Database, Error};

/// How often a ticker may notify.
pub const TICK: Duration = Duration::from_millis(10);

/// Events were committed (`/v1/events` readers and long polls read on).
pub const EVENTS: &str = "tessera_events";

/// Sends one `NOTIFY` on its channel per tick in which
/// [`Ticker::committed`] was called; cheap to clone; stops when every
/// clone is dropped.
#[derive(Clone, Debug)]
pub struct Ticker {
    dirty: Arc<AtomicBool>,
}

impl Ticker {
    /// Starts ticking every `every` on `channel` (inside a tokio runtime).
    pub fn start(db: Database, channel: &'static str, every: Duration) -> Ticker {
        let dirty = Arc::new(AtomicBool::new(false));
        let weak = Arc::downgrade(&dirty);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(dirty) = weak.upgrade() else {
                    return;
                };
                if !dirty.swap(false, Ordering::SeqCst) {
                    continue;
                }
                let sent = match db.client().await {
                    Ok(client) => client
                        .batch_execute(&format!("NOTIFY {channel}"))
                        .await
                        .map_err(Error::from),
                    Err(e) => Err(e),
                };
                if let Err(e) = sent {
                    // Listeners poll too; the next tick tries again.
                    dirty.store(true, Ordering::SeqCst);
                    tracing::warn!(channel, error = %e, "a wake-up could not be sent");
                }
            }
        });
        Ticker { dirty }
    }

    /// Something was committed: listeners hear of it at the next tick.
    pub fn committed(&self) {
        self.dirty.store(true, Ordering::SeqCst);
    }
}

/// Listens on `channel` on a connection of its own; answers what wakes
/// on each notification (every waiter on `notified()`). The listener
/// ends when its connection does; callers poll as well, so a lost
/// connection delays, never loses, what they read.
pub async fn listen(db: &Database, channel: &'static str) -> Result<Arc<Notify>, Error> {
    let (client, mut connection) = db.dedicated().await?;
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    // The connection is read while LISTEN runs, or LISTEN never answers.
    {
        let statement = format!("LISTEN {channel}");
        let listening = client.batch_execute(&statement);
        tokio::pin!(listening);
        loop {
            tokio::select! {
                done = &mut listening => break done?,
                message = messages.next() => match message {
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(_)) => {}
                    None => return Err(Error::Unreachable {
                        at: db.at().to_string(),
                        source: deadpool_postgres::PoolError::Closed,
                    }),
                },
            }
        }
    }
    let woken = Arc::new(Notify::new());
    let wake = woken.clone();
    tokio::spawn(async move {
        // The client lives as long as its connection is read.
        let _client = client;
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(_)) => wake.notify_waiters(),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(channel, error = %e, "a wake-up listener lost its connection");
                    return;
                }
            }
        }
    });
    Ok(woken)
}
