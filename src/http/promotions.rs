//! `POST /v1/promotions` (admin only): the public promotion gate.

use http::StatusCode;

use super::error::ApiError;
use super::request::Req;
use super::{Ctx, Resp, json_response};
use crate::auth;
use crate::promotion::{self, Request};
use crate::wire::PromotionReply;

/// `POST /v1/promotions {pin, stages}`.
pub async fn promote(ctx: &Ctx, mut req: Req) -> Result<Resp, ApiError> {
    let p = ctx.authenticate(&req).await?;
    auth::require_admin(&p)?;
    let body: Request = req.json(ctx.limits.max_body_bytes).await?;
    let (record, sha) = promotion::promote(&ctx.store, &ctx.queue, &p, body).await?;
    tracing::info!(noun = %format!("{}/{}/{}", record.to.namespace.as_ref().map_or("", |n| n.as_str()), record.to.store, record.to.key), version = record.to.version, record = %sha, "noun promoted to public");
    Ok(json_response(
        StatusCode::CREATED,
        &PromotionReply {
            promotion_sha256: sha,
            promotion: record,
        },
    ))
}
