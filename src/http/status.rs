//! `GET /v1/status`: what an operator checks first. Per queue the key may
//! see: task counts per state, the oldest queued task's wait, the live
//! leases; for admin also the journal's size, the disk's free space and
//! what folding the journal did.
//! Read-only; counts only tasks the key may see, like `GET /v1/queues`.

use std::collections::BTreeMap;

use http::StatusCode;
use jiff::Timestamp;

use super::error::ApiError;
use super::request::Req;
use super::wire::{FoldStatus, QueueStatus, Status, StorageStatus};
use super::{Ctx, Resp, json_response, ops};
use crate::auth::access;
use crate::queue::{State, Task, TaskState};
use crate::store::{Name, Store, io_err};

/// `GET /v1/status`.
pub async fn status(ctx: &Ctx, req: Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req)?;
    let now = Timestamp::now();
    let queues = ctx
        .queue
        .read(|st| {
            let mine: Vec<&Name> = st
                .queues
                .keys()
                .filter(|q| access::shows_queue(&p, q))
                .collect();
            summarize(st, &mine, now, |t| {
                p.is_admin() || access::sees_task(&p, &st.facts(t))
            })
        })
        .await?;
    let storage = if p.is_admin() {
        let folds = FoldStatus::from(ctx.queue.folds());
        Some(ctx.blocking(move |store| storage(store, folds)).await?)
    } else {
        None
    };
    let (_, health) = ops::report(&ctx.store);
    Ok(json_response(
        StatusCode::OK,
        &Status {
            health,
            now,
            queues,
            storage,
        },
    ))
}

/// Each of `queues` summarized over the tasks `keep` allows, in one scan.
fn summarize(
    st: &State,
    queues: &[&Name],
    now: Timestamp,
    keep: impl Fn(&Task) -> bool,
) -> Vec<QueueStatus> {
    let mut out: BTreeMap<&Name, QueueStatus> = queues
        .iter()
        .map(|q| {
            let counts = TaskState::ALL
                .iter()
                .map(|s| (s.as_str().to_string(), 0))
                .collect();
            let status = QueueStatus {
                name: (*q).clone(),
                counts,
                oldest_queued_since: None,
                live_leases: 0,
            };
            (*q, status)
        })
        .collect();
    for t in st.tasks.values() {
        let Some(q) = out.get_mut(&t.spec.queue) else {
            continue;
        };
        if !keep(t) {
            continue;
        }
        *q.counts.entry(t.state.as_str().to_string()).or_default() += 1;
        if t.state == TaskState::Queued {
            q.oldest_queued_since = Some(
                q.oldest_queued_since
                    .map_or(t.updated_at, |o| o.min(t.updated_at)),
            );
        }
        if t.state == TaskState::Claimed && t.lease.as_ref().is_some_and(|l| l.expires_at > now) {
            q.live_leases += 1;
        }
    }
    out.into_values().collect()
}

/// The journal's size, the root file system's free space, and `folds`.
fn storage(store: &Store, folds: FoldStatus) -> Result<StorageStatus, crate::store::Error> {
    let journal = &store.root().journal;
    let mut journal_bytes = 0;
    for entry in journal
        .entries()
        .map_err(|e| io_err("listing journal/", e))?
    {
        let meta = entry
            .and_then(|e| e.metadata())
            .map_err(|e| io_err("reading journal/", e))?;
        if meta.is_file() {
            journal_bytes += meta.len();
        }
    }
    let fs = rustix::fs::fstatvfs(journal)
        .map_err(|e| io_err("reading the file system's free space", e.into()))?;
    Ok(StorageStatus {
        journal_bytes,
        disk_free_bytes: fs.f_bavail.saturating_mul(fs.f_frsize),
        disk_total_bytes: fs.f_blocks.saturating_mul(fs.f_frsize),
        folds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_is_counted_even_when_zero() {
        let st = State::new(crate::queue::SplitLimits {
            max_depth: 4,
            max_children: 64,
        });
        let q = Name::parse("queue", "work").unwrap();
        let got = summarize(&st, &[&q], Timestamp::now(), |_| true);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].counts.len(), TaskState::ALL.len());
        assert!(got[0].counts.values().all(|n| *n == 0));
        assert_eq!((got[0].oldest_queued_since, got[0].live_leases), (None, 0));
    }
}
