//! The pack's catalog (governed artifact references): every pin must
//! already exist in the daemon with exactly its sha256, checked with
//! `GET /v1/nouns/{ns}/{store}/{key}?version=N&sha256=H` before the import
//! writes anything.

use std::sync::Arc;

use anyhow::Context;
use tessera_importer::CatalogItem;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::outcome::{Kind, Line, Outcome};
use crate::client::Client;
use crate::paths;

/// Pin checks in flight at once.
const CONCURRENCY: usize = 16;

/// A line for every pin that is missing or differs; empty when all hold.
pub(super) async fn check(client: &Client, catalog: &[CatalogItem]) -> anyhow::Result<Vec<Line>> {
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    let mut running = JoinSet::new();
    for (i, pin) in catalog.iter().enumerate() {
        let permit = permits.clone().acquire_owned().await?;
        let client = client.clone();
        let at = [pin.namespace.as_str(), pin.store.as_str(), pin.key.as_str()];
        let path = format!(
            "{}?version={}&sha256={}",
            paths::NOUN_GET.at(&at),
            pin.version,
            pin.sha256
        );
        running.spawn(async move {
            let _permit = permit;
            (i, client.get(&path).await)
        });
    }
    let mut problems = Vec::new();
    while let Some(joined) = running.join_next().await {
        let (i, reply) = joined.context("checking a catalog pin")?;
        let reply = reply?;
        if reply.status.is_success() {
            continue;
        }
        let pin = &catalog[i];
        let noun = format!("{}/{}/{}", pin.namespace, pin.store, pin.key);
        let body = reply.value();
        let details = &body["error"]["details"];
        let why = match reply.error_code().as_deref() {
            Some("not_found") => format!(
                "{noun} does not exist, or this key may not read it; import the pack that writes it first"
            ),
            Some("version_not_found") => format!(
                "{noun} has no version {} (the latest is {}); pin a version that exists",
                pin.version, details["latest"]
            ),
            Some("pin_mismatch") => format!(
                "{noun} version {} has sha256 {}, not {}; the catalog must pin the stored bytes",
                pin.version,
                details["actual"].as_str().unwrap_or("?"),
                pin.sha256
            ),
            code => format!(
                "{noun} version {} could not be checked: {} {}: {}",
                pin.version,
                reply.status.as_u16(),
                code.unwrap_or("unknown"),
                body["error"]["message"].as_str().unwrap_or("")
            ),
        };
        problems.push((
            i,
            Line::new(Outcome::Error, Kind::Pin, &pin.name, &pin.source).because(why),
        ));
    }
    problems.sort_by_key(|(i, _)| *i);
    Ok(problems.into_iter().map(|(_, l)| l).collect())
}
