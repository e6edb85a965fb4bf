//! The task fields a spec, a split's child and every view of a task carry
//! alike: how it is ordered, labelled and run. Declared once here and
//! flattened into each of them (the daemon's `TaskSpec`, `ChildSpec`,
//! task view, worker prompt and thin claim; the importer's specs), so a
//! field added here reaches them all.

use std::sync::LazyLock;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::whole;

/// How a task is ordered, labelled and run. Flattened into its holders:
/// these are top-level fields of a spec and of a task view.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Traits {
    /// Higher is claimed first.
    #[serde(default, deserialize_with = "whole::number")]
    pub priority: i32,
    /// Descriptive tags (grant nothing). A set: kept sorted, without
    /// repeats; at most 64, each at most 256 bytes.
    #[serde(default, deserialize_with = "set")]
    #[schema(max_items = 64)]
    pub tags: Box<[String]>,
    /// Descriptive cohorts (grant nothing). A set, as `tags`.
    #[serde(default, deserialize_with = "set")]
    #[schema(max_items = 64)]
    pub target_cohorts: Box<[String]>,
    /// What the task does when an upstream fails or is cancelled: run
    /// anyway (the default) or be cancelled.
    #[serde(default)]
    pub on_upstream_failure: UpstreamFailure,
    /// Its own lease length in seconds (1 to a day); `null`: its queue's.
    #[serde(default, deserialize_with = "whole::optional")]
    #[schema(minimum = 1, maximum = 86_400)]
    pub lease_ttl_s: Option<u32>,
    /// What a projection that cannot be written does to the submit.
    #[serde(default)]
    pub check_policy: CheckPolicy,
}

/// Longest accepted text in a tag, cohort or idempotency key.
pub const MAX_LABEL: usize = 256;

/// Most tags, and most cohorts, one task may carry.
pub const MAX_LABELS: usize = 64;

/// Longest lease a task or queue may ask for (a day).
pub const MAX_LEASE_TTL_S: u32 = 86_400;

impl Traits {
    /// Checks what serde cannot: labels short and few, the lease in
    /// range. Returns the offending field and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let long = |v: &[String]| v.iter().any(|s| s.len() > MAX_LABEL) || v.len() > MAX_LABELS;
        if long(&self.tags) || long(&self.target_cohorts) {
            return Err((
                "tags",
                format!("at most {MAX_LABELS} tags and cohorts, each at most {MAX_LABEL} bytes"),
            ));
        }
        if self
            .lease_ttl_s
            .is_some_and(|t| t == 0 || t > MAX_LEASE_TTL_S)
        {
            return Err(("lease_ttl_s", format!("1 to {MAX_LEASE_TTL_S} seconds")));
        }
        Ok(())
    }

    /// Serializes `traits` with only the fields that differ from their
    /// defaults, for a holder that is stored (a spec): its journal record
    /// and fingerprint stay what they were when these fields were written
    /// only when set. Views show every field.
    pub fn only_set<S: Serializer>(traits: &Traits, s: S) -> Result<S::Ok, S::Error> {
        static DEFAULTS: LazyLock<Map<String, Value>> =
            LazyLock::new(|| {
                match serde_json::to_value(Traits::default()).expect("traits serialize") {
                    Value::Object(map) => map,
                    _ => unreachable!("traits serialize as an object"),
                }
            });
        let Value::Object(mut map) =
            serde_json::to_value(traits).map_err(serde::ser::Error::custom)?
        else {
            unreachable!("traits serialize as an object");
        };
        map.retain(|field, value| DEFAULTS.get(field) != Some(value));
        map.serialize(s)
    }
}

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

/// A list that means a set (`tags`, `target_cohorts`, a spec's
/// `depends_on`), sorted and without repeats as it comes in, so a stored
/// spec is canonical and two specs that differ only in order or repeats
/// have one fingerprint (the idempotency comparison).
pub fn set<'de, D: Deserializer<'de>, T: Deserialize<'de> + Ord>(
    d: D,
) -> Result<Box<[T]>, D::Error> {
    let mut items = Vec::<T>::deserialize(d)?;
    items.sort_unstable();
    items.dedup();
    Ok(items.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sets_are_sorted_and_whole_numbers_are_integers() {
        let t: Traits = serde_json::from_value(json!({
            "tags": ["b", "a", "b"], "priority": 2.0, "lease_ttl_s": 6e1, "other": 1,
        }))
        .unwrap();
        assert_eq!(*t.tags, ["a", "b"]);
        assert_eq!((t.priority, t.lease_ttl_s), (2, Some(60)));
        assert!(serde_json::from_value::<Traits>(json!({"priority": 2.5})).is_err());
        assert!(serde_json::from_value::<Traits>(json!({"lease_ttl_s": null})).is_ok());
    }

    #[test]
    fn a_stored_holder_writes_only_what_was_set() {
        #[derive(Serialize)]
        struct Holder {
            kind: &'static str,
            #[serde(flatten, serialize_with = "Traits::only_set")]
            traits: Traits,
        }
        let traits = Traits {
            priority: 3,
            ..Traits::default()
        };
        let stored = serde_json::to_value(Holder {
            kind: "k",
            traits: traits.clone(),
        })
        .unwrap();
        assert_eq!(stored, json!({"kind": "k", "priority": 3}));
        let shown = serde_json::to_value(&traits).unwrap();
        assert_eq!(shown["tags"], json!([]), "a view shows every field");
    }
}
