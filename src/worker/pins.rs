//! Pins the daemon dereferences on a task's behalf (brief pins at enqueue
//! and at submit, a resume's new input, a submit's outputs and evidence)
//! are read as the principal responsible for them: the requester, the
//! resumer, the submitter. A pin that principal may not read is refused
//! exactly as a missing one, so a pin never reveals a hidden noun.
//! [`check`] only looks at the version lists (a pin that must name a
//! readable version); [`read`] also reads and re-hashes the bodies.

use super::Error;
use crate::auth::{Principal, access};
use crate::store::{self, Name, Pin, Store, VersionEntry};

/// What a pin read as `p` checks before the store is touched (with `ns`
/// the namespace of a pin naming none): `nouns:read` and the namespace,
/// so a missing noun and a present one answer these alike.
fn may_read(p: &Principal, pin: &Pin, ns: &Name) -> Result<(), Error> {
    Ok(access::may_read_nouns(
        p,
        pin.namespace.as_ref().unwrap_or(ns),
    )?)
}

/// Reads the bytes `pin` names as `p` would (namespace, `nouns:read`,
/// visibility, quarantine), with `ns` as the namespace of a pin naming none.
pub fn read_as(store: &Store, p: &Principal, pin: &Pin, ns: &Name) -> Result<Vec<u8>, Error> {
    may_read(p, pin, ns)?;
    Ok(store.read_pin(pin, ns, |e| access::read_noun(p, e).is_ok())?)
}

/// The version entry `pin` names, as `p` would read it (no body read).
pub fn entry_as(store: &Store, p: &Principal, pin: &Pin, ns: &Name) -> Result<VersionEntry, Error> {
    may_read(p, pin, ns)?;
    Ok(
        store.version_entry(&pin.path(ns), Some(pin.version), Some(pin.sha256), |e| {
            access::read_noun(p, e).is_ok()
        })?,
    )
}

/// Whether an error reading a pin means "not readable by this key"
/// (missing, hidden, forbidden, or a version without the pinned hash)
/// rather than a failure of the store.
pub fn is_unreadable(e: &Error) -> bool {
    matches!(
        e,
        Error::Store(
            store::Error::NounNotFound
                | store::Error::VersionNotFound { .. }
                | store::Error::PinMismatch { .. }
        ) | Error::Auth(crate::auth::Error::Hidden | crate::auth::Error::Forbidden(_))
    )
}

/// Checks that every pin names an existing version with that sha256,
/// readable by `p`, without reading the bodies. A pin `p` may not read
/// answers exactly as a missing one.
pub async fn check(
    store: &Store,
    p: &Principal,
    ns: &Name,
    pins: Vec<(String, Pin)>,
) -> Result<(), Error> {
    each(store, p, ns, pins, entry_as).await.map(|_| ())
}

/// [`check`], and the bodies in order.
pub async fn read(
    store: &Store,
    p: &Principal,
    ns: &Name,
    pins: Vec<(String, Pin)>,
) -> Result<Vec<Vec<u8>>, Error> {
    each(store, p, ns, pins, |store, p, pin, ns| {
        read_as(store, p, pin, ns)
    })
    .await
}

/// Runs `one` on each pin on the blocking pool, turning a refusal into
/// `InvalidPin` for that pin's field.
async fn each<T: Send + 'static>(
    store: &Store,
    p: &Principal,
    ns: &Name,
    pins: Vec<(String, Pin)>,
    one: fn(&Store, &Principal, &Pin, &Name) -> Result<T, Error>,
) -> Result<Vec<T>, Error> {
    if pins.is_empty() {
        return Ok(Vec::new());
    }
    let (p, ns) = (p.clone(), ns.clone());
    store
        .blocking(move |store| {
            let mut out = Vec::with_capacity(pins.len());
            for (field, pin) in pins {
                let reason = match one(store, &p, &pin, &ns) {
                    Ok(v) => {
                        out.push(v);
                        continue;
                    }
                    Err(Error::Store(store::Error::PinMismatch { version, .. })) => {
                        format!("version {version} does not have the pinned sha256")
                    }
                    Err(Error::Store(
                        store::Error::NounNotFound | store::Error::VersionNotFound { .. },
                    ))
                    | Err(Error::Auth(crate::auth::Error::Hidden)) => {
                        "no such noun version is visible to this key".into()
                    }
                    Err(Error::Auth(crate::auth::Error::Forbidden(m))) => m,
                    Err(e) => return Err(e),
                };
                return Err(Error::InvalidPin {
                    field,
                    reason,
                    pin: Box::new(pin),
                });
            }
            Ok(out)
        })
        .await
}
