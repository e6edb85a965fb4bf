//! Coalesced calls: claims or completions that arrive together are run
//! by one statement ([`lease::claim_many`],
//! [`complete::complete_then_claim`]), so a burst of them shares one
//! commit and one WAL flush, and each caller is answered once the
//! statement holding its call has committed.
//!
//! Nothing waits for a batch to fill: a batch is whatever arrived while
//! the batches before it were running, up to [`MAX_BATCH`], with at most
//! [`IN_FLIGHT`] statements running at once. A lone call runs at once;
//! under load the batches grow by themselves (group commit).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use super::complete::{self, Completion, Outcome};
use super::lease::{self, ClaimAsk, ClaimedRow};
use crate::database::{Database, Error};

/// Calls in one statement at most.
pub const MAX_BATCH: usize = 64;

/// Statements of one batcher running at once at most.
pub const IN_FLIGHT: usize = 4;

/// A call and where its answer goes.
type Call<I, O> = (I, oneshot::Sender<Result<O, Arc<Error>>>);

/// A coalescer of calls `I` answered with `O`: cheap to clone; its worker
/// ends once every clone is dropped and the calls sent are answered.
#[derive(Debug)]
pub struct Batcher<I, O> {
    tx: mpsc::UnboundedSender<Call<I, O>>,
}

impl<I, O> Clone for Batcher<I, O> {
    fn clone(&self) -> Self {
        Batcher {
            tx: self.tx.clone(),
        }
    }
}

/// Completions coalesced, each with the claim to make if it is accepted
/// ([`complete::complete_then_claim`]).
pub type Completer = Batcher<(Completion, Option<ClaimAsk>), (Outcome, Vec<ClaimedRow>)>;

/// Claims coalesced ([`lease::claim_many`]).
pub type Claimer = Batcher<ClaimAsk, Vec<ClaimedRow>>;

/// Starts a completion coalescer on `db` (inside a tokio runtime).
pub fn completer(db: Database) -> Completer {
    Batcher::start(db, |db, items| async move {
        complete::complete_then_claim(&db, items).await
    })
}

/// Starts a claim coalescer on `db` (inside a tokio runtime).
pub fn claimer(db: Database) -> Claimer {
    Batcher::start(
        db,
        |db, asks| async move { lease::claim_many(&db, asks).await },
    )
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts the worker: `run` answers a batch, one answer per call in
    /// order (an error is shared by every call of its batch).
    pub fn start<F, Fut>(db: Database, run: F) -> Batcher<I, O>
    where
        F: Fn(Database, Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>, Error>> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(work(db, rx, run));
        Batcher { tx }
    }

    /// Runs `call` with whatever else arrives with it; answers once the
    /// statement holding it has committed.
    pub async fn call(&self, call: I) -> Result<O, Arc<Error>> {
        let (answer, answered) = oneshot::channel();
        self.tx
            .send((call, answer))
            .map_err(|_| ())
            .expect("the batcher runs while a handle to it exists");
        answered
            .await
            .expect("the batcher answers every call it takes")
    }
}

async fn work<I, O, F, Fut>(db: Database, mut rx: mpsc::UnboundedReceiver<Call<I, O>>, run: F)
where
    I: Send + 'static,
    O: Send + 'static,
    F: Fn(Database, Vec<I>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<O>, Error>> + Send + 'static,
{
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
                Ok(call) => batch.push(call),
                Err(_) => break,
            }
        }
        let (calls, answers): (Vec<I>, Vec<_>) = batch.into_iter().unzip();
        let done = run(db.clone(), calls);
        tokio::spawn(async move {
            match done.await {
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
