//! The `Authorization: Bearer` credential, read by one rule everywhere.

use http::{HeaderMap, header};

use super::error::{ApiError, ErrorCode};

/// The bearer credential of a request head, the one rule every route and
/// `/mcp` read it by: `Ok(None)` when there is no `Authorization` header,
/// an error when it is not `Bearer <token>`. The scheme is matched without
/// regard to case (RFC 9110 §11.1): `bearer` and `BEARER` are `Bearer`.
pub fn bearer(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty())
        .map(Some)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::Unauthenticated,
                "malformed Authorization header; send `Authorization: Bearer <key>`",
            )
        })
}
