//! Noun routes: parse, authorize, call the store, respond.

use base64::Engine;
use http::{HeaderValue, StatusCode, header};
use serde_json::json;

use super::error::{ApiError, ErrorCode};
use super::request::Req;
use super::tasks::query_name;
use super::{Ctx, Resp, json_response};
use crate::auth::access::{self, WantedMeta};
use crate::auth::{self, Principal, parse_surface};
use crate::store::{self, Name, NounPath, PutOutcome, PutRequest, Sha256, Store, canonical_json};
use crate::wire::{PutNoun, PutNounReply};

/// `PUT /v1/nouns/{ns}/{store}/{key}[?source_pack=P]`.
pub async fn put(ctx: &Ctx, mut req: Req, path: [&str; 3]) -> Result<Resp, ApiError> {
    let principal = ctx.authenticate(&req).await?;
    let path = NounPath::parse(path[0], path[1], path[2])?;
    access::may_write_nouns(&principal, &path.namespace)?;
    let source_pack = query_name(&req, "source_pack")?;
    let env: PutNoun = req.json(ctx.limits.max_body_bytes).await?;
    let prepared = Prepared::new(principal, path, &env, source_pack)?;
    let started = std::time::Instant::now();
    let (status, reply) = ctx.blocking(move |store| prepared.run(store)).await?;
    ctx.metrics.noun_put(started.elapsed());
    Ok(json_response(status, &reply))
}

/// A noun put that has passed every check made before the store is
/// touched, ready to run on the blocking pool. The single route and the
/// batch route (`http::batch`) both go through it, so they check alike.
pub struct Prepared {
    principal: Principal,
    path: NounPath,
    bytes: Vec<u8>,
    request: PutRequest,
    wanted: WantedMeta,
}

impl Prepared {
    /// Checks a put envelope for `path` (the caller has run
    /// `access::may_write_nouns` for its namespace); `source_pack` is the
    /// seed pack the write comes from, recorded on the new version.
    pub fn new(
        principal: Principal,
        path: NounPath,
        env: &PutNoun,
        source_pack: Option<Name>,
    ) -> Result<Prepared, ApiError> {
        let (bytes, media_type) = body_bytes(env)?;
        if env.expected_version.is_none() && !env.skip_unchanged {
            return Err(ApiError::new(ErrorCode::MissingField,
                "expected_version is required (0 to create); it may be omitted only with skip_unchanged",
            )
            .with(json!({"field": "expected_version"})));
        }
        if let Some(t) = &env.noun_type {
            Name::parse("type", t)?;
        }
        Ok(Prepared {
            request: PutRequest {
                expected_version: env.expected_version,
                skip_unchanged: env.skip_unchanged,
                dry_run: env.dry_run,
                media_type,
                noun_type: env.noun_type.clone(),
                source_pack,
            },
            wanted: wanted_meta(env)?,
            principal,
            path,
            bytes,
        })
    }

    /// Runs the put against the store (blocking file I/O): the status and
    /// the answer the route sends.
    pub fn run(self, store: &Store) -> Result<(StatusCode, PutNounReply), ApiError> {
        let Prepared {
            principal,
            path,
            bytes,
            request,
            wanted,
        } = self;
        let (body_sha, body_len) = (Sha256::of(&bytes), bytes.len() as u64);
        let outcome = store.put_noun(
            &path,
            &bytes,
            &request,
            |entry| access::read_noun(&principal, entry).is_ok(),
            |latest| access::write_noun(&principal, latest, &wanted),
        )?;
        let (status, outcome_name, entry, current) = match &outcome {
            PutOutcome::Create { entry } => (StatusCode::CREATED, "create", Some(entry), 0),
            PutOutcome::NewVersion { entry } => (
                StatusCode::CREATED,
                "new_version",
                Some(entry),
                entry.version - 1,
            ),
            PutOutcome::Unchanged { entry } => {
                (StatusCode::OK, "unchanged", Some(entry), entry.version)
            }
            PutOutcome::Conflict { current, .. } => (StatusCode::OK, "conflict", None, *current),
        };
        let status = if request.dry_run {
            StatusCode::OK
        } else {
            status
        };
        Ok((
            status,
            PutNounReply {
                namespace: path.namespace.to_string(),
                store: path.store.to_string(),
                key: path.key.to_string(),
                outcome: outcome_name.into(),
                version: entry.map(|e| e.version),
                sha256: entry.map_or(body_sha, |e| e.sha256),
                size: entry.map_or(body_len, |e| e.size),
                current_version: current,
                dry_run: request.dry_run,
            },
        ))
    }
}

/// `GET /v1/nouns/{ns}/{store}/{key}[?version=N[&sha256=H]]`: the exact bytes.
pub async fn get(ctx: &Ctx, req: Req, path: [&str; 3]) -> Result<Resp, ApiError> {
    let principal = ctx.authenticate(&req).await?;
    let path = NounPath::parse(path[0], path[1], path[2])?;
    access::may_read_nouns(&principal, &path.namespace)?;
    let (version, pin) = version_query(&req)?;
    let started = std::time::Instant::now();
    let (entry, bytes) = ctx
        .blocking(move |store| {
            store.read_version(&path, version, pin, |entry| {
                access::read_noun(&principal, entry).is_ok()
            })
        })
        .await?;
    ctx.metrics.noun_get(started.elapsed());
    Ok(version_response(&entry, bytes))
}

/// The `?version=N&sha256=H` of a noun read.
pub fn version_query(req: &Req) -> Result<(Option<u64>, Option<Sha256>), ApiError> {
    let version = req.query_u64("version")?;
    let sha256 = req
        .query("sha256")
        .map(|s| {
            s.parse::<Sha256>()
                .map_err(|e| ApiError::new(ErrorCode::InvalidQuery, e.to_string()))
        })
        .transpose()?;
    Ok((version, sha256))
}

/// A noun version's exact bytes, with its media type and the headers
/// `x-tessera-version`, `x-tessera-sha256` and `etag`.
pub fn version_response(entry: &store::VersionEntry, bytes: Vec<u8>) -> Resp {
    let mut resp = Resp::new(super::body::full(bytes));
    let headers = resp.headers_mut();
    let ct = HeaderValue::from_str(&entry.media_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, ct);
    headers.insert("x-tessera-version", HeaderValue::from(entry.version));
    let sha = entry.sha256.hex();
    headers.insert(
        "x-tessera-sha256",
        HeaderValue::from_str(&sha).expect("hex"),
    );
    headers.insert(
        header::ETAG,
        HeaderValue::from_str(&format!("\"{sha}\"")).expect("hex"),
    );
    resp
}

/// `GET /v1/nouns/{ns}/{store}/{key}/versions`: the versions the key may
/// read (404 when it may read none, as for a missing noun).
pub async fn versions(ctx: &Ctx, req: Req, path: [&str; 3]) -> Result<Resp, ApiError> {
    let principal = ctx.authenticate(&req).await?;
    let path = NounPath::parse(path[0], path[1], path[2])?;
    access::may_read_nouns(&principal, &path.namespace)?;
    let noun = ctx
        .blocking(move |store| {
            store
                .read_ref(&path)?
                .and_then(|noun| noun.seen_by(|e| access::read_noun(&principal, e).is_ok()))
                .ok_or(store::Error::NounNotFound)
        })
        .await?;
    Ok(json_response(StatusCode::OK, &noun))
}

/// The body bytes and media type of a put envelope.
fn body_bytes(env: &PutNoun) -> Result<(Vec<u8>, String), ApiError> {
    let (bytes, default_type) = match (&env.body, &env.body_base64) {
        (Some(v), None) => (canonical_json(v), "application/json"),
        (None, Some(b64)) => (
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| {
                    ApiError::new(
                        ErrorCode::InvalidBody,
                        format!("body_base64 is not base64: {e}"),
                    )
                    .with(json!({"field": "body_base64"}))
                })?,
            "application/octet-stream",
        ),
        _ => {
            return Err(ApiError::new(
                ErrorCode::InvalidBody,
                "send exactly one of `body` (JSON) and `body_base64` (bytes)",
            ));
        }
    };
    let media_type = env
        .media_type
        .clone()
        .unwrap_or_else(|| default_type.into());
    if media_type.len() > 255 || HeaderValue::from_str(&media_type).is_err() {
        return Err(ApiError::new(
            ErrorCode::InvalidMediaType,
            "media_type must be a header-safe string of at most 255 bytes",
        ));
    }
    Ok((bytes, media_type))
}

/// The envelope fields of a put, checked before the store is touched.
fn wanted_meta(env: &PutNoun) -> Result<WantedMeta, ApiError> {
    let allowed_surfaces = env
        .allowed_surfaces
        .as_ref()
        .map(|list| {
            list.iter()
                .map(|s| parse_surface("allowed_surfaces", s))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let producer_surface = env
        .producer_surface
        .as_deref()
        .map(|s| parse_surface("producer_surface", s))
        .transpose()?;
    Ok(WantedMeta {
        visibility: env.visibility,
        allowed_surfaces,
        producer_surface,
    })
}

/// `POST /v1/nouns/{ns}/{store}/{key}/quarantine` and `/unquarantine` (admin).
pub async fn quarantine(
    ctx: &Ctx,
    req: Req,
    path: [&str; 3],
    quarantined: bool,
) -> Result<Resp, ApiError> {
    let principal = ctx.authenticate(&req).await?;
    auth::require_admin(&principal)?;
    let path = NounPath::parse(path[0], path[1], path[2])?;
    let noun = ctx
        .blocking(move |store| {
            store.set_quarantine(&path, quarantined, |latest| {
                latest.map(|_| ()).ok_or(ApiError::not_found())
            })
        })
        .await?;
    tracing::info!(noun = %format!("{}/{}/{}", noun.namespace, noun.store, noun.key), quarantined, "quarantine changed");
    Ok(json_response(StatusCode::OK, &noun))
}
