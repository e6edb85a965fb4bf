//! What is enqueued: the `TaskSpec` envelope (the routing and lifecycle
//! fields; the brief is opaque JSON), queue configuration, and the
//! comparison behind idempotent enqueue.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use tessera_core::set;
pub use tessera_core::task::TaskSpec;
use tessera_core::task::{surface_opt, surfaces_opt};
pub use tessera_core::{CheckPolicy, MAX_LABEL, MAX_LEASE_TTL_S, Traits, UpstreamFailure};

use super::task::TaskId;
use crate::store::envelope::{Envelope, TaskFacts};
use crate::store::{EffectClass, Name, Visibility};

/// The daemon's rules over a spec: its brief, its access facts, its step.
pub trait SpecRules {
    /// Checks every rule of the spec: its brief ([`super::Brief::parse`])
    /// and [`TaskSpec::check_fields`]. Run where a spec comes in, before
    /// the queue's lock. Returns the parsed brief, or the offending field
    /// and why.
    fn check(&self) -> Result<super::Brief, (&'static str, String)>;

    /// What the access rules need to know about a task with this spec,
    /// enqueued (or to be enqueued) by `requester`.
    fn facts<'a>(&'a self, requester: &'a Name, server_queue: bool) -> TaskFacts<'a>;

    /// The daemon's view of the brief (checked at enqueue).
    fn brief(&self) -> super::brief::Brief;

    /// The step name: the file stem of the projected `<step>.md`.
    fn step_name(&self) -> Name;
}

impl SpecRules for TaskSpec {
    fn check(&self) -> Result<super::Brief, (&'static str, String)> {
        let brief = super::brief::Brief::parse(&self.brief)?;
        self.check_fields()?;
        Ok(brief)
    }

    fn facts<'a>(&'a self, requester: &'a Name, server_queue: bool) -> TaskFacts<'a> {
        TaskFacts {
            namespace: &self.namespace,
            queue: &self.queue,
            server_queue,
            kind: &self.kind,
            effect_class: self.effect_class,
            envelope: Envelope {
                visibility: self.visibility_scope,
                owner: Some(requester.as_str()),
                producer_surface: self.producer_surface.as_ref(),
                allowed_surfaces: &self.allowed_surfaces,
                quarantined: false,
            },
        }
    }

    fn brief(&self) -> super::brief::Brief {
        super::brief::Brief::of(&self.brief)
    }

    fn step_name(&self) -> Name {
        self.brief().step_name(&self.kind)
    }
}

/// Retry delay after an expired lease: `base_ms * 2^(attempt-1)`, capped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct Backoff {
    /// The first delay.
    pub base_ms: u64,
    /// The longest delay.
    pub cap_ms: u64,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            base_ms: 1_000,
            cap_ms: 60_000,
        }
    }
}

impl Backoff {
    /// The delay before attempt `next` (the first retry is attempt 2).
    pub fn delay_ms(&self, next: u32) -> u64 {
        let doublings = next.saturating_sub(2).min(32);
        self.base_ms
            .saturating_mul(1u64 << doublings)
            .min(self.cap_ms)
    }
}

/// A provisioned queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct QueueConfig {
    /// Its name.
    pub name: Name,
    /// Lease length.
    #[serde(default = "default_ttl")]
    pub lease_ttl_s: u32,
    /// Claims before a task fails with `attempts_exhausted`.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// Retry delays.
    #[serde(default)]
    pub backoff: Backoff,
    /// Claimable only by keys that name it in their grants.
    #[serde(default)]
    pub server: bool,
    /// The ctx-dir placement template for its tasks, relative to each
    /// task's namespace area.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// Promotion policy: the stage kinds a noun version needs (succeeded
    /// tasks of each kind, at least one in this queue among the stages)
    /// before `POST /v1/promotions` makes it public. Set by admin only;
    /// empty means the default pair (`verb.solve_draft`, `verb.verify_gate`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_stages: Vec<Name>,
}

fn default_ttl() -> u32 {
    300
}

fn default_attempts() -> u32 {
    3
}

impl QueueConfig {
    /// A queue named `name` with every other setting at its default.
    pub fn named(name: Name) -> QueueConfig {
        QueueConfig {
            name,
            lease_ttl_s: default_ttl(),
            max_attempts: default_attempts(),
            backoff: Backoff::default(),
            server: false,
            placement: None,
            required_stages: Vec::new(),
        }
    }

    /// Checks the numbers.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.lease_ttl_s == 0 || self.lease_ttl_s > MAX_LEASE_TTL_S {
            return Err(("lease_ttl_s", format!("1 to {MAX_LEASE_TTL_S} seconds")));
        }
        if self.max_attempts == 0 || self.max_attempts > 1000 {
            return Err(("max_attempts", "1 to 1000".into()));
        }
        if self.backoff.base_ms > self.backoff.cap_ms {
            return Err(("backoff", "base_ms must not exceed cap_ms".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_first_retry_and_stops_at_the_cap() {
        let b = Backoff {
            base_ms: 100,
            cap_ms: 1_000,
        };
        let delays: Vec<u64> = (2..=7).map(|n| b.delay_ms(n)).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(b.delay_ms(u32::MAX), 1_000);
    }

    #[test]
    fn fingerprints_ignore_key_order_and_whitespace() {
        let a: TaskSpec = serde_json::from_str(r#"{"namespace":"n","queue":"q","kind":"k","effect_class":"read","brief":{"a":1,"b":2}}"#).unwrap();
        let b: TaskSpec = serde_json::from_str(r#"{"brief": { "b": 2, "a": 1 }, "kind":"k","queue":"q","namespace":"n","effect_class":"read"}"#).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        let c: TaskSpec = serde_json::from_str(
            r#"{"namespace":"n","queue":"q","kind":"k","effect_class":"read","brief":{"a":2}}"#,
        )
        .unwrap();
        assert_ne!(a.fingerprint(), c.fingerprint());
    }

    #[test]
    fn fingerprints_ignore_the_order_and_repeats_of_sets() {
        let spec = |lists: &str| -> TaskSpec {
            serde_json::from_str(&format!(
                r#"{{"namespace":"n","queue":"q","kind":"k","effect_class":"read","brief":{{}},{lists}}}"#
            ))
            .unwrap()
        };
        let a = spec(r#""tags":["b","a"],"target_cohorts":["y","x"],"depends_on":["t2","t1"]"#);
        let b = spec(r#""tags":["a","b","a"],"target_cohorts":["x","y"],"depends_on":["t1","t2"]"#);
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_eq!(*a.traits.tags, ["a", "b"]);
        let c = spec(r#""tags":["a"],"target_cohorts":["x","y"],"depends_on":["t1","t2"]"#);
        assert_ne!(a.fingerprint(), c.fingerprint());
    }
}

/// A child named by a split: a `TaskSpec` whose envelope fields
/// (namespace, visibility, producer and allowed surfaces) may be omitted,
/// and are then the parent's; naming different ones is refused, since a
/// child can never widen its parent's envelope. `allow_file_submit` and
/// `placement` are always the parent's (and its work dir is the daemon's):
/// a child cannot name them.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct ChildSpec {
    /// Must equal the parent's when given.
    #[serde(default)]
    pub namespace: Option<Name>,
    /// The child's queue.
    pub queue: Name,
    /// The child's kind.
    pub kind: Name,
    /// The child's effect class.
    pub effect_class: EffectClass,
    /// Must equal the parent's when given.
    #[serde(default, deserialize_with = "surface_opt")]
    pub producer_surface: Option<Name>,
    /// Must equal the parent's when given.
    #[serde(default)]
    pub visibility_scope: Option<Visibility>,
    /// Must equal the parent's when given.
    #[serde(default, deserialize_with = "surfaces_opt")]
    pub allowed_surfaces: Option<Box<[Name]>>,
    /// The child's brief.
    #[schema(value_type = Object)]
    pub brief: Box<RawValue>,
    /// Upstream tasks (existing ids).
    #[serde(default, deserialize_with = "set")]
    pub depends_on: Box<[TaskId]>,
    /// Overrides the queue's `max_attempts`.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_attempts: Option<u32>,
    /// How it is ordered, labelled and run (top-level fields).
    #[serde(flatten)]
    #[schema(inline)]
    pub traits: Traits,
}

impl ChildSpec {
    /// The full spec under `parent`'s envelope, or the field that would widen it.
    pub fn under(self, parent: &TaskSpec) -> Result<TaskSpec, &'static str> {
        if self.namespace.is_some_and(|n| n != parent.namespace) {
            return Err("namespace");
        }
        if self.producer_surface.is_some() && self.producer_surface != parent.producer_surface {
            return Err("producer_surface");
        }
        if self
            .visibility_scope
            .is_some_and(|v| v != parent.visibility_scope)
        {
            return Err("visibility_scope");
        }
        if self
            .allowed_surfaces
            .is_some_and(|a| *a != *parent.allowed_surfaces)
        {
            return Err("allowed_surfaces");
        }
        Ok(TaskSpec {
            namespace: parent.namespace.clone(),
            queue: self.queue,
            kind: self.kind,
            effect_class: self.effect_class,
            producer_surface: parent.producer_surface.clone(),
            visibility_scope: parent.visibility_scope,
            allowed_surfaces: parent.allowed_surfaces.clone(),
            idempotency_key: None,
            brief: self.brief,
            depends_on: self.depends_on,
            not_before: None,
            max_attempts: self.max_attempts,
            allow_file_submit: parent.allow_file_submit,
            placement: parent.placement.clone(),
            traits: self.traits,
        })
    }
}
