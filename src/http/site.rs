//! The overview site: a read-only page at `GET /` and its stylesheet and
//! scripts under `/ui/`. The files are plain HTML, CSS and ES modules
//! compiled into the binary (`src/http/site/`, no build step). They hold
//! no data and need no key: every record the page shows comes from the
//! JSON API with the key the operator gives the page, so it shows exactly
//! what that key may see.
//!
//! Every file is sent with a strict Content-Security-Policy of its own
//! (scripts, styles and connections from this origin only, no inline
//! script) in place of the sandbox every other answer gets (`headers.rs`,
//! which also adds `nosniff`), and an ETag with `Cache-Control: no-cache`:
//! browsers keep the files but ask again each time, so a new daemon's page
//! is used at once and an unchanged one costs a `304`.

use std::sync::LazyLock;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use super::Resp;
use super::error::{ApiError, ErrorCode};
use super::request::Req;
use crate::store::Sha256;

/// The policy every site file is served with: nothing but this origin's
/// own files and API, no inline script or style, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; worker-src 'self'; \
     object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One file of the site.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

/// The site's files; `index.html` is served at `/`, the others at `/ui/<name>`.
const ASSETS: [Asset; 6] = [
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_str!("site/index.html"),
    },
    Asset {
        name: "site.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("site/site.css"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("site/app.js"),
    },
    Asset {
        name: "kit.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("site/kit.js"),
    },
    Asset {
        name: "nouns.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("site/nouns.js"),
    },
    Asset {
        name: "live.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("site/live.js"),
    },
];

/// Each file's ETag (a quoted prefix of its sha256), in `ASSETS` order.
static ETAGS: LazyLock<Vec<HeaderValue>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| {
            let hex = Sha256::of(a.body.as_bytes()).hex();
            HeaderValue::from_str(&format!("\"{}\"", &hex[..32])).expect("hex is a header value")
        })
        .collect()
});

/// `GET /`: the page.
pub fn index(req: &Req) -> Result<Resp, ApiError> {
    file(req, "index.html")
}

/// `GET /ui/{name}`: a stylesheet or script of the page; `404 no_route`
/// for any other name.
pub fn file(req: &Req, name: &str) -> Result<Resp, ApiError> {
    let Some(i) = ASSETS.iter().position(|a| a.name == name) else {
        return Err(ApiError::new(
            ErrorCode::NoRoute,
            "no such file of the overview site; open / for the page",
        ));
    };
    let asset = &ASSETS[i];
    let etag = ETAGS[i].clone();
    let fresh = req
        .headers()
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| tag.trim() == etag || tag.trim() == "*");
    let mut resp = if fresh {
        let mut r = Response::new(super::body::full(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        Response::new(super::body::full(Bytes::from_static(asset.body.as_bytes())))
    };
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::ETAG, etag);
    Ok(resp)
}
