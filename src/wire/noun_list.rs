//! `GET /v1/nouns`: a page of the nouns a key may read.

use serde::{Deserialize, Serialize};

use crate::store::{Name, VersionEntry};

/// One noun as the listing shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NounSummary {
    /// Namespace.
    pub namespace: Name,
    /// Store.
    pub store: Name,
    /// Key.
    pub key: Name,
    /// The latest version the key may read.
    pub latest: VersionEntry,
    /// The seed packs that wrote any version the key may read, sorted.
    pub source_packs: Vec<Name>,
}

/// `GET /v1/nouns`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NounList {
    /// A page, in (namespace, store, key) order.
    pub nouns: Vec<NounSummary>,
    /// Pass as `cursor` for the next page (which may be empty); absent on
    /// the last page.
    pub next_cursor: Option<String>,
}
