//! Objects written later: bytes whose durable copy is elsewhere (a
//! receipt in a journal record) are appended to a pack (`pack.rs`) by a
//! background thread, off the request path and without fsync (replay hands
//! them over again after a crash), many per write. Until then readers get
//! them from memory, so an object is readable by its sha256 the moment it
//! is handed over. A write that fails (a full disk) is retried until it
//! succeeds; the bytes stay readable meanwhile.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use hashbrown::HashMap;

use super::{Error, Inner, Sha256};

/// How long the writer lets handed-over objects gather before a write, so
/// a busy daemon wakes it once per batch rather than once per object.
const GATHER: Duration = Duration::from_millis(5);

/// The objects still to be written, shared with the writer thread.
#[derive(Debug, Default)]
pub(super) struct Later {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    waiting: Mutex<Waiting>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Waiting {
    /// Handed over and not yet written, by hash.
    objects: HashMap<Sha256, Arc<Vec<u8>>>,
    /// Hashes the writer has not taken yet, oldest first.
    queue: Vec<Sha256>,
    /// The writer is started.
    started: bool,
    /// The writer waits for work (a put must wake it).
    idle: bool,
    /// The store is gone: the writer ends.
    closed: bool,
}

impl Shared {
    fn waiting(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Later {
    /// Bytes handed over and not yet written, by hash.
    pub(super) fn get(&self, sha: &Sha256) -> Option<Arc<Vec<u8>>> {
        self.shared.waiting().objects.get(sha).cloned()
    }

    /// Hands `bytes` over; `store` is the store they belong to (the thread
    /// holds it weakly, so it ends when the store is dropped).
    pub(super) fn put(&self, store: &Arc<Inner>, sha: Sha256, bytes: Vec<u8>) {
        let mut w = self.shared.waiting();
        if w.objects.insert(sha, Arc::new(bytes)).is_some() {
            return;
        }
        w.queue.push(sha);
        if !w.started {
            w.started = true;
            let (shared, weak) = (self.shared.clone(), Arc::downgrade(store));
            std::thread::Builder::new()
                .name("tessera-objects".into())
                .spawn(move || run(&shared, &weak))
                .expect("spawning the object writer");
        } else if w.idle {
            w.idle = false;
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Later {
    fn drop(&mut self) {
        self.shared.waiting().closed = true;
        self.shared.wake.notify_one();
    }
}

impl Later {
    /// Writes everything still waiting, on the caller's thread.
    pub(super) fn flush(&self, inner: &Inner) -> Result<(), Error> {
        let waiting: Vec<(Sha256, Arc<Vec<u8>>)> = self
            .shared
            .waiting()
            .objects
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
    let mut w = inner.later.shared.waiting();
    for (sha, _) in items {
        w.objects.remove(sha);
    }
    Ok(())
}

fn run(shared: &Shared, store: &Weak<Inner>) {
    loop {
        {
            let mut w = shared.waiting();
            while w.queue.is_empty() && !w.closed {
                w.idle = true;
                w = shared.wake.wait(w).unwrap_or_else(PoisonError::into_inner);
            }
            w.idle = false;
            if w.queue.is_empty() {
                return;
            }
        }
        std::thread::sleep(GATHER);
        let batch = std::mem::take(&mut shared.waiting().queue);
        loop {
            let Some(inner) = store.upgrade() else { return };
            let items: Vec<(Sha256, Arc<Vec<u8>>)> = batch
                .iter()
                .filter_map(|sha| inner.later.get(sha).map(|b| (*sha, b)))
                .collect();
            if items.is_empty() {
                break;
            }
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
