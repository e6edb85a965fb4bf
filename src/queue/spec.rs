//! What is enqueued: the `TaskSpec` envelope (the routing and lifecycle
//! fields; the brief is opaque JSON), queue configuration, and the
//! comparison behind idempotent enqueue.

use jiff::Timestamp;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;

use super::task::TaskId;
use crate::store::envelope::{Envelope, TaskFacts, parse_surface};
use crate::store::{EffectClass, Name, Sha256, Visibility, canonical_json};

/// What a projection does when its placement cannot be written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(utoipa::ToSchema)]
pub enum CheckPolicy {
    /// Submit succeeds; the receipt records the projection as skipped.
    #[default]
    Warn,
    /// Submit fails and the attempt stays open.
    Strict,
}

/// What a pending task does when an upstream task fails or is cancelled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(utoipa::ToSchema)]
pub enum UpstreamFailure {
    /// Runs anyway once every upstream has ended (its worker reads each
    /// upstream's state, `ok` and receipt).
    #[default]
    Run,
    /// Is cancelled at once (reason `upstream tN failed` or `... cancelled`).
    Cancel,
}

impl UpstreamFailure {
    /// Whether this is the default.
    pub fn is_run(&self) -> bool {
        *self == UpstreamFailure::Run
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
    /// Descriptive cohorts (grant nothing).
    #[serde(
        default,
        deserialize_with = "set",
        skip_serializing_if = "<[_]>::is_empty"
    )]
    pub target_cohorts: Box<[String]>,
    /// Descriptive tags (grant nothing).
    #[serde(
        default,
        deserialize_with = "set",
        skip_serializing_if = "<[_]>::is_empty"
    )]
    pub tags: Box<[String]>,
    /// Same key in a namespace: the same task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<Box<str>>,
    /// The brief: opaque JSON (an object) for the worker.
    #[schema(value_type = serde_json::Value)]
    pub brief: Box<RawValue>,
    /// Upstream tasks; pending until each is terminal.
    #[serde(
        default,
        deserialize_with = "set",
        skip_serializing_if = "<[_]>::is_empty"
    )]
    pub depends_on: Box<[TaskId]>,
    /// What to do when an upstream fails or is cancelled: run anyway (the
    /// default) or cancel this task.
    #[serde(default, skip_serializing_if = "UpstreamFailure::is_run")]
    pub on_upstream_failure: UpstreamFailure,
    /// Higher is claimed first.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i32,
    /// Not claimable before this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub not_before: Option<Timestamp>,
    /// Overrides the queue's `max_attempts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Overrides the queue's `lease_ttl_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ttl_s: Option<u32>,
    /// Projection failure policy.
    #[serde(default, skip_serializing_if = "CheckPolicy::is_warn")]
    pub check_policy: CheckPolicy,
    /// Whether `@file:` submit bodies (read from the task's work dir,
    /// which the daemon creates) are allowed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_file_submit: bool,
    /// The ctx-dir placement template, relative to the namespace area
    /// `workspace/<namespace>/`, with `{task_id}` as one whole segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Box<str>>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

impl CheckPolicy {
    /// Whether this is the default.
    pub fn is_warn(&self) -> bool {
        *self == CheckPolicy::Warn
    }
}

fn surface_only() -> Visibility {
    Visibility::SurfaceOnly
}

fn surface_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Name>, D::Error> {
    let s = String::deserialize(d)?;
    parse_surface("producer_surface", &s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn surfaces<'de, D: Deserializer<'de>>(d: D) -> Result<Box<[Name]>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| parse_surface("allowed_surfaces", s).map_err(serde::de::Error::custom))
        .collect()
}

/// A list that means a set (`tags`, `target_cohorts`, `depends_on`),
/// sorted and without repeats as it comes in, so the stored spec is
/// canonical and two specs that differ only in order or repeats have one
/// fingerprint (the idempotency comparison).
fn set<'de, D: Deserializer<'de>, T: Deserialize<'de> + Ord>(d: D) -> Result<Box<[T]>, D::Error> {
    let mut items = Vec::<T>::deserialize(d)?;
    items.sort_unstable();
    items.dedup();
    Ok(items.into())
}

/// Longest accepted text in a tag, cohort or idempotency key.
pub const MAX_LABEL: usize = 256;

impl TaskSpec {
    /// Checks every rule of the spec: its brief ([`super::Brief::parse`])
    /// and [`TaskSpec::check_fields`]. Run where a spec comes in, before
    /// the queue's lock. Returns the parsed brief, or the offending field
    /// and why.
    pub fn check(&self) -> Result<super::Brief, (&'static str, String)> {
        let brief = super::brief::Brief::parse(&self.brief)?;
        self.check_fields()?;
        Ok(brief)
    }

    /// Checks the envelope fields serde cannot, cheaply (the queue checks
    /// them again under its lock): labels are short, numbers in range.
    pub fn check_fields(&self) -> Result<(), (&'static str, String)> {
        let long = |v: &[String]| v.iter().any(|s| s.len() > MAX_LABEL) || v.len() > 64;
        if long(&self.tags) || long(&self.target_cohorts) {
            return Err((
                "tags",
                format!("at most 64 tags and cohorts, each at most {MAX_LABEL} bytes"),
            ));
        }
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
        if self
            .lease_ttl_s
            .is_some_and(|t| t == 0 || t > MAX_LEASE_TTL_S)
        {
            return Err(("lease_ttl_s", format!("1 to {MAX_LEASE_TTL_S} seconds")));
        }
        if self.depends_on.len() > 256 {
            return Err(("depends_on", "at most 256 upstream tasks".into()));
        }
        Ok(())
    }

    /// What the access rules need to know about a task with this spec,
    /// enqueued (or to be enqueued) by `requester`.
    pub fn facts<'a>(&'a self, requester: &'a Name, server_queue: bool) -> TaskFacts<'a> {
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

    /// The daemon's view of the brief (checked at enqueue).
    pub fn brief(&self) -> super::brief::Brief {
        super::brief::Brief::of(&self.brief)
    }

    /// The step name: the file stem of the projected `<step>.md`.
    pub fn step_name(&self) -> Name {
        self.brief().step_name(&self.kind)
    }

    /// sha256 of the spec's canonical JSON: equal specs, equal fingerprints,
    /// whatever their key order or whitespace.
    pub fn fingerprint(&self) -> Sha256 {
        let value = serde_json::to_value(self).expect("specs serialize");
        Sha256::of(&canonical_json(&value))
    }
}

/// Longest lease a task or queue may ask for (a day).
pub const MAX_LEASE_TTL_S: u32 = 86_400;

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
        assert_eq!(*a.tags, ["a", "b"]);
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
    /// Tags.
    #[serde(default, deserialize_with = "set")]
    pub tags: Box<[String]>,
    /// Cohorts.
    #[serde(default, deserialize_with = "set")]
    pub target_cohorts: Box<[String]>,
    /// The child's brief.
    #[schema(value_type = serde_json::Value)]
    pub brief: Box<RawValue>,
    /// Upstream tasks (existing ids).
    #[serde(default, deserialize_with = "set")]
    pub depends_on: Box<[TaskId]>,
    /// What to do when an upstream fails or is cancelled.
    #[serde(default)]
    pub on_upstream_failure: UpstreamFailure,
    /// Priority.
    #[serde(default)]
    pub priority: i32,
    /// Attempts.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Lease length.
    #[serde(default)]
    pub lease_ttl_s: Option<u32>,
    /// Projection policy.
    #[serde(default)]
    pub check_policy: CheckPolicy,
}

fn surfaces_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<[Name]>>, D::Error> {
    surfaces(d).map(Some)
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
            target_cohorts: self.target_cohorts,
            tags: self.tags,
            idempotency_key: None,
            brief: self.brief,
            depends_on: self.depends_on,
            on_upstream_failure: self.on_upstream_failure,
            priority: self.priority,
            not_before: None,
            max_attempts: self.max_attempts,
            lease_ttl_s: self.lease_ttl_s,
            check_policy: self.check_policy,
            allow_file_submit: parent.allow_file_submit,
            placement: parent.placement.clone(),
        })
    }
}
