//! `<step>.md`: YAML front matter between `---` lines, then the body byte
//! for byte. Each front-matter value is written as JSON (valid YAML), one
//! key per line, so the header never contains a bare `---` line and the
//! body is found by position, never by scanning it: any body round-trips,
//! including ``` fences, `---` lines, no trailing newline and bytes that
//! are not UTF-8 (stored raw; such a file is not valid UTF-8 text).

use serde::{Deserialize, Serialize};

/// The front matter of a projected step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The task.
    pub task_id: String,
    /// The step name.
    pub step: String,
    /// The attempt that produced it.
    pub attempt: u32,
    /// The daemon's verdict (the receipt's `ok`).
    pub ok: bool,
    /// sha256 of the body.
    pub sha256: String,
    /// Body size in bytes.
    pub size: u64,
}

const FENCE: &[u8] = b"---\n";

/// Encodes header and body.
pub fn encode(h: &Header, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 256);
    out.extend_from_slice(FENCE);
    let fields: [(&str, serde_json::Value); 6] = [
        ("task_id", h.task_id.clone().into()),
        ("step", h.step.clone().into()),
        ("attempt", h.attempt.into()),
        ("ok", h.ok.into()),
        ("sha256", h.sha256.clone().into()),
        ("size", h.size.into()),
    ];
    for (k, v) in fields {
        out.extend_from_slice(format!("{k}: {v}\n").as_bytes());
    }
    out.extend_from_slice(FENCE);
    out.extend_from_slice(body);
    out
}

/// Decodes a file written by [`encode`]: the header and the exact body.
pub fn decode(file: &[u8]) -> Option<(Header, &[u8])> {
    let rest = file.strip_prefix(FENCE)?;
    let mut map = serde_json::Map::new();
    let mut pos = 0;
    loop {
        let line_end = pos + rest[pos..].iter().position(|b| *b == b'\n')?;
        let line = std::str::from_utf8(&rest[pos..line_end]).ok()?;
        pos = line_end + 1;
        if line == "---" {
            break;
        }
        let (k, v) = line.split_once(": ")?;
        map.insert(k.to_string(), serde_json::from_str(v).ok()?);
    }
    let header = serde_json::from_value(serde_json::Value::Object(map)).ok()?;
    Some((header, &rest[pos..]))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn header(step: &str) -> Header {
        Header {
            task_id: "t7".into(),
            step: step.into(),
            attempt: 2,
            ok: true,
            sha256: "ab".repeat(32),
            size: 3,
        }
    }

    #[test]
    fn awkward_bodies_round_trip() {
        let bodies: &[&[u8]] = &[
            b"",
            b"plain",
            b"no trailing newline",
            b"---\n---\n",
            b"```\n---\nfenced\n---\n```\n",
            b"\n\n---",
            &[0xff, 0xfe, 0x00, b'\n', 0x80],
            b"step: \"evil\"\n---\n",
        ];
        for body in bodies {
            let file = encode(&header("draft"), body);
            let (h, back) = decode(&file).expect("decodes");
            assert_eq!((h, back), (header("draft"), *body));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn any_body_and_step_round_trip(body in proptest::collection::vec(any::<u8>(), 0..2048), step in ".{0,40}") {
            let h = header(&step);
            let file = encode(&h, &body);
            let (back_h, back_body) = decode(&file).expect("decodes");
            prop_assert_eq!(back_h, h);
            prop_assert_eq!(back_body, body.as_slice());
        }
    }
}
