//! Receipts read from their rows by hash: a daemon that lacks a receipt's
//! object (another daemon completed the task) reads it here, through the
//! store's [`ObjectRows`], so any daemon serves a task's output, its
//! consumers' inputs and its audit.

use tokio::runtime::Handle;

use crate::database::Database;
use crate::store::bucket::wait;
use crate::store::{self, ObjectRows, Sha256};

const BY_SHA: &str = "SELECT body FROM receipts WHERE sha256 = $1 LIMIT 1";

/// The `receipts` rows of the database at `db`, waited for on `handle`'s
/// runtime (the store's reads are blocking).
#[derive(Debug)]
pub struct ReceiptRows {
    db: Database,
    handle: Handle,
}

impl ReceiptRows {
    /// The receipts of `db`, read on `handle`'s runtime.
    pub fn new(db: Database, handle: Handle) -> ReceiptRows {
        ReceiptRows { db, handle }
    }
}

impl ObjectRows for ReceiptRows {
    fn fetch(&self, sha: &Sha256) -> Result<Option<Vec<u8>>, store::Error> {
        let key = sha.as_bytes().as_slice();
        wait(&self.handle, async {
            let client = self.db.client().await?;
            let statement = client.prepare_cached(BY_SHA).await?;
            let row = client.query_opt(&statement, &[&key]).await?;
            Ok::<_, crate::database::Error>(row.map(|r| r.get(0)))
        })
        .map_err(|e| store::Error::Unavailable {
            what: format!("reading receipt {sha} in the database at {}", self.db.at()),
            cause: e.to_string(),
        })
    }
}
