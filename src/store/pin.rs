//! Reading a noun version, by pin (the core crate's `Pin`: `{namespace?,
//! store, key, version, sha256}`) or by number: it checks the recorded
//! hash and the bytes.

use super::{Error, Name, NounPath, Pin, Sha256, VersionEntry};

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
