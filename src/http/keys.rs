//! Key routes (admin only): issue, list, revoke.

use http::StatusCode;
use jiff::Timestamp;

use super::error::{ApiError, ErrorCode};
use super::request::Req;
use super::{Ctx, Resp, json_response};
use crate::auth::{self, IssueRequest};
use crate::wire::{IssueKey, IssuedKey, KeyList, KeyView};

/// Longest label, account id or owner string accepted.
const MAX_TEXT: usize = 256;

/// `POST /v1/keys`.
pub async fn issue(ctx: &Ctx, mut req: Req) -> Result<Resp, ApiError> {
    let principal = ctx.authenticate(&req).await?;
    auth::require_admin(&principal)?;
    let body: IssueKey = req.json(ctx.limits.max_body_bytes).await?;
    let grants = body.grants.check()?;
    for (field, value) in [
        ("label", Some(&body.label)),
        ("account_id", body.account_id.as_ref()),
        ("owner", body.owner.as_ref()),
    ] {
        if value.is_some_and(|v| v.len() > MAX_TEXT) {
            return Err(ApiError::new(
                ErrorCode::InvalidField,
                format!("{field} is longer than {MAX_TEXT} bytes"),
            ));
        }
    }
    if body.expires_at.is_some_and(|t| t <= Timestamp::now()) {
        return Err(ApiError::new(
            ErrorCode::InvalidField,
            "expires_at is in the past",
        ));
    }
    let by = principal.key_id.to_string();
    let request = IssueRequest {
        label: body.label,
        account_id: body.account_id,
        owner: body.owner,
        grants,
        expires_at: body.expires_at,
    };
    let (record, secret) = ctx.keyring.issue(request).await?;
    tracing::info!(key_id = %record.key_id, by = %by, kind = ?record.principal_kind, "key issued");
    Ok(json_response(
        StatusCode::CREATED,
        &IssuedKey {
            key: KeyView::from(&record),
            secret,
        },
    ))
}

/// `GET /v1/keys`.
pub async fn list(ctx: &Ctx, req: Req) -> Result<Resp, ApiError> {
    let principal = ctx.authenticate(&req).await?;
    auth::require_admin(&principal)?;
    let keys = ctx
        .keyring
        .list()
        .await?
        .iter()
        .map(KeyView::from)
        .collect();
    Ok(json_response(StatusCode::OK, &KeyList { keys }))
}

/// `DELETE /v1/keys/{key_id}`.
pub async fn revoke(ctx: &Ctx, req: Req, key_id: &str) -> Result<Resp, ApiError> {
    let principal = ctx.authenticate(&req).await?;
    auth::require_admin(&principal)?;
    let record = ctx.keyring.revoke(key_id).await?;
    tracing::info!(key_id = %record.key_id, by = %principal.key_id, "key revoked");
    Ok(json_response(StatusCode::OK, &KeyView::from(&record)))
}
