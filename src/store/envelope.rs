//! The envelope vocabulary: who may see a record and what a task's effect
//! may touch, as plain data. It sits on the ground floor so that the queue
//! and the access rules (`auth::access`) both read it and neither imports
//! the other: the queue describes a task with [`TaskFacts`], and `auth`
//! decides from them.

use serde::{Deserialize, Serialize};

use super::{Error, Name, VersionEntry};

/// Who may read a noun version (decided in `auth::access`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[derive(utoipa::ToSchema)]
pub enum Visibility {
    /// The owning key only (and admin).
    Private,
    /// Keys holding the producer surface.
    SurfaceOnly,
    /// Keys holding the producer surface or one of `allowed_surfaces`.
    AllowlistSurfaces,
    /// Any key with `nouns:read`.
    Public,
}

/// What a task's effect may touch; `write-repo` and `public` need admin.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    utoipa::ToSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum EffectClass {
    /// Reads only.
    Read,
    /// Writes records inside Tessera.
    WriteInternal,
    /// Writes a repository: admin only.
    WriteRepo,
    /// Publishes: admin only.
    Public,
}

impl EffectClass {
    /// Whether only admin keys may enqueue or claim tasks of this class.
    pub fn needs_admin(self) -> bool {
        matches!(self, EffectClass::WriteRepo | EffectClass::Public)
    }
}

/// A surface named with or without its `surface:` prefix; stored bare.
pub fn parse_surface(field: &'static str, s: &str) -> Result<Name, Error> {
    Name::parse(field, s.strip_prefix("surface:").unwrap_or(s))
}

/// What a record says about who may see it.
#[derive(Clone, Copy, Debug)]
pub struct Envelope<'a> {
    /// Its visibility.
    pub visibility: Visibility,
    /// The key id that owns it.
    pub owner: Option<&'a str>,
    /// The surface that produced it.
    pub producer_surface: Option<&'a Name>,
    /// The extra surfaces of `allowlist_surfaces`.
    pub allowed_surfaces: &'a [Name],
    /// Quarantined records are admin-only.
    pub quarantined: bool,
}

impl<'a> From<&'a VersionEntry> for Envelope<'a> {
    fn from(e: &'a VersionEntry) -> Envelope<'a> {
        Envelope {
            visibility: e.visibility,
            owner: e.owner.as_deref(),
            producer_surface: e.producer_surface.as_ref(),
            allowed_surfaces: &e.allowed_surfaces,
            quarantined: e.quarantined,
        }
    }
}

/// What the rules need to know about a task.
#[derive(Clone, Copy, Debug)]
pub struct TaskFacts<'a> {
    /// Its namespace.
    pub namespace: &'a Name,
    /// Its queue.
    pub queue: &'a Name,
    /// Whether the queue is a server queue.
    pub server_queue: bool,
    /// Its kind.
    pub kind: &'a Name,
    /// Its effect class.
    pub effect_class: EffectClass,
    /// Its visibility envelope (owner = the requester key).
    pub envelope: Envelope<'a>,
}
