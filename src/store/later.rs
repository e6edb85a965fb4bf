//! Objects written later: bytes whose durable copy is elsewhere (a
//! receipt in a journal record) are appended to a pack (`pack.rs`) by a
//! background thread, off the request path and without fsync (replay hands
//! them over again after a crash), many per write. Until then readers get
//! them from memory, so an object is readable by its sha256 the moment it
//! is handed over. A write that fails (a full disk) is retried until it
//! succeeds; the bytes stay readable meanwhile.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use super::{Error, Inner, Sha256};

/// The objects still to be written, and the writer thread's inbox.
#[derive(Debug, Default)]
pub(super) struct Later {
    pending: Mutex<HashMap<Sha256, Arc<Vec<u8>>>>,
    inbox: Mutex<Option<Sender<Sha256>>>,
}

impl Later {
    /// Bytes handed over and not yet written, by hash.
    pub(super) fn get(&self, sha: &Sha256) -> Option<Arc<Vec<u8>>> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(sha)
            .cloned()
    }

    /// Hands `bytes` over; `store` is the store they belong to (the thread
    /// holds it weakly, so it ends when the store is dropped).
    pub(super) fn put(&self, store: &Arc<Inner>, sha: Sha256, bytes: Vec<u8>) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(sha, Arc::new(bytes));
        let mut inbox = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = inbox.get_or_insert_with(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            let weak = Arc::downgrade(store);
            std::thread::Builder::new()
                .name("tessera-objects".into())
                .spawn(move || run(&weak, &rx))
                .expect("spawning the object writer");
            tx
        });
        let _ = tx.send(sha);
    }
}

impl Later {
    /// Writes everything still waiting, on the caller's thread.
    pub(super) fn flush(&self, inner: &Inner) -> Result<(), Error> {
        let waiting: Vec<(Sha256, Arc<Vec<u8>>)> = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        write(inner, &waiting)
    }
}

/// Packs `items` and forgets them once written.
fn write(inner: &Inner, items: &[(Sha256, Arc<Vec<u8>>)]) -> Result<(), Error> {
    let refs: Vec<(Sha256, &[u8])> = items.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    inner.packs.append(&refs)?;
    let mut pending = inner
        .later
        .pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    for (sha, _) in items {
        pending.remove(sha);
    }
    Ok(())
}

fn run(store: &Weak<Inner>, rx: &Receiver<Sha256>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        loop {
            let Some(inner) = store.upgrade() else { return };
            let items: Vec<(Sha256, Arc<Vec<u8>>)> = batch
                .iter()
                .filter_map(|sha| inner.later.get(sha).map(|b| (*sha, b)))
                .collect();
            match write(&inner, &items) {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(objects = items.len(), error = %e, "objects could not be packed yet; they stay readable from memory and are retried");
                    drop(inner);
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
    }
}
