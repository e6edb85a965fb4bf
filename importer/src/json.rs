//! JSON body files, read strictly: a key written twice in one object is
//! refused (serde_json would keep the last), and so is a number that would
//! not come back as written (an integer past 64 bits, which serde_json
//! turns into a float). Both errors carry serde_json's line. A UTF-8 byte
//! order mark at the start (some Windows editors write one) is skipped, as
//! the YAML and TOML parsers skip it; the lines are unchanged.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// The UTF-8 byte order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Smallest magnitude of a float that an integer past 64 bits can become.
const PAST_64_BITS: f64 = 9_223_372_036_854_775_808.0;

/// Parses `bytes` as one JSON document with the checks above; the error is
/// `(line, message)`.
pub(crate) fn parse(bytes: &[u8]) -> Result<Value, (usize, String)> {
    let bytes = bytes.strip_prefix(BOM).unwrap_or(bytes);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Strict::deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v.0))
        .map_err(|e| (e.line().max(1), e.to_string()))?;
    Ok(value)
}

/// A JSON value that was read with the checks of this module.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Value, E> {
        if f.fract() == 0.0 && f.abs() >= PAST_64_BITS {
            return Err(E::custom(format!(
                "the number {f:e} does not fit in 64 bits and would not be kept exactly; write it as a string"
            )));
        }
        Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "duplicate key {key:?}; a key may appear once in an object"
                )));
            }
            let Strict(value) = map.next_value()?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value as JSON text, or the error's line and a part of its message.
    type Want = Result<&'static str, (usize, &'static str)>;

    #[test]
    fn json_bodies_keep_numbers_exact_and_refuse_repeated_keys() {
        // (document, Ok(value as JSON text) or Err((line, message part)))
        let cases: &[(&str, Want)] = &[
            (
                r#"{"a": 1, "b": [1.5, -2, null]}"#,
                Ok(r#"{"a":1,"b":[1.5,-2,null]}"#),
            ),
            ("18446744073709551615", Ok("18446744073709551615")),
            ("-9223372036854775808", Ok("-9223372036854775808")),
            (
                "{\n\"n\":\n123456789012345678901234567890}",
                Err((3, "does not fit in 64 bits")),
            ),
            ("18446744073709551616", Err((1, "does not fit in 64 bits"))),
            ("{\"a\": 1,\n \"a\": 2}", Err((2, "duplicate key \"a\""))),
            ("{\"x\": {\"a\": 1, \"a\": 1}}", Err((1, "duplicate key"))),
            ("[1,", Err((1, "EOF"))),
            ("\u{feff}{\"a\": 1}", Ok(r#"{"a":1}"#)),
            ("\u{feff}{\"a\": 1,\n \"b\": }", Err((2, "expected value"))),
            ("{\"a\": \"\u{feff}\"}", Ok("{\"a\":\"\u{feff}\"}")),
            ("\u{feff}\u{feff}1", Err((1, "expected value"))),
        ];
        for (doc, want) in cases {
            match (parse(doc.as_bytes()), want) {
                (Ok(got), Ok(want)) => assert_eq!(got.to_string(), *want, "{doc}"),
                (Err((line, message)), Err((want_line, part))) => {
                    assert_eq!(line, *want_line, "{doc}: {message}");
                    assert!(message.contains(part), "{doc}: {message}");
                }
                (got, want) => panic!("{doc}: got {got:?}, want {want:?}"),
            }
        }
    }
}
