//! A task as enqueued: its id and its spec (the routing and lifecycle
//! fields around an opaque brief), read alike by the daemon, which
//! enqueues it, and the importer, which plans it from a seed pack.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::canonical::canonical_json;
use crate::{EffectClass, MAX_LABEL, Name, Sha256, Traits, Visibility, set};

/// A task's id: `t` followed by decimal digits. New ids are random
/// (drawn by the daemon), so an id says nothing of how many tasks were
/// created before it, by anyone; roots written when ids were a sequence
/// (`t1`, `t2`, …) keep theirs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub u64);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// A string that is not a task id.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a task id (t followed by digits)")]
pub struct BadTaskId(pub String);

impl FromStr for TaskId {
    type Err = BadTaskId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.strip_prefix('t')
            .filter(|d| !d.is_empty() && d.len() <= 19 && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse().ok())
            .map(TaskId)
            .ok_or_else(|| BadTaskId(s.chars().take(40).collect()))
    }
}

impl Serialize for TaskId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The task envelope. Unknown fields are refused.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct TaskSpec {
    /// The namespace it lives in.
    pub namespace: Name,
    /// The provisioned queue.
    pub queue: Name,
    /// The verb, such as `verb.solve_draft`.
    pub kind: Name,
    /// What its effect may touch.
    pub effect_class: EffectClass,
    /// The surface that produced it (`surface:X` or `X`); defaults to the
    /// enqueuing key's only surface.
    #[serde(
        default,
        deserialize_with = "surface_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub producer_surface: Option<Name>,
    /// Who may see and claim it.
    #[serde(default = "surface_only")]
    pub visibility_scope: Visibility,
    /// Extra surfaces for `allowlist_surfaces`.
    #[serde(
        default,
        deserialize_with = "surfaces",
        skip_serializing_if = "<[_]>::is_empty"
    )]
    pub allowed_surfaces: Box<[Name]>,
    /// Same key in a namespace: the same task (1 to 256 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1)]
    pub idempotency_key: Option<Box<str>>,
    /// The brief: opaque JSON (an object) for the worker.
    #[schema(value_type = Object)]
    pub brief: Box<RawValue>,
    /// Upstream tasks (at most 256); pending until each is terminal.
    #[serde(
        default,
        deserialize_with = "set",
        skip_serializing_if = "<[_]>::is_empty"
    )]
    #[schema(max_items = 256)]
    pub depends_on: Box<[TaskId]>,
    /// Not claimable before this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub not_before: Option<Timestamp>,
    /// Overrides the queue's `max_attempts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub max_attempts: Option<u32>,
    /// Whether `@file:` submit bodies (read from the task's work dir,
    /// which the daemon creates) are allowed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_file_submit: bool,
    /// The ctx-dir placement template, relative to the namespace area
    /// `workspace/<namespace>/`, with `{task_id}` as one whole segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Box<str>>,
    /// How it is ordered, labelled and run (top-level fields; stored
    /// only where set, so a spec's record and fingerprint stay compact).
    #[serde(flatten, serialize_with = "Traits::only_set")]
    #[schema(inline)]
    pub traits: Traits,
}

/// Specs are equal when their fingerprints are: the same fields and the
/// same brief, whatever the key order or whitespace (the idempotency
/// comparison's notion of "the same task").
impl PartialEq for TaskSpec {
    fn eq(&self, other: &TaskSpec) -> bool {
        self.fingerprint() == other.fingerprint()
    }
}

impl TaskSpec {
    /// The spec as JSON with every trait written, set or not: the form a
    /// plan compares field by field with the daemon's view of a task
    /// (which shows every trait). The daemon reads a default written out
    /// as one left out, so this is also a form to send.
    pub fn full_json(&self) -> serde_json::Map<String, serde_json::Value> {
        let (serde_json::Value::Object(mut map), serde_json::Value::Object(traits)) = (
            serde_json::to_value(self).expect("specs serialize"),
            serde_json::to_value(&self.traits).expect("traits serialize"),
        ) else {
            unreachable!("a spec and its traits are objects");
        };
        map.extend(traits);
        map
    }

    /// Checks the envelope fields serde cannot, cheaply (the queue checks
    /// them again under its lock): labels are short, numbers in range.
    pub fn check_fields(&self) -> Result<(), (&'static str, String)> {
        self.traits.check()?;
        if self
            .idempotency_key
            .as_ref()
            .is_some_and(|k| k.is_empty() || k.len() > MAX_LABEL)
        {
            return Err(("idempotency_key", format!("1 to {MAX_LABEL} bytes")));
        }
        if self.max_attempts == Some(0) {
            return Err(("max_attempts", "at least 1".into()));
        }
        if self.depends_on.len() > 256 {
            return Err(("depends_on", "at most 256 upstream tasks".into()));
        }
        Ok(())
    }

    /// sha256 of the spec's canonical JSON: equal specs, equal fingerprints,
    /// whatever their key order or whitespace.
    pub fn fingerprint(&self) -> Sha256 {
        let value = serde_json::to_value(self).expect("specs serialize");
        Sha256::of(&canonical_json(&value))
    }
}

fn surface_only() -> Visibility {
    Visibility::SurfaceOnly
}

/// A `producer_surface`, written `surface:X` or `X`, bare; `null` is
/// none, as the schema of an optional field allows.
pub fn surface_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Name>, D::Error> {
    let Some(s) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    Name::surface("producer_surface", &s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// `allowed_surfaces`, each written `surface:X` or `X`, bare.
pub fn surfaces<'de, D: Deserializer<'de>>(d: D) -> Result<Box<[Name]>, D::Error> {
    surface_names(Vec::<String>::deserialize(d)?)
}

/// [`surfaces`] for an optional field: `null` is none.
pub fn surfaces_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<[Name]>>, D::Error> {
    Option::<Vec<String>>::deserialize(d)?
        .map(surface_names)
        .transpose()
}

fn surface_names<E: serde::de::Error>(list: Vec<String>) -> Result<Box<[Name]>, E> {
    list.iter()
        .map(|s| Name::surface("allowed_surfaces", s).map_err(E::custom))
        .collect()
}
