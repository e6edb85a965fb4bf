//! The daemon's life: open the root (taking its lock), load keys, serve
//! until the shutdown future resolves, drain, release the root.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::auth::throttle::Throttle;
use crate::auth::token::Minter;
use crate::auth::{Keyring, check};
use crate::config::Config;
use crate::database::Database;
use crate::database::objects::ObjectLedger;
use crate::http::budget::BodyBudget;
use crate::http::conns::{self, Connections};
use crate::http::{self, Ctx};
use crate::queue::{self, Queue, pg};
use crate::store::bucket::Bucket;
use crate::store::{self, Access, Store};
use crate::worker::order::TaskLocks;

/// How often a full disk's free space is read again.
const SPACE_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The root or keys.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// The task journal.
    #[error(transparent)]
    Queue(#[from] queue::Error),
    /// The shared database.
    #[error(transparent)]
    Database(#[from] crate::database::Error),
    /// `--objects-url` or `[objects]` cannot be used.
    #[error("{0}")]
    Objects(String),
    /// The keys or the token secret in the shared database.
    #[error(transparent)]
    Keys(#[from] crate::auth::Error),
    /// The root's queue and keys are in a shared database, and no
    /// `--queue-url` was given.
    #[error("{0}")]
    SharedRoot(String),
    /// A file under `auth/` that durable records prove existed is missing
    /// or damaged (`auth::check`).
    #[error("{}", .0.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n"))]
    Auth(Vec<check::Problem>),
}

/// What the task table says `auth/` must hold: every key id a task names
/// (requester, claimant, parker) has a record, and the token secret
/// exists while a task holds a live claim (its worker token was minted
/// with it).
pub fn auth_evidence(tasks: queue::Walk<'_>) -> check::Expected {
    let mut expected = check::Expected::default();
    for t in tasks.tasks() {
        for (id, part) in t.key_ids() {
            expected.key(id, || format!("task {}'s {part}", t.id));
        }
        if let Some(lease) = &t.lease
            && expected.live_claim.is_none()
        {
            expected.live_claim = Some(format!(
                "task {}'s live claim (attempt {})",
                t.id, lease.attempt.0
            ));
        }
    }
    expected
}

/// Opens the root and the queue it names: the root's journal
/// (recovered), or the database of `[queue] url` (migrated), which is
/// answered too (keys and the token secret live there as well).
async fn open_queue(config: &Config) -> Result<(Store, Queue, Option<Database>), Error> {
    let (root, segment_bytes) = (config.root.clone(), config.queue.segment_bytes());
    let limits = config.queue.clone();
    if config.objects.url.is_some() && config.queue.url.is_none() {
        return Err(Error::Objects(
            "--objects-url needs --queue-url: the nouns' refs live in the queue's database; pass both (or [queue] url and [objects] url)".into(),
        ));
    }
    let blocking = move || -> Result<(Store, Option<Queue>), Error> {
        let store = Store::open_with(&root, Access::Exclusive, segment_bytes)?;
        if limits.url.is_some() {
            return Ok((store, None));
        }
        if let Some(at) = crate::auth::shared::marked(&store)? {
            return Err(Error::SharedRoot(crate::auth::shared::needs_url(&at)));
        }
        let (queue, rec) = Queue::open(
            &store,
            limits.split_limits(),
            segment_bytes,
            limits.fold_after(),
        )?;
        tracing::info!(
            snapshot_tasks = rec.snapshot_tasks,
            replayed = rec.records,
            torn_tail = rec.torn_tail,
            segments = rec.segments,
            snapshot_ms = rec.snapshot_ms,
            replay_ms = rec.replay_ms,
            "task journal recovered"
        );
        Ok((store, Some(queue)))
    };
    let (store, journal) = tokio::task::spawn_blocking(blocking)
        .await
        .expect("opening the root does not panic")?;
    if let Some(queue) = journal {
        return Ok((store, queue, None));
    }
    let url = config
        .queue
        .url
        .as_deref()
        .expect("no journal without a url");
    let db = Database::connect(url).await?;
    crate::auth::shared::mark(&store, db.at())?;
    for m in crate::database::schema::migrate(&db).await? {
        tracing::info!(version = m.version, name = %m.name, "queue database migrated");
    }
    let restored = pg::Shared::restore_receipts(&db, &store).await?;
    if restored > 0 {
        tracing::info!(
            receipts = restored,
            "wrote the receipt objects this root lacked from the queue database"
        );
    }
    share_nouns(config, &store, &db).await?;
    let queue = Queue::shared(db.clone(), &store, config.queue.split_limits()).await;
    Ok((store, queue, Some(db)))
}

/// With `[objects] url`, keeps noun objects in its bucket and noun refs in
/// `db`; with or without it, reads a receipt another daemon wrote from
/// its row.
async fn share_nouns(config: &Config, store: &Store, db: &Database) -> Result<(), Error> {
    let handle = tokio::runtime::Handle::current();
    store.read_rows(Arc::new(pg::receipt_rows::ReceiptRows::new(
        db.clone(),
        handle.clone(),
    )));
    let Some(url) = &config.objects.url else {
        return Ok(());
    };
    let ledger = Arc::new(ObjectLedger::new(db.clone(), handle.clone()));
    let bucket = Bucket::open(url, &config.objects.settings(), handle.clone())
        .map_err(|e| Error::Objects(e.to_string()))?
        .counted(ledger, config.objects.garbage_grace());
    bucket.check().await?;
    crate::database::nouns::share(store, bucket, db.clone(), handle);
    tracing::info!(bucket = %url, database = %db.at(), "nouns shared: objects in the bucket, refs in the database");
    Ok(())
}

/// A daemon whose root is open and locked, ready to serve.
#[derive(Debug)]
pub struct Daemon {
    ctx: Arc<Ctx>,
    /// The shared database, when the queue is in one.
    shared: Option<Database>,
}

impl Daemon {
    /// Opens the root, creating its layout and the admin key on first
    /// start, and the queue: the root's journal, or the database of
    /// `[queue] url` (migrated first).
    pub async fn open(config: &Config) -> Result<Daemon, Error> {
        let started = std::time::Instant::now();
        let (store, queue, shared) = open_queue(config).await?;
        let (keyring, admin_key, tokens) = match &shared {
            Some(db) => {
                let (keyring, admin_key) = Keyring::shared(db, &store).await?;
                (keyring, admin_key, Minter::shared(db, &store).await?)
            }
            None => {
                let (keyring, admin_key) = open_root_auth(&store, &queue).await?;
                (keyring, admin_key, Minter::open(&store)?)
            }
        };
        if let Some(path) = admin_key {
            tracing::info!(path = %path, "created the admin key; its secret is in this file (mode 0600)");
        }
        tracing::info!(
            queue = %queue.describe(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "queue open"
        );
        let unsettled = queue
            .audit_started(crate::worker::audit::Unsettled::of)
            .await
            .map_err(queue::Error::from)?;
        for line in crate::worker::audit::settle(&store, &unsettled) {
            tracing::warn!("{line}");
        }
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let events = Arc::new(crate::events::Events::new(config.limits.events_backlog));
        queue.observe(vec![metrics.clone()], events.clone());
        store.watch_nouns(events.clone());
        Ok(Daemon {
            shared,
            ctx: Arc::new(Ctx {
                store,
                keyring,
                queue,
                metrics,
                events,
                tokens,
                limits: config.limits.clone(),
                bodies: BodyBudget::new(
                    config.limits.max_body_bytes_in_flight,
                    std::time::Duration::from_millis(config.limits.header_timeout_ms),
                ),
                connections: Connections::new(conns::fit_to_open_files(
                    config.limits.max_connections,
                )),
                throttle: Throttle::new(
                    config.limits.worker_failures_per_peer,
                    config.limits.worker_failures_overall,
                ),
                task_locks: TaskLocks::default(),
            }),
        })
    }

    /// Serves on `listener` until `shutdown` resolves, then drains.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let addr = listener
            .local_addr()
            .map_or_else(|_| "?".to_string(), |a: SocketAddr| a.to_string());
        tracing::info!(root = %self.ctx.store.root().path.display(), addr = %addr, "tessera started");
        let (stop_sweeper, sweeper_stopped) = tokio::sync::oneshot::channel::<()>();
        let queue = self.ctx.queue.clone();
        let sweeper = tokio::spawn(async move {
            queue
                .sweep_until(async {
                    let _ = sweeper_stopped.await;
                })
                .await;
        });
        // The periodic check of a full disk: an out-of-space episode ends
        // once the space is back, even if its writer has not written since.
        let store = self.ctx.store.clone();
        let space = tokio::spawn(async move {
            let mut every = tokio::time::interval(SPACE_CHECK);
            loop {
                every.tick().await;
                store.recheck_space();
            }
        });
        // The bucket's garbage collector, when nouns are shared: whichever
        // daemon holds its lease row collects.
        let (stop_collector, collector_stopped) = tokio::sync::oneshot::channel::<()>();
        let collector = self.shared.clone().map(|db| {
            let holder = format!("{}-{}", std::process::id(), addr);
            tokio::spawn(crate::garbage::run(
                db,
                self.ctx.store.clone(),
                holder,
                async {
                    let _ = collector_stopped.await;
                },
            ))
        });
        http::serve(listener, self.ctx.clone(), shutdown).await;
        space.abort();
        let _ = stop_collector.send(());
        if let Some(c) = collector {
            let _ = c.await;
        }
        let _ = stop_sweeper.send(());
        let _ = sweeper.await;
        self.ctx.queue.close();
        // Objects handed over to be written later (receipts, whose durable
        // copy is the journal) are written now, so a stopped root holds
        // every receipt as an object without waiting for the next start.
        if let Err(e) = self.ctx.store.flush_later() {
            tracing::warn!(error = %e, "stopped without writing every receipt out; the next start writes them from the journal");
        }
        self.ctx.store.close_noun_log();
        tracing::info!(root = %self.ctx.store.root().path.display(), "tessera stopped");
    }
}

/// Opens the root's keys, once the journal has said what they must be: a
/// missing one that a task names is refused, never made again (keys and
/// the token secret are made only on a fresh root).
async fn open_root_auth(store: &Store, queue: &Queue) -> Result<(Keyring, Option<String>), Error> {
    let expected = queue
        .audit(auth_evidence)
        .await
        .map_err(queue::Error::from)?;
    let blockers: Vec<check::Problem> = check::check(store, &expected)?
        .into_iter()
        .filter(|p| p.blocks_start)
        .collect();
    if !blockers.is_empty() {
        queue.close();
        return Err(Error::Auth(blockers));
    }
    Ok(Keyring::open(store)?)
}

/// Opens the root and serves on `listener` until `shutdown` resolves.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let daemon = Daemon::open(&config).await?;
    daemon.serve(listener, shutdown).await;
    Ok(())
}
