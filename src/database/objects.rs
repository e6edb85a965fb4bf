//! The objects of a shared bucket, counted: the `objects` rows the
//! garbage collector (`crate::garbage`) reads.
//!
//! A write to the bucket first counts on its object: it upserts the
//! object's row with `touched = now()`, committed (without waiting for
//! its WAL flush: see [`ObjectLedger`]'s count) before the bucket's PUT. Objects are named by content, so a put that finds
//! an object already there relies on it without writing it.
//!
//! The collector deletes an object only if all of these hold:
//! - nothing names it (a noun version, a staged or dropped part, a
//!   receipt's body or parts, or it is a promotion record, kept for audit
//!   as on a root);
//! - no write has counted on it for the bucket's grace period;
//! - it holds the object's row lock, re-checking `touched` under it.
//!
//! Whatever names an object does so after a write counted on it. The
//! collector deletes from the bucket only while it holds the row's lock,
//! so a count on an old object that the collector is deleting either:
//! - commits first, so the re-check under the lock sees it and the object
//!   stays; or
//! - waits for the collector's commit, and its PUT, which comes after,
//!   writes the object anew.
//!
//! A write whose object went up but whose row never came (a refused or
//! cut-off put) leaves an object nothing names, deleted once its grace
//! has passed.

use std::fmt;

use tokio::runtime::Handle;

use super::{Database, Error};
use crate::store::bucket::{Ledger, wait};
use crate::store::{self, Sha256};

/// The count in one round trip: two statements in one simple query, which
/// PostgreSQL runs as one implicit transaction (rolled back whole on an
/// error), committed without waiting for its WAL flush. The digest's hex
/// (ours: 64 hex digits) is written into the text, as a multi-statement
/// query takes no parameters.
fn count_statement(sha: &Sha256) -> String {
    format!(
        "SET LOCAL synchronous_commit = off; \
         INSERT INTO objects (sha256, touched) VALUES ('\\x{}'::bytea, now()) \
         ON CONFLICT (sha256) DO UPDATE SET touched = now()",
        sha.hex()
    )
}

/// The `objects` rows of the database at `db`, the bucket's [`Ledger`].
pub struct ObjectLedger {
    db: Database,
    handle: Handle,
}

impl fmt::Debug for ObjectLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectLedger")
            .field("db", &self.db)
            .finish()
    }
}

impl ObjectLedger {
    /// The ledger in `db`, whose statements run on `handle`'s runtime.
    pub fn new(db: Database, handle: Handle) -> ObjectLedger {
        ObjectLedger { db, handle }
    }
}

impl Ledger for ObjectLedger {
    fn count(&self, sha: &Sha256) -> Result<(), store::Error> {
        // The count must be seen by the collector before the PUT, and it
        // is, once committed; it need not be on disk then. The write that
        // names the object commits synchronously after it, flushing the
        // WAL that holds the count too, and a database that crashes
        // before that fails the write. So the count commits without
        // waiting for a flush of its own: one flush per put, not two.
        wait(&self.handle, async {
            let client = self.db.client().await?;
            client.batch_execute(&count_statement(sha)).await?;
            Ok::<_, Error>(())
        })
        .map_err(|e| store::Error::Unavailable {
            what: format!("counting object {sha} in the database at {}", self.db.at()),
            cause: e.to_string(),
        })
    }
}
