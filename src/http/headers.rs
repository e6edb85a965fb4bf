//! The headers every answer carries, set in one place
//! ([`protect`], called by `routes::answer` for every request the router
//! answers, `/mcp` and its tool calls included).
//!
//! Many answers hold bytes a client chose: a noun's body under the media
//! type its writer named (`text/html` too), a task's raw output parts, a
//! worker's noun reads, error details that echo a path. None of them may
//! run in a browser that opens them. So every answer is `nosniff` (a
//! browser takes the declared type, never a guess), and every answer but
//! the overview site's own files (which name the policy they need in
//! `site.rs`) gets [`SANDBOX`]: a document opened from it has a unique
//! origin, runs no script, loads nothing and cannot be framed.

use http::{HeaderValue, header};

use super::Resp;

/// The policy of every answer that names none of its own.
pub const SANDBOX: &str = "sandbox; default-src 'none'; frame-ancestors 'none'";

/// Sets `X-Content-Type-Options: nosniff` on `resp`, and [`SANDBOX`] as
/// its `Content-Security-Policy` unless the handler named one (only the
/// site's files do).
pub fn protect(resp: &mut Resp) {
    let headers = resp.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(SANDBOX));
}
