//! Who is asking and what they were issued: keys, grants, visibility.
//!
//! Security model:
//! - A key is issued by an admin and stored only as a hash. Its permissions
//!   are exactly its issued `Grants`; nothing a request carries (a query
//!   filter, a body field, a label, a cohort, an `X-Surface-Id` header)
//!   adds to them. Changing grants means issuing a new key.
//! - Every route authenticates through [`Keyring::authenticate`] and decides
//!   through [`access`]; both work from memory (on the shared database,
//!   from a look at the keys at most a second old, [`shared`]).
//! - Outcomes: no or bad credential is `Unauthenticated` (401); allowed to
//!   see but not to do is `Forbidden` (403); may not see at all is `Hidden`,
//!   which the HTTP layer answers exactly like a missing record (404).
//!
//! A sample key record (`auth/keys/k3f9c2a1b7d4e6f08.json`, mode 0600):
//! ```json
//! {
//!   "key_id": "k3f9c2a1b7d4e6f08",
//!   "label": "team worker",
//!   "account_id": "acct-7",
//!   "owner": null,
//!   "principal_kind": "service_binding",
//!   "grants": {
//!     "queues": ["work.external"],
//!     "kinds": ["verb.solve_draft"],
//!     "effect_classes": ["read", "write-internal"],
//!     "scopes": ["namespace:team_example", "surface:team_example", "nouns:read",
//!                "cas:write", "verbs:claim", "verbs:submit"]
//!   },
//!   "secret_sha256": "…64 hex…",
//!   "created_at": "2026-11-30T09:00:00Z",
//!   "expires_at": null,
//!   "revoked_at": null
//! }
//! ```

pub mod access;
pub mod check;
pub mod keyring;
pub mod scope;
pub mod shared;
pub mod throttle;
pub mod token;

use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use crate::store::EffectClass;
pub use crate::store::envelope::parse_surface;
pub use keyring::{IssueRequest, KeyRecord, Keyring};
pub use scope::{GrantSet, Grants, Scope};

use crate::store::envelope::Viewer;
use crate::store::{self, Name};

/// How a key was issued, for audit only (never network attestation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(utoipa::ToSchema)]
pub enum PrincipalKind {
    /// A plain key.
    Key,
    /// A key issued with a `surface:` scope.
    ServiceBinding,
}

/// The authenticated caller: cheap to clone (an `Arc`).
#[derive(Clone, Debug)]
pub struct Principal(Arc<PrincipalInfo>);

/// What a principal is, compiled from its key record.
#[derive(Debug)]
pub struct PrincipalInfo {
    /// The key's id.
    pub key_id: Name,
    /// The account id, for audit.
    pub account_id: Option<String>,
    /// Service binding or plain key.
    pub kind: PrincipalKind,
    /// Its grants as sets.
    pub grants: GrantSet,
    /// What it may see and claim, compiled from its grants once: the
    /// rules the queue filters by (`store::envelope::Viewer`).
    pub viewer: Viewer,
}

impl PrincipalInfo {
    /// A principal's parts, its viewer compiled from `grants`. `owns`
    /// says whether the records `key_id` owns (`private` nouns and tasks)
    /// are its own: true for a key, false for an authority that acts for
    /// another key under narrowed grants (a split's children,
    /// `access::split_authority`), which owns nothing.
    pub fn new(
        key_id: Name,
        account_id: Option<String>,
        kind: PrincipalKind,
        grants: GrantSet,
        owns: bool,
    ) -> PrincipalInfo {
        let viewer = Viewer {
            key: key_id.clone(),
            owns,
            admin: grants.admin,
            claims: grants.can(&Scope::VerbsClaim),
            namespaces: grants.namespaces.clone(),
            surfaces: grants.surfaces.clone(),
            queues: grants.queues.clone(),
            kinds: grants.kinds.clone(),
            effect_classes: grants.effect_classes.clone(),
        };
        PrincipalInfo {
            key_id,
            account_id,
            kind,
            grants,
            viewer,
        }
    }
}

impl Deref for Principal {
    type Target = PrincipalInfo;

    fn deref(&self) -> &PrincipalInfo {
        &self.0
    }
}

impl Principal {
    /// A principal from its compiled parts.
    pub fn new(info: PrincipalInfo) -> Principal {
        Principal(Arc::new(info))
    }

    /// Whether the key holds `admin`.
    pub fn is_admin(&self) -> bool {
        self.grants.admin
    }

    /// Whether a record with this `owner` (a key id) is the principal's
    /// own: its key made it, and the principal owns what its key owns.
    pub fn owns(&self, owner: Option<&str>) -> bool {
        self.viewer.owns(owner)
    }
}

/// What can fail in authentication and authorization.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No usable credential: missing, malformed, unknown, revoked, expired.
    #[error("{0}; send `Authorization: Bearer <key>` with a valid key")]
    Unauthenticated(&'static str),
    /// Authenticated and allowed to see, but not to do this.
    #[error("{0}")]
    Forbidden(String),
    /// May not see the record at all: answered exactly like a missing one.
    #[error("not found")]
    Hidden,
    /// A queue the key was not issued: answered exactly like a queue that
    /// was never provisioned.
    #[error("queue {0:?} is not provisioned; an admin provisions it with POST /v1/queues")]
    HiddenQueue(String),
    /// A new record names no producer surface and the key holds no
    /// single surface to default to.
    #[error("name producer_surface: this key holds no single surface to default to")]
    ProducerSurfaceRequired,
    /// A new version names a producer surface other than the noun's.
    #[error("a noun's producer surface is fixed when it is created")]
    ProducerSurfaceFixed,
    /// A grant request that cannot be issued.
    #[error("{0}")]
    InvalidGrant(String),
    /// No key with that id.
    #[error("no key with that id")]
    UnknownKey,
    /// Revoking this key would leave no usable admin key.
    #[error(
        "this is the last usable admin key; issue another admin key first, then revoke this one"
    )]
    LastAdminKey,
    /// The shared database's keys cannot be read or written now
    /// (`--queue-url`): a key check refuses rather than trusting an old
    /// look, which could miss a revocation.
    #[error("the keys in the shared database cannot be read ({0}); retry shortly")]
    KeysUnavailable(String),
    /// The store failed underneath.
    #[error(transparent)]
    Store(#[from] store::Error),
}

impl From<crate::database::Error> for Error {
    fn from(e: crate::database::Error) -> Error {
        Error::KeysUnavailable(e.to_string())
    }
}

/// The one admission check for admin-only routes.
pub fn require_admin(p: &Principal) -> Result<(), Error> {
    if p.is_admin() {
        Ok(())
    } else {
        Err(Error::Forbidden("this needs an admin key".into()))
    }
}
