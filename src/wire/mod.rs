//! Request and response bodies of the HTTP API, shared by the daemon's
//! handlers and the `tessera` command's client so both sides agree on every
//! field. Requests reject unknown fields.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

mod batch;
pub mod bearer;
pub mod error;
pub mod flattened;
pub mod json;
mod noun_list;
mod scalars;
pub mod schema;
mod status;
mod tasks;
pub mod whole_numbers;
mod worker;

pub use batch::*;
pub use noun_list::*;
pub use status::*;
pub use tasks::*;
pub use worker::*;

use jiff::Timestamp;

use crate::auth::scope::RequestedGrants;
use crate::auth::{Grants, KeyRecord, PrincipalKind};
pub use crate::store::Pin;
use crate::store::{Sha256, Visibility};

/// `PUT /v1/nouns/{ns}/{store}/{key}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct PutNoun {
    /// The version this write follows (0 = create). May be omitted only
    /// with `skip_unchanged`, meaning "after whatever is latest".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    /// The noun's type, such as `noun.skill_pack`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub noun_type: Option<String>,
    /// Media type; defaults to `application/json` for `body` and
    /// `application/octet-stream` for `body_base64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Visibility of the new version; defaults to the latest version's, or
    /// `surface_only` for a new noun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<Visibility>,
    /// Surfaces for `allowlist_surfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_surfaces: Option<Vec<String>>,
    /// The producer surface of a new noun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer_surface: Option<String>,
    /// Bytes equal to the latest version's, with the same media type, type,
    /// visibility and allowlist, write nothing and answer 200.
    #[serde(default, skip_serializing_if = "is_false")]
    pub skip_unchanged: bool,
    /// Report what would happen; write nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
    /// A JSON body, stored in canonical form.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub body: Option<Value>,
    /// Raw bytes, base64 (standard alphabet), stored exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Keeps an explicit JSON `null` body as `Some(Value::Null)`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// The answer to a noun put (and to its dry run).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PutNounReply {
    /// Namespace.
    pub namespace: String,
    /// Store.
    pub store: String,
    /// Key.
    pub key: String,
    /// `create`, `new_version`, `unchanged` or (dry run only) `conflict`.
    pub outcome: String,
    /// The version written, kept, or that would be written; absent on conflict.
    pub version: Option<u64>,
    /// The body's sha256.
    pub sha256: Sha256,
    /// The body's size in bytes.
    pub size: u64,
    /// The version before this request.
    pub current_version: u64,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// `GET /healthz`: `200` while writes are accepted or only out of space,
/// `503` after a failed fsync.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok`; `out_of_space` (reads work; writes answer `507` until space
    /// is freed, then resume by themselves); or `storage_failed` (reads
    /// work; writes answer `503` until the daemon restarts); or
    /// `queue_unavailable` (the queue's database does not answer: `503`
    /// until it does again, asked anew on every call).
    pub status: String,
    /// The daemon's version.
    pub version: String,
    /// What the storage reported, unless `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<HealthIncident>,
    /// Why the queue's database does not answer, when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
}

/// The storage condition behind a `/healthz` status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HealthIncident {
    /// The writer that reported it: `files` or `journal`.
    pub writer: String,
    /// What failed, with the OS error.
    pub cause: String,
    /// When it was first reported.
    #[schema(value_type = String, format = DateTime)]
    pub since: Timestamp,
    /// Out of space: the free bytes the refused write needed (for a task
    /// change, the least journal segment its record fits in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needed_bytes: Option<u64>,
    /// Out of space: the free bytes on the root's filesystem now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
}

/// `POST /v1/keys`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct IssueKey {
    /// Display label (grants nothing).
    pub label: String,
    /// Account id, for audit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// Owner, for audit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The grants (scopes checked after the body is read).
    pub grants: RequestedGrants,
    /// Optional expiry (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
}

/// A key as listed: everything but secrets and hashes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KeyView {
    /// Key id.
    pub key_id: String,
    /// Label.
    pub label: String,
    /// Account id.
    pub account_id: Option<String>,
    /// Owner.
    pub owner: Option<String>,
    /// `key` or `service_binding`.
    pub principal_kind: PrincipalKind,
    /// Grants.
    pub grants: Grants,
    /// Issued at.
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// Expires at.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
    /// Revoked at.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub revoked_at: Option<Timestamp>,
}

impl From<&KeyRecord> for KeyView {
    fn from(r: &KeyRecord) -> KeyView {
        KeyView {
            key_id: r.key_id.to_string(),
            label: r.label.clone(),
            account_id: r.account_id.clone(),
            owner: r.owner.clone(),
            principal_kind: r.principal_kind,
            grants: r.grants.clone(),
            created_at: r.created_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
        }
    }
}

/// The answer to `POST /v1/keys`: the key and its secret, shown once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct IssuedKey {
    /// The key.
    #[serde(flatten)]
    pub key: KeyView,
    /// The secret: `Authorization: Bearer <secret>`. Not stored; shown once.
    pub secret: String,
}

/// `GET /v1/keys`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KeyList {
    /// Every key, sorted by id.
    pub keys: Vec<KeyView>,
}

/// Task counts per state as the wire shows them: keyed by the state's name.
pub fn counts_by_state(
    counts: Vec<(crate::queue::TaskState, u64)>,
) -> std::collections::BTreeMap<String, u64> {
    counts
        .into_iter()
        .map(|(s, n)| (s.as_str().to_string(), n))
        .collect()
}

/// `POST /v1/promotions`: the promotion record and its hash.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PromotionReply {
    /// The record's hash.
    pub promotion_sha256: Sha256,
    /// The record.
    pub promotion: crate::promotion::Promoted,
}
