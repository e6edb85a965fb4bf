//! `Name` and `NounPath`: the only place a namespace, store, key or surface
//! segment is checked. Every other module receives an already checked `Name`,
//! so no client string reaches a file path unchecked.
//!
//! The rule: `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`. It excludes `.`, `..`,
//! separators, NUL and the empty string by construction.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Error;

/// Longest accepted name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// A checked name segment: safe to use as one path component under the root.
/// Clones share the text, so a name repeated by many tasks can be held once.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(Arc<str>);

impl Name {
    /// Checks `value` against the name rule; `field` names it in the error.
    pub fn parse(field: &'static str, value: &str) -> Result<Name, Error> {
        if is_valid(value) {
            Ok(Name(value.into()))
        } else {
            Err(Error::InvalidName {
                field,
                value: value.chars().take(200).collect(),
            })
        }
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
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

/// The address of one noun: namespace, store and key, each a checked `Name`.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct NounPath {
    /// The namespace segment.
    pub namespace: Name,
    /// The store segment.
    pub store: Name,
    /// The key segment.
    pub key: Name,
}

impl NounPath {
    /// Checks all three segments, naming the first bad one.
    pub fn parse(namespace: &str, store: &str, key: &str) -> Result<NounPath, Error> {
        Ok(NounPath {
            namespace: Name::parse("namespace", namespace)?,
            store: Name::parse("store", store)?,
            key: Name::parse("key", key)?,
        })
    }
}

impl fmt::Display for NounPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.store, self.key)
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
