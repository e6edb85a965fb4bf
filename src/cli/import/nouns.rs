//! The nouns of a pack: one `skip_unchanged` put each, without an expected
//! version (the pack says what the latest version should hold), sent
//! through `POST /v1/batch/nouns`. The pins they end up with (or, in a
//! plan, would end up with) are what the tasks' `{noun: ...}` refs become.

use std::collections::HashMap;

use anyhow::Context;
use base64::Engine;
use serde_json::{Value, json};
use tessera_importer::{NounBody, NounItem, Pack, Plan};

use super::Mode;
use super::outcome::{Kind, Line, Outcome, Progress};
use super::{diff, send};
use crate::paths;
use crate::store::Sha256;
use crate::wire::{NounBatchItem, PutNoun, PutNounReply};

/// The pins of the pack's nouns, by `(store, key)`: each a brief-ready
/// `{store, key, version, sha256}`. Nouns that failed are absent.
/// The pin each noun of the plan has (or, in a plan, would have), and
/// whether that version is new (not yet written in a plan).
pub(super) type Pins = HashMap<(String, String), (Value, bool)>;

/// Puts (or, in a plan, dry-runs) every noun of the plan.
pub(super) async fn put_all(
    client: &crate::client::Client,
    plan: &Plan,
    mode: Mode,
    progress: &Progress,
) -> anyhow::Result<(Vec<Line>, Pins)> {
    let items = plan
        .nouns
        .iter()
        .map(|n| item(&plan.pack, n, mode))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let path = format!(
        "{}?source_pack={}",
        paths::BATCH_NOUNS.at(&[]),
        plan.pack.name
    );
    let answers = send::batch::<_, PutNounReply>(client, &path, &items, progress).await?;
    let mut lines = Vec::with_capacity(answers.len());
    let mut pins = Pins::new();
    for (noun, answer) in plan.nouns.iter().zip(answers) {
        let id = format!("{}/{}", noun.store, noun.key);
        let line = match (answer.result, answer.error) {
            (Some(reply), _) => {
                let outcome = match reply.outcome.as_str() {
                    "create" => Outcome::Create,
                    "new_version" => Outcome::NewVersion,
                    "unchanged" => Outcome::Unchanged,
                    _ => Outcome::Conflict,
                };
                if let Some(version) = reply.version {
                    pins.insert(
                        (noun.store.clone(), noun.key.clone()),
                        (
                            json!({"store": noun.store, "key": noun.key, "version": version, "sha256": reply.sha256}),
                            matches!(outcome, Outcome::Create | Outcome::NewVersion),
                        ),
                    );
                }
                Line::new(outcome, Kind::Noun, &id, &noun.source)
            }
            (None, error) => {
                let note = error.map_or_else(
                    || format!("the daemon answered {} without a reason", answer.status),
                    |e| format!("{} {}: {}", answer.status, e.code, e.message),
                );
                Line::new(Outcome::Error, Kind::Noun, &id, &noun.source).because(note)
            }
        };
        lines.push(line);
    }
    Ok((lines, pins))
}

/// The batch item for one noun: the put `PUT /v1/nouns/{ns}/{store}/{key}`
/// would take, in the pack's namespace and for its producer surface.
fn item(pack: &Pack, noun: &NounItem, mode: Mode) -> anyhow::Result<NounBatchItem> {
    let visibility = noun
        .visibility
        .as_ref()
        .map(|v| serde_json::from_value(Value::String(v.clone())))
        .transpose()
        .with_context(|| format!("{}: visibility", noun.source.file.display()))?;
    let mut envelope = PutNoun {
        noun_type: Some(noun.noun_type.clone()),
        visibility,
        allowed_surfaces: (!noun.allowed_surfaces.is_empty())
            .then(|| noun.allowed_surfaces.clone()),
        producer_surface: Some(pack.producer_surface.clone()),
        skip_unchanged: true,
        dry_run: mode == Mode::Plan,
        ..PutNoun::default()
    };
    match &noun.body {
        NounBody::Json(value) => envelope.body = Some(value.clone()),
        NounBody::Bytes { bytes, media_type } => {
            envelope.body_base64 = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
            envelope.media_type = Some(media_type.clone());
        }
    }
    Ok(NounBatchItem {
        namespace: pack.namespace.clone(),
        store: noun.store.clone(),
        key: noun.key.clone(),
        envelope: serde_json::value::to_raw_value(&envelope).context("encoding a noun")?,
    })
}

/// For each noun a plan would give a new version, what differs from the
/// latest version the daemon holds: its body (by field for JSON, by hash
/// for bytes) and its type, media type, visibility and allowlist. A noun
/// that cannot be read keeps its line without changes.
pub(super) async fn explain(client: &crate::client::Client, plan: &Plan, lines: &mut [Line]) {
    for (noun, line) in plan.nouns.iter().zip(lines.iter_mut()) {
        if line.outcome != Outcome::NewVersion {
            continue;
        }
        if let Some(old) = held(client, &plan.pack.namespace, noun).await {
            line.changes = diff::changes(&old, &written(noun, &old));
        }
    }
}

/// The latest version as a record: `{body, type, media_type, visibility,
/// allowed_surfaces}`.
async fn held(client: &crate::client::Client, namespace: &str, noun: &NounItem) -> Option<Value> {
    let path = paths::NOUN_PUT.at(&[namespace, &noun.store, &noun.key]);
    let versions = client.get(&format!("{path}/versions")).await.ok()?;
    let versions: Value = versions.success().ok()?.json().ok()?;
    let latest = versions["versions"].as_array()?.last()?.clone();
    let bytes = client.get(&path).await.ok()?.success().ok()?.body;
    let body = if latest["media_type"] == "application/json" {
        serde_json::from_slice(&bytes).ok()?
    } else {
        json!({"sha256": latest["sha256"], "size": latest["size"]})
    };
    Some(json!({
        "body": body,
        "type": latest["type"],
        "media_type": latest["media_type"],
        "visibility": latest["visibility"],
        "allowed_surfaces": latest["allowed_surfaces"],
    }))
}

/// The noun as the pack writes it, in the shape of [`held`]; visibility
/// and allowlist the pack leaves out are the held ones (a put keeps them).
fn written(noun: &NounItem, held: &Value) -> Value {
    let (body, media_type) = match &noun.body {
        NounBody::Json(value) => (value.clone(), "application/json".to_owned()),
        NounBody::Bytes { bytes, media_type } => (
            json!({"sha256": Sha256::of(bytes).hex(), "size": bytes.len()}),
            media_type.clone(),
        ),
    };
    json!({
        "body": body,
        "type": noun.noun_type,
        "media_type": media_type,
        "visibility": noun.visibility.as_ref().map_or_else(|| held["visibility"].clone(), |v| json!(v)),
        "allowed_surfaces": if noun.allowed_surfaces.is_empty() {
            held["allowed_surfaces"].clone()
        } else {
            json!(noun.allowed_surfaces)
        },
    })
}
