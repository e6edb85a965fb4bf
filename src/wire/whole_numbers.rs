//! Integer fields take integer-valued JSON numbers: `2468.0` or `2.468e3`
//! where a body's type wants an integer is that integer, as JSON Schema's
//! `integer` (and so the OpenAPI document) allows and as clients that
//! hold every number as a float (JavaScript's `JSON.stringify` of a
//! computed value, Python's `float`) send them. Only the number serde
//! refused is rewritten, by the position its error names, so numbers in
//! free-form JSON (a brief, a noun's body) keep their bytes.

use std::borrow::Cow;

use serde::de::DeserializeOwned;
use serde_json::Value;

/// How many numbers one body may have rewritten: each costs a parse.
const MAX_REWRITES: usize = 16;

/// Parses `bytes` as `T`, reading an integer-valued number with a
/// fraction or exponent as the integer where `T` wants one. Any other
/// refusal is serde's own (after a rewrite, its column counts the
/// rewritten text).
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    let mut text = Cow::Borrowed(bytes);
    for _ in 0..MAX_REWRITES {
        match serde_json::from_slice(&text) {
            Err(e) if wants_integer(&e) => match rewrite(&text, &e) {
                Some(t) => text = Cow::Owned(t),
                None => return Err(e),
            },
            done => return done,
        }
    }
    serde_json::from_slice(&text)
}

/// Reads `value` as `T` as [`from_slice`] reads its text.
pub fn from_value<T: DeserializeOwned>(value: Value) -> serde_json::Result<T> {
    match T::deserialize(&value) {
        Err(e) if wants_integer(&e) => {
            from_slice(&serde_json::to_vec(&value).expect("JSON values serialize"))
        }
        other => other,
    }
}

/// Whether `e` refused a number with a fraction or exponent where an
/// integer was wanted.
fn wants_integer(e: &serde_json::Error) -> bool {
    let msg = e.to_string();
    let Some(rest) = msg.strip_prefix("invalid type: floating point `") else {
        return false;
    };
    let Some((_, expected)) = rest.split_once("`, expected ") else {
        return false;
    };
    let integer = ["u8", "u16", "u32", "u64", "u128", "usize"]
        .iter()
        .chain(&["i8", "i16", "i32", "i64", "i128", "isize"])
        .any(|t| {
            expected
                .strip_prefix(t)
                .is_some_and(|after| !after.starts_with(|c: char| c.is_ascii_alphanumeric()))
        });
    integer || expected.contains("integer")
}

/// `text` with the number that ends where `e` points written as the
/// integer it equals, or `None` when it is not one a float holds exactly.
fn rewrite(text: &[u8], e: &serde_json::Error) -> Option<Vec<u8>> {
    let line_start = if e.line() <= 1 {
        0
    } else {
        text.iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(e.line() - 2)?
            .0
            + 1
    };
    let end = (line_start + e.column()).min(text.len());
    let numeric = |b: &u8| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-');
    let start = text[..end]
        .iter()
        .rposition(|b| !numeric(b))
        .map_or(0, |i| i + 1);
    let token = std::str::from_utf8(&text[start..end]).ok()?;
    let n = tessera_core::whole::exact_integer(token.parse().ok()?)?;
    let mut out = Vec::with_capacity(text.len());
    out.extend_from_slice(&text[..start]);
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(&text[end..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Body {
        n: u32,
        signed: Option<i64>,
        free: Option<Value>,
        #[serde(default)]
        list: Vec<u64>,
    }

    #[test]
    fn integer_valued_numbers_fill_integer_fields() {
        let b: Body =
            from_slice(br#"{"n": 2468.0, "signed": -2.5e1, "list": [1.0, 2, 3e0]}"#).unwrap();
        assert_eq!(b.n, 2468);
        assert_eq!(b.signed, Some(-25));
        assert_eq!(b.list, [1, 2, 3]);
        let b: Body = from_value(serde_json::json!({"n": 7.0})).unwrap();
        assert_eq!(b.n, 7);
    }

    #[test]
    fn free_form_numbers_keep_their_bytes() {
        let b: Body = from_slice(b"{\"free\": {\"x\": 2.0},\n \"n\": 3.0}").unwrap();
        assert_eq!(b.free.unwrap().to_string(), r#"{"x":2.0}"#);
        assert_eq!(b.n, 3);
    }

    #[test]
    fn other_refusals_are_serdes_own() {
        for (text, said) in [
            (
                r#"{"n": 2.5}"#,
                "invalid type: floating point `2.5`, expected u32",
            ),
            (r#"{"n": 1e300}"#, "floating point"),
            (
                r#"{"n": -1.0}"#,
                "invalid value: integer `-1`, expected u32",
            ),
            (r#"{"n": 1, "x": 1}"#, "unknown field `x`"),
            (r#"{"n": 1"#, "EOF"),
        ] {
            let e = from_slice::<Body>(text.as_bytes()).unwrap_err();
            assert!(e.to_string().contains(said), "{text}: {e}");
        }
    }
}
