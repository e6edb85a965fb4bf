//! Promotion to public: the gate between team-private work and a public
//! artifact. An admin names a noun pin and the stage tasks that produced
//! and checked it; the gate writes a new version of the noun with
//! visibility `public` (never rewriting one) and a promotion record object
//! referencing the stage receipts, only when every piece holds:
//! 1. the pin names an existing version with that sha256;
//! 2. each stage succeeded, and its last receipt's outputs or evidence
//!    contain that exact sha256;
//! 3. the stages cover the required stage kinds (the pinned contract's
//!    `required_stages`, else `verb.solve_draft` and `verb.verify_gate`);
//! 4. the stages' receipts were submitted by distinct keys.
//!
//! Anything missing is refused with every missing piece named, and nothing
//! changes.

use std::collections::BTreeSet;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::auth::Principal;
use crate::queue::{Queue, TaskId, TaskState};
use crate::store::{
    self, Durability, Name, Pin, PutOutcome, PutRequest, Sha256, Store, VersionMeta, Visibility,
    canonical_record,
};

/// Stage kinds required when the contract names none.
pub const DEFAULT_REQUIRED_STAGES: [&str; 2] = ["verb.solve_draft", "verb.verify_gate"];

/// What can stop a promotion.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Missing pieces, each named.
    #[error("promotion refused: {}", .0.join("; "))]
    Refused(Vec<String>),
    /// The store failed (or a concurrent write won the version).
    #[error(transparent)]
    Store(#[from] store::Error),
}

/// `POST /v1/promotions`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The noun version to promote (its namespace is required).
    pub pin: Pin,
    /// The stage tasks.
    pub stages: Vec<TaskId>,
}

/// One stage as the record lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    /// The task.
    pub task_id: TaskId,
    /// Its kind.
    pub kind: Name,
    /// Its last receipt.
    pub receipt: Sha256,
    /// The key that submitted it.
    pub by_key: String,
}

/// The promotion record (stored as an object) and its hash.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Promoted {
    /// The pin that was promoted.
    pub from: Pin,
    /// The new public version.
    pub to: Pin,
    /// The stages and their receipts.
    pub stages: Vec<Stage>,
    /// The stage kinds that were required.
    pub required_stages: Vec<String>,
    /// The admin key.
    pub by: String,
    /// When.
    pub at: Timestamp,
}

/// Checks every piece and, when all hold, promotes. Returns the record and its hash.
pub async fn promote(
    store: &Store,
    queue: &Queue,
    admin: &Principal,
    req: Request,
) -> Result<(Promoted, Sha256), Error> {
    let mut problems = Vec::new();
    let Some(ns) = req.pin.namespace.clone() else {
        return Err(Error::Refused(vec![
            "the pin must name its namespace".into(),
        ]));
    };
    if req.stages.is_empty() {
        problems.push("name at least one stage task".to_string());
    }
    let unique: BTreeSet<TaskId> = req.stages.iter().copied().collect();
    if unique.len() != req.stages.len() {
        problems.push("a stage is named twice".into());
    }
    let tasks: Vec<_> = queue.peek(|st| {
        req.stages
            .iter()
            .map(|id| (*id, st.tasks.get(id).cloned()))
            .collect()
    });
    let pin = req.pin.clone();
    let sha = pin.sha256;
    let (bytes_ok, stages, contract_stages, mut more) = store.blocking(move |store| {
        let mut problems = Vec::new();
        let bytes_ok = match store.read_pin::<store::Error>(&pin, &ns, |_| Ok(())) {
            Ok(_) => true,
            Err(e) => {
                problems.push(format!("the pin {}/{}/{} v{}: {e}", ns, pin.store, pin.key, pin.version));
                false
            }
        };
        let mut stages = Vec::new();
        let mut contract_stages = None;
        for (id, task) in &tasks {
            let Some(t) = task else {
                problems.push(format!("stage {id} does not exist"));
                continue;
            };
            if t.state != TaskState::Succeeded {
                problems.push(format!("stage {id} is {}, not succeeded", t.state.as_str()));
                continue;
            }
            let Some(receipt_sha) = t.receipts.last() else {
                problems.push(format!("stage {id} has no receipt"));
                continue;
            };
            let receipt: Value = serde_json::from_slice(&store.get_object(receipt_sha)?).unwrap_or(Value::Null);
            let cites = ["outputs", "evidence"].iter().any(|k| {
                receipt[k].as_array().is_some_and(|pins| pins.iter().any(|p| p["sha256"] == json!(sha)))
            });
            if !cites {
                problems.push(format!("stage {id}'s receipt {receipt_sha} does not reference sha256 {sha} in its outputs or evidence"));
            }
            if contract_stages.is_none() {
                contract_stages = required_from_contract(store, t);
            }
            stages.push(Stage {
                task_id: *id,
                kind: t.spec.kind.clone(),
                receipt: *receipt_sha,
                by_key: receipt["by_key"].as_str().unwrap_or_default().to_string(),
            });
        }
        Ok::<_, Error>((bytes_ok, stages, contract_stages, problems))
    })
    .await?;
    problems.append(&mut more);
    let required: Vec<String> = contract_stages.unwrap_or_else(|| {
        DEFAULT_REQUIRED_STAGES
            .iter()
            .map(|s| s.to_string())
            .collect()
    });
    for kind in &required {
        if !stages.iter().any(|s| s.kind.as_str() == kind) {
            problems.push(format!("no succeeded stage of kind {kind}"));
        }
    }
    for (i, a) in stages.iter().enumerate() {
        if let Some(b) = stages[i + 1..].iter().find(|b| b.by_key == a.by_key) {
            problems.push(format!("stages {} and {} were submitted by the same key {}; promotion needs distinct actors", a.task_id, b.task_id, a.by_key));
        }
    }
    if !problems.is_empty() || !bytes_ok {
        return Err(Error::Refused(problems));
    }
    let by = admin.key_id.to_string();
    let from = req.pin.clone();
    store
        .blocking(move |store| {
            let path = from.path(from.namespace.as_ref().expect("checked above"));
            let (pinned, bytes) = store.read_version::<store::Error>(
                &path,
                Some(from.version),
                Some(from.sha256),
                |_| Ok(()),
            )?;
            // Appended after whatever is latest, under the key's lock; the
            // envelope stays the latest version's but for visibility.
            let request = PutRequest {
                expected_version: None,
                skip_unchanged: false,
                dry_run: false,
                media_type: pinned.media_type,
                noun_type: pinned.noun_type,
            };
            let outcome = store.put_noun::<store::Error>(&path, &bytes, &request, |latest| {
                let latest = latest.expect("the pinned noun exists");
                Ok(VersionMeta {
                    created_by: by.clone(),
                    producer_surface: latest.producer_surface.clone(),
                    visibility: Visibility::Public,
                    allowed_surfaces: latest.allowed_surfaces.clone(),
                    owner: latest.owner.clone(),
                })
            })?;
            let PutOutcome::NewVersion { entry } = outcome else {
                unreachable!("a put after the latest version is a new version")
            };
            let record = Promoted {
                to: Pin {
                    namespace: Some(path.namespace.clone()),
                    store: path.store.clone(),
                    key: path.key.clone(),
                    version: entry.version,
                    sha256: entry.sha256,
                },
                from,
                stages,
                required_stages: required,
                by,
                at: Timestamp::now(),
            };
            let sha = store.put_object(&canonical_record(&record), Durability::Synced)?;
            Ok((record, sha))
        })
        .await
}

/// The `required_stages` of the contract a task pins, if any.
fn required_from_contract(store: &Store, t: &crate::queue::Task) -> Option<Vec<String>> {
    let brief = t.spec.brief_value();
    let pin: Pin = serde_json::from_value(brief.get("contract_ref")?.clone()).ok()?;
    let bytes = store
        .read_pin::<store::Error>(&pin, &t.spec.namespace, |_| Ok(()))
        .ok()?;
    let contract: Value = serde_json::from_slice(&bytes).ok()?;
    let list: Vec<String> = contract["required_stages"]
        .as_array()?
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    (!list.is_empty()).then_some(list)
}
