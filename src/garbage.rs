//! The shared bucket's garbage collector: objects nothing names, that no
//! write has counted on for the bucket's grace period, are deleted by the
//! daemon holding the `garbage` lease row (on the database's clock, as
//! the queue's maintenance is led). Why a put can never lose its object
//! to it: `database::objects`.

use std::collections::HashSet;
use std::time::Duration;

use futures_util::TryStreamExt;

use crate::database::{self, Database, Error};
use crate::queue::pg::leader;
use crate::store::{self, Sha256, Store};

/// How long the collector's lease row lasts unless renewed.
const LEASE: Duration = Duration::from_secs(30);

/// What one collection did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// Objects deleted.
    pub deleted: usize,
    /// Objects past their grace that are promotion records, kept for
    /// good (no longer counted).
    pub kept: usize,
}

/// Collects every half grace period (at most hourly, at least each
/// second) while this daemon holds the `garbage` lease, until `stop`.
pub async fn run(
    db: Database,
    store: Store,
    holder: String,
    stop: impl std::future::Future<Output = ()>,
) {
    let Some(grace) = store.objects().bucket().map(|b| b.grace()) else {
        return;
    };
    let every = (grace / 2).clamp(Duration::from_secs(1), Duration::from_secs(3600));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    let mut held = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = &mut stop => break,
        }
        held = match leader::acquire(&db, "garbage", &holder, LEASE).await {
            Ok(Some(term)) => Some(term.term),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot reach the database to collect garbage; retrying");
                None
            }
        };
        if held.is_none() {
            continue;
        }
        match collect(&db, &store).await {
            Ok(c) if c.deleted > 0 => {
                tracing::info!(
                    deleted = c.deleted,
                    "deleted objects nothing names from the bucket"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "collecting the bucket's garbage failed; retrying")
            }
        }
    }
    if let Some(t) = held {
        let _ = leader::resign(&db, "garbage", &holder, t).await;
    }
}

/// Deletes from `store`'s bucket the objects nothing names that no write
/// has counted on for the bucket's grace period. Safe from two
/// collectors at once.
pub async fn collect(db: &Database, store: &Store) -> Result<Collected, Error> {
    let Some(grace) = store.objects().bucket().map(|b| b.grace()) else {
        return Ok(Collected::default());
    };
    let grace = grace.as_secs_f64();
    let old: Vec<Vec<u8>> = {
        let client = db.client().await?;
        client
            .query(
                "SELECT sha256 FROM objects WHERE touched < now() - make_interval(secs => $1)",
                &[&grace],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    if old.is_empty() {
        return Ok(Collected::default());
    }
    let named = named(db).await?;
    let mut done = Collected::default();
    for raw in old {
        let sha = database::sha256(&raw)?;
        if named.contains(&sha) {
            continue;
        }
        let record = store
            .blocking(move |s| Ok::<_, store::Error>(is_promotion_record(s, &sha)))
            .await
            .map_err(|e| Error::Corrupt(e.to_string()))?;
        if record {
            // Kept for good: its row goes, so no later pass reads it again
            // (a later write of the same bytes counts it anew).
            db.client()
                .await?
                .execute("DELETE FROM objects WHERE sha256 = $1", &[&raw])
                .await?;
            done.kept += 1;
            continue;
        }
        let mut client = db.client().await?;
        let tx = client.transaction().await?;
        let still = tx
            .query_opt(
                "SELECT 1 FROM objects WHERE sha256 = $1 \
                 AND touched < now() - make_interval(secs => $2) FOR UPDATE SKIP LOCKED",
                &[&raw, &grace],
            )
            .await?;
        if still.is_none() {
            continue;
        }
        store
            .blocking(move |s| match s.objects().bucket() {
                Some(bucket) => bucket.delete(&sha),
                None => Ok(()),
            })
            .await
            .map_err(|e: store::Error| Error::Corrupt(e.to_string()))?;
        tx.execute("DELETE FROM objects WHERE sha256 = $1", &[&raw])
            .await?;
        tx.commit().await?;
        done.deleted += 1;
    }
    Ok(done)
}

/// Whether the object `sha` is a promotion record (named by nothing,
/// kept for audit, as `tessera fsck` keeps it on a root).
fn is_promotion_record(store: &Store, sha: &Sha256) -> bool {
    store
        .get_object(sha)
        .is_ok_and(|bytes| serde_json::from_slice::<crate::promotion::Promoted>(&bytes).is_ok())
}

/// Every object a row names: noun versions, staged and dropped parts,
/// and the bodies and parts of receipts.
async fn named(db: &Database) -> Result<HashSet<Sha256>, Error> {
    let client = db.client().await?;
    let mut named = HashSet::new();
    for statement in [
        "SELECT sha256 FROM noun_versions",
        "SELECT sha256 FROM staged",
        "SELECT unnest(dropped) FROM tasks WHERE dropped <> '{}'",
    ] {
        for row in client.query(statement, &[]).await? {
            named.insert(database::sha256(row.get(0))?);
        }
    }
    // Read a row at a time: the receipts' bodies are not held at once.
    let rows = client
        .query_raw("SELECT body FROM receipts", std::iter::empty::<i32>())
        .await?;
    tokio::pin!(rows);
    while let Some(row) = rows.try_next().await? {
        let body: &[u8] = row.get(0);
        let receipt: crate::queue::Receipt = serde_json::from_slice(body)
            .map_err(|e| Error::Corrupt(format!("a receipt row is not a receipt: {e}")))?;
        named.extend(receipt.out.map(|o| o.sha256));
        named.extend(receipt.parts.iter().flat_map(|p| p.values().copied()));
    }
    Ok(named)
}
