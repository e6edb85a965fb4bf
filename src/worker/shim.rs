//! The shim: a compact view of the nouns a task's brief pins (its contract
//! and input), scoped to the claiming key. Every entry is data, never an
//! instruction (`"role": "data"`), and carries its pin. A body of at most
//! [`INLINE_LIMIT`] bytes is inline; a larger one is a reference (size and
//! the worker noun route's URL); a pin the claimant may not read is
//! `unavailable` without saying why. Nothing here widens a grant: every pin
//! is read as the claimant, exactly as the claimant's own key would read it.
//!
//! The worker noun route (`GET /v1/worker/nouns/{ns}/{store}/{key}`) reads
//! only the pins a task names ([`named`]): its brief's `contract_ref` and
//! `input_ref`, and the output and evidence pins in the last receipts of
//! its finished steps (the upstream tasks and children its prompt points
//! at). Anything else answers exactly as a missing noun.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::{Error, pins};
use crate::auth::Principal;
use crate::paths;
use crate::queue::SpecRules;
use crate::queue::{Receipt, Task};
use crate::store::{self, Name, NounPath, Pin, Sha256, Store, VersionEntry};

/// Largest body the shim shows inline, in bytes.
pub const INLINE_LIMIT: u64 = 16 * 1024;

/// What the shim says of a pin the claimant may not read.
pub const UNREADABLE: &str = "not readable by this key";

/// The worker noun route's URL for a pin (with its namespace filled in).
pub fn url(pin: &Pin, ns: &Name) -> String {
    let path = pin.path(ns);
    let at = [
        path.namespace.as_str(),
        path.store.as_str(),
        path.key.as_str(),
    ];
    format!(
        "{}?version={}&sha256={}",
        paths::WORKER_NOUN.at(&at),
        pin.version,
        pin.sha256.hex()
    )
}

/// One shim entry: the pin named by `field`, read as `holder`.
pub fn entry(
    store: &Store,
    holder: &Principal,
    field: &str,
    pin: &Pin,
    ns: &Name,
) -> Result<Value, Error> {
    let mut out = json!({"role": "data", "field": field, "pin": pin.qualified(ns)});
    let e = match pins::entry_as(store, holder, pin, ns) {
        Ok(e) => e,
        Err(e) if pins::is_unreadable(&e) => {
            out["unavailable"] = json!(UNREADABLE);
            return Ok(out);
        }
        Err(e) => return Err(e),
    };
    out["media_type"] = json!(e.media_type);
    out["size"] = json!(e.size);
    if e.size > INLINE_LIMIT {
        out["url"] = json!(url(pin, ns));
        return Ok(out);
    }
    let bytes = store.read_body(&e)?;
    let (format, body) = inline(&bytes);
    out["format"] = json!(format);
    out["body"] = body;
    Ok(out)
}

/// A body as the shim shows it: parsed JSON, else UTF-8 text, else base64.
pub fn inline(bytes: &[u8]) -> (&'static str, Value) {
    if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
        return ("json", v);
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => ("text", json!(text)),
        Err(_) => ("base64", json!(STANDARD.encode(bytes))),
    }
}

/// The pins a task names, with their fields: the brief's, then the
/// outputs and evidence of the last receipt of each finished step in
/// `steps` (tasks the claimant may see).
pub fn named(store: &Store, task: &Task, steps: &[Task]) -> Vec<(String, Pin)> {
    let mut out = task.spec.brief().pins();
    for r in steps.iter().filter(|r| r.state.is_terminal()) {
        let Some(receipt) = r
            .receipts
            .last()
            .and_then(|sha| Receipt::read(store, sha).ok())
        else {
            continue;
        };
        for (what, list) in [
            ("outputs", &receipt.outputs),
            ("evidence", &receipt.evidence),
        ] {
            for (i, pin) in list.iter().enumerate() {
                out.push((format!("steps.{}.{what}[{i}]", r.id), pin.clone()));
            }
        }
    }
    out
}

/// Reads `path` (at `version` and `sha256` when given) as `holder`, if one
/// of `allowed` names it; with no version, the highest pinned one. Every
/// refusal (not named, missing, hidden, another hash) is `NounNotFound`,
/// the answer for a missing noun.
pub fn read(
    store: &Store,
    holder: &Principal,
    allowed: &[(String, Pin)],
    ns: &Name,
    path: &NounPath,
    version: Option<u64>,
    sha256: Option<Sha256>,
) -> Result<(VersionEntry, Vec<u8>), Error> {
    let pin = allowed
        .iter()
        .map(|(_, pin)| pin)
        .filter(|pin| pin.path(ns) == *path)
        .filter(|pin| version.is_none_or(|v| pin.version == v))
        .filter(|pin| sha256.is_none_or(|s| pin.sha256 == s))
        .max_by_key(|pin| pin.version)
        .ok_or(Error::Store(store::Error::NounNotFound))?;
    let entry = match pins::entry_as(store, holder, pin, ns) {
        Ok(e) => e,
        Err(e) if pins::is_unreadable(&e) => return Err(store::Error::NounNotFound.into()),
        Err(e) => return Err(e),
    };
    let bytes = store.read_body(&entry)?;
    Ok((entry, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_inline_as_json_text_or_base64() {
        assert_eq!(inline(b"{\"a\": 1}"), ("json", json!({"a": 1})));
        assert_eq!(inline(b"plain words"), ("text", json!("plain words")));
        assert_eq!(inline(&[0xff, 0x00]), ("base64", json!("/wA=")));
    }
}
