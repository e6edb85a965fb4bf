//! A flow step's `consumes`, resolved when its worker fetches the prompt:
//! each entry (`{step, path}` in the brief) against the last receipt of
//! the upstream task with that step name among the task's `depends_on`.
//!
//! An entry is `ready` with a pointer (the file in the upstream's ctx-dir
//! when the projection was written, sha256, size) and, up to
//! [`shim::INLINE_LIMIT`] bytes, the content inline as the shim shows a
//! body (`role: data`, never an instruction); a larger one gives the URL
//! of `GET /v1/worker/consumes/{name}`, which serves a ready entry's raw
//! bytes to the worker's handle ([`read`]). Otherwise it is `missing`, with
//! the upstream's `state` and `ok` and the reason (it did not succeed, it
//! has no worker result, it did not stage the part), never left out.
//!
//! Upstreams are only those the claimant may see (`prompt::Facts`): an
//! entry naming a step no visible upstream has is `missing` with reason
//! "no upstream step … that this key may see", the same whether the task
//! is hidden or was never there.

use serde_json::{Value, json};

use super::{Error, shim};
use crate::paths;
use crate::queue::SpecRules;
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
        .map(|(name, c)| entry(store, name, c, upstream(task, upstreams, c)))
        .collect()
}

/// The raw bytes and sha256 of the entry `name` of `task`'s `consumes`,
/// when it is ready; `None` when the brief has no such entry or it is
/// missing (as [`resolve`] shows it).
pub fn read(
    store: &Store,
    task: &Task,
    upstreams: &[Task],
    name: &str,
) -> Result<Option<(Sha256, Vec<u8>)>, Error> {
    let consumes = task.spec.brief().consumes.unwrap_or_default();
    let Some(c) = consumes
        .iter()
        .find(|(n, _)| n.as_str() == name)
        .map(|(_, c)| c)
    else {
        return Ok(None);
    };
    let Some(up) = upstream(task, upstreams, c) else {
        return Ok(None);
    };
    match source(store, up, &c.path)? {
        Ok(found) => Ok(Some((found.sha256, store.get_object(&found.sha256)?))),
        Err(_) => Ok(None),
    }
}

/// The upstream an entry names: among the task's `depends_on` that the
/// claimant may see, the one whose step name is the entry's `step`.
fn upstream<'a>(task: &Task, upstreams: &'a [Task], c: &Consume) -> Option<&'a Task> {
    upstreams
        .iter()
        .filter(|u| task.spec.depends_on.contains(&u.id))
        .find(|u| u.spec.step_name() == c.step)
}

/// A ready output: its object, its file name in the ctx-dir and the
/// receipt that names it.
struct Found {
    sha256: Sha256,
    file: String,
    receipt: Receipt,
}

/// Where the output an address names is, or why it is missing.
fn source(store: &Store, up: &Task, path: &Address) -> Result<Result<Found, &'static str>, Error> {
    if up.state != TaskState::Succeeded {
        return Ok(Err("the upstream has not succeeded"));
    }
    let Some(last) = up.receipts.last() else {
        return Ok(Err("the upstream has no receipt"));
    };
    let receipt = Receipt::read(store, last)?;
    Ok(match located(&receipt, path) {
        Some((sha256, file)) => Ok(Found {
            sha256,
            file,
            receipt,
        }),
        None => Err(match path {
            Address::Out => "the upstream has no worker result",
            Address::Part(_) => "the upstream did not stage this part",
        }),
    })
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
    let found = match source(store, up, &c.path)? {
        Ok(found) => found,
        Err(reason) => {
            out["status"] = json!("missing");
            out["reason"] = json!(reason);
            return Ok(out);
        }
    };
    let bytes = store.get_object(&found.sha256)?;
    super::audit::ensure_ctx(store, &up.spec.namespace, &found.receipt);
    out["status"] = json!("ready");
    out["file_path"] = json!(found.receipt.projection.as_ref().and_then(|p| {
        (p.status == ProjectionStatus::Written)
            .then(|| store.root().absolute.join(&p.path).join(&found.file))
    }));
    out["sha256"] = json!(found.sha256);
    out["size"] = json!(bytes.len());
    if bytes.len() as u64 > shim::INLINE_LIMIT {
        out["url"] = json!(url(name));
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

/// The worker route's URL for an entry.
fn url(name: &Name) -> String {
    paths::WORKER_CONSUMES.at(&[name.as_str()])
}
