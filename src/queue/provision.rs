//! Provisioning a queue: the posted settings are a patch ([`QueuePatch`])
//! over the queue's config when the queue exists, so a re-post that names
//! only the queue changes nothing and one that names a field changes only
//! that field. The merge is pure ([`QueuePatch::over`]); each backend runs
//! it on the config it holds under its own lock or row lock and records
//! the merged config (the journal's `QueueSet` event, the `queues` row),
//! so a replay or another daemon reads the same. Checking the merged
//! config stays in `decide.rs`.

use serde::{Deserialize, Deserializer, Serialize};

use super::spec::{Backoff, QueueConfig};
use crate::store::Name;

/// `POST /v1/queues`: a queue's name and the settings to set. For a new
/// queue, a field left out takes its default; for an existing one, a
/// field left out keeps its value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct QueuePatch {
    /// Its name.
    pub name: Name,
    /// Lease length, in seconds (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ttl_s: Option<u32>,
    /// Claims before a task fails with `attempts_exhausted` (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Retry delays, both given (default 1000 ms doubling to 60000 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    /// Claimable only by keys that name it in their grants (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<bool>,
    /// The ctx-dir placement template; `null` removes it.
    #[serde(
        default,
        deserialize_with = "kept_null",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub placement: Option<Option<String>>,
    /// The stage kinds promotion requires; `[]` means the default pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_stages: Option<Vec<Name>>,
}

/// Keeps an explicit JSON `null` as `Some(None)` (absent is `None`).
fn kept_null<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

impl QueuePatch {
    /// The config this patch makes of `current` (the queue's config, or
    /// `None` for a new queue, whose fields left out take their defaults).
    pub fn over(&self, current: Option<&QueueConfig>) -> QueueConfig {
        let base = match current {
            Some(c) => c.clone(),
            None => QueueConfig::named(self.name.clone()),
        };
        QueueConfig {
            name: self.name.clone(),
            lease_ttl_s: self.lease_ttl_s.unwrap_or(base.lease_ttl_s),
            max_attempts: self.max_attempts.unwrap_or(base.max_attempts),
            backoff: self.backoff.unwrap_or(base.backoff),
            server: self.server.unwrap_or(base.server),
            placement: self.placement.clone().unwrap_or(base.placement),
            required_stages: self.required_stages.clone().unwrap_or(base.required_stages),
        }
    }
}

/// What a provision did.
#[derive(Clone, Debug, PartialEq)]
pub struct Provisioned {
    /// The queue's whole config after it.
    pub config: QueueConfig,
    /// True when the queue is new; false when it existed (and the patch
    /// changed only the fields it named).
    pub created: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(v: serde_json::Value) -> QueuePatch {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_patch_changes_only_the_fields_it_names() {
        let full = patch(json!({"name": "q", "lease_ttl_s": 120, "max_attempts": 5,
            "backoff": {"base_ms": 10, "cap_ms": 20}, "server": true,
            "placement": "runs/{task_id}", "required_stages": ["verb.a"]}))
        .over(None);
        let cases = [
            (json!({"name": "q"}), full.clone()),
            (
                json!({"name": "q", "max_attempts": 7}),
                QueueConfig {
                    max_attempts: 7,
                    ..full.clone()
                },
            ),
            (
                json!({"name": "q", "placement": null}),
                QueueConfig {
                    placement: None,
                    ..full.clone()
                },
            ),
            (
                json!({"name": "q", "required_stages": []}),
                QueueConfig {
                    required_stages: vec![],
                    ..full.clone()
                },
            ),
        ];
        for (given, want) in cases {
            assert_eq!(patch(given.clone()).over(Some(&full)), want, "{given}");
        }
    }

    #[test]
    fn a_new_queue_takes_the_defaults_for_what_is_left_out() {
        let made = patch(json!({"name": "q", "lease_ttl_s": 120})).over(None);
        let defaults: QueueConfig = serde_json::from_value(json!({"name": "q"})).unwrap();
        assert_eq!(
            made,
            QueueConfig {
                lease_ttl_s: 120,
                ..defaults
            }
        );
    }
}
