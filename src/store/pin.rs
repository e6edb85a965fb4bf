//! `Pin`: `{namespace?, store, key, version, sha256}`, a reference to one
//! exact noun version. Reading by pin checks the recorded hash and the bytes.

use serde::{Deserialize, Serialize};

use super::{Error, Name, NounPath, Sha256};

/// A reference to one exact noun version.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    /// Namespace; when absent, the namespace of the task that carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<Name>,
    /// Store.
    pub store: Name,
    /// Key.
    pub key: Name,
    /// Version.
    pub version: u64,
    /// The version's sha256.
    pub sha256: Sha256,
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
    /// Reads the bytes a pin names, checking that the version exists, that
    /// its recorded hash is the pin's, and (by `read_body`) that the bytes
    /// hash to it. `authorize` sees the version entry before any bytes are read.
    pub fn read_pin<E: From<Error>>(
        &self,
        pin: &Pin,
        default_ns: &Name,
        authorize: impl FnOnce(&super::VersionEntry) -> Result<(), E>,
    ) -> Result<Vec<u8>, E> {
        let path = pin.path(default_ns);
        let noun = self.read_ref(&path)?.ok_or(Error::NounNotFound)?;
        let Some(entry) = noun.version(pin.version) else {
            authorize(noun.latest())?;
            return Err(Error::VersionNotFound {
                version: pin.version,
                latest: noun.latest().version,
            }
            .into());
        };
        authorize(entry)?;
        if entry.sha256 != pin.sha256 {
            return Err(Error::PinMismatch {
                version: pin.version,
                expected: pin.sha256,
                actual: entry.sha256,
            }
            .into());
        }
        Ok(self.read_body(entry)?)
    }
}
