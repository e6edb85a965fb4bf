//! Operational routes: `/healthz` (no authentication).

use super::error::ApiError;
use super::{Resp, json_response};
use crate::http::wire::Health;

/// `GET /healthz`.
pub fn healthz() -> Result<Resp, ApiError> {
    Ok(json_response(
        http::StatusCode::OK,
        &Health {
            status: "ok".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
    ))
}
