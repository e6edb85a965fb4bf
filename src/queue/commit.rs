//! Group commit: appenders put encoded records into a shared buffer; one
//! thread writes whatever has accumulated and fsyncs it once, then tells
//! every waiter how far the journal is durable. A state change is
//! acknowledged only after `wait` sees its sequence number durable.
//!
//! After a failed write or fsync the committer is poisoned: every waiter
//! and every later append gets an error until the daemon restarts, since
//! the kernel may have dropped pages it could not write.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use tokio::sync::watch;

use super::journal;

/// How far the journal is durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Durable {
    /// Records durable so far (a sequence number).
    pub seq: u64,
    /// A write or fsync failed; nothing more will become durable.
    pub failed: bool,
}

/// The journal is poisoned by an earlier failed write or fsync.
#[derive(Debug, thiserror::Error)]
#[error("the task journal could not be written; check the disk and restart the daemon")]
pub struct Poisoned;

#[derive(Debug, Default)]
struct Pending {
    buf: Vec<u8>,
    appended: u64,
    shutdown: bool,
}

#[derive(Debug)]
struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    durable: watch::Sender<Durable>,
}

/// The committer handle: append records, wait for durability.
#[derive(Debug)]
pub struct Committer {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Committer {
    /// Starts the commit thread appending to `file`.
    pub fn start(file: std::fs::File) -> Committer {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            durable: watch::Sender::new(Durable::default()),
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tessera-journal".into())
            .spawn(move || run(file, &worker))
            .expect("spawning the journal thread");
        Committer {
            shared,
            thread: Mutex::new(Some(thread)),
        }
    }

    /// Appends one record and returns its sequence number. Call it in the
    /// same critical section that applies the record, so journal order is
    /// application order.
    pub fn append(&self, payload: &[u8]) -> Result<u64, Poisoned> {
        if self.shared.durable.borrow().failed {
            return Err(Poisoned);
        }
        let mut p = self
            .shared
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        journal::encode(payload, &mut p.buf);
        p.appended += 1;
        let seq = p.appended;
        drop(p);
        self.shared.wake.notify_one();
        Ok(seq)
    }

    /// The sequence number of the last appended record.
    pub fn appended(&self) -> u64 {
        self.shared
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .appended
    }

    /// Waits until record `seq` is durable.
    pub async fn wait(&self, seq: u64) -> Result<(), Poisoned> {
        let mut rx = self.shared.durable.subscribe();
        let d = rx
            .wait_for(|d| d.seq >= seq || d.failed)
            .await
            .map_err(|_| Poisoned)?;
        if d.seq >= seq { Ok(()) } else { Err(Poisoned) }
    }

    /// Flushes what is pending and stops the thread.
    pub fn shutdown(&self) {
        self.shared
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .shutdown = true;
        self.shared.wake.notify_one();
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
    }
}

fn run(mut file: std::fs::File, shared: &Shared) {
    loop {
        let (batch, seq) = {
            let mut p = shared
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            while p.buf.is_empty() && !p.shutdown {
                p = shared
                    .wake
                    .wait(p)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if p.buf.is_empty() {
                return;
            }
            (std::mem::take(&mut p.buf), p.appended)
        };
        match file.write_all(&batch).and_then(|()| file.sync_data()) {
            Ok(()) => {
                shared.durable.send_modify(|d| d.seq = seq);
            }
            Err(e) => {
                tracing::error!(error = %e, "journal write failed; refusing task changes until restart");
                shared.durable.send_modify(|d| d.failed = true);
                return;
            }
        }
    }
}
