//! Canonical JSON bytes: the one encoder every writer of a JSON noun body,
//! receipt or record uses, so equal content has one sha256 whatever produced
//! it (YAML, TOML, a worker, the CLI).
//!
//! Canonical form: object keys sorted by their UTF-8 bytes, two-space
//! indent, `": "` after keys, one trailing newline. Numbers keep
//! serde_json's shortest round-trip form. Key order does not depend on
//! serde_json's `preserve_order` feature: this module sorts explicitly
//! ([`canonical_json`], [`canonical_record`]), or writes a record whose
//! fields are declared in key order and checks it in debug builds
//! ([`canonical_sorted`]).

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// The canonical bytes of `value`.
pub fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(&Sorted(value)).expect("a Value always serializes");
    out.push(b'\n');
    out
}

/// The canonical bytes of any serializable record.
pub fn canonical_record<T: Serialize>(record: &T) -> Vec<u8> {
    let value = serde_json::to_value(record).expect("records serialize to JSON");
    canonical_json(&value)
}

/// The canonical bytes of a record whose struct fields are declared in
/// key order at every level (its maps ordered maps): written straight,
/// without the `Value` tree [`canonical_record`] builds, for records made
/// on a hot path (a receipt, a submit's request hash). Debug builds (every
/// test) check the bytes against [`canonical_record`], so a field added
/// out of order fails the first test that writes one.
pub fn canonical_sorted<T: Serialize>(record: &T) -> Vec<u8> {
    // Room for a receipt, so it is written without regrowing.
    let mut out = Vec::with_capacity(1024);
    serde_json::to_writer_pretty(&mut out, record).expect("records serialize to JSON");
    out.push(b'\n');
    debug_assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&canonical_record(record)),
        "a struct field is declared out of key order"
    );
    out
}

/// Deepest nesting of arrays and objects accepted in a request body (and
/// so in anything stored from one): deeper JSON is refused with `400
/// too_deep` before it is parsed.
pub const MAX_JSON_DEPTH: usize = 64;

/// The bytes of a JSON text outside its string literals, in order: the
/// opening quote of each string is one of them, its contents and closing
/// quote are not. The one scanner of JSON text that is not a parse (the
/// depth check here, the parse-cost estimate of request bodies).
pub fn outside_strings(text: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let (mut in_str, mut escaped) = (false, false);
    text.iter().filter_map(move |&b| {
        if in_str {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            return None;
        }
        in_str = b == b'"';
        Some(b)
    })
}

/// The nesting depth of a JSON text (arrays and objects), without parsing it.
pub fn json_depth(text: &[u8]) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for b in outside_strings(text) {
        match b {
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

struct Sorted<'a>(&'a Value);

impl Serialize for Sorted<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                let mut m = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    m.serialize_entry(k, &Sorted(v))?;
                }
                m.end()
            }
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for v in items {
                    seq.serialize_element(&Sorted(v))?;
                }
                seq.end()
            }
            other => other.serialize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_counts_arrays_and_objects_outside_strings() {
        assert_eq!(json_depth(br#"{"a":"[[[{{{","b":[{}]}"#), 3);
        assert_eq!(json_depth(br#""\"[""#), 0);
        assert_eq!(json_depth(b"[[[]]]"), 3);
    }

    #[test]
    fn sorts_keys_indents_two_spaces_and_ends_with_newline() {
        let v = json!({"b": [1, {"z": null, "a": true}], "a": "x"});
        let text = String::from_utf8(canonical_json(&v)).unwrap();
        assert_eq!(
            text,
            "{\n  \"a\": \"x\",\n  \"b\": [\n    1,\n    {\n      \"a\": true,\n      \"z\": null\n    }\n  ]\n}\n"
        );
    }

    #[derive(serde::Serialize)]
    struct InOrder {
        a: u8,
        b: Option<&'static str>,
        c: std::collections::BTreeMap<&'static str, u8>,
    }

    #[derive(serde::Serialize)]
    struct OutOfOrder {
        b: u8,
        a: u8,
    }

    #[test]
    fn a_record_in_key_order_is_written_straight_and_one_out_of_order_is_caught() {
        let r = InOrder {
            a: 1,
            b: None,
            c: [("y", 2), ("x", 1)].into(),
        };
        assert_eq!(canonical_sorted(&r), canonical_record(&r));
        if cfg!(debug_assertions) {
            let caught = std::panic::catch_unwind(|| canonical_sorted(&OutOfOrder { b: 1, a: 2 }));
            assert!(caught.is_err(), "debug builds check the order");
        }
    }

    #[test]
    fn equal_values_have_equal_bytes_whatever_the_input_order() {
        let a: Value = serde_json::from_str(r#"{"x":1,"y":{"q":2,"p":3}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"y":{"p":3,"q":2},"x":1}"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
    }
}
