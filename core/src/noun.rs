//! Where a noun is and which version a reference means: [`NounPath`], a
//! noun's three checked segments, and [`Pin`], one exact version.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::name::{BadName, Name};
use crate::sha256::Sha256;

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
    pub fn parse(namespace: &str, store: &str, key: &str) -> Result<NounPath, BadName> {
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

/// A reference to one exact noun version (fields in key order: receipts
/// that cite pins are written by `canonical_sorted`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct Pin {
    /// Key.
    pub key: Name,
    /// Namespace; when absent, the namespace of the task that carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<Name>,
    /// The version's sha256.
    pub sha256: Sha256,
    /// Store.
    pub store: Name,
    /// Version.
    pub version: u64,
}

impl Pin {
    /// The noun it names, with `default_ns` when the pin names none.
    pub fn path(&self, default_ns: &Name) -> NounPath {
        NounPath {
            namespace: self.namespace.clone().unwrap_or_else(|| default_ns.clone()),
            store: self.store.clone(),
            key: self.key.clone(),
        }
    }

    /// The pin with its namespace filled in.
    pub fn qualified(&self, default_ns: &Name) -> Pin {
        Pin {
            namespace: Some(self.namespace.clone().unwrap_or_else(|| default_ns.clone())),
            ..self.clone()
        }
    }
}
