//! Pins the daemon dereferences on a task's behalf (brief pins at enqueue
//! and at submit, a resume's new input, a submit's outputs and evidence)
//! are read as the principal responsible for them: the requester, the
//! resumer, the submitter. A pin that principal may not read is refused
//! exactly as a missing one, so a pin never reveals a hidden noun.

use super::Error;
use crate::auth::{Principal, access};
use crate::store::{self, Name, Pin, Store};

/// Reads the bytes `pin` names as `p` would (namespace, `nouns:read`,
/// visibility, quarantine), with `ns` as the namespace of a pin naming none.
pub fn read_as(store: &Store, p: &Principal, pin: &Pin, ns: &Name) -> Result<Vec<u8>, Error> {
    let pin_ns = pin.namespace.as_ref().unwrap_or(ns);
    store.read_pin::<Error>(pin, ns, |entry| {
        access::may_read_nouns(p, pin_ns)?;
        Ok(access::read_noun(p, entry)?)
    })
}

/// Checks that every pin names an existing version with that sha256,
/// readable by `p`, and returns their bytes in order. A pin `p` may not
/// read answers exactly as a missing one.
pub async fn check(
    store: &Store,
    p: &Principal,
    ns: &Name,
    pins: Vec<(String, Pin)>,
) -> Result<Vec<Vec<u8>>, Error> {
    if pins.is_empty() {
        return Ok(Vec::new());
    }
    let (p, ns) = (p.clone(), ns.clone());
    store
        .blocking(move |store| {
            let mut read_all = Vec::with_capacity(pins.len());
            for (field, pin) in pins {
                let reason = match read_as(store, &p, &pin, &ns) {
                    Ok(bytes) => {
                        read_all.push(bytes);
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
            Ok(read_all)
        })
        .await
}
