//! Sends many items to a batch route (`/v1/batch/nouns`, `/v1/batch/tasks`)
//! in as few requests as the daemon's limits allow, and returns one answer
//! per item, in order. An item the daemon refuses for its size on its own
//! (413, or the connection closed while the daemon still answers
//! `/healthz`) gets its own `body_too_large` answer naming its size and the
//! daemon's limit, so its line says why instead of "cannot reach".

use std::collections::VecDeque;
use std::ops::Range;

use anyhow::{Context, bail};
use http::StatusCode;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::outcome::Progress;
use serde_json::{Value, json};

use crate::client::{Client, ClientError};
use crate::paths;
use crate::wire::{BatchReply, ItemError, ItemReply, MAX_BATCH_ITEMS};

/// Bytes of items per request: well inside the daemon's default batch
/// limit (four times its 8 MiB body limit). A request the daemon still
/// finds too large (413) is split in half and sent again.
const REQUEST_BUDGET: usize = 4 * 1024 * 1024;

#[derive(Serialize)]
struct Body<'a, I> {
    items: &'a [I],
}

/// Posts `items` to the batch route `path` and returns their answers in
/// order. A refusal of a whole request (such as 401 or 403) is an error.
pub(super) async fn batch<I: Serialize, T: DeserializeOwned>(
    client: &Client,
    path: &str,
    items: &[I],
    progress: &Progress,
) -> anyhow::Result<Vec<ItemReply<T>>> {
    let mut todo = chunks(items)?;
    let mut answers = Vec::with_capacity(items.len());
    while let Some(range) = todo.pop_front() {
        let sent = client
            .post_json(
                path,
                &Body {
                    items: &items[range.clone()],
                },
            )
            .await;
        let limit = match sent {
            Ok(reply) if reply.status == StatusCode::PAYLOAD_TOO_LARGE => {
                let details: Option<Value> = reply.json().ok();
                details.and_then(|d| d["error"]["details"]["limit"].as_u64())
            }
            Err(ClientError::Connect { .. })
                if client.get(&paths::HEALTHZ.at(&[])).await.is_ok() =>
            {
                None
            }
            Ok(reply) => {
                let reply = reply
                    .success()
                    .with_context(|| format!("the daemon refused POST {path}"))?;
                let answer: BatchReply<T> = reply
                    .json()
                    .with_context(|| format!("reading the answer to POST {path}"))?;
                if answer.items.len() != range.len() {
                    bail!(
                        "POST {path} answered {} items for {} sent; is the daemon the same version as this command?",
                        answer.items.len(),
                        range.len()
                    );
                }
                progress.inc(range.len());
                answers.extend(answer.items);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if range.len() > 1 {
            let mid = range.start + range.len() / 2;
            todo.push_front(mid..range.end);
            todo.push_front(range.start..mid);
            continue;
        }
        let size = serde_json::to_vec(&items[range.start])
            .context("encoding an item")?
            .len();
        progress.inc(1);
        answers.push(too_large(size, limit));
    }
    Ok(answers)
}

/// The answer for an item the daemon would not take for its size.
fn too_large<T>(size: usize, limit: Option<u64>) -> ItemReply<T> {
    let limit = limit.map_or_else(
        || "its body limit (it closed the connection)".to_owned(),
        |n| format!("its {n}-byte limit"),
    );
    ItemReply {
        status: StatusCode::PAYLOAD_TOO_LARGE.as_u16(),
        result: None,
        error: Some(ItemError {
            code: "body_too_large".into(),
            message: format!(
                "this item is {size} bytes as sent, past the daemon's request limit: {limit}; make it smaller or raise the daemon's max_body_bytes"
            ),
            details: json!({"size": size}),
        }),
    }
}

/// Consecutive ranges of at most `MAX_BATCH_ITEMS` items and about
/// `REQUEST_BUDGET` bytes each (an item larger than that goes alone).
fn chunks<I: Serialize>(items: &[I]) -> anyhow::Result<VecDeque<Range<usize>>> {
    let mut out = VecDeque::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let size = serde_json::to_vec(item).context("encoding an item")?.len() + 1;
        if i > start && (i - start == MAX_BATCH_ITEMS || bytes + size > REQUEST_BUDGET) {
            out.push_back(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < items.len() {
        out.push_back(start..items.len());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_the_item_count_and_the_byte_budget() {
        let small: Vec<u32> = vec![7; 2 * MAX_BATCH_ITEMS + 1];
        let got: Vec<_> = chunks(&small).unwrap().into_iter().collect();
        assert_eq!(
            got,
            [
                0..MAX_BATCH_ITEMS,
                MAX_BATCH_ITEMS..2 * MAX_BATCH_ITEMS,
                2 * MAX_BATCH_ITEMS..2 * MAX_BATCH_ITEMS + 1
            ]
        );
        let big = vec!["x".repeat(REQUEST_BUDGET / 2); 3];
        let got: Vec<_> = chunks(&big).unwrap().into_iter().collect();
        assert_eq!(got, [0..1, 1..2, 2..3]);
        let empty: Vec<u32> = Vec::new();
        assert!(chunks(&empty).unwrap().is_empty());
    }
}
