//! Every queue's config as this daemon last read it, for the calls that
//! only read (a task's view, a check, a claim's answer, a submit's
//! decision on the task its caller read): read again once it is older
//! than [`FRESH_FOR`], or at once when this daemon changed a queue, so a
//! queue another daemon provisions or changes is seen within that time.
//! Every change that a config decides on another task (enqueue, split,
//! the family transaction) reads the rows again in its own transaction.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::transact;
use crate::database::{Database, Error};
use crate::queue::QueueConfig;
use crate::store::Name;

/// How long a read of the queues' configs is answered from.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

/// Every queue's config, by name.
pub type Configs = Arc<BTreeMap<Name, QueueConfig>>;

/// The last read of the queues' configs.
#[derive(Debug, Default)]
pub struct Held {
    inner: Mutex<Reads>,
}

#[derive(Debug, Default)]
struct Reads {
    /// The last read, and when it began.
    last: Option<(Instant, Configs)>,
    /// When this daemon last changed a queue: a read that began before
    /// is not kept.
    changed: Option<Instant>,
}

impl Held {
    /// Every queue's config, read at most [`FRESH_FOR`] ago.
    pub async fn get(&self, db: &Database) -> Result<Configs, Error> {
        if let Some((at, configs)) = &self.inner.lock().expect("never poisoned").last
            && at.elapsed() < FRESH_FOR
        {
            return Ok(configs.clone());
        }
        self.read(db).await
    }

    /// Every queue's config, read now.
    pub async fn read(&self, db: &Database) -> Result<Configs, Error> {
        let since = Instant::now();
        let client = db.client().await?;
        let configs = Arc::new(transact::queues(&client).await?);
        let mut reads = self.inner.lock().expect("never poisoned");
        let newer = reads.last.as_ref().is_none_or(|(at, _)| *at < since);
        if newer && reads.changed.is_none_or(|c| c < since) {
            reads.last = Some((since, configs.clone()));
        }
        Ok(configs)
    }

    /// Forgets the last read: this daemon changed a queue.
    pub fn forget(&self) {
        let mut reads = self.inner.lock().expect("never poisoned");
        reads.last = None;
        reads.changed = Some(Instant::now());
    }
}
