//! Nouns: a noun entry becomes a [`NounItem`], its body inline or read
//! from a `body_file` inside the pack (JSON, YAML and TOML files become a
//! JSON value; anything else is kept as bytes with a media type).
//!
//! Confinement of the file itself (no `..` out, no absolute path, no symlink
//! out, regular files only) is `source`'s; duplicates are `resolve`'s.

use serde_json::Value;

use crate::json;
use crate::plan::{NounBody, NounItem};
use crate::raw::{self, Format};
use crate::report::push_pointer;
use crate::resolve::{Ctx, section, text};
use crate::source::pack_path;
use crate::task;

/// A noun's store and key (always, for duplicate checks) and its item (when
/// its body could be read).
pub(crate) fn noun_item(
    ctx: &mut Ctx,
    f: usize,
    pointer: &str,
    noun: &Value,
) -> (String, String, Option<NounItem>) {
    let (store, key) = (text(noun, "store"), text(noun, "key"));
    let body = match (
        noun.get("body"),
        noun.get("body_file").and_then(Value::as_str),
    ) {
        (Some(body), _) => Some(NounBody::Json(body.clone())),
        (None, Some(written)) => body_file(ctx, f, &push_pointer(pointer, "body_file"), written),
        (None, None) => None,
    };
    let item = body.map(|body| NounItem {
        store: store.clone(),
        key: key.clone(),
        noun_type: text(noun, "type"),
        visibility: noun
            .get("visibility")
            .and_then(Value::as_str)
            .map(str::to_owned),
        allowed_surfaces: section(noun, "allowed_surfaces")
            .iter()
            .filter_map(Value::as_str)
            .map(task::bare_surface)
            .collect(),
        body,
        source: ctx.source(f, pointer),
    });
    (store, key, item)
}

/// Reads a `body_file`: JSON, YAML and TOML become a JSON value, anything
/// else stays bytes with a media type from the extension.
fn body_file(ctx: &mut Ctx, f: usize, at: &str, written: &str) -> Option<NounBody> {
    let rel = match pack_path(written) {
        Ok(rel) => rel,
        Err(message) => {
            ctx.at(f, at, message);
            return None;
        }
    };
    let bytes = match ctx.dir.read(&rel) {
        Ok(bytes) => bytes,
        Err(message) => {
            ctx.at(f, at, format!("{written:?} {message}"));
            return None;
        }
    };
    if let Err(message) = ctx.budget.take(bytes.len()) {
        ctx.at(f, at, format!("{written:?}: {message}"));
        return None;
    }
    let ext = rel
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if ext == "json" {
        return match json::parse(&bytes) {
            Ok(value) => Some(NounBody::Json(value)),
            Err((line, message)) => {
                ctx.diags
                    .push(&rel, line, "json", format!("not valid JSON: {message}"));
                None
            }
        };
    }
    let Some(format) = Format::from_extension(&ext) else {
        let media_type = media_type(&ext);
        return Some(NounBody::Bytes {
            bytes: text_lf(media_type, bytes),
            media_type: media_type.to_owned(),
        });
    };
    let field = if format == Format::Yaml {
        "yaml"
    } else {
        "toml"
    };
    let Ok(text) = String::from_utf8(bytes) else {
        ctx.diags.push(
            &rel,
            1,
            "file",
            "is not UTF-8 text; YAML and TOML files must be UTF-8",
        );
        return None;
    };
    match raw::parse(format, &text, &mut ctx.budget) {
        Ok(parsed) => Some(NounBody::Json(parsed.value)),
        Err(e) => {
            ctx.diags.push(&rel, e.line, field, e.message);
            None
        }
    }
}

/// A text body with CRLF line ends made LF, so a CRLF checkout stores the
/// same bytes; other bodies (and text that is not UTF-8) stay as they are.
fn text_lf(media_type: &str, bytes: Vec<u8>) -> Vec<u8> {
    if !media_type.starts_with("text/") {
        return bytes;
    }
    match std::str::from_utf8(&bytes) {
        Ok(text) if text.contains("\r\n") => raw::lf(text).into_owned().into_bytes(),
        _ => bytes,
    }
}

fn media_type(ext: &str) -> &'static str {
    match ext {
        "md" | "markdown" => "text/markdown",
        "txt" => "text/plain",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        _ => "application/octet-stream",
    }
}
