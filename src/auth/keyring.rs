//! Hashed key records and their in-memory index: issue, list, revoke,
//! authenticate. Records live in `auth/keys/<key_id>.json` (mode 0600),
//! or in the database several daemons share (`--queue-url`,
//! [`super::shared`]); they are loaded once at start, and a request's key
//! check works from memory (on the shared database, from a look at most
//! [`FRESH`] old, and a key not seen yet is read by its id).
//!
//! A secret is `tsk_<key_id>_<64 hex>`: the key id finds the record, then
//! the sha256 of the whole secret is compared with the stored hash in
//! constant time. Secrets are 256 random bits, so a fast hash is enough.
//! Failed authentications are counted and logged (sampled, with the
//! reason, never the secret); they are not throttled, since a key cannot
//! be guessed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use cap_std::fs::Dir;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::scope::{GrantSet, Grants, Scope};
use super::shared::{self, Mark};
use super::throttle::Failures;
use super::{Error, Principal, PrincipalInfo, PrincipalKind};
use crate::database::Database;
use crate::store::{self, Name, Sha256, Store};

/// On the shared database, a request trusts the keys it sees only when
/// they were looked at this recently: a revocation on any daemon is
/// refused on every other within this long of its commit.
pub const FRESH: Duration = Duration::from_secs(1);

/// How often each daemon looks for keys changed on the others.
const LOOK_EVERY: Duration = Duration::from_millis(250);

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
    records: Records,
    keys: Arc<RwLock<Keys>>,
    failures: Arc<Failures>,
    /// Held by a revocation on a root from its last-admin check through
    /// its write, so two revocations cannot each leave the other as the
    /// last admin (the shared database decides under a lock of its own).
    /// A `std` mutex is enough: a root's revocation runs on the blocking
    /// pool and never awaits.
    revoking: Arc<Mutex<()>>,
    /// Bumped by every revocation (and every change a look at the shared
    /// database finds), so what a key holds open (an event stream) ends
    /// at once ([`Keyring::unusable`]).
    revoked: Arc<tokio::sync::watch::Sender<u64>>,
}

type Keys = HashMap<Name, Arc<Entry>>;

/// Where the records are kept.
#[derive(Clone, Debug)]
enum Records {
    /// `auth/keys/` under the root.
    Root(Store),
    /// The shared database, looked at by this daemon.
    Shared(Arc<Tail>),
}

/// This daemon's looks at the shared database's keys.
#[derive(Debug)]
struct Tail {
    db: Database,
    /// When the tail was made: the origin of `fresh_until`.
    epoch: Instant,
    /// Until when (ms after `epoch`) the last look is fresh enough.
    fresh_until: AtomicU64,
    /// The last look's mark and the last failure; held through a look, so
    /// one runs at a time.
    looked: tokio::sync::Mutex<Looked>,
}

#[derive(Debug)]
struct Looked {
    mark: Mark,
    /// The last look that failed: when, and why.
    failed: Option<(Instant, String)>,
}

impl Tail {
    fn is_fresh(&self) -> bool {
        self.epoch.elapsed().as_millis() < u128::from(self.fresh_until.load(Ordering::Acquire))
    }

    fn looked_at(&self, at: Instant) {
        let until = (at + FRESH).duration_since(self.epoch).as_millis();
        self.fresh_until
            .store(u64::try_from(until).unwrap_or(u64::MAX), Ordering::Release);
    }
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
        let ring = Keyring::with(Records::Root(store.clone()), load_records(&dir)?);
        if !ring.read().is_empty() {
            return Ok((ring, None));
        }
        let (record, secret) = new_key(IssueRequest::admin());
        Keyring::write_record(store, &record)?;
        ring.remember(record);
        Ok((ring, Some(write_admin_key(store, &secret)?)))
    }

    /// Loads every key from the shared database, and keeps looking for
    /// changes made on other daemons. A database with no keys yet is
    /// given this root's records (a root moving to the shared database
    /// keeps its keys), or a new admin key whose secret goes to this
    /// root's `auth/admin.key` (whose path is returned).
    pub async fn shared(db: &Database, store: &Store) -> Result<(Keyring, Option<String>), Error> {
        let on_root = match store.root().auth.open_dir("keys") {
            Ok(dir) => load_records(&dir)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(store::io_err("opening auth/keys", e).into()),
        };
        let moved = on_root.len();
        let mut admin_secret = None;
        let seeded = shared::seed(db, || {
            if on_root.is_empty() {
                let (record, secret) = new_key(IssueRequest::admin());
                admin_secret = Some(secret);
                vec![record]
            } else {
                on_root
            }
        })
        .await?;
        let path = match (seeded, admin_secret) {
            (true, Some(secret)) => Some(write_admin_key(store, &secret)?),
            (true, None) => {
                tracing::info!(
                    keys = moved,
                    "the shared database had no keys: it holds this root's key records from now on (auth/keys/ is no longer read)"
                );
                None
            }
            (false, _) => None,
        };
        let started = Instant::now();
        let look = shared::load_all(db).await?;
        let tail = Arc::new(Tail {
            db: db.clone(),
            epoch: Instant::now(),
            fresh_until: AtomicU64::new(0),
            looked: tokio::sync::Mutex::new(Looked {
                mark: look.mark,
                failed: None,
            }),
        });
        tail.looked_at(started);
        let ring = Keyring::with(Records::Shared(tail.clone()), look.records);
        tokio::spawn(keep_looking(
            Arc::downgrade(&tail),
            Arc::downgrade(&ring.keys),
            ring.revoked.clone(),
        ));
        Ok((ring, path))
    }

    fn with(records: Records, loaded: Vec<KeyRecord>) -> Keyring {
        let keys = loaded
            .into_iter()
            .map(|r| (r.key_id.clone(), Entry::new(r)))
            .collect();
        Keyring {
            records,
            keys: Arc::new(RwLock::new(keys)),
            failures: Arc::default(),
            revoking: Arc::default(),
            revoked: Arc::new(tokio::sync::watch::Sender::new(0)),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Keys> {
        self.keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Issues a key and returns its record and the secret (shown once).
    pub async fn issue(&self, req: IssueRequest) -> Result<(KeyRecord, String), Error> {
        let (record, secret) = new_key(req);
        match &self.records {
            Records::Root(store) => {
                let written = record.clone();
                store
                    .blocking(move |store| Keyring::write_record(store, &written))
                    .await?;
            }
            Records::Shared(tail) => shared::insert(&tail.db, &record).await?,
        }
        self.remember(record.clone());
        Ok((record, secret))
    }

    /// Revokes a key, durably; later requests with it are refused, and
    /// what it holds open ends ([`Keyring::unusable`]). An admin key can
    /// be revoked only while another admin key stays usable at least as
    /// long as it would have (one that expires sooner does not count), or
    /// no one could issue keys.
    pub async fn revoke(&self, key_id: &str) -> Result<KeyRecord, Error> {
        let now = Timestamp::now();
        let key_id = key_id.to_string();
        let (record, changed) = match &self.records {
            Records::Root(store) => {
                let ring = self.clone();
                store
                    .blocking(move |store| {
                        let _one_at_a_time = ring
                            .revoking
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        let all: Vec<KeyRecord> =
                            ring.read().values().map(|e| e.record.clone()).collect();
                        let (record, changed) = revocation(&all, &key_id, now)?;
                        if changed {
                            Keyring::write_record(store, &record)?;
                            ring.remember(record.clone());
                        }
                        Ok::<_, Error>((record, changed))
                    })
                    .await?
            }
            Records::Shared(tail) => {
                let decided = shared::revoke(&tail.db, |all| {
                    let (record, changed) = revocation(&all, &key_id, now)?;
                    let write = changed.then(|| record.clone());
                    Ok::<_, Error>(((record, changed), write))
                })
                .await??;
                if decided.1 {
                    self.remember(decided.0.clone());
                }
                decided
            }
        };
        if changed {
            self.revoked.send_modify(|n| *n += 1);
        }
        Ok(record)
    }

    fn remember(&self, record: KeyRecord) {
        merge(&self.keys, [record]);
    }
}

/// A new key's record and its secret (nothing is written).
pub(super) fn new_key(req: IssueRequest) -> (KeyRecord, String) {
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
    (record, secret)
}

/// Writes a new admin key's secret to `auth/admin.key` (mode 0600) and
/// answers the file's path.
fn write_admin_key(store: &Store, secret: &str) -> Result<String, store::Error> {
    store.writer().write_private(
        &store.root().auth,
        ADMIN_KEY_FILE,
        format!("{secret}\n").as_bytes(),
    )?;
    let path = store.root().path.join("auth").join(ADMIN_KEY_FILE);
    Ok(path.display().to_string())
}

/// The revocation of `key_id` decided over every record: the record as
/// it is to be (and whether that is a change: revoking again changes
/// nothing), or why it may not be revoked.
fn revocation(all: &[KeyRecord], key_id: &str, now: Timestamp) -> Result<(KeyRecord, bool), Error> {
    let mut record = all
        .iter()
        .find(|r| r.key_id.as_str() == key_id)
        .ok_or(Error::UnknownKey)?
        .clone();
    if record.revoked_at.is_some() {
        return Ok((record, false));
    }
    if is_admin(&record) && usable(&record, now) {
        let other_admin = all.iter().any(|e| {
            e.key_id != record.key_id && is_admin(e) && usable(e, now) && outlasts(e, &record)
        });
        if !other_admin {
            return Err(Error::LastAdminKey);
        }
    }
    record.revoked_at = Some(now);
    Ok((record, true))
}

/// Takes each record into `keys` unless what is there is newer, and
/// answers whether anything changed. A record changes only by being
/// revoked, so a revoked copy is never replaced by an unrevoked one,
/// whichever order reads of the shared database arrive in.
fn merge(keys: &RwLock<Keys>, records: impl IntoIterator<Item = KeyRecord>) -> bool {
    let mut keys = keys
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut changed = false;
    for record in records {
        let newer = keys.get(&record.key_id).is_none_or(|e| {
            e.record != record && !(e.record.revoked_at.is_some() && record.revoked_at.is_none())
        });
        if newer {
            keys.insert(record.key_id.clone(), Entry::new(record));
            changed = true;
        }
    }
    changed
}

/// Whether a record grants `admin`.
fn is_admin(record: &KeyRecord) -> bool {
    record.grants.scopes.contains(&Scope::Admin)
}

/// Looks at the shared database's keys every [`LOOK_EVERY`] while the
/// keyring lives, so requests find a fresh look ready.
async fn keep_looking(
    tail: Weak<Tail>,
    keys: Weak<RwLock<Keys>>,
    revoked: Arc<tokio::sync::watch::Sender<u64>>,
) {
    let mut every = tokio::time::interval(LOOK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let (Some(tail), Some(keys)) = (tail.upgrade(), keys.upgrade()) else {
            return;
        };
        // A failure is kept and answered to requests until a look works.
        let _ = look(&tail, &keys, &revoked, true).await;
    }
}

/// Applies a look at the records changed since the last one; with
/// `always`, looks even when the last look is still fresh. A request
/// that finds the last look stale waits for this one; when the last one
/// failed under [`LOOK_EVERY`] ago, its failure is answered at once.
async fn look(
    tail: &Tail,
    keys: &RwLock<Keys>,
    revoked: &tokio::sync::watch::Sender<u64>,
    always: bool,
) -> Result<(), Error> {
    let mut looked = tail.looked.lock().await;
    if !always && tail.is_fresh() {
        return Ok(());
    }
    if let Some((at, why)) = &looked.failed
        && !always
        && at.elapsed() < LOOK_EVERY
    {
        return Err(Error::KeysUnavailable(why.clone()));
    }
    let started = Instant::now();
    match shared::changed_since(&tail.db, looked.mark).await {
        Ok(found) => {
            if merge(keys, found.records) {
                revoked.send_modify(|n| *n += 1);
            }
            if looked.failed.take().is_some() {
                tracing::info!("the shared database's keys can be read again");
            }
            looked.mark = found.mark;
            tail.looked_at(started);
            Ok(())
        }
        Err(e) => {
            let why = e.to_string();
            if looked.failed.is_none() {
                tracing::warn!(error = %why, "cannot read the shared database's keys; key checks answer 503 until it can be read");
            }
            looked.failed = Some((Instant::now(), why.clone()));
            Err(Error::KeysUnavailable(why))
        }
    }
}

impl Keyring {
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

    /// Every key record, sorted by id: on the shared database, as it is
    /// now (an admin who revoked a key on one daemon lists it revoked on
    /// any other at once).
    pub async fn list(&self) -> Result<Vec<KeyRecord>, Error> {
        if let Records::Shared(tail) = &self.records {
            merge(&self.keys, shared::load_all(&tail.db).await?.records);
        }
        let mut out: Vec<_> = self.read().values().map(|e| e.record.clone()).collect();
        out.sort_by(|a, b| a.key_id.cmp(&b.key_id));
        Ok(out)
    }

    /// The principal behind a bearer secret, or why it is refused. A
    /// refusal is counted and logged (sampled).
    pub async fn authenticate(&self, secret: Option<&str>) -> Result<Principal, Error> {
        let checked = self.check(secret).await;
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

    async fn check(&self, secret: Option<&str>) -> Result<Principal, Error> {
        let secret = secret.ok_or(Error::Unauthenticated("missing bearer credential"))?;
        let key_id = key_id_of(secret).ok_or(Error::Unauthenticated("malformed key"))?;
        let entry = self
            .entry(key_id)
            .await?
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
    pub async fn principal(&self, key_id: &Name) -> Result<Principal, Error> {
        let entry = self
            .entry(key_id.as_str())
            .await?
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

    /// The principal of `key_id` while it is usable, `None` once it is
    /// not (revoked, expired, unknown): for what a task's requester
    /// still lends to work on it. Only keys that cannot be read now are
    /// an error, never taken for an unusable key.
    pub async fn usable_principal(&self, key_id: &Name) -> Result<Option<Principal>, Error> {
        match self.principal(key_id).await {
            Ok(p) => Ok(Some(p)),
            Err(Error::Unauthenticated(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The entry of `key_id` as of a fresh look: on the shared database,
    /// one this daemon has not seen yet is read by its id.
    async fn entry(&self, key_id: &str) -> Result<Option<Arc<Entry>>, Error> {
        self.fresh().await?;
        if let Some(entry) = self.get(key_id) {
            return Ok(Some(entry));
        }
        let Records::Shared(tail) = &self.records else {
            return Ok(None);
        };
        if Name::parse("key_id", key_id).is_err() {
            return Ok(None);
        }
        let Some(record) = shared::get(&tail.db, key_id).await? else {
            return Ok(None);
        };
        self.remember(record);
        Ok(self.get(key_id))
    }

    /// Whether keys can be checked now (`/healthz`): on the shared
    /// database, whether a look at them is fresh or can be made.
    pub async fn ready(&self) -> Result<(), Error> {
        self.fresh().await
    }

    /// On the shared database, waits for a fresh look when the last one
    /// is older than [`FRESH`].
    async fn fresh(&self) -> Result<(), Error> {
        match &self.records {
            Records::Shared(tail) if !tail.is_fresh() => {
                look(tail, &self.keys, &self.revoked, false).await
            }
            _ => Ok(()),
        }
    }

    fn get(&self, key_id: &str) -> Option<Arc<Entry>> {
        let name = Name::parse("key_id", key_id).ok()?;
        self.read().get(&name).cloned()
    }

    /// Whether some admin key is neither revoked nor expired.
    pub fn has_usable_admin(&self) -> bool {
        let now = Timestamp::now();
        self.read()
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

    #[tokio::test]
    async fn the_last_usable_admin_key_stays() {
        let (_dir, ring) = open();
        let first = ring.list().await.unwrap()[0].key_id.clone();
        assert!(matches!(
            ring.revoke(first.as_str()).await,
            Err(Error::LastAdminKey)
        ));
        let expired = ring
            .issue(IssueRequest {
                expires_at: Some(Timestamp::now() - jiff::SignedDuration::from_secs(1)),
                ..IssueRequest::admin()
            })
            .await
            .unwrap()
            .0;
        assert!(
            matches!(ring.revoke(first.as_str()).await, Err(Error::LastAdminKey)),
            "an expired admin key does not count"
        );
        assert!(
            ring.revoke(expired.key_id.as_str()).await.is_ok(),
            "it is not usable anyway"
        );
        let (second, _) = ring.issue(IssueRequest::admin()).await.unwrap();
        assert!(ring.revoke(first.as_str()).await.is_ok());
        assert!(
            ring.revoke(first.as_str()).await.is_ok(),
            "revoking again changes nothing"
        );
        assert!(matches!(
            ring.revoke(second.key_id.as_str()).await,
            Err(Error::LastAdminKey)
        ));
    }

    #[tokio::test]
    async fn an_admin_key_that_expires_sooner_does_not_count_as_another_admin() {
        let (_dir, ring) = open();
        let permanent = ring.list().await.unwrap()[0].key_id.clone();
        let at = |s: i64| Some(Timestamp::now() + jiff::SignedDuration::from_secs(s));
        let issue = async |expires_at| {
            ring.issue(IssueRequest {
                expires_at,
                ..IssueRequest::admin()
            })
            .await
            .unwrap()
            .0
            .key_id
        };
        let soon = issue(at(2)).await;
        assert!(
            matches!(
                ring.revoke(permanent.as_str()).await,
                Err(Error::LastAdminKey)
            ),
            "an admin key that expires in 2 s would leave no admin"
        );
        let later = issue(at(3600)).await;
        assert!(matches!(
            ring.revoke(permanent.as_str()).await,
            Err(Error::LastAdminKey)
        ));
        assert!(
            ring.revoke(soon.as_str()).await.is_ok(),
            "the permanent key outlasts it"
        );
        assert!(ring.revoke(later.as_str()).await.is_ok());
        let second = issue(None).await;
        assert!(
            ring.revoke(permanent.as_str()).await.is_ok(),
            "another permanent one"
        );
        issue(at(3600)).await;
        assert!(matches!(
            ring.revoke(second.as_str()).await,
            Err(Error::LastAdminKey)
        ));
    }

    #[tokio::test]
    async fn failed_authentications_are_counted() {
        let (_dir, ring) = open();
        let (_, secret) = ring.issue(IssueRequest::admin()).await.unwrap();
        assert!(ring.authenticate(Some(&secret)).await.is_ok());
        for bad in [None, Some("tsk_nope"), Some("garbage")] {
            assert!(ring.authenticate(bad).await.is_err());
        }
        assert_eq!(ring.failed_authentications(), 3);
    }
}
