//! [`Address`]: the addressing a Blueprint flow uses for one piece of a
//! finished task's output, `$.out` (the final body) or `$.parts["name"]`
//! (one staged part). The importer checks `consumes` entries with it and
//! the daemon resolves them (and `GET /v1/tasks/{id}/output?path=`) with
//! the same type, so both read the same syntax.
//!
//! The part name inside the brackets is a JSON string literal (parsed by
//! `serde_json`, so escapes mean what JSON says). A name is refused here
//! only when no part could ever carry it (empty, `.`, `..`, a path
//! separator, NUL); the daemon's part-name rule still applies to staging.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One addressable piece of a task's output.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    /// `$.out`: the final body.
    Out,
    /// `$.parts["name"]`: the part staged under this name.
    Part(String),
}

impl Address {
    /// Parses `$.out` or `$.parts["name"]`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Address, String> {
        let hint = r#"write $.out or $.parts["<part name>"]"#;
        if text == "$.out" {
            return Ok(Address::Out);
        }
        let Some(inner) = text
            .strip_prefix("$.parts[")
            .and_then(|rest| rest.strip_suffix(']'))
        else {
            return Err(format!("{text:?} is not an output address; {hint}"));
        };
        let name: String = serde_json::from_str(inner).map_err(|_| {
            format!("{text:?}: the part name must be a double-quoted string; {hint}")
        })?;
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
            return Err(format!("{text:?}: {name:?} cannot name a part"));
        }
        Ok(Address::Part(name))
    }

    /// The part's name, for a part address.
    pub fn part(&self) -> Option<&str> {
        match self {
            Address::Out => None,
            Address::Part(name) => Some(name),
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Out => f.write_str("$.out"),
            Address::Part(name) => {
                let quoted = serde_json::to_string(name).map_err(|_| fmt::Error)?;
                write!(f, "$.parts[{quoted}]")
            }
        }
    }
}

impl Serialize for Address {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Address, D::Error> {
        let text = String::deserialize(d)?;
        Address::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_table() {
        let ok: &[(&str, Address)] = &[
            ("$.out", Address::Out),
            (r#"$.parts["plan.md"]"#, Address::Part("plan.md".into())),
            (r#"$.parts["a \"b\""]"#, Address::Part("a \"b\"".into())),
        ];
        for (text, want) in ok {
            let got = Address::parse(text).unwrap();
            assert_eq!(&got, want, "{text}");
            assert_eq!(got.to_string(), *text);
        }
        let bad: &[(&str, &str)] = &[
            ("$.output", "is not an output address"),
            ("$.parts[plan.md]", "double-quoted string"),
            (r#"$.parts["plan.md""#, "is not an output address"),
            (r#"$.parts[""]"#, "cannot name a part"),
            (r#"$.parts[".."]"#, "cannot name a part"),
            (r#"$.parts["a/b"]"#, "cannot name a part"),
            (r#"$.parts['x']"#, "double-quoted string"),
        ];
        for (text, want) in bad {
            let err = Address::parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
