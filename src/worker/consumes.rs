//! A flow step's `consumes`, resolved when its worker fetches the prompt:
//! each entry (`{step, path}` in the brief) against the last receipt of
//! the upstream task with that step name among the task's `depends_on`.
//!
//! An entry is `ready` with a pointer (the file in the upstream's ctx-dir
//! when the projection was written, sha256, size) and, up to
//! [`shim::INLINE_LIMIT`] bytes, the content inline as the shim shows a
//! body (`role: data`, never an instruction); a larger one gives the URL
//! of `GET /v1/tasks/{id}/output?path=…`. Otherwise it is `missing`, with
//! the upstream's `state` and `ok` and the reason (it did not succeed, it
//! has no worker result, it did not stage the part), never left out.
//!
//! Upstreams are only those the claimant may see (`prompt::Facts`): an
//! entry naming a step no visible upstream has is `missing` with reason
//! "no upstream step … that this key may see", the same whether the task
//! is hidden or was never there.

use serde_json::{Value, json};

use super::{Error, shim};
use crate::queue::brief::{Address, Consume};
use crate::queue::receipt::ProjectionStatus;
use crate::queue::{Receipt, Task, TaskState};
use crate::store::{Name, Sha256, Store};

/// Every `consumes` entry of `task`'s brief, resolved against `upstreams`
/// (tasks the claimant may see), in name order.
pub fn resolve(store: &Store, task: &Task, upstreams: &[Task]) -> Result<Vec<Value>, Error> {
    let Some(consumes) = task.spec.brief().consumes else {
        return Ok(Vec::new());
    };
    consumes
        .iter()
        .map(|(name, c)| {
            let upstream = upstreams
                .iter()
                .filter(|u| task.spec.depends_on.contains(&u.id))
                .find(|u| u.spec.step_name() == c.step);
            entry(store, name, c, upstream)
        })
        .collect()
}

fn entry(store: &Store, name: &Name, c: &Consume, up: Option<&Task>) -> Result<Value, Error> {
    let mut out = json!({"role": "data", "name": name, "step": c.step, "path": c.path});
    let Some(up) = up else {
        out["status"] = json!("missing");
        out["reason"] = json!(format!(
            "no upstream step {:?} that this key may see",
            c.step.as_str()
        ));
        return Ok(out);
    };
    out["task_id"] = json!(up.id);
    out["state"] = json!(up.state);
    out["ok"] = json!(up.ok());
    let missing = |mut out: Value, reason: &str| {
        out["status"] = json!("missing");
        out["reason"] = json!(reason);
        Ok(out)
    };
    if up.state != TaskState::Succeeded {
        return missing(out, "the upstream has not succeeded");
    }
    let Some(receipt) = up
        .receipts
        .last()
        .map(|sha| Receipt::read(store, sha))
        .transpose()?
    else {
        return missing(out, "the upstream has no receipt");
    };
    let Some((sha, file)) = located(&receipt, &c.path) else {
        let reason = match c.path {
            Address::Out => "the upstream has no worker result",
            Address::Part(_) => "the upstream did not stage this part",
        };
        return missing(out, reason);
    };
    let bytes = store.get_object(&sha)?;
    out["status"] = json!("ready");
    out["file_path"] = json!(receipt.projection.as_ref().and_then(|p| {
        (p.status == ProjectionStatus::Written)
            .then(|| store.root().absolute.join(&p.path).join(&file))
    }));
    out["sha256"] = json!(sha);
    out["size"] = json!(bytes.len());
    if bytes.len() as u64 > shim::INLINE_LIMIT {
        out["url"] = json!(url(up, &c.path));
        return Ok(out);
    }
    let (format, body) = shim::inline(&bytes);
    out["format"] = json!(format);
    out["body"] = body;
    Ok(out)
}

/// The object and ctx-dir file name an address names in a receipt.
fn located(receipt: &Receipt, path: &Address) -> Option<(Sha256, String)> {
    match path {
        Address::Out => {
            let out = receipt.out?;
            let step = receipt.step.clone()?;
            Some((out.sha256, format!("{step}.md")))
        }
        Address::Part(name) => {
            let sha = receipt.parts.as_ref()?.get(name)?;
            Some((*sha, name.clone()))
        }
    }
}

/// The raw bytes an address names in `task`'s last receipt, with their
/// sha256: `None` when the task has no such output.
pub fn raw(store: &Store, task: &Task, path: &Address) -> Result<Option<(Sha256, Vec<u8>)>, Error> {
    let Some(last) = task.receipts.last() else {
        return Ok(None);
    };
    let receipt = Receipt::read(store, last)?;
    match located(&receipt, path) {
        Some((sha, _)) => Ok(Some((sha, store.get_object(&sha)?))),
        None => Ok(None),
    }
}

/// The output route's URL for one address of a task.
fn url(task: &Task, path: &Address) -> String {
    let query: String = form_urlencoded::byte_serialize(path.to_string().as_bytes()).collect();
    format!("/v1/tasks/{}/output?path={query}", task.id)
}
