//! `Pin`: `{namespace?, store, key, version, sha256}`, a reference to one
//! exact noun version. Reading by pin checks the recorded hash and the bytes.

use serde::{Deserialize, Serialize};

use super::{Error, Name, NounPath, Sha256, VersionEntry};

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

impl super::Store {
    /// Reads one version of a noun (the latest when `version` is `None`),
    /// checking it against `sha256` when one is given: the one read path
    /// behind `GET /v1/nouns/...` and every pin. The reader sees only the
    /// versions `sees` accepts ([`NounRef::seen_by`](super::NounRef::seen_by)): one it may not see
    /// answers as one never written (`VersionNotFound` naming the latest
    /// it sees, or `NounNotFound` when it sees none), and "the latest" is
    /// the latest it sees. The caller checks what needs no record (scopes,
    /// namespace) first. The bytes are verified by `read_body`.
    pub fn read_version(
        &self,
        path: &NounPath,
        version: Option<u64>,
        sha256: Option<Sha256>,
        sees: impl Fn(&VersionEntry) -> bool,
    ) -> Result<(VersionEntry, Vec<u8>), Error> {
        let entry = self.version_entry(path, version, sha256, sees)?;
        let bytes = self.read_body(&entry)?;
        Ok((entry, bytes))
    }

    /// The entry [`read_version`](Self::read_version) would read, with the
    /// same checks and answers, without reading the body: for pins that
    /// only need to name a readable version (a brief's, a resume's).
    pub fn version_entry(
        &self,
        path: &NounPath,
        version: Option<u64>,
        sha256: Option<Sha256>,
        sees: impl Fn(&VersionEntry) -> bool,
    ) -> Result<VersionEntry, Error> {
        let noun = self
            .read_ref(path)?
            .and_then(|n| n.seen_by(sees))
            .ok_or(Error::NounNotFound)?;
        let entry = match version {
            None => noun.latest(),
            Some(v) => noun.version(v).ok_or(Error::VersionNotFound {
                version: v,
                latest: noun.latest().version,
            })?,
        };
        if let Some(expected) = sha256
            && expected != entry.sha256
        {
            return Err(Error::PinMismatch {
                version: entry.version,
                expected,
                actual: entry.sha256,
            });
        }
        Ok(entry.clone())
    }

    /// Reads the bytes a pin names (see [`read_version`](Self::read_version)).
    pub fn read_pin(
        &self,
        pin: &Pin,
        default_ns: &Name,
        sees: impl Fn(&VersionEntry) -> bool,
    ) -> Result<Vec<u8>, Error> {
        let path = pin.path(default_ns);
        let (_, bytes) = self.read_version(&path, Some(pin.version), Some(pin.sha256), sees)?;
        Ok(bytes)
    }
}
