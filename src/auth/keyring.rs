//! Hashed key records and their in-memory index: issue, list, revoke,
//! authenticate. Records live in `auth/keys/<key_id>.json` (mode 0600) and
//! are loaded once at start; a request's key check never touches the disk.
//!
//! A secret is `tsk_<key_id>_<64 hex>`: the key id finds the record, then
//! the sha256 of the whole secret is compared with the stored hash in
//! constant time. Secrets are 256 random bits, so a fast hash is enough.
//! Failed authentications are counted and logged (sampled, with the
//! reason, never the secret); they are not throttled, since a key cannot
//! be guessed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use cap_std::fs::Dir;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::scope::{GrantSet, Grants, Scope};
use super::throttle::Failures;
use super::{Error, Principal, PrincipalInfo, PrincipalKind};
use crate::store::{self, Name, Sha256, Store};

/// File the first start writes the admin secret to, under `auth/`.
pub const ADMIN_KEY_FILE: &str = "admin.key";

/// The key id a secret names (`tsk_<key_id>_<64 hex>`), when it has that
/// shape; it proves nothing until the keyring checks the whole secret.
pub fn key_id_of(secret: &str) -> Option<&str> {
    secret
        .strip_prefix("tsk_")
        .and_then(|rest| rest.split_once('_'))
        .map(|(id, _)| id)
}

/// A stored key: everything but the secret itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRecord {
    /// The key's id (not secret).
    pub key_id: Name,
    /// A display label; grants nothing.
    pub label: String,
    /// The account the key belongs to, for audit; grants nothing.
    pub account_id: Option<String>,
    /// Who the key was issued to, for audit; grants nothing.
    pub owner: Option<String>,
    /// `service_binding` when issued with a `surface:` scope.
    pub principal_kind: PrincipalKind,
    /// What the key may do.
    pub grants: Grants,
    /// sha256 of the secret.
    pub secret_sha256: Sha256,
    /// Issuance time.
    pub created_at: Timestamp,
    /// After this instant the key is refused.
    pub expires_at: Option<Timestamp>,
    /// Set by revocation; the key is refused from then on.
    pub revoked_at: Option<Timestamp>,
}

/// What issuance asks for.
#[derive(Clone, Debug)]
pub struct IssueRequest {
    /// Display label.
    pub label: String,
    /// Account id for audit.
    pub account_id: Option<String>,
    /// Owner for audit.
    pub owner: Option<String>,
    /// The grants.
    pub grants: Grants,
    /// Optional expiry.
    pub expires_at: Option<Timestamp>,
}

impl IssueRequest {
    /// An admin key with no expiry: the one the first start issues.
    pub fn admin() -> IssueRequest {
        IssueRequest {
            label: "admin".into(),
            account_id: None,
            owner: None,
            grants: Grants {
                scopes: vec![Scope::Admin],
                ..Grants::default()
            },
            expires_at: None,
        }
    }
}

/// The key index: cheap to clone (an `Arc`). The `RwLock` is held only for
/// map lookups and inserts, never across I/O or `.await`.
#[derive(Clone, Debug)]
pub struct Keyring {
    store: Store,
    keys: Arc<RwLock<HashMap<Name, Arc<Entry>>>>,
    failures: Arc<Failures>,
    /// Held by a revocation from its last-admin check through its write,
    /// so two revocations cannot each leave the other as the last admin.
    /// A `std` mutex is enough: revocation runs on the blocking pool and
    /// never awaits.
    revoking: Arc<Mutex<()>>,
    /// Bumped by every revocation, so what a key holds open (an event
    /// stream) ends at once ([`Keyring::unusable`]).
    revoked: Arc<tokio::sync::watch::Sender<u64>>,
}

#[derive(Debug)]
struct Entry {
    record: KeyRecord,
    principal: Principal,
}

impl Entry {
    fn new(record: KeyRecord) -> Arc<Entry> {
        let principal = Principal(Arc::new(PrincipalInfo::new(
            record.key_id.clone(),
            record.account_id.clone(),
            record.principal_kind,
            GrantSet::compile(&record.grants),
            true,
        )));
        Arc::new(Entry { record, principal })
    }
}

impl Keyring {
    /// Loads every key; on a root without keys, creates the admin key and
    /// returns the path its secret was written to.
    pub fn open(store: &Store) -> Result<(Keyring, Option<String>), store::Error> {
        let auth = &store.root().auth;
        crate::store::root::create_dir_if_missing(auth, "keys")?;
        let dir = auth
            .open_dir("keys")
            .map_err(|e| store::io_err("opening auth/keys", e))?;
        let mut keys = HashMap::new();
        for record in load_records(&dir)? {
            keys.insert(record.key_id.clone(), Entry::new(record));
        }
        let ring = Keyring {
            store: store.clone(),
            keys: Arc::new(RwLock::new(keys)),
            failures: Arc::default(),
            revoking: Arc::default(),
            revoked: Arc::new(tokio::sync::watch::Sender::new(0)),
        };
        if !ring
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty()
        {
            return Ok((ring, None));
        }
        let (_, secret) = ring.issue(IssueRequest::admin())?;
        store
            .writer()
            .write_private(auth, ADMIN_KEY_FILE, format!("{secret}\n").as_bytes())?;
        let path = store.root().path.join("auth").join(ADMIN_KEY_FILE);
        Ok((ring, Some(path.display().to_string())))
    }

    /// Issues a key and returns its record and the secret (shown once).
    pub fn issue(&self, req: IssueRequest) -> Result<(KeyRecord, String), store::Error> {
        let key_id = Name::parse("key_id", &format!("k{}", random_hex(8))).expect("valid id");
        let secret = format!("tsk_{key_id}_{}", random_hex(32));
        let has_surface = req
            .grants
            .scopes
            .iter()
            .any(|s| matches!(s, Scope::Surface(_)));
        let record = KeyRecord {
            key_id,
            label: req.label,
            account_id: req.account_id,
            owner: req.owner,
            principal_kind: if has_surface {
                PrincipalKind::ServiceBinding
            } else {
                PrincipalKind::Key
            },
            grants: req.grants,
            secret_sha256: Sha256::of(secret.as_bytes()),
            created_at: Timestamp::now(),
            expires_at: req.expires_at,
            revoked_at: None,
        };
        self.save(&record)?;
        Ok((record, secret))
    }

    /// Revokes a key, durably; later requests with it are refused, and
    /// what it holds open ends ([`Keyring::unusable`]). An admin key can
    /// be revoked only while another admin key stays usable at least as
    /// long as it would have (one that expires sooner does not count), or
    /// no one could issue keys.
    pub fn revoke(&self, key_id: &str) -> Result<KeyRecord, Error> {
        let _one_at_a_time = self
            .revoking
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = self.get(key_id).ok_or(Error::UnknownKey)?;
        let mut record = entry.record.clone();
        if record.revoked_at.is_some() {
            return Ok(record);
        }
        let now = Timestamp::now();
        if entry.principal.is_admin() && usable(&record, now) {
            let other_admin = self
                .keys
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .values()
                .any(|e| {
                    e.record.key_id != record.key_id
                        && e.principal.is_admin()
                        && usable(&e.record, now)
                        && outlasts(&e.record, &record)
                });
            if !other_admin {
                return Err(Error::LastAdminKey);
            }
        }
        record.revoked_at = Some(now);
        self.save(&record)?;
        self.revoked.send_modify(|n| *n += 1);
        Ok(record)
    }

    /// Resolves once `key_id` can no longer be used: at once when it is
    /// unknown, revoked or expired, else at its revocation or expiry.
    pub async fn unusable(&self, key_id: &Name) {
        let mut revocations = self.revoked.subscribe();
        loop {
            let Some(entry) = self.get(key_id.as_str()) else {
                return;
            };
            let now = Timestamp::now();
            if !usable(&entry.record, now) {
                return;
            }
            let left = entry
                .record
                .expires_at
                .map(|t| now.duration_until(t).unsigned_abs());
            tokio::select! {
                changed = revocations.changed() => if changed.is_err() { return },
                () = async {
                    match left {
                        Some(left) => tokio::time::sleep(left).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    }

    /// Every key record, sorted by id.
    pub fn list(&self) -> Vec<KeyRecord> {
        let mut out: Vec<_> = self
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .map(|e| e.record.clone())
            .collect();
        out.sort_by(|a, b| a.key_id.cmp(&b.key_id));
        out
    }

    /// The principal behind a bearer secret, or why it is refused. A
    /// refusal is counted and logged (sampled).
    pub fn authenticate(&self, secret: Option<&str>) -> Result<Principal, Error> {
        let checked = self.check(secret);
        if let Err(Error::Unauthenticated(reason)) = &checked
            && let Some(suppressed) = self.failures.record()
        {
            tracing::info!(
                reason = *reason,
                suppressed,
                failures = self.failures.total(),
                "key authentication failed"
            );
        }
        checked
    }

    /// Failed key authentications since start.
    pub fn failed_authentications(&self) -> u64 {
        self.failures.total()
    }

    fn check(&self, secret: Option<&str>) -> Result<Principal, Error> {
        let secret = secret.ok_or(Error::Unauthenticated("missing bearer credential"))?;
        let key_id = key_id_of(secret).ok_or(Error::Unauthenticated("malformed key"))?;
        let entry = self
            .get(key_id)
            .ok_or(Error::Unauthenticated("unknown key"))?;
        let offered = Sha256::of(secret.as_bytes());
        if !bool::from(
            offered
                .as_bytes()
                .ct_eq(entry.record.secret_sha256.as_bytes()),
        ) {
            return Err(Error::Unauthenticated("unknown key"));
        }
        if entry.record.revoked_at.is_some() {
            return Err(Error::Unauthenticated("key revoked"));
        }
        if entry
            .record
            .expires_at
            .is_some_and(|t| t <= Timestamp::now())
        {
            return Err(Error::Unauthenticated("key expired"));
        }
        Ok(entry.principal.clone())
    }

    /// The principal of a key that is still usable (not revoked or
    /// expired): the authority a worker token acts under is its claimant's.
    pub fn principal(&self, key_id: &Name) -> Result<Principal, Error> {
        let entry = self
            .get(key_id.as_str())
            .ok_or(Error::Unauthenticated("unknown key"))?;
        if entry.record.revoked_at.is_some() {
            return Err(Error::Unauthenticated("the claiming key was revoked"));
        }
        if entry
            .record
            .expires_at
            .is_some_and(|t| t <= Timestamp::now())
        {
            return Err(Error::Unauthenticated("the claiming key expired"));
        }
        Ok(entry.principal.clone())
    }

    fn get(&self, key_id: &str) -> Option<Arc<Entry>> {
        let name = Name::parse("key_id", key_id).ok()?;
        self.keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&name)
            .cloned()
    }

    /// Whether some admin key is neither revoked nor expired.
    pub fn has_usable_admin(&self) -> bool {
        let now = Timestamp::now();
        self.keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .any(|e| e.principal.is_admin() && usable(&e.record, now))
    }

    /// Writes `record` as `auth/keys/<key_id>.json` (mode 0600), durably.
    /// The one writer of key records: issuance, revocation, and
    /// `tessera recover --accept-loss` recording a lost key.
    pub fn write_record(store: &Store, record: &KeyRecord) -> Result<(), store::Error> {
        let dir = store
            .root()
            .auth
            .open_dir("keys")
            .map_err(|e| store::io_err("opening auth/keys", e))?;
        let mut bytes = serde_json::to_vec_pretty(record).expect("records serialize");
        bytes.push(b'\n');
        store
            .writer()
            .write_private(&dir, &format!("{}.json", record.key_id), &bytes)
    }

    fn save(&self, record: &KeyRecord) -> Result<(), store::Error> {
        Keyring::write_record(&self.store, record)?;
        self.keys
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(record.key_id.clone(), Entry::new(record.clone()));
        Ok(())
    }
}

/// Whether a key is neither revoked nor expired at `now`.
fn usable(record: &KeyRecord, now: Timestamp) -> bool {
    record.revoked_at.is_none() && record.expires_at.is_none_or(|t| t > now)
}

/// Whether `other` stays usable at least as long as `key` would.
fn outlasts(other: &KeyRecord, key: &KeyRecord) -> bool {
    match (other.expires_at, key.expires_at) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(o), Some(k)) => o >= k,
    }
}

fn load_records(dir: &Dir) -> Result<Vec<KeyRecord>, store::Error> {
    let mut out = Vec::new();
    for entry in dir
        .entries()
        .map_err(|e| store::io_err("listing auth/keys", e))?
    {
        let entry = entry.map_err(|e| store::io_err("listing auth/keys", e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".json") {
            continue;
        }
        let bytes = dir
            .read(&name)
            .map_err(|e| store::io_err(format!("reading auth/keys/{name}"), e))?;
        let record = serde_json::from_slice(&bytes).map_err(|e| store::Error::CorruptRef {
            path: format!("auth/keys/{name}"),
            message: e.to_string(),
        })?;
        out.push(record);
    }
    Ok(out)
}

/// `n` random bytes from the OS RNG, as lowercase hex.
pub fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).expect("the OS random number generator is available");
    hex::encode(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Access;

    fn open() -> (tempfile::TempDir, Keyring) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Access::Exclusive).unwrap();
        let (ring, _) = Keyring::open(&store).unwrap();
        (dir, ring)
    }

    #[test]
    fn the_last_usable_admin_key_stays() {
        let (_dir, ring) = open();
        let first = ring.list()[0].key_id.clone();
        assert!(matches!(
            ring.revoke(first.as_str()),
            Err(Error::LastAdminKey)
        ));
        let expired = ring
            .issue(IssueRequest {
                expires_at: Some(Timestamp::now() - jiff::SignedDuration::from_secs(1)),
                ..IssueRequest::admin()
            })
            .unwrap()
            .0;
        assert!(
            matches!(ring.revoke(first.as_str()), Err(Error::LastAdminKey)),
            "an expired admin key does not count"
        );
        assert!(
            ring.revoke(expired.key_id.as_str()).is_ok(),
            "it is not usable anyway"
        );
        let (second, _) = ring.issue(IssueRequest::admin()).unwrap();
        assert!(ring.revoke(first.as_str()).is_ok());
        assert!(
            ring.revoke(first.as_str()).is_ok(),
            "revoking again changes nothing"
        );
        assert!(matches!(
            ring.revoke(second.key_id.as_str()),
            Err(Error::LastAdminKey)
        ));
    }

    #[test]
    fn an_admin_key_that_expires_sooner_does_not_count_as_another_admin() {
        let (_dir, ring) = open();
        let permanent = ring.list()[0].key_id.clone();
        let at = |s: i64| Some(Timestamp::now() + jiff::SignedDuration::from_secs(s));
        let issue = |expires_at| {
            ring.issue(IssueRequest {
                expires_at,
                ..IssueRequest::admin()
            })
            .unwrap()
            .0
            .key_id
        };
        let soon = issue(at(2));
        assert!(
            matches!(ring.revoke(permanent.as_str()), Err(Error::LastAdminKey)),
            "an admin key that expires in 2 s would leave no admin"
        );
        let later = issue(at(3600));
        assert!(matches!(
            ring.revoke(permanent.as_str()),
            Err(Error::LastAdminKey)
        ));
        assert!(
            ring.revoke(soon.as_str()).is_ok(),
            "the permanent key outlasts it"
        );
        assert!(ring.revoke(later.as_str()).is_ok());
        let second = issue(None);
        assert!(
            ring.revoke(permanent.as_str()).is_ok(),
            "another permanent one"
        );
        issue(at(3600));
        assert!(matches!(
            ring.revoke(second.as_str()),
            Err(Error::LastAdminKey)
        ));
    }

    #[test]
    fn failed_authentications_are_counted() {
        let (_dir, ring) = open();
        let (_, secret) = ring.issue(IssueRequest::admin()).unwrap();
        assert!(ring.authenticate(Some(&secret)).is_ok());
        for bad in [None, Some("tsk_nope"), Some("garbage")] {
            assert!(ring.authenticate(bad).is_err());
        }
        assert_eq!(ring.failed_authentications(), 3);
    }
}
