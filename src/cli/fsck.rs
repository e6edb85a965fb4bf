//! `tessera fsck`: check a root offline and print each problem with its
//! path: every object and noun ref (`store::fsck`), every journal record's
//! checksum and order and the snapshot's checksum (a replay that changes
//! nothing), every receipt the queue names, every ctx-dir against the
//! latest receipt that says it was written there, the files under `auth/`
//! against what the tasks, receipts and refs name (`auth::check`), every
//! pin a brief or receipt holds against the ref files, and every object
//! against what names it: an object nothing names is what a deleted ref
//! file leaves behind.

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;

use crate::auth::check::{self, Expected};
use crate::auth::shared::Audit;
use crate::config::QueueLimits;
use crate::queue::offline;
use crate::queue::{Brief, OnFinding, Receipt, Walk, pg};
use crate::store::fsck::Report;
use crate::store::object::object_path;
use crate::store::{Access, Name, Pin, Sha256, Store, fsck};
use crate::worker::audit;

/// Unreferenced objects listed one by one before the rest are counted.
const LISTED: usize = 20;

/// Checks the root, and the queue in the database at `queue_url` when
/// given (else the root's journal); exit 1 when any problem is found.
pub fn run(
    root: &Path,
    queue_url: Option<&str>,
    objects_url: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let store = Store::open(root, Access::ReadOnly)?;
    let _shared = match objects_url {
        Some(objects) => Some(share_nouns(&store, queue_url, objects)?),
        None => None,
    };
    let survey = survey(&store, queue_url)?;
    let mut problems = survey.problems;
    let mut notes = Vec::new();
    match &survey.lost {
        None => notes.push(
            "unreferenced objects are not looked for while the journal cannot be read whole"
                .to_string(),
        ),
        Some(lost) => problems.extend(describe(lost)),
    }
    for problem in &problems {
        println!("{problem}");
    }
    if survey.report.noun_log_records > 0 {
        println!(
            "the noun log holds {} record(s) the next start writes into their files (until then a ref file may lag its log)",
            survey.report.noun_log_records
        );
    }
    for note in &notes {
        println!("{note}");
    }
    println!(
        "checked {} objects, {} noun refs, {}, {} receipts and auth/: {}",
        survey.report.objects,
        survey.report.refs,
        match queue_url {
            None => "the journal",
            Some(_) => "the queue database",
        },
        survey.receipts,
        match problems.len() {
            0 => "clean".to_string(),
            n => format!("{n} problem(s)"),
        }
    );
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Reads the nouns of `store` where daemons that share them keep them:
/// refs in the database at `queue_url`, objects in the bucket at
/// `objects_url` (its endpoint and keys from the `AWS_*` variables). The
/// runtime their requests run on is returned, to be kept while they run.
fn share_nouns(
    store: &Store,
    queue_url: Option<&str>,
    objects_url: &str,
) -> anyhow::Result<tokio::runtime::Runtime> {
    let Some(url) = queue_url else {
        anyhow::bail!(
            "--objects-url needs --queue-url: the nouns' refs are in the queue's database"
        );
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    let bucket =
        crate::store::bucket::Bucket::open(objects_url, &Default::default(), handle.clone())?;
    let db = runtime.block_on(async {
        bucket.check().await?;
        anyhow::Ok(crate::database::Database::connect(url).await?)
    })?;
    crate::database::nouns::share(store, bucket, db, handle);
    Ok(runtime)
}

/// What a whole check found.
pub(super) struct Survey {
    /// The store's own check.
    pub report: Report,
    /// Every problem but the unreferenced objects, as lines.
    pub problems: Vec<String>,
    /// Receipts read.
    pub receipts: u64,
    /// The loose objects nothing names; `None` when what names an object
    /// is not fully known yet (journal damage, a receipt or noun change
    /// only a log carries until the next start).
    pub lost: Option<Vec<(Sha256, u64)>>,
}

/// Checks everything `tessera fsck` checks: the root, and the queue in
/// the database at `queue_url` when given, else the root's journal.
pub(super) fn survey(store: &Store, queue_url: Option<&str>) -> anyhow::Result<Survey> {
    needs_no_url(store, queue_url)?;
    let report = fsck::check(store)?;
    let mut problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    let mut seen = Seen::default();
    if let Some(url) = queue_url {
        shared_tasks(store, url, &report, &mut seen, &mut problems)?;
    } else {
        journal_tasks(store, &report, &mut seen, &mut problems);
    }
    for (id, file) in &report.writers {
        if let Ok(id) = Name::parse("key_id", id) {
            seen.expected.key(&id, || file.clone());
        }
    }
    problems.extend(
        auth_problems(store, seen.keys.as_ref(), &seen.expected)?
            .iter()
            .map(|p| p.to_string()),
    );
    let lost = (!seen.partial).then(|| unreferenced(store, &report, &seen.named));
    Ok(Survey {
        report,
        problems,
        receipts: seen.receipts,
        lost,
    })
}

/// What the queue database's tasks and receipts name: every receipt's
/// durable copy is its row, so one whose object this root lacks is
/// written at the next start, as a journal record's is.
fn shared_tasks(
    store: &Store,
    url: &str,
    report: &Report,
    seen: &mut Seen,
    problems: &mut Vec<String>,
) -> anyhow::Result<()> {
    let ((), keys, event_key) = shared_walk(store, url, |walk, rows| {
        seen.tasks(store, report, walk, rows, problems)
    })?;
    seen.keys = Some(keys);
    problems.extend(event_key);
    Ok(())
}

/// Refuses a root whose queue and keys are in a shared database when no
/// `--queue-url` names it: its journal and `auth/` hold none of them.
pub(super) fn needs_no_url(store: &Store, queue_url: Option<&str>) -> anyhow::Result<()> {
    match crate::auth::shared::marked(store)? {
        Some(at) if queue_url.is_none() => {
            Err(super::exit::Usage(crate::auth::shared::needs_url(&at)).into())
        }
        _ => Ok(()),
    }
}

/// Every problem with the keys and the token secret given `expected`:
/// the files under `auth/`, or the shared database's rows (`keys`, read
/// by [`shared_walk`]), where a daemon on it keeps them.
pub(super) fn auth_problems(
    store: &Store,
    keys: Option<&Audit>,
    expected: &Expected,
) -> anyhow::Result<Vec<check::Problem>> {
    Ok(match keys {
        Some(keys) => check::check_shared(keys, expected),
        None => check::check(store, expected)?,
    })
}

/// Runs `f` on every task of the queue in the database at `url` (read
/// only), with the hash of every receipt it holds; answers with what `f`
/// answered, the keys' rows and the token secret, and what is wrong with
/// the event-id key, if anything.
pub(super) fn shared_walk<T>(
    store: &Store,
    url: &str,
    f: impl FnOnce(Walk<'_>, &hashbrown::HashSet<Sha256>) -> T,
) -> anyhow::Result<(T, Audit, Option<String>)> {
    // Several threads: a store reading shared nouns waits on its own
    // runtime from inside this one's.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let db = crate::database::Database::connect(url).await?;
        let plan = crate::database::schema::plan(&db).await?;
        if !plan.pending.is_empty() {
            anyhow::bail!(
                "the queue database's schema is at version {}; start the daemon (or run tessera migrate) first",
                plan.current
            );
        }
        let rows = pg::Shared::receipt_shas(&db).await?;
        let keys = crate::auth::shared::audit(&db).await?;
        let event_key = pg::event_ids::EventIds::audit(&db).await?;
        let queue =
            crate::queue::Queue::shared(db, store, QueueLimits::default().split_limits()).await;
        Ok((queue.audit(|walk| f(walk, &rows)).await?, keys, event_key))
    })
}

/// What the root's journal's tasks and receipts name.
fn journal_tasks(store: &Store, report: &Report, seen: &mut Seen, problems: &mut Vec<String>) {
    match offline::replay(
        store,
        QueueLimits::default().split_limits(),
        OnFinding::Report,
    ) {
        Err(e) => {
            problems.push(e.to_string());
            seen.partial = true;
        }
        Ok(replayed) => {
            seen.partial |= replayed.finding.is_some();
            problems.extend(replayed.finding.as_ref().map(|f| f.to_string()));
            let receipts = &replayed.recovery.journal_receipts;
            seen.tasks(store, report, replayed.walk(), receipts, problems);
        }
    }
}

/// What the queue's tasks and receipts name.
#[derive(Default)]
struct Seen {
    /// Receipts read.
    receipts: u64,
    /// Objects named: receipts, their bodies and parts, staged parts
    /// (dropped ones too).
    named: HashSet<Sha256>,
    /// What `auth/` must hold.
    expected: Expected,
    /// The shared database's keys and token secret, when the queue is
    /// there.
    keys: Option<Audit>,
    /// Something the queue names could not be read (journal damage, a
    /// receipt only its journal record carries yet): what names an object
    /// is not fully known.
    partial: bool,
}

impl Seen {
    /// Reads every task's receipts: each is checked, its ctx-dirs against
    /// the latest receipt that wrote them, each pin against the ref files.
    fn tasks(
        &mut self,
        store: &Store,
        report: &Report,
        tasks: Walk<'_>,
        journal_receipts: &hashbrown::HashSet<Sha256>,
        problems: &mut Vec<String>,
    ) {
        self.expected = crate::daemon::auth_evidence(tasks);
        for t in tasks.tasks() {
            self.named.extend(t.staged.values().copied());
            self.named.extend(t.dropped.iter().copied());
            for (field, pin) in Brief::of(&t.spec.brief).pins() {
                pinned(report, &pin, &t.spec.namespace, problems, || {
                    format!("task {}'s {field}", t.id)
                });
            }
            let mut read = Vec::with_capacity(t.receipts.len());
            // A receipt still carried only by its journal record may be
            // the one that wrote a ctx-dir: the task's ctx-dirs are
            // checked once the next start has written it out.
            let mut unread = false;
            for sha in &t.receipts {
                self.receipts += 1;
                self.named.insert(*sha);
                match Receipt::read(store, sha) {
                    Ok(receipt) => read.push(receipt),
                    Err(_) if journal_receipts.contains(sha) => unread = true,
                    Err(e) => {
                        unread = true;
                        problems.push(format!("receipt {sha} of task {}: {e}", t.id));
                    }
                }
            }
            self.partial |= unread;
            for r in &read {
                self.named.extend(r.out.map(|o| o.sha256));
                self.named
                    .extend(r.parts.iter().flat_map(|p| p.values().copied()));
                self.expected.key(&r.by_key, || {
                    format!("the receipt of task {} attempt {}", t.id, r.attempt.0)
                });
                for pin in r.outputs.iter().chain(&r.evidence) {
                    pinned(report, pin, &t.spec.namespace, problems, || {
                        format!("the receipt of task {} attempt {}", t.id, r.attempt.0)
                    });
                }
            }
            if unread {
                continue;
            }
            for receipt in audit::latest_written(read) {
                if let Err(e) = audit::check_ctx(store, &receipt) {
                    let path = receipt.projection.map(|p| p.path).unwrap_or_default();
                    problems.push(format!("{path}: {e} (task {})", t.id));
                }
            }
        }
    }
}

/// A pin names a version a ref file holds (nouns are never deleted, so a
/// pin the daemon accepted always does, unless the ref file was lost).
fn pinned(
    report: &Report,
    pin: &Pin,
    ns: &Name,
    problems: &mut Vec<String>,
    by: impl FnOnce() -> String,
) {
    let ns = pin.namespace.as_ref().unwrap_or(ns);
    let noun = format!("{ns}/{}/{}", pin.store, pin.key);
    if !report.holds(&noun, pin.version, pin.sha256) {
        problems.push(format!(
            "nouns/{noun}.json: {} pins version {} ({}), which no ref file holds: restore the ref file from a backup",
            by(),
            pin.version,
            pin.sha256
        ));
    }
}

/// The loose objects nothing names: what a deleted ref file leaves (its
/// versions' bodies), or a write that never completed. A promotion record
/// names itself (it is kept for audit; nothing points at it).
fn unreferenced(store: &Store, report: &Report, named: &HashSet<Sha256>) -> Vec<(Sha256, u64)> {
    report
        .unreferenced(named)
        .into_iter()
        .filter(|(sha, _)| {
            !store.get_object(sha).is_ok_and(|bytes| {
                serde_json::from_slice::<crate::promotion::Promoted>(&bytes).is_ok()
            })
        })
        .collect()
}

/// The unreferenced objects as problem lines, with what to do.
fn describe(lost: &[(Sha256, u64)]) -> Vec<String> {
    if lost.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<String> = lost
        .iter()
        .take(LISTED)
        .map(|(sha, size)| {
            format!(
                "{}: {size} bytes that no noun ref, receipt or task names",
                object_path(sha)
            )
        })
        .collect();
    if lost.len() > LISTED {
        out.push(format!(
            "... and {} more unreferenced object(s)",
            lost.len() - LISTED
        ));
    }
    out.push(format!(
        "{} unreferenced object(s): a noun ref file that was deleted leaves its versions' bodies like this; restore nouns/<namespace>/<store>/<key>.json from a backup (its versions name these objects) and fsck is clean again. If no ref file was lost, they are left by writes that never completed (a submit or a part refused or cut short by a crash); `tessera recover --accept-loss` (daemon stopped) moves them to objects/unreferenced/",
        lost.len()
    ));
    out
}
