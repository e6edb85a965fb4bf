//! `GET /v1/status`: what an operator checks first. Per queue the key may
//! see: task counts per state, the oldest queued task's wait, the live
//! leases; for admin also the journal's size, the disk's free space and
//! what folding the journal did.
//! Read-only; counts only tasks the key may see, like `GET /v1/queues`.

use http::StatusCode;
use jiff::Timestamp;

use super::error::ApiError;
use super::request::Req;
use super::{Ctx, Resp, json_response, ops};
use crate::store::{Store, io_err};
use crate::wire::{FoldStatus, QueueStatus, Status, StorageStatus};

/// `GET /v1/status`.
pub async fn status(ctx: &Ctx, req: Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let now = Timestamp::now();
    let queues = ctx
        .queue
        .summary(&p.viewer, now)
        .await?
        .into_iter()
        .map(|q| QueueStatus {
            name: q.name,
            counts: crate::wire::counts_by_state(q.counts),
            oldest_queued_since: q.oldest_queued_since,
            live_leases: q.live_leases,
        })
        .collect();
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
