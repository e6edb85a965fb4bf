//! What `auth/` must hold, judged against what the rest of the root proves
//! existed: every key record parses and is the key its file is named for;
//! `admin.key` is the secret of an admin key that has a record; the token
//! secret parses (`token::parse_secret`: its bytes hash to the sum beside
//! them). A file that is missing while something durable
//! names it (a task's requester, claimant or parker names a key id; a live
//! claim's worker token was minted with the secret; `admin.key` names its
//! key) is a loss the start refuses rather than papering over: a missing
//! key record would silently stop the key working (and on a root with no
//! record left, the start would issue a new admin key and overwrite
//! `admin.key`), a missing secret would be made again and every live
//! worker token would die.
//!
//! A fresh root has none of these files: the first start creates the
//! admin key and then the secret, so only durable evidence, never the
//! absence of a file alone, makes a missing one a problem. The caller
//! gathers that evidence as plain values ([`Expected`]); this module reads
//! `auth/` only, and writes it only in [`accept_loss`], which an operator
//! asks for explicitly (`tessera recover --accept-loss`).

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::keyring::{ADMIN_KEY_FILE, KeyRecord, key_id_of, new_key, random_hex};
use super::scope::{Grants, Scope};
use super::token::SECRET_FILE;
use super::{IssueRequest, Keyring, PrincipalKind};
use crate::store::{self, Name, Sha256, Store};

/// What durable records outside `auth/` say must be in it.
#[derive(Clone, Debug, Default)]
pub struct Expected {
    /// Each key id something durable names, with the first record seen
    /// naming it (for messages: "task t7's requester").
    pub keys: BTreeMap<Name, String>,
    /// A live claim whose worker token was minted with the token secret
    /// (for messages), if there is one.
    pub live_claim: Option<String>,
}

impl Expected {
    /// Notes that `what` names key `id` (the first naming is kept).
    pub fn key(&mut self, id: &Name, what: impl FnOnce() -> String) {
        self.keys.entry(id.clone()).or_insert_with(what);
    }
}

/// One problem with a file under `auth/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The file, relative to the root.
    pub path: String,
    /// What is wrong and what to do.
    pub message: String,
    /// Whether the daemon refuses to start on it.
    pub blocks_start: bool,
    /// What `--accept-loss` would do about it, when it can.
    pub loss: Option<Loss>,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// A loss an operator may accept instead of restoring the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loss {
    /// The key record is gone: record the key as lost and revoked.
    KeyRecord(Name),
    /// The token secret is gone: make a new one.
    TokenSecret,
    /// Every key record is gone: a new admin key is issued.
    EveryKey,
}

const ACCEPT: &str = "`tessera recover --accept-loss` (daemon stopped)";

/// Every problem with `auth/` given `expected`, in file order.
pub fn check(store: &Store, expected: &Expected) -> Result<Vec<Problem>, store::Error> {
    let auth = &store.root().auth;
    let mut problems = Vec::new();
    let records = records(store, &mut problems)?;
    for (id, named_by) in &expected.keys {
        if !records.contains_key(id) {
            problems.push(Problem {
                path: format!("auth/keys/{id}.json"),
                message: format!(
                    "missing, but {named_by} names key {id}: restore the file from a backup, or accept that the key is gone with {ACCEPT}, which records it as revoked"
                ),
                blocks_start: true,
                loss: Some(Loss::KeyRecord(id.clone())),
            });
        }
    }
    let secret_exists = auth.exists(SECRET_FILE);
    if records.is_empty() && expected.keys.is_empty() && secret_exists {
        problems.push(Problem {
            path: "auth/keys/".into(),
            message: format!(
                "holds no key record, but auth/{SECRET_FILE} exists, which the first start makes after the admin key: restore auth/keys/ from a backup, or accept that every key is gone with {ACCEPT}, which issues a new admin key"
            ),
            blocks_start: true,
            loss: Some(Loss::EveryKey),
        });
    }
    match auth.read_to_string(ADMIN_KEY_FILE) {
        Ok(text) => admin_key(&text, &records, &mut problems),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => problems.push(Problem {
            path: format!("auth/{ADMIN_KEY_FILE}"),
            message: format!("cannot be read: {e}"),
            blocks_start: false,
            loss: None,
        }),
    }
    match auth.read(SECRET_FILE).map(|b| super::token::parse_secret(&b)) {
        Ok(Ok(_)) => {}
        Ok(Err(why)) => problems.push(Problem {
            path: format!("auth/{SECRET_FILE}"),
            message: format!(
                "{why}: restore it from a backup, or remove it and accept that every live worker token stops working (a new secret is made at start)"
            ),
            blocks_start: true,
            loss: None,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(claim) = &expected.live_claim {
                problems.push(Problem {
                    path: format!("auth/{SECRET_FILE}"),
                    message: format!(
                        "missing, but {claim} holds a worker token minted with it: restore the file from a backup, or accept that every live worker token stops working with {ACCEPT}, which makes a new secret (handles keep working)"
                    ),
                    blocks_start: true,
                    loss: Some(Loss::TokenSecret),
                });
            }
        }
        Err(e) => problems.push(Problem {
            path: format!("auth/{SECRET_FILE}"),
            message: format!("cannot be read: {e}"),
            blocks_start: true,
            loss: None,
        }),
    }
    Ok(problems)
}

/// Every problem with the keys and the token secret in the shared
/// database (as `shared::audit` read them) given `expected`. Nothing here
/// blocks a start: the rows live with the tasks that name them, so one is
/// missing only when it was deleted by hand.
pub fn check_shared(audit: &super::shared::Audit, expected: &Expected) -> Vec<Problem> {
    let rows = &audit.rows;
    let problem = |path: String, message: String| Problem {
        path,
        message,
        blocks_start: false,
        loss: None,
    };
    let mut problems = Vec::new();
    for (id, record) in rows {
        match record {
            Err(e) => problems.push(problem(
                format!("keys row {id}"),
                format!("is not a key record ({e}); was it changed by hand?"),
            )),
            Ok(r) if r.key_id.as_str() != id => problems.push(problem(
                format!("keys row {id}"),
                format!("holds the record of key {}", r.key_id),
            )),
            Ok(_) => {}
        }
    }
    for (id, named_by) in &expected.keys {
        if !rows.iter().any(|(row, _)| row == id.as_str()) {
            problems.push(problem(
                format!("keys row {id}"),
                format!("missing, but {named_by} names key {id}: was it deleted by hand? Restore the database from a backup"),
            ));
        }
    }
    match audit.secret.as_deref().map(super::token::parse_secret) {
        Some(Ok(_)) => {}
        Some(Err(why)) => problems.push(problem(
            "secrets row worker_token".into(),
            format!("{why}: restore the database from a backup"),
        )),
        None => {
            if let Some(claim) = &expected.live_claim {
                problems.push(problem(
                    "secrets row worker_token".into(),
                    format!("missing, but {claim} holds a worker token minted with it: was it deleted by hand?"),
                ));
            }
        }
    }
    problems
}

/// The key records that parse, by key id; every other file under
/// `auth/keys/` that ends in `.json` is a problem.
fn records(
    store: &Store,
    problems: &mut Vec<Problem>,
) -> Result<BTreeMap<Name, KeyRecord>, store::Error> {
    let mut out = BTreeMap::new();
    let dir = match store.root().auth.open_dir("keys") {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(store::io_err("opening auth/keys", e)),
    };
    let mut names = Vec::new();
    for entry in dir
        .entries()
        .map_err(|e| store::io_err("listing auth/keys", e))?
    {
        let entry = entry.map_err(|e| store::io_err("listing auth/keys", e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    for name in names {
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        let path = format!("auth/keys/{name}");
        let mut problem = |message: String, blocks_start: bool| {
            problems.push(Problem {
                path: path.clone(),
                message,
                blocks_start,
                loss: None,
            })
        };
        let parsed = dir
            .read(&name)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<KeyRecord>(&b).map_err(|e| e.to_string()));
        let record = match parsed {
            Ok(r) => r,
            Err(e) => {
                problem(
                    format!(
                        "is not a key record ({e}): restore it from a backup, or move it out of auth/keys/ to give the key up"
                    ),
                    true,
                );
                continue;
            }
        };
        if record.key_id.as_str() != stem {
            problem(
                format!(
                    "holds the record of key {}, not {stem}: rename it to {}.json, or restore it from a backup",
                    record.key_id, record.key_id
                ),
                false,
            );
        }
        let surface = record
            .grants
            .scopes
            .iter()
            .any(|s| matches!(s, Scope::Surface(_)));
        if surface != (record.principal_kind == PrincipalKind::ServiceBinding) {
            problem(
                "its principal_kind does not match its scopes (service_binding exactly when a surface: scope is issued); restore it from a backup".into(),
                false,
            );
        }
        out.insert(record.key_id.clone(), record);
    }
    Ok(out)
}

/// `admin.key` is the secret of an admin key that has a record.
fn admin_key(text: &str, records: &BTreeMap<Name, KeyRecord>, problems: &mut Vec<Problem>) {
    let path = format!("auth/{ADMIN_KEY_FILE}");
    let secret = text.trim();
    let Some(id) = key_id_of(secret).and_then(|id| Name::parse("key_id", id).ok()) else {
        problems.push(Problem {
            path,
            message: "does not hold a key secret (tsk_<key_id>_<hex>)".into(),
            blocks_start: false,
            loss: None,
        });
        return;
    };
    let Some(record) = records.get(&id) else {
        problems.push(Problem {
            path,
            message: format!(
                "holds the secret of key {id}, whose record auth/keys/{id}.json is missing: restore the record from a backup, or accept that the key is gone with {ACCEPT}, which records it as revoked and issues a new admin key into this file"
            ),
            blocks_start: true,
            loss: Some(Loss::KeyRecord(id)),
        });
        return;
    };
    let wrong = if Sha256::of(secret.as_bytes()) != record.secret_sha256 {
        Some("does not hash to the record's secret_sha256")
    } else if !record.grants.scopes.contains(&Scope::Admin) {
        Some("is not an admin key")
    } else {
        None
    };
    if let Some(wrong) = wrong {
        problems.push(Problem {
            path,
            message: format!(
                "holds a secret of key {id} that {wrong}: restore it or the record from a backup"
            ),
            blocks_start: false,
            loss: None,
        });
    }
}

/// What [`accept_loss`] did, one line each.
pub type Accepted = Vec<String>;

/// Accepts each loss in `problems` (the root is held exclusively): a lost
/// key record is recorded as a revoked key with no grants (what it named
/// stays; nobody can use the key), a lost token secret is made again. When
/// no usable admin key is left, a new one is issued into `admin.key`, as
/// the first start does.
pub fn accept_loss(store: &Store, problems: &[Problem]) -> Result<Accepted, store::Error> {
    let mut done = Vec::new();
    let keys = store.root().auth.open_dir("keys");
    for problem in problems {
        match &problem.loss {
            Some(Loss::KeyRecord(id)) => {
                if keys.as_ref().is_ok_and(|d| d.exists(format!("{id}.json"))) {
                    continue;
                }
                let now = Timestamp::now();
                let record = KeyRecord {
                    key_id: id.clone(),
                    label: "lost (recorded by tessera recover --accept-loss)".into(),
                    account_id: None,
                    owner: None,
                    principal_kind: PrincipalKind::Key,
                    grants: Grants::default(),
                    secret_sha256: Sha256::of(random_hex(32).as_bytes()),
                    created_at: now,
                    expires_at: None,
                    revoked_at: Some(now),
                };
                Keyring::write_record(store, &record)?;
                done.push(format!(
                    "auth/keys/{id}.json: recorded key {id} as lost and revoked"
                ));
            }
            Some(Loss::TokenSecret) => {
                super::token::Minter::open(store)?;
                done.push(format!(
                    "auth/{SECRET_FILE}: made a new token secret (every earlier worker token is dead; handles keep working)"
                ));
            }
            Some(Loss::EveryKey) | None => {}
        }
    }
    let (ring, issued) = Keyring::open(store)?;
    if let Some(path) = issued {
        done.push(format!(
            "auth/keys/: no key record was left; issued a new admin key, its secret is in {path}"
        ));
    } else if !ring.has_usable_admin() {
        let (record, secret) = new_key(IssueRequest::admin());
        Keyring::write_record(store, &record)?;
        store.writer().write_private(
            &store.root().auth,
            ADMIN_KEY_FILE,
            format!("{secret}\n").as_bytes(),
        )?;
        done.push(format!(
            "auth/{ADMIN_KEY_FILE}: no usable admin key was left; issued admin key {} into this file",
            record.key_id
        ));
    }
    Ok(done)
}
