//! `NounPath`: a noun's three checked segments (the rule itself is the
//! core crate's [`Name`]).

use std::fmt;

use serde::{Deserialize, Serialize};

pub use tessera_core::name::{BadName, MAX_NAME_LEN, Name, is_valid};

use super::Error;

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
