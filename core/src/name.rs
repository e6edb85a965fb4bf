//! `Name`: the only place a namespace, store, key, queue, kind or surface
//! segment is checked. Every other module (the daemon's and the
//! importer's) receives an already checked `Name`, so no client string
//! reaches a file path unchecked.
//!
//! The rule: `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`. It excludes `.`, `..`,
//! separators, NUL and the empty string by construction.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest accepted name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// A checked name segment: safe to use as one path component under the root.
/// Clones share the text, so a name repeated by many tasks can be held once.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(Arc<str>);

impl Name {
    /// Checks `value` against the name rule; `field` names it in the error.
    pub fn parse(field: &'static str, value: &str) -> Result<Name, BadName> {
        if is_valid(value) {
            Ok(Name(value.into()))
        } else {
            Err(BadName {
                field,
                value: value.chars().take(200).collect(),
            })
        }
    }

    /// A surface written with or without its `surface:` prefix, bare.
    pub fn surface(field: &'static str, value: &str) -> Result<Name, BadName> {
        Name::parse(field, value.strip_prefix("surface:").unwrap_or(value))
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A namespace, store, key or surface that breaks the name rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid {field} {value:?}: names are 1-128 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit"
)]
pub struct BadName {
    /// Which segment.
    pub field: &'static str,
    /// The rejected value (truncated).
    pub value: String,
}

/// Whether `value` matches `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`.
pub fn is_valid(value: &str) -> bool {
    let bytes = value.as_bytes();
    match bytes.first() {
        Some(first) if first.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    bytes.len() <= MAX_NAME_LEN
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// Names this thread deserialized last, reused when they come again.
const RECENT: usize = 8;

thread_local! {
    static RECENT_NAMES: std::cell::RefCell<Vec<Name>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl<'de> Deserialize<'de> for Name {
    /// Checks the name; one equal to a name this thread deserialized
    /// lately shares its text (a snapshot repeats a queue's name a
    /// million times, and allocates it once).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        RECENT_NAMES.with_borrow_mut(|recent| {
            if let Some(n) = recent.iter().find(|n| n.as_str() == s) {
                return Ok(n.clone());
            }
            let n = Name::parse("name", &s).map_err(serde::de::Error::custom)?;
            if recent.len() == RECENT {
                recent.remove(0);
            }
            recent.push(n.clone());
            Ok(n)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! names {
        ($($input:expr => $ok:expr),* $(,)?) => {
            $( assert_eq!(is_valid($input), $ok, "name {:?}", $input); )*
        };
    }

    #[test]
    fn a_name_deserialized_again_shares_its_text_and_bad_ones_are_refused() {
        let a: Name = serde_json::from_str("\"work.q\"").unwrap();
        let b: Name = serde_json::from_str("\"work.q\"").unwrap();
        assert!(std::ptr::eq(a.as_str(), b.as_str()));
        for i in 0..2 * RECENT {
            let _: Name = serde_json::from_str(&format!("\"n{i}\"")).unwrap();
        }
        let c: Name = serde_json::from_str("\"work.q\"").unwrap();
        assert_eq!(a, c);
        assert!(serde_json::from_str::<Name>("\"../x\"").is_err());
    }

    #[test]
    fn name_rule_table() {
        let longest = "a".repeat(128);
        let too_long = "a".repeat(129);
        names! {
            "a" => true,
            "A9" => true,
            "work.contracts" => true,
            "sum-squares_v2" => true,
            longest.as_str() => true,
            too_long.as_str() => false,
            "" => false,
            "." => false,
            ".." => false,
            ".hidden" => false,
            "-dash" => false,
            "_under" => false,
            "a/b" => false,
            "a\\b" => false,
            "/abs" => false,
            "a\0b" => false,
            "a b" => false,
            "%2e%2e" => false,
            "é" => false,
            "a:b" => false,
        }
    }
}
