//! One noun log record: a noun's whole new ref file, and for a put the
//! body of its new version.
//!
//! ```text
//! payload := header | "\n" | ref: ref_len bytes | body: body_len bytes
//! header  := {"ref_len":N,"body_len":M}   a put
//!          | {"ref_len":N}                a ref change without a body (quarantine)
//! ```
//!
//! The ref bytes are exactly the ref file's bytes, so replay writes them
//! back without re-encoding; the latest record of a noun is its ref file.
//! Decoding checks what replay relies on: the ref parses and is not empty,
//! and a put's body hashes to its latest version's sha256 with its size.

use serde::{Deserialize, Serialize};

use super::super::noun::NounRef;
use super::super::{NounPath, Sha256};

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    ref_len: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_len: Option<u64>,
}

/// A record read back and checked.
#[derive(Debug)]
pub struct Record<'a> {
    /// The noun the ref file belongs to.
    pub path: NounPath,
    /// The ref file's bytes.
    pub ref_bytes: &'a [u8],
    /// A put's body (the latest version's bytes).
    pub body: Option<&'a [u8]>,
}

/// Encodes a record: `ref_bytes` is the noun's new ref file, `body` the
/// new version's bytes for a put.
pub fn encode(ref_bytes: &[u8], body: Option<&[u8]>) -> Vec<u8> {
    let header = Header {
        ref_len: ref_bytes.len() as u64,
        body_len: body.map(|b| b.len() as u64),
    };
    let mut out = serde_json::to_vec(&header).expect("a header serializes");
    out.reserve(1 + ref_bytes.len() + body.map_or(0, <[u8]>::len));
    out.push(b'\n');
    out.extend_from_slice(ref_bytes);
    out.extend_from_slice(body.unwrap_or_default());
    out
}

/// Decodes and checks a record, or says why it is not one.
pub fn decode(payload: &[u8]) -> Result<Record<'_>, String> {
    let split = payload
        .iter()
        .position(|b| *b == b'\n')
        .ok_or("a record without a header line")?;
    let header: Header = serde_json::from_slice(&payload[..split])
        .map_err(|e| format!("a record whose header is not a noun log header ({e})"))?;
    let rest = &payload[split + 1..];
    let ref_len = usize::try_from(header.ref_len).map_err(|_| "a ref length past memory")?;
    let body_len = header
        .body_len
        .map(usize::try_from)
        .transpose()
        .map_err(|_| "a body length past memory")?;
    if Some(rest.len()) != ref_len.checked_add(body_len.unwrap_or(0)) {
        return Err(format!(
            "a record of {} bytes after its header, not the {ref_len} + {} it names",
            rest.len(),
            body_len.unwrap_or(0)
        ));
    }
    let (ref_bytes, body) = rest.split_at(ref_len);
    let noun: NounRef = serde_json::from_slice(ref_bytes)
        .map_err(|e| format!("a record whose ref is not a noun ref ({e})"))?;
    let Some(latest) = noun.versions.last() else {
        return Err("a record whose ref has no versions".into());
    };
    let body = body_len.map(|_| body);
    if let Some(body) = body
        && (Sha256::of(body) != latest.sha256 || body.len() as u64 != latest.size)
    {
        return Err(format!(
            "a record whose body does not hash to version {}'s sha256 {}",
            latest.version, latest.sha256
        ));
    }
    Ok(Record {
        path: NounPath {
            namespace: noun.namespace,
            store: noun.store,
            key: noun.key,
        },
        ref_bytes,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Name;
    use crate::store::noun::VersionEntry;

    fn noun(body: &[u8]) -> Vec<u8> {
        let noun = NounRef {
            namespace: Name::parse("n", "n").unwrap(),
            store: Name::parse("s", "s").unwrap(),
            key: Name::parse("k", "k").unwrap(),
            versions: vec![VersionEntry {
                version: 1,
                sha256: Sha256::of(body),
                size: body.len() as u64,
                media_type: "application/octet-stream".into(),
                noun_type: None,
                created_at: jiff::Timestamp::UNIX_EPOCH,
                created_by: "k1".into(),
                producer_surface: None,
                visibility: crate::store::Visibility::Public,
                allowed_surfaces: Vec::new(),
                owner: None,
                quarantined: false,
                source_pack: None,
            }],
        };
        serde_json::to_vec_pretty(&noun).unwrap()
    }

    #[test]
    fn records_round_trip_and_bad_ones_say_why() {
        let body = b"bytes\n\0\0";
        let r = noun(body);
        let put = encode(&r, Some(body));
        assert_eq!(put[0], b'{', "the segment format resynchronizes on '{{'");
        let got = decode(&put).unwrap();
        assert_eq!(
            (got.path.to_string(), got.ref_bytes, got.body),
            ("n/s/k".into(), &r[..], Some(&body[..]))
        );
        let flag = encode(&r, None);
        assert_eq!(decode(&flag).unwrap().body, None);

        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"no header line".to_vec(), "header line"),
            (
                b"{\"ref_len\":1,\"x\":2}\n{".to_vec(),
                "not a noun log header",
            ),
            ([&put[..], b"!"].concat(), "not the"),
            (encode(b"{}", None), "not a noun ref"),
            (encode(&r, Some(b"other")), "does not hash"),
        ];
        for (payload, why) in cases {
            let err = decode(&payload).unwrap_err();
            assert!(err.contains(why), "{why}: {err}");
        }
    }
}
