//! The envelope vocabulary: who may see a record and what a task's effect
//! may touch, as plain data (the daemon's access rules decide from them;
//! the seed-pack schema's enums are checked against them).

use serde::{Deserialize, Serialize};

/// Who may read a noun version (decided in `auth::access`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
