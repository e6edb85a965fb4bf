//! The shared database's schema, as numbered migrations: each runs once,
//! in order, inside one transaction that holds a transaction-scoped
//! advisory lock, so daemons starting together migrate once and a failed
//! migration leaves nothing behind. `tessera_schema` records what ran; a
//! database whose schema is newer than this binary is refused, never
//! migrated down.

use super::{Database, Error};

/// One step of the schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    /// Its number: the schema's version once it has run.
    pub version: i32,
    /// What it does, in a few words.
    pub name: &'static str,
    /// Its statements.
    pub sql: &'static str,
}

/// Every migration this binary knows, oldest first.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "the queue's tables",
        sql: include_str!("schema/0001_queue.sql"),
    },
    Migration {
        version: 2,
        name: "tasks in the order they were made, handles and upstreams by task",
        sql: include_str!("schema/0002_task_order.sql"),
    },
    Migration {
        version: 3,
        name: "keys that every daemon sees change",
        sql: include_str!("schema/0003_shared_keys.sql"),
    },
    Migration {
        version: 4,
        name: "events every daemon streams and resumes",
        sql: include_str!("schema/0004_event_stream.sql"),
    },
    Migration {
        version: 5,
        name: "time conversions the planner inlines",
        sql: include_str!("schema/0005_inlined_times.sql"),
    },
    Migration {
        version: 6,
        name: "fewer writes and checks per claim, completion and enqueue",
        sql: include_str!("schema/0006_fewer_writes.sql"),
    },
    Migration {
        version: 7,
        name: "event ids enciphered from their place, not stored",
        sql: include_str!("schema/0007_event_ids.sql"),
    },
    Migration {
        version: 8,
        name: "nouns' version lists, for daemons that share their nouns",
        sql: include_str!("schema/0008_nouns.sql"),
    },
];

/// The advisory lock key migrations hold (inside their transaction
/// only): "tessera" read as bytes.
const LOCK: i64 = 0x0074_6573_7365_7261;

/// The schema's version this binary writes.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Where a database's schema stands against this binary's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The version the database records (0 for an empty database).
    pub current: i32,
    /// What would run to bring it to [`latest`], in order.
    pub pending: Vec<Migration>,
}

/// What the database's schema is and what a migration would run; writes
/// nothing.
pub async fn plan(db: &Database) -> Result<Plan, Error> {
    let client = db.client().await?;
    let current = version(&client).await?;
    plan_from(current)
}

/// Runs every pending migration, under the lock, in one transaction;
/// answers what ran (nothing when the schema is current).
pub async fn migrate(db: &Database) -> Result<Vec<Migration>, Error> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS tessera_schema (
           version integer PRIMARY KEY,
           name text NOT NULL,
           applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await?;
    let plan = plan_from(version(&tx).await?)?;
    for m in &plan.pending {
        tx.batch_execute(m.sql).await?;
        tx.execute(
            "INSERT INTO tessera_schema (version, name) VALUES ($1, $2)",
            &[&m.version, &m.name],
        )
        .await?;
    }
    tx.commit().await?;
    for m in &plan.pending {
        tracing::info!(
            version = m.version,
            name = m.name,
            at = db.at(),
            "queue schema migrated"
        );
    }
    Ok(plan.pending)
}

/// The version recorded in `tessera_schema`, 0 when there is none.
async fn version(client: &impl deadpool_postgres::GenericClient) -> Result<i32, Error> {
    let exists: bool = client
        .query_one("SELECT to_regclass('tessera_schema') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        return Ok(0);
    }
    Ok(client
        .query_one("SELECT coalesce(max(version), 0) FROM tessera_schema", &[])
        .await?
        .get(0))
}

fn plan_from(current: i32) -> Result<Plan, Error> {
    if current > latest() {
        return Err(Error::NewerSchema {
            found: current,
            known: latest(),
        });
    }
    Ok(Plan {
        current,
        pending: MIGRATIONS
            .iter()
            .filter(|m| m.version > current)
            .copied()
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_from_one_without_gaps() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i32 + 1, "{}", m.name);
        }
    }

    #[test]
    fn a_newer_schema_is_refused_and_an_older_one_runs_what_it_lacks() {
        assert!(matches!(
            plan_from(latest() + 1),
            Err(Error::NewerSchema { found, known }) if found == latest() + 1 && known == latest()
        ));
        assert_eq!(plan_from(0).unwrap().pending, MIGRATIONS);
        assert!(plan_from(latest()).unwrap().pending.is_empty());
    }
}
