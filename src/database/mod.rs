//! The PostgreSQL database several daemons share (`--queue-url`):
//! connecting, the settings Tessera's promises need, and the schema's
//! migrations ([`schema`]). What lives in it is written by the layers
//! that own it: the queue's tasks (`queue::pg`), the keys and the token
//! secret (`auth::shared`); the `secrets` rows (the token secret, the
//! event-id key) are read and made by [`secret`] and [`secret_or`].
//!
//! The database must commit synchronously (`synchronous_commit` on):
//! Tessera acknowledges a change only once it is durable, and an
//! asynchronous commit is visible to other sessions before it is flushed.

pub mod nouns;
pub mod objects;
pub mod schema;

use std::str::FromStr;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

/// How long a new connection may take, and how long sent data may go
/// unacknowledged, unless the URL says (`connect_timeout`,
/// `tcp_user_timeout`).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long an idle connection waits before it probes the server.
const KEEPALIVE_IDLE: std::time::Duration = std::time::Duration::from_secs(2);

/// How long the server keeps a transaction that sends nothing
/// (`idle_in_transaction_session_timeout`).
const IDLE_IN_TRANSACTION: std::time::Duration = std::time::Duration::from_secs(10);

/// Connections each daemon keeps open to the database at most.
pub const POOL_SIZE: usize = 16;

/// The oldest PostgreSQL major version the schema and statements use
/// (`xid8`, `pg_snapshot_xmin`, `gen_random_uuid` without an extension).
pub const MIN_SERVER_VERSION: u32 = 15;

/// What can fail reaching or preparing the database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL is not a PostgreSQL connection string.
    #[error(
        "--queue-url is not a PostgreSQL URL ({0}); write it as postgres://USER@HOST:PORT/DATABASE"
    )]
    BadUrl(String),
    /// The database cannot be reached, or refused the connection.
    #[error(
        "cannot reach the queue database at {at}: {source}; check that it is running and that the URL's user, host, port and database are right"
    )]
    Unreachable {
        /// The URL without its password.
        at: String,
        /// Why.
        source: deadpool_postgres::PoolError,
    },
    /// A statement failed.
    #[error("the queue database refused a statement: {}", cause(.0))]
    Statement(#[from] tokio_postgres::Error),
    /// The server is older than the schema needs.
    #[error(
        "the queue database runs PostgreSQL {found}; Tessera needs {MIN_SERVER_VERSION} or later"
    )]
    OldServer {
        /// Its `server_version_num` divided by 10,000.
        found: u32,
    },
    /// The database commits asynchronously.
    #[error(
        "the queue database has synchronous_commit = {0}; Tessera acknowledges only durable changes, so set synchronous_commit = on (ALTER DATABASE … SET synchronous_commit = on)"
    )]
    AsyncCommit(String),
    /// A row holds what Tessera never writes.
    #[error("the queue database holds a row Tessera cannot read ({0}); was it changed by hand?")]
    Corrupt(String),
    /// The schema was migrated by a newer Tessera.
    #[error(
        "the queue database's schema is at version {found}, newer than this binary's {known}; run the newer Tessera, or a database of its own"
    )]
    NewerSchema {
        /// The version the database records.
        found: i32,
        /// The newest version this binary knows.
        known: i32,
    },
}

/// A pool of connections to the queue's database, checked for the
/// settings Tessera needs.
#[derive(Clone)]
pub struct Database {
    pool: Pool,
    config: tokio_postgres::Config,
    at: String,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("at", &self.at).finish()
    }
}

impl Database {
    /// Connects to `url` and checks the server's version and that it
    /// commits synchronously.
    pub async fn connect(url: &str) -> Result<Database, Error> {
        let mut config =
            tokio_postgres::Config::from_str(url).map_err(|e| Error::BadUrl(e.to_string()))?;
        // Short statements only: compiling one with the JIT (on by default
        // for plans the planner thinks costly, such as the recursive family
        // query) took up to a second here, for a statement that runs in
        // well under a millisecond.
        //
        // A daemon cut off in the middle of a transaction must not keep
        // its row locks for the server's TCP timeout of hours: the server
        // ends a transaction left idle for IDLE_IN_TRANSACTION.
        //
        // Every statement is prepared once per connection and planned
        // once (a generic plan): re-planning each execution for its
        // parameters took a fifth of the database's CPU per task, for
        // short statements whose plans do not change with them. A plan
        // made once may be made while a table is still empty (a fresh
        // database), and would then scan the whole table for good
        // (a tenth of the CPU per task, growing with the table): every
        // statement here has an index to use, so scans are off.
        let ours = format!(
            "-c jit=off -c plan_cache_mode=force_generic_plan -c enable_seqscan=off \
             -c idle_in_transaction_session_timeout={}",
            IDLE_IN_TRANSACTION.as_millis()
        );
        let options = match config.get_options() {
            Some(o) => format!("{o} {ours}"),
            None => ours,
        };
        config.options(&options);
        // A database host that answers nothing must not hold a call (or
        // /healthz) for the system's TCP timeout of minutes: neither a
        // connection being made, nor one whose packets go unanswered
        // (a partition), nor an idle one (a listener's).
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(CONNECT_TIMEOUT);
        }
        config
            .keepalives(true)
            .keepalives_idle(KEEPALIVE_IDLE)
            .keepalives_interval(KEEPALIVE_IDLE)
            .keepalives_retries(2);
        let at = describe(&config);
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .build()
            .expect("a pool with a runtime-free config builds");
        let db = Database { pool, config, at };
        db.check_server().await?;
        Ok(db)
    }

    /// Where it connects (the URL without its password).
    pub fn at(&self) -> &str {
        &self.at
    }

    /// A connection of its own, outside the pool (a listener's), with the
    /// task that drives it: its messages go to `messages`.
    pub async fn dedicated(
        &self,
    ) -> Result<
        (
            tokio_postgres::Client,
            tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
        ),
        Error,
    > {
        Ok(self.config.connect(NoTls).await?)
    }

    /// A connection from the pool.
    pub async fn client(&self) -> Result<deadpool_postgres::Object, Error> {
        self.pool.get().await.map_err(|source| Error::Unreachable {
            at: self.at.clone(),
            source,
        })
    }

    async fn check_server(&self) -> Result<(), Error> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT current_setting('server_version_num')::int, current_setting('synchronous_commit')",
                &[],
            )
            .await?;
        let found = (row.get::<_, i32>(0) / 10_000) as u32;
        if found < MIN_SERVER_VERSION {
            return Err(Error::OldServer { found });
        }
        let commit: String = row.get(1);
        // `remote_write`, `remote_apply` and `local` also flush locally
        // before answering; only `off` acknowledges before the flush.
        if commit == "off" {
            return Err(Error::AsyncCommit(commit));
        }
        Ok(())
    }
}

/// The `secrets` row `name`: the one the database holds, or `fresh`
/// written now when it holds none (daemons making one at once all keep
/// the first that lands).
pub async fn secret_or(db: &Database, name: &str, fresh: &[u8]) -> Result<Vec<u8>, Error> {
    let client = db.client().await?;
    client
        .execute(
            "INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            &[&name, &fresh],
        )
        .await?;
    secret(&client, name)
        .await?
        .ok_or_else(|| Error::Corrupt(format!("the secrets row {name} vanished as it was made")))
}

/// The `secrets` row `name`, when the database holds one.
pub async fn secret(
    client: &impl deadpool_postgres::GenericClient,
    name: &str,
) -> Result<Option<Vec<u8>>, Error> {
    Ok(client
        .query_opt("SELECT value FROM secrets WHERE name = $1", &[&name])
        .await?
        .map(|r| r.get(0)))
}

/// A time the database sent as microseconds since the epoch
/// (`to_micros` in the schema).
pub(crate) fn time(us: i64) -> Result<jiff::Timestamp, Error> {
    jiff::Timestamp::from_microsecond(us)
        .map_err(|_| Error::Corrupt(format!("a time of {us} µs is out of range")))
}

/// A sha256 the database holds as its 32 bytes.
pub(crate) fn sha256(bytes: &[u8]) -> Result<crate::store::Sha256, Error> {
    let bytes = bytes
        .try_into()
        .map_err(|_| Error::Corrupt(format!("a hash of {} bytes", bytes.len())))?;
    Ok(crate::store::Sha256::from_bytes(bytes))
}

/// What the server said (its message and SQLSTATE), or the client's
/// error with its source: `tokio_postgres::Error`'s own text is only
/// "db error".
pub(crate) fn cause(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => match std::error::Error::source(e) {
            Some(source) => format!("{e}: {source}"),
            None => e.to_string(),
        },
    }
}

/// `user@host:port/database`, without the password.
fn describe(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "{}@{host}:{port}/{}",
        config.get_user().unwrap_or("(default user)"),
        config.get_dbname().unwrap_or("(default database)")
    )
}
