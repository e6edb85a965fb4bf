//! `GET /v1/nouns?namespace=&store=&source_pack=&cursor=&limit=`: the
//! nouns a key may read, each with its latest version the key may read and
//! the seed packs that wrote any of those versions. Filters select; they
//! grant nothing. A namespace the key holds no scope for is skipped (or,
//! named in `namespace`, refused as the single routes refuse it), and a
//! noun with no version the key may read is left out, as if missing.

use http::StatusCode;
use serde_json::json;

use super::error::{ApiError, ErrorCode};
use super::request::Req;
use super::tasks::query_name;
use super::{Ctx, Resp, json_response};
use crate::auth::{Principal, Scope, access};
use crate::store::listing::Within;
use crate::store::{Name, NounPath, NounRef};
use crate::wire::{NounList, NounSummary};

/// Largest page.
const MAX_PAGE: usize = 1000;

/// `GET /v1/nouns`.
pub async fn list(ctx: &Ctx, req: Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    access::require(&p, Scope::NounsRead)?;
    let within = Within {
        namespace: query_name(&req, "namespace")?,
        store: query_name(&req, "store")?,
    };
    if let Some(ns) = &within.namespace {
        access::may_read_nouns(&p, ns)?;
    }
    let source_pack = query_name(&req, "source_pack")?;
    let after = req.query("cursor").map(cursor).transpose()?;
    let limit = req
        .query_u64("limit")?
        .map_or(100, |n| (n as usize).clamp(1, MAX_PAGE));
    let page = ctx
        .blocking(move |store| {
            let readable = |ns: &Name| access::may_read_nouns(&p, ns).is_ok();
            store.list_nouns(&within, after.as_ref(), limit, &readable, |noun| {
                summary(&p, noun, source_pack.as_ref())
            })
        })
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &NounList {
            nouns: page.items,
            next_cursor: page.next.map(|p| p.to_string()),
        },
    ))
}

/// A `cursor`: the `namespace/store/key` of the last noun of a page.
fn cursor(s: &str) -> Result<NounPath, ApiError> {
    let bad = || {
        ApiError::new(
            ErrorCode::InvalidQuery,
            "cursor must be the next_cursor of an earlier page (namespace/store/key)",
        )
        .with(json!({"field": "cursor"}))
    };
    let mut parts = s.split('/');
    let (Some(ns), Some(st), Some(key), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    NounPath::parse(ns, st, key).map_err(|_| bad())
}

/// The noun as `p` sees it, when `p` may read a version of it written by
/// `source_pack` (or any version, without that filter).
fn summary(p: &Principal, noun: NounRef, source_pack: Option<&Name>) -> Option<NounSummary> {
    let mut noun = noun.seen_by(|entry| access::read_noun(p, entry).is_ok())?;
    let mut source_packs: Vec<Name> = noun
        .versions
        .iter()
        .filter_map(|e| e.source_pack.clone())
        .collect();
    source_packs.sort();
    source_packs.dedup();
    if source_pack.is_some_and(|wanted| !source_packs.contains(wanted)) {
        return None;
    }
    let latest = noun.versions.pop()?;
    Some(NounSummary {
        namespace: noun.namespace,
        store: noun.store,
        key: noun.key,
        latest,
        source_packs,
    })
}
