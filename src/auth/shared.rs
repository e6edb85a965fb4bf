//! Keys and the worker-token secret in the database several daemons
//! share (`--queue-url`): every daemon issues, revokes and authenticates
//! against the same rows.
//!
//! Each daemon keeps the records in memory, as on a root, and looks for
//! rows changed since its last look ([`changed_since`]): those written by
//! a transaction its last look could not see, at or above that look's
//! `pg_snapshot_xmin`, the same horizon the event stream reads by (a row
//! numbered by a sequence can commit after a higher one was read). A key
//! the daemon has not seen yet is read by its id ([`get`]), so a key
//! issued on one daemon works on every other at once.
//!
//! Revocation's last-admin rule decides over every row, under a
//! transaction-scoped advisory lock, so two daemons revoking the last two
//! admin keys at once cannot each leave the other as the last.

use deadpool_postgres::GenericClient;

use super::keyring::KeyRecord;
use crate::database::{self, Database, Error};
use crate::store::{self, Store};

/// The advisory lock key that orders changes to `keys` (inside a
/// transaction only): "tess.key" read as bytes.
const KEYS_LOCK: i64 = 0x7465_7373_2e6b_6579;

/// The `secrets` row holding the worker-token secret.
const TOKEN_SECRET: &str = "worker_token";

/// Where a daemon's look at the keys stands: rows changed by transactions
/// at or above this xid may not have been seen yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark(i64);

/// One look at the keys: the rows it found and where the next one starts.
#[derive(Debug)]
pub struct Look {
    /// The records found (all of them, or those changed since the mark).
    pub records: Vec<KeyRecord>,
    /// Where the next look starts.
    pub mark: Mark,
}

/// Every key record, and the mark to look for changes from.
pub async fn load_all(db: &Database) -> Result<Look, Error> {
    look(db, None).await
}

/// The records changed since `mark`, and the next mark. A row can come
/// back more than once; applying it again changes nothing.
pub async fn changed_since(db: &Database, mark: Mark) -> Result<Look, Error> {
    look(db, Some(mark)).await
}

async fn look(db: &Database, since: Option<Mark>) -> Result<Look, Error> {
    let client = db.client().await?;
    let since = since.map(|m| m.0);
    let tx_horizon = client
        .query_one(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
            &[],
        )
        .await?
        .get::<_, i64>(0);
    let rows = client
        .query(
            "SELECT record::text FROM keys \
             WHERE $1::bigint IS NULL OR changed >= $1::bigint::text::xid8",
            &[&since],
        )
        .await?;
    Ok(Look {
        records: records(&rows)?,
        mark: Mark(tx_horizon),
    })
}

/// The record of `key_id`, if the database has one.
pub async fn get(db: &Database, key_id: &str) -> Result<Option<KeyRecord>, Error> {
    let client = db.client().await?;
    let row = client
        .query_opt(
            "SELECT record::text FROM keys WHERE key_id = $1",
            &[&key_id],
        )
        .await?;
    row.map(|r| parse(r.get(0))).transpose()
}

/// Inserts a new key's record.
pub async fn insert(db: &Database, record: &KeyRecord) -> Result<(), Error> {
    let client = db.client().await?;
    write(&client, record).await
}

/// The keys a database starts with, written once: when it holds none,
/// `first()` gives them (a root's existing records, or a new admin key)
/// and they are inserted; answers whether they were. Daemons starting
/// together decide under the lock, so only one writes.
pub async fn seed(db: &Database, first: impl FnOnce() -> Vec<KeyRecord>) -> Result<bool, Error> {
    let mut client = db.client().await?;
    let tx = locked(&mut client).await?;
    let empty = tx
        .query_opt("SELECT 1 FROM keys LIMIT 1", &[])
        .await?
        .is_none();
    if empty {
        for record in first() {
            write(&tx, &record).await?;
        }
    }
    tx.commit().await?;
    Ok(empty)
}

/// Revokes `key_id` under the lock: `decide` sees every record and
/// answers the revoked one to write (or `None` to write nothing, with its
/// own error or answer).
pub async fn revoke<T, E>(
    db: &Database,
    decide: impl FnOnce(Vec<KeyRecord>) -> Result<(T, Option<KeyRecord>), E>,
) -> Result<Result<T, E>, Error> {
    let mut client = db.client().await?;
    let tx = locked(&mut client).await?;
    let records = records(&tx.query("SELECT record::text FROM keys", &[]).await?)?;
    let (answer, write_out) = match decide(records) {
        Ok(decided) => decided,
        Err(e) => return Ok(Err(e)),
    };
    if let Some(record) = write_out {
        write(&tx, &record).await?;
    }
    tx.commit().await?;
    Ok(Ok(answer))
}

/// A transaction holding the lock that orders changes to `keys`.
async fn locked(
    client: &mut deadpool_postgres::Object,
) -> Result<deadpool_postgres::Transaction<'_>, Error> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&KEYS_LOCK])
        .await?;
    Ok(tx)
}

/// The records of rows whose first column is `record::text`.
fn records(rows: &[tokio_postgres::Row]) -> Result<Vec<KeyRecord>, Error> {
    rows.iter().map(|r| parse(r.get(0))).collect()
}

/// Inserts or replaces `record`, marking the row changed by this
/// transaction.
async fn write(client: &impl GenericClient, record: &KeyRecord) -> Result<(), Error> {
    let json = serde_json::to_string(record).expect("records serialize");
    client
        .execute(
            "INSERT INTO keys (key_id, record, revoked_at, changed) \
             VALUES ($1, $2::text::jsonb, $3::text::timestamptz, pg_current_xact_id()) \
             ON CONFLICT (key_id) DO UPDATE SET record = EXCLUDED.record, \
               revoked_at = EXCLUDED.revoked_at, changed = EXCLUDED.changed",
            &[
                &record.key_id.as_str(),
                &json,
                &record.revoked_at.map(|t| t.to_string()),
            ],
        )
        .await?;
    Ok(())
}

fn parse(text: &str) -> Result<KeyRecord, Error> {
    serde_json::from_str(text).map_err(|e| Error::Corrupt(format!("a key record: {e}")))
}

/// The worker-token secret's line (`token::parse_secret` reads it): the
/// one the database holds, or `fresh` written now when it holds none.
pub async fn token_secret(db: &Database, fresh: &[u8]) -> Result<Vec<u8>, Error> {
    database::secret_or(db, TOKEN_SECRET, fresh).await
}

/// Everything `tessera fsck` checks of the keys in the database.
#[derive(Debug)]
pub struct Audit {
    /// Each row's key id with its record, or why it does not parse.
    pub rows: Vec<(String, Result<KeyRecord, String>)>,
    /// The token secret's line, when there is one.
    pub secret: Option<Vec<u8>>,
}

/// The keys' rows and the token secret, read for `tessera fsck`.
pub async fn audit(db: &Database) -> Result<Audit, Error> {
    let client = db.client().await?;
    let rows = client
        .query("SELECT key_id, record::text FROM keys ORDER BY key_id", &[])
        .await?
        .iter()
        .map(|r| {
            let record = serde_json::from_str(r.get(1)).map_err(|e| e.to_string());
            (r.get(0), record)
        })
        .collect();
    Ok(Audit {
        rows,
        secret: database::secret(&client, TOKEN_SECRET).await?,
    })
}

/// The file under `auth/` that says a root's keys and queue are in a
/// shared database (its address, without a password): a start, `fsck` or
/// `recover` without `--queue-url` on such a root is refused, where it
/// would otherwise make a new queue and a new admin key over `admin.key`.
pub const MARKER: &str = "queue-database";

/// Records on the root that its keys and queue are in the database at
/// `at`.
pub fn mark(store: &Store, at: &str) -> Result<(), store::Error> {
    let line = format!("{at}\n");
    if marked(store)?.is_some_and(|was| was == at) {
        return Ok(());
    }
    store
        .writer()
        .write_private(&store.root().auth, MARKER, line.as_bytes())
}

/// The database a root's keys and queue are in, when a daemon on it was
/// started with `--queue-url`.
pub fn marked(store: &Store) -> Result<Option<String>, store::Error> {
    match store.root().auth.read_to_string(MARKER) {
        Ok(text) => Ok(Some(text.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(store::io_err(format!("reading auth/{MARKER}"), e)),
    }
}

/// Why a root marked as on a shared database is refused without one.
pub fn needs_url(at: &str) -> String {
    format!(
        "this root's queue and keys are in the shared database at {at} (auth/{MARKER}): pass --queue-url (or set TESSERA_QUEUE_URL) with that database's URL"
    )
}
