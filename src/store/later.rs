//! Objects written later: bytes whose durable copy is elsewhere (a
//! receipt in a journal record) are written to `objects/` by a background
//! thread, off the request path, with `Durability::Journaled` (no fsync:
//! replay writes them again after a crash). Until then readers get them
//! from memory, so an object is readable by its sha256 the moment it is
//! handed over. A write that fails (a full disk) is retried until it
//! succeeds; the bytes stay readable meanwhile.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use super::{Durability, Inner, Sha256};

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

fn run(store: &Weak<Inner>, rx: &Receiver<Sha256>) {
    while let Ok(sha) = rx.recv() {
        loop {
            let Some(inner) = store.upgrade() else { return };
            let Some(bytes) = inner.later.get(&sha) else {
                break;
            };
            match inner
                .objects
                .put(&inner.writer, &bytes, Durability::Journaled)
            {
                Ok(_) => {
                    inner
                        .later
                        .pending
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&sha);
                    break;
                }
                Err(e) => {
                    tracing::warn!(object = %sha, error = %e, "an object could not be written yet; it stays readable from memory and is retried");
                    drop(inner);
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
    }
}
