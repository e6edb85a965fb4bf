//! Ctx-dirs against the receipts that name them: `tessera fsck` reports a
//! ctx-dir whose files are not exactly its task's last written result.

use super::front_matter;
use crate::queue::Receipt;
use crate::queue::receipt::ProjectionStatus;
use crate::store::{Sha256, Store};

/// Whether the ctx-dir the receipt says was written holds exactly its
/// result: `<step>.md` with this task, attempt and body hash, and each
/// part with its hash. `Ok` when the receipt projected nothing.
pub fn check_ctx(store: &Store, receipt: &Receipt) -> Result<(), String> {
    let (Some(projection), Some(step), Some(out)) =
        (&receipt.projection, &receipt.step, &receipt.out)
    else {
        return Ok(());
    };
    if projection.status != ProjectionStatus::Written {
        return Ok(());
    }
    let rel = projection
        .path
        .strip_prefix("workspace/")
        .ok_or_else(|| format!("the receipt names {} outside workspace/", projection.path))?;
    let dir = store
        .root()
        .workspace
        .open_dir(rel)
        .map_err(|e| format!("the ctx-dir cannot be opened: {e}"))?;
    let file = format!("{step}.md");
    let bytes = dir
        .read(&file)
        .map_err(|e| format!("{file} cannot be read: {e}"))?;
    let (header, body) =
        front_matter::decode(&bytes).ok_or_else(|| format!("{file} has no front matter"))?;
    if header.task_id != receipt.task_id.to_string() || header.attempt != receipt.attempt.0 {
        return Err(format!(
            "{file} is from {} attempt {}, the receipt from {} attempt {}",
            header.task_id, header.attempt, receipt.task_id, receipt.attempt.0
        ));
    }
    if Sha256::of(body) != out.sha256 {
        return Err(format!("{file}'s body does not hash to the receipt's out"));
    }
    for (name, sha) in receipt.parts.iter().flatten() {
        let part = dir
            .read(name)
            .map_err(|e| format!("part {name} cannot be read: {e}"))?;
        if Sha256::of(&part) != *sha {
            return Err(format!("part {name} does not hash to the receipt's"));
        }
    }
    Ok(())
}
