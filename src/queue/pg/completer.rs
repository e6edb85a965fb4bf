//! Coalesced completions: submits that arrive together are recorded by
//! one statement ([`lease::complete_many`]), so a burst of them shares
//! one commit and one WAL flush, and each caller is answered once the
//! statement that holds its completion has committed.
//!
//! Nothing waits for a batch to fill: a batch is whatever arrived while
//! the batches before it were running, up to [`MAX_BATCH`], with at most
//! [`IN_FLIGHT`] statements running at once. A lone submit runs at once;
//! under load the batches grow by themselves (group commit).

use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::lease::{self, Completion, Outcome};
use super::{Database, Error};

/// Completions in one statement at most.
pub const MAX_BATCH: usize = 64;

/// Completion statements running at once at most.
pub const IN_FLIGHT: usize = 4;

/// A completion and where its answer goes.
type Item = (Completion, oneshot::Sender<Result<Outcome, Arc<Error>>>);

/// The coalescer: cheap to clone; its worker ends once every clone is
/// dropped and the completions sent have been answered.
#[derive(Clone, Debug)]
pub struct Completer {
    tx: mpsc::UnboundedSender<Item>,
}

impl Completer {
    /// Starts the coalescer on `db` (inside a tokio runtime).
    pub fn start(db: Database) -> Completer {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(db, rx));
        Completer { tx }
    }

    /// Records `c` with whatever else arrives with it; answers once the
    /// statement holding it has committed (a database error is shared by
    /// every completion of its batch).
    pub async fn complete(&self, c: Completion) -> Result<Outcome, Arc<Error>> {
        let (answer, answered) = oneshot::channel();
        self.tx
            .send((c, answer))
            .expect("the completer runs while a handle to it exists");
        answered
            .await
            .expect("the completer answers every completion it takes")
    }
}

async fn run(db: Database, mut rx: mpsc::UnboundedReceiver<Item>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        let db = db.clone();
        tokio::spawn(async move {
            let (items, answers): (Vec<Completion>, Vec<_>) = batch.into_iter().unzip();
            match lease::complete_many(&db, &items).await {
                Ok(outcomes) => {
                    for (answer, outcome) in answers.into_iter().zip(outcomes) {
                        let _ = answer.send(Ok(outcome));
                    }
                }
                Err(e) => {
                    let e = Arc::new(e);
                    for answer in answers {
                        let _ = answer.send(Err(e.clone()));
                    }
                }
            }
            drop(slot);
        });
    }
}
