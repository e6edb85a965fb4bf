//! `GET /v1/events`: Server-Sent Events of task transitions and noun
//! writes (see `crate::events`), filtered by what the key may see at the
//! moment each is sent. `Last-Event-ID` resumes within the hub's window,
//! on a shared queue from an id any daemon sent;
//! a comment every [`KEEP_ALIVE`] keeps proxies from closing the stream;
//! the stream ends the moment its key is revoked or expires; a reader more than
//! `events::BACKLOG` events behind gets a `lagged` event naming the id to
//! resume from, and the stream ends.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use super::body::Chunks;
use super::error::ApiError;
use super::request::Req;
use super::{Ctx, Resp};
use crate::auth::{Principal, access};
use crate::events::{Event, EventId, Start, Subscription, What};

/// How often an idle stream gets a keep-alive comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `GET /v1/events` (any key; `Last-Event-ID` optional).
pub async fn stream(ctx: &Arc<Ctx>, req: Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    let last = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.query("last_event_id"))
        .map(str::to_string);
    let mut sub = ctx.events.subscribe(last.as_deref());
    // An id this daemon's hub does not hold may be another daemon's on a
    // shared queue: once the stream here reaches it, it resumes as well.
    if let (Start::Reset, Some(id)) = (&sub.start, last.as_deref().and_then(EventId::parse))
        && ctx.queue.reach_event(id.value()).await?
    {
        sub = ctx.events.subscribe(last.as_deref());
    }
    let (tx, body) = Chunks::channel(16);
    tokio::spawn(write(ctx.clone(), p, sub, tx));
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

/// Whether `p` may see what `ev` is about, now.
fn visible(p: &Principal, ev: &Event) -> bool {
    match &ev.what {
        What::Task { data, .. } => p.viewer.sees_task(&data.sight.facts(false)),
        What::Noun { path, entry } => {
            access::may_read_nouns(p, &path.namespace).is_ok()
                && access::read_noun(p, entry).is_ok()
        }
    }
}

/// The frame of `ev` as `p` gets it.
fn frame(p: &Principal, ev: &Event) -> Bytes {
    let data = ev.data(|q| access::shows_queue(p, q)).to_string();
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {data}\n\n",
        ev.id,
        ev.name()
    ))
}

/// Feeds one reader's body until the client leaves, the daemon stops, the
/// key is revoked, or the reader falls too far behind.
async fn write(ctx: Arc<Ctx>, p: Principal, sub: Subscription, tx: mpsc::Sender<Bytes>) {
    let Subscription {
        start,
        head,
        mut rx,
    } = sub;
    let mut closed = ctx.events.closed();
    let unusable = ctx.keyring.unusable(&p.key_id);
    let mut unusable = std::pin::pin!(unusable);
    // The place of the last event taken from the hub, sent or not.
    let mut last_sent = head;
    let first = match start {
        Start::Resume(missed) => missed,
        Start::Reset => {
            let reset = json!({"reason": "the last event id is older than the window of kept events, or from before a restart: reload what you show"});
            if tx
                .send(Bytes::from(format!("event: reset\ndata: {reset}\n\n")))
                .await
                .is_err()
            {
                return;
            }
            Vec::new()
        }
    };
    if tx
        .send(Bytes::from_static(b": connected\n\n"))
        .await
        .is_err()
    {
        return;
    }
    for ev in first {
        if visible(&p, &ev) && tx.send(frame(&p, &ev)).await.is_err() {
            return;
        }
    }
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.tick().await;
    loop {
        let chunk = tokio::select! {
            _ = closed.wait_for(|c| *c) => return,
            () = &mut unusable => return,
            _ = keep_alive.tick() => Bytes::from_static(b": keep-alive\n\n"),
            got = rx.recv() => match got {
                Ok(ev) => {
                    let seen = ev.n <= last_sent;
                    if seen {
                        continue;
                    }
                    last_sent = ev.n;
                    if !visible(&p, &ev) {
                        continue;
                    }
                    frame(&p, &ev)
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // A fresh id for its place, not the id of the last
                    // event taken, which it may not have been sent.
                    let resume = ctx.events.mark(last_sent).to_string();
                    let lagged = json!({"resume_from": resume, "reason": "this reader fell too far behind; reconnect with Last-Event-ID set to resume_from"});
                    let _ = tx.try_send(Bytes::from(format!("event: lagged\ndata: {lagged}\n\n")));
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        tokio::select! {
            _ = closed.wait_for(|c| *c) => return,
            () = &mut unusable => return,
            sent = tx.send(chunk) => if sent.is_err() { return },
        }
    }
}
