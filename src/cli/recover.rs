//! `tessera recover --root DIR [--salvage] [--accept-loss]`: what to do
//! when the daemon refuses to start. Without a flag it reads only and
//! shows every blocker the start would refuse on (a damaged noun log, a
//! damaged task journal, a file under `auth/` that durable records prove
//! existed), with what salvaging or accepting the loss would do. With
//! `--salvage`, it keeps every journal record before the damage, moves
//! the rest to `journal/salvaged/` (nothing is deleted) and compacts.
//! With `--accept-loss`, it records each lost key as revoked, makes a lost
//! token secret again, issues a new admin key when none is usable, and
//! moves the objects nothing names to `objects/unreferenced/`. The daemon
//! must be stopped (it holds the root's lock).

use std::path::Path;
use std::process::ExitCode;

use crate::auth::check;
use crate::config::QueueLimits;
use crate::queue::OnFinding;
use crate::queue::offline;
use crate::store::{Access, Store, fsck};

/// Exit 0 when nothing blocks the start (any longer), 1 when a blocker was
/// found and left as it is, 2 (an error) when it cannot be salvaged.
/// With `queue_url`, the tasks are read from the queue's database (its
/// journal is not the root's, so there is nothing to salvage here).
pub fn run(
    root: &Path,
    queue_url: Option<&str>,
    salvage: bool,
    accept_loss: bool,
) -> anyhow::Result<ExitCode> {
    let mut blocked = false;
    let store = Store::open(root, Access::ReadOnly)?;
    super::fsck::needs_no_url(&store, queue_url)?;
    let (_, noun_damage) = fsck::noun_log(&store, &mut fsck::Report::default())?;
    if let Some(damage) = &noun_damage {
        blocked = true;
        println!("damage: {damage}");
        println!(
            "the noun log cannot be salvaged here: restore the segment from a backup, or move it out of journal/nouns/ to give up the puts it holds from that record on"
        );
    }
    if let Some(url) = queue_url {
        println!("the queue is in the database at {url}: nothing under journal/ to salvage");
        let (expected, keys, _) =
            super::fsck::shared_walk(&store, url, |walk, _| crate::daemon::auth_evidence(walk))?;
        let found = Found {
            expected,
            keys: Some(keys),
            salvaging: false,
            noun_damaged: noun_damage.is_some(),
            blocked,
        };
        return settle(root, store, queue_url, found, accept_loss);
    }
    let limits = QueueLimits::default().split_limits();
    let replayed = offline::replay(&store, limits, OnFinding::Report)?;
    let rec = &replayed.recovery;
    match &replayed.finding {
        None => println!(
            "journal: clean ({} tasks in the snapshot, {} records replayed{})",
            rec.snapshot_tasks,
            rec.records,
            if rec.torn_tail {
                "; a torn final record, never acknowledged, is cut when the daemon starts"
            } else {
                ""
            }
        ),
        Some(finding) => {
            println!("damage: {finding}");
            if salvage && finding.salvageable {
                // Done below, with the root held.
            } else if finding.salvageable {
                blocked = true;
                println!(
                    "salvaging would keep the {} record(s) before the damage and move the damaged record and the {} after it to journal/salvaged/ (run again with --salvage, with the daemon stopped)",
                    rec.records, finding.following
                );
            } else {
                blocked = true;
                println!("this cannot be salvaged: restore the file from a backup");
            }
        }
    }
    let found = Found {
        expected: crate::daemon::auth_evidence(replayed.walk()),
        keys: None,
        salvaging: salvage && replayed.finding.as_ref().is_some_and(|f| f.salvageable),
        noun_damaged: noun_damage.is_some(),
        blocked,
    };
    drop(replayed);
    settle(root, store, None, found, accept_loss)
}

/// What the read-only part of a recovery found.
struct Found {
    /// What `auth/` must hold, as the tasks say.
    expected: check::Expected,
    /// The shared database's keys and token secret, when the queue is
    /// there.
    keys: Option<crate::auth::shared::Audit>,
    /// The journal is damaged, salvageably, and a salvage was asked for.
    salvaging: bool,
    /// The noun log is damaged.
    noun_damaged: bool,
    /// Something blocks the start so far.
    blocked: bool,
}

/// The rest of a recovery: the blockers under `auth/`, then, as asked
/// and when nothing else blocks, the journal salvaged and the loss
/// accepted (the objects nothing names, on the root and in the queue at
/// `queue_url` when given, set aside).
fn settle(
    root: &Path,
    store: Store,
    queue_url: Option<&str>,
    found: Found,
    accept_loss: bool,
) -> anyhow::Result<ExitCode> {
    let Found {
        expected,
        keys,
        salvaging,
        noun_damaged,
        mut blocked,
    } = found;
    let auth: Vec<check::Problem> = super::fsck::auth_problems(&store, keys.as_ref(), &expected)?
        .into_iter()
        .filter(|p| p.blocks_start)
        .collect();
    if auth.is_empty() {
        println!(
            "{}",
            match queue_url {
                Some(_) => "keys: they live in the queue database, with the tasks that name them",
                None => "auth/: every file the queue's tasks name is there",
            }
        );
    }
    for problem in &auth {
        println!("damage: {problem}");
        if problem.loss.is_none() || !accept_loss {
            blocked = true;
        }
    }
    let accepting = accept_loss && !blocked;
    let lost = if accepting {
        super::fsck::survey(&store, queue_url)?.lost
    } else {
        None
    };
    drop(store);
    if !salvaging && !accepting {
        return Ok(exit(blocked));
    }
    if noun_damaged {
        println!("nothing was changed: the noun log must be repaired first");
        return Ok(ExitCode::FAILURE);
    }
    let store = Store::open(root, Access::Exclusive)?;
    if salvaging {
        let limits = QueueLimits::default().split_limits();
        let replayed = offline::replay(&store, limits, OnFinding::Salvage)?;
        if let Some(finding) = &replayed.finding {
            replayed.compact(&store)?;
            println!(
                "salvaged: kept the {} record(s) before the damage ({} tasks); moved {} record(s) to journal/salvaged/",
                replayed.recovery.records,
                replayed.walk().count(),
                finding.following
            );
        }
    }
    if accepting {
        // A root on the shared database keeps no keys of its own.
        if queue_url.is_none() {
            for line in check::accept_loss(&store, &auth)? {
                println!("accepted: {line}");
            }
        }
        match lost {
            Some(lost) if !lost.is_empty() => {
                fsck::set_aside(&store, &lost)?;
                println!(
                    "accepted: moved {} unreferenced object(s) to objects/{}/",
                    lost.len(),
                    fsck::SET_ASIDE
                );
            }
            Some(_) => {}
            None => println!(
                "unreferenced objects were not looked for: the journal or the noun log still carries changes the next start writes out; start and stop the daemon, then run this again"
            ),
        }
    }
    if !blocked {
        println!("the daemon can start");
    }
    Ok(exit(blocked))
}

fn exit(blocked: bool) -> ExitCode {
    if blocked {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
