//! `tessera export DIR [--queue Q]...`: a tree a reviewer can diff in git.
//! For every noun the key may read, its latest readable version:
//!
//! ```text
//! DIR/<namespace>/<store>/<key>.json    the body as canonical JSON (sorted keys,
//!                                       two-space indent, trailing newline); a body
//!                                       that is not JSON keeps its bytes, as
//!                                       <key>.md, <key>.txt or <key>.bin by media type
//! DIR/<namespace>/<store>/<key>.meta    its version entry as canonical JSON: version,
//!                                       sha256, size, media_type, type, visibility,
//!                                       created_at, created_by, source_pack, ...
//! DIR/<namespace>/_tasks/<queue>/<id>.json   each task of the queues named with
//!                                       --queue: its spec, state, attempt,
//!                                       receipts' hashes, source_pack
//! ```
//!
//! A `.meta` name never clashes with a body (bodies end in `.json`, `.md`,
//! `.txt` or `.bin`). The export is deterministic: every file is canonical
//! JSON of values that change only when the daemon's records do (no lease,
//! no update time), so a second run against an unchanged daemon writes
//! nothing and a changed body is a line diff. `mirror` writes the files
//! and removes those of nouns and tasks that are gone. The command reads
//! through the HTTP API only.

mod mirror;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::remote::RemoteArgs;
use crate::client::Client;
use crate::paths;
use crate::store::{canonical_json, canonical_record};
use crate::wire::{NounList, NounSummary, TaskList, TaskView};
use mirror::{Files, TASKS};

/// Bodies fetched at once.
const CONCURRENCY: usize = 16;

/// A page size for the listings.
const PAGE: usize = 1000;

/// `tessera export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The folder to write (created when missing; an existing one must be
    /// empty or hold an earlier export).
    pub dir: PathBuf,
    /// Also export the tasks of this queue (repeatable).
    #[arg(long = "queue", value_name = "QUEUE", value_parser = super::key::parse_name)]
    pub queues: Vec<crate::store::Name>,
    /// The daemon and the key.
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// Runs `tessera export`.
pub async fn run(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let client = args.remote.client()?;
    let mut files = Files::new();
    let nouns = nouns(&client).await?;
    let count = nouns.len();
    for (noun, body) in bodies(&client, nouns).await? {
        let (name, bytes) = body_file(&noun, body);
        let folder = vec![noun.namespace.to_string(), noun.store.to_string()];
        files.insert(with(&folder, name), bytes);
        let meta = format!("{}.meta", noun.key);
        files.insert(with(&folder, meta), canonical_record(&noun.latest));
    }
    let mut tasks = 0;
    for queue in &args.queues {
        for t in queue_tasks(&client, queue).await? {
            let folder = vec![t.namespace.to_string(), TASKS.into(), queue.to_string()];
            files.insert(
                with(&folder, format!("{}.json", t.task_id)),
                canonical_json(&task_record(&t)),
            );
            tasks += 1;
        }
    }
    let dir = args.dir.clone();
    let changes = tokio::task::spawn_blocking(move || mirror::mirror(&dir, &files))
        .await
        .context("writing the export")??;
    println!(
        "exported {count} nouns and {tasks} tasks to {}: {} files written, {} removed, {} unchanged",
        args.dir.display(),
        changes.written,
        changes.removed,
        changes.unchanged
    );
    Ok(ExitCode::SUCCESS)
}

fn with(folder: &[String], name: String) -> Vec<String> {
    let mut path = folder.to_vec();
    path.push(name);
    path
}

/// Every noun the key may read, page by page.
async fn nouns(client: &Client) -> anyhow::Result<Vec<NounSummary>> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let page: NounList = client
            .get(&format!(
                "{}?limit={PAGE}{cursor}",
                paths::NOUN_LIST.at(&[])
            ))
            .await?
            .success()
            .context("listing nouns")?
            .json()?;
        out.extend(page.nouns);
        match page.next_cursor {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return Ok(out),
        }
    }
}

/// Each noun's listed version, read by its pin (so body and metadata
/// agree even when a new version lands meanwhile).
async fn bodies(
    client: &Client,
    nouns: Vec<NounSummary>,
) -> anyhow::Result<Vec<(NounSummary, bytes::Bytes)>> {
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let mut running = JoinSet::new();
    for noun in nouns {
        let permit = permits.clone().acquire_owned().await?;
        let client = client.clone();
        running.spawn(async move {
            let _permit = permit;
            let at = [
                noun.namespace.as_str(),
                noun.store.as_str(),
                noun.key.as_str(),
            ];
            let path = format!(
                "{}?version={}&sha256={}",
                paths::NOUN_GET.at(&at),
                noun.latest.version,
                noun.latest.sha256
            );
            let reply = client.get(&path).await?.success();
            let body = reply
                .with_context(|| format!("reading {}/{}/{}", noun.namespace, noun.store, noun.key))?
                .body;
            anyhow::Ok((noun, body))
        });
    }
    let mut out = Vec::new();
    while let Some(joined) = running.join_next().await {
        out.push(joined.context("reading a noun")??);
    }
    Ok(out)
}

/// The body's file name and bytes: canonical JSON when the media type is
/// JSON and the bytes parse, else the bytes under an extension.
fn body_file(noun: &NounSummary, body: bytes::Bytes) -> (String, Vec<u8>) {
    let media = noun.latest.media_type.as_str();
    let essence = media.split(';').next().unwrap_or("").trim();
    if (essence == "application/json" || essence.ends_with("+json"))
        && let Ok(value) = serde_json::from_slice::<Value>(&body)
    {
        return (format!("{}.json", noun.key), canonical_json(&value));
    }
    let ext = match essence {
        "text/markdown" => "md",
        "text/plain" => "txt",
        _ => "bin",
    };
    (format!("{}.{ext}", noun.key), body.to_vec())
}

/// Every task of `queue` the key may see, page by page.
async fn queue_tasks(client: &Client, queue: &crate::store::Name) -> anyhow::Result<Vec<TaskView>> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let page: TaskList = client
            .get(&format!(
                "{}?queue={queue}&limit={PAGE}{cursor}",
                paths::TASK_LIST.at(&[])
            ))
            .await?
            .success()
            .with_context(|| format!("listing the tasks of queue {queue}"))?
            .json()?;
        out.extend(page.tasks);
        match page.next_cursor {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return Ok(out),
        }
    }
}

/// A task's file: what it asks (its spec) and where it is (state,
/// attempts, receipts), without what changes while it runs (lease,
/// heartbeats, staged parts, update time).
fn task_record(t: &TaskView) -> Value {
    let brief: Value = serde_json::from_str(t.brief.get()).unwrap_or(Value::Null);
    let mut spec = json!({
        "namespace": t.namespace,
        "queue": t.queue,
        "kind": t.kind,
        "effect_class": t.effect_class,
        "producer_surface": t.producer_surface,
        "visibility_scope": t.visibility_scope,
        "allowed_surfaces": t.allowed_surfaces,
        "not_before": t.not_before,
        "max_attempts": t.max_attempts_override,
        "idempotency_key": t.idempotency_key,
        "depends_on": t.upstream.iter().map(|u| u.task_id).collect::<Vec<_>>(),
        "allow_file_submit": t.allow_file_submit,
        "placement": t.placement,
        "brief": brief,
    });
    if let (Value::Object(spec), Value::Object(traits)) = (
        &mut spec,
        serde_json::to_value(&t.traits).expect("traits serialize"),
    ) {
        spec.extend(traits);
    }
    json!({
        "task_id": t.task_id,
        "state": t.state,
        "attempt": t.attempt,
        "max_attempts": t.max_attempts,
        "reason": t.reason,
        "receipts": t.receipts,
        "source_pack": t.source_pack,
        "requester": t.requester,
        "created_at": t.created_at,
        "parent": t.parent,
        "children": t.children.iter().map(|c| c.task_id).collect::<Vec<_>>(),
        "spec": spec,
    })
}
