//! Noun refs in the shared database (`serve --objects-url`): the
//! [`RefTable`] the store reads and changes instead of the root's ref
//! files, so that every daemon serves every noun and a key's
//! compare-and-swap has one winner across all of them.
//!
//! A change locks the noun's head row (`SELECT … FOR UPDATE`, made first
//! when the noun is new), reads its versions, lets the store decide on
//! them (the access rule, `expected_version`, `skip_unchanged`: the same
//! code as on a root), and writes the new version and the head in the
//! same transaction, with its event row. A put's object goes up to the
//! bucket meanwhile, and the transaction commits only once it is there,
//! so a version never names a missing object. Every daemon's event stream
//! carries every noun change (`queue::pg::stream`), in the order of the
//! task changes around it. Two daemons changing one key are ordered by
//! the row lock; the second decides on what the first committed.

use std::fmt;

use deadpool_postgres::GenericClient;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::{Database, Error};
use crate::store::bucket::wait;
use crate::store::listing::Within;
use crate::store::refs::{Beside, Decide, RefChange, RefTable};
use crate::store::{self, Name, NounPath, NounRef, VersionEntry};

const LOCK_HEAD: &str =
    "SELECT latest FROM nouns WHERE namespace = $1 AND store = $2 AND key = $3 FOR UPDATE";
const MAKE_HEAD: &str = "INSERT INTO nouns (namespace, store, key, latest) VALUES ($1, $2, $3, 0) \
     ON CONFLICT DO NOTHING";
const VERSIONS: &str = "SELECT entry::text FROM noun_versions \
     WHERE namespace = $1 AND store = $2 AND key = $3 ORDER BY version";
/// A version appended, the head moved and the event written: one
/// statement, one round trip, in the transaction that holds the head.
const APPEND: &str = "WITH appended AS ( \
       INSERT INTO noun_versions (namespace, store, key, version, sha256, entry) \
       VALUES ($1, $2, $3, $4, $5, $6::text::jsonb)), \
     moved AS (UPDATE nouns SET latest = $4 WHERE namespace = $1 AND store = $2 AND key = $3) \
     INSERT INTO events (facts) VALUES ($7::text::jsonb)";
const QUARANTINE: &str = "UPDATE noun_versions \
     SET entry = jsonb_set(entry, '{quarantined}', to_jsonb($4::bool)) \
     WHERE namespace = $1 AND store = $2 AND key = $3";
const EVENT: &str = "INSERT INTO events (facts) VALUES ($1::text::jsonb)";
const PAGE: &str = "WITH page AS ( \
       SELECT namespace, store, key FROM nouns \
       WHERE latest > 0 AND (namespace, store, key) > ($1, $2, $3) \
         AND ($4::text IS NULL OR namespace = $4) AND ($5::text IS NULL OR store = $5) \
       ORDER BY namespace, store, key LIMIT $6) \
     SELECT v.namespace, v.store, v.key, v.entry::text \
     FROM page JOIN noun_versions v USING (namespace, store, key) \
     ORDER BY v.namespace, v.store, v.key, v.version";

/// Shares `store`'s nouns: its objects in `bucket`, its refs in `db`
/// (both waited for on `handle`'s runtime), for a daemon and for
/// `tessera fsck` alike.
pub fn share(
    store: &crate::store::Store,
    bucket: crate::store::bucket::Bucket,
    db: Database,
    handle: Handle,
) {
    store.objects().use_bucket(bucket);
    store.use_ref_table(std::sync::Arc::new(NounTable::new(db, handle)));
}

/// The noun refs of the database at `db`, waited for on `handle`'s
/// runtime (the store's calls are blocking).
pub struct NounTable {
    db: Database,
    handle: Handle,
}

impl fmt::Debug for NounTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NounTable").field("db", &self.db).finish()
    }
}

impl NounTable {
    /// The refs in `db`, whose statements run on `handle`'s runtime.
    pub fn new(db: Database, handle: Handle) -> NounTable {
        NounTable { db, handle }
    }

    fn unavailable(&self, what: &str, e: Error) -> store::Error {
        store::Error::Unavailable {
            what: format!("{what} in the database at {}", self.db.at()),
            cause: e.to_string(),
        }
    }
}

/// The key columns of `path`.
fn keys(path: &NounPath) -> [&str; 3] {
    [
        path.namespace.as_str(),
        path.store.as_str(),
        path.key.as_str(),
    ]
}

/// A ref from its version rows (oldest first); `None` when there are none.
fn from_rows(path: &NounPath, rows: &[String]) -> Result<Option<NounRef>, store::Error> {
    if rows.is_empty() {
        return Ok(None);
    }
    let versions = rows
        .iter()
        .map(|text| {
            serde_json::from_str::<VersionEntry>(text).map_err(|e| store::Error::CorruptRef {
                path: format!("the database's noun_versions of {path}"),
                message: e.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(NounRef {
        namespace: path.namespace.clone(),
        store: path.store.clone(),
        key: path.key.clone(),
        versions,
    }))
}

/// Reads the versions of `path` on `client`.
async fn versions(
    client: &impl GenericClient,
    path: &NounPath,
) -> Result<Vec<String>, tokio_postgres::Error> {
    let [ns, st, key] = keys(path);
    let statement = client.prepare_cached(VERSIONS).await?;
    let rows = client.query(&statement, &[&ns, &st, &key]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Waits for a change's [`Beside`] job, when it has one, and answers its
/// outcome (a panic in it goes on here).
async fn finished(job: Option<JoinHandle<Result<(), store::Error>>>) -> Result<(), store::Error> {
    match job {
        None => Ok(()),
        Some(job) => match job.await {
            Ok(done) => done,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(store::Error::Unavailable {
                what: "writing an object beside a noun change".into(),
                cause: e.to_string(),
            }),
        },
    }
}

/// Why a change did not commit: the database, or the store's decision.
enum Failed {
    Database(Error),
    Store(store::Error),
}

impl From<tokio_postgres::Error> for Failed {
    fn from(e: tokio_postgres::Error) -> Failed {
        Failed::Database(e.into())
    }
}

impl From<Error> for Failed {
    fn from(e: Error) -> Failed {
        Failed::Database(e)
    }
}

impl RefTable for NounTable {
    fn read(&self, path: &NounPath) -> Result<Option<NounRef>, store::Error> {
        let rows = wait(&self.handle, async {
            let client = self.db.client().await?;
            Ok::<_, Error>(versions(&client, path).await?)
        })
        .map_err(|e| self.unavailable(&format!("reading noun {path}"), e))?;
        from_rows(path, &rows)
    }

    fn change(
        &self,
        path: &NounPath,
        decide: &mut Decide<'_>,
        beside: Option<Beside>,
    ) -> Result<(), store::Error> {
        let [ns, st, key] = keys(path);
        let mut beside = beside.map(|job| self.handle.spawn(job));
        let done = wait(&self.handle, async {
            let mut client = self.db.client().await?;
            let tx = client.transaction().await?;
            let lock = tx.prepare_cached(LOCK_HEAD).await?;
            // The versions are read in the lock's round trip: sent behind
            // it, they are read once the lock is held, with a snapshot
            // taken then (each statement takes its own), so they include
            // whatever the lock's last holder committed.
            let head_key: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&ns, &st, &key];
            let (head, mut rows) =
                tokio::try_join!(tx.query_opt(&lock, &head_key), versions(&tx, path))?;
            if head.is_none() {
                let make = tx.prepare_cached(MAKE_HEAD).await?;
                tx.execute(&make, &head_key).await?;
                tx.query_one(&lock, &head_key).await?;
                rows = versions(&tx, path).await?;
            }
            // A refusal or no change rolls back before answering, so the
            // head row's lock is gone when the caller goes on.
            let decided =
                from_rows(path, &rows).and_then(|current| Ok((decide(current.as_ref())?, current)));
            let (change, current) = match decided {
                Ok((Some(change), current)) => (change, current),
                other => {
                    tx.rollback().await?;
                    // Waited for, but the decision is the answer: a
                    // refused put needed no object (one that went up
                    // is the collector's).
                    let _ = finished(beside.take()).await;
                    return other.map(|_| ()).map_err(Failed::Store);
                }
            };
            let latest = match &change {
                RefChange::Append(entry) => (**entry).clone(),
                RefChange::Quarantine(q) => {
                    let mut entry = current
                        .as_ref()
                        .map(|c| c.latest().clone())
                        .ok_or(Failed::Store(store::Error::NounNotFound))?;
                    entry.quarantined = *q;
                    entry
                }
            };
            let facts = serde_json::json!({"noun": path, "entry": latest}).to_string();
            match &change {
                RefChange::Append(entry) => {
                    let version = i64::try_from(entry.version).expect("versions fit in i64");
                    let text = serde_json::to_string(entry).expect("entries serialize");
                    let sha = entry.sha256.as_bytes().as_slice();
                    let append = tx.prepare_cached(APPEND).await?;
                    tx.execute(&append, &[&ns, &st, &key, &version, &sha, &text, &facts])
                        .await?;
                }
                RefChange::Quarantine(q) => {
                    let event = tx.prepare_cached(EVENT).await?;
                    tx.execute(&event, &[&facts]).await?;
                    let quarantine = tx.prepare_cached(QUARANTINE).await?;
                    tx.execute(&quarantine, &[&ns, &st, &key, q]).await?;
                }
            }
            if let Err(e) = finished(beside.take()).await {
                tx.rollback().await?;
                return Err(Failed::Store(e));
            }
            tx.commit().await?;
            Ok::<_, Failed>(())
        });
        match done {
            Ok(()) => Ok(()),
            Err(Failed::Store(e)) => Err(e),
            Err(Failed::Database(e)) => Err(self.unavailable(&format!("changing noun {path}"), e)),
        }
    }

    fn list(
        &self,
        within: &Within,
        after: Option<&NounPath>,
        limit: usize,
    ) -> Result<Vec<NounRef>, store::Error> {
        let [ns, st, key] = after.map_or(["", "", ""], keys);
        let only_ns = within.namespace.as_ref().map(Name::as_str);
        let only_st = within.store.as_ref().map(Name::as_str);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = wait(&self.handle, async {
            let client = self.db.client().await?;
            let page = client.prepare_cached(PAGE).await?;
            Ok::<_, Error>(
                client
                    .query(&page, &[&ns, &st, &key, &only_ns, &only_st, &limit])
                    .await?,
            )
        })
        .map_err(|e| self.unavailable("listing nouns", e))?;
        let mut refs: Vec<NounRef> = Vec::new();
        let mut entries: Vec<String> = Vec::new();
        let mut path: Option<NounPath> = None;
        for row in &rows {
            let here = NounPath::parse(row.get(0), row.get(1), row.get(2))?;
            if path.as_ref().is_some_and(|p| *p != here) {
                let done = path.replace(here.clone()).expect("checked");
                refs.extend(from_rows(&done, &std::mem::take(&mut entries))?);
            }
            path.get_or_insert(here);
            entries.push(row.get(3));
        }
        if let Some(done) = path {
            refs.extend(from_rows(&done, &entries)?);
        }
        Ok(refs)
    }
}
