//! Promotion to public: the gate between team-private work and a public
//! artifact. An admin names a noun pin and the stage tasks that produced
//! and checked it; the gate writes a new version of the noun with
//! visibility `public` (never rewriting one) and a promotion record object
//! referencing the stage receipts, only when every piece holds:
//! 1. the pin names an existing version with that sha256;
//! 2. each stage succeeded, and its last receipt's outputs or evidence
//!    hold exactly that pin (`{namespace, store, key, version, sha256}`);
//! 3. the stages cover the required stage kinds: admin policy, the union of
//!    the `required_stages` of the stages' queues (set when an admin
//!    provisions them), else `verb.solve_draft` and `verb.verify_gate`;
//!    never anything a requester wrote, such as a contract noun;
//! 4. the stages' receipts were submitted by distinct keys.
//!
//! Anything missing is refused with every missing piece named, and nothing
//! changes.

use std::collections::BTreeSet;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::auth::Principal;
use crate::queue::{Queue, Receipt, TaskId, TaskState};
use crate::store::{
    self, Durability, Name, Pin, PutOutcome, PutRequest, Sha256, Store, VersionMeta, Visibility,
    canonical_record,
};

/// Stage kinds required when no stage's queue names any.
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
    /// The queue could not answer.
    #[error(transparent)]
    Queue(#[from] crate::queue::JournalError),
}

/// `POST /v1/promotions`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct Request {
    /// The noun version to promote (its namespace is required).
    pub pin: Pin,
    /// The stage tasks.
    pub stages: Vec<TaskId>,
}

/// One stage as the record lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
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
    #[schema(value_type = String, format = DateTime)]
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
    let (tasks, required) = queue.tasks_now(&req.stages).await?;
    let policy: BTreeSet<String> = required.iter().map(|k| k.to_string()).collect();
    let pin = req.pin.clone();
    let (bytes_ok, stages, mut more) = store.blocking(move |store| {
        let mut problems = Vec::new();
        let bytes_ok = match store.read_pin(&pin, &ns, |_| true) {
            Ok(_) => true,
            Err(e) => {
                problems.push(format!("the pin {}/{}/{} v{}: {e}", ns, pin.store, pin.key, pin.version));
                false
            }
        };
        let mut stages = Vec::new();
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
            let receipt = Receipt::read(store, receipt_sha)?;
            if !receipt.cites(&pin) {
                problems.push(format!("stage {id}'s receipt {receipt_sha} does not hold exactly this pin (namespace, store, key, version and sha256) in its outputs or evidence"));
            }
            stages.push(Stage {
                task_id: *id,
                kind: t.spec.kind.clone(),
                receipt: *receipt_sha,
                by_key: receipt.by_key.to_string(),
            });
        }
        Ok::<_, Error>((bytes_ok, stages, problems))
    })
    .await?;
    problems.append(&mut more);
    let required: Vec<String> = if policy.is_empty() {
        DEFAULT_REQUIRED_STAGES
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        policy.into_iter().collect()
    };
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
            let (pinned, bytes) =
                store.read_version(&path, Some(from.version), Some(from.sha256), |_| true)?;
            // Appended after whatever is latest, under the key's lock; the
            // envelope stays the latest version's but for visibility.
            let request = PutRequest {
                expected_version: None,
                skip_unchanged: false,
                dry_run: false,
                media_type: pinned.media_type,
                noun_type: pinned.noun_type,
                source_pack: None,
            };
            let outcome = store.put_noun::<store::Error>(
                &path,
                &bytes,
                &request,
                |_| true,
                |latest| {
                    let latest = latest.expect("the pinned noun exists");
                    Ok(VersionMeta {
                        created_by: by.clone(),
                        producer_surface: latest.producer_surface.clone(),
                        visibility: Visibility::Public,
                        allowed_surfaces: latest.allowed_surfaces.clone(),
                        owner: latest.owner.clone(),
                    })
                },
            )?;
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
