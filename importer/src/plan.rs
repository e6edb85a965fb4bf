//! The Plan: what a valid pack asks the daemon to create, each item with
//! the file and line it came from.
//!
//! A `Plan` only exists for a pack with no problems at all (`plan` returns a
//! `Report` otherwise), though it may carry warnings. It is data: applying it (pins, enqueue, catalog
//! checks) is the daemon's `tessera import`, not this crate's.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use crate::report::Diagnostic;
use tessera_core::Address;
use tessera_core::task::TaskSpec;

/// A validated pack, ready to apply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// The pack's header.
    pub pack: Pack,
    /// Nouns to write, in source order.
    pub nouns: Vec<NounItem>,
    /// Tasks to enqueue, every upstream before its dependents; ties keep
    /// source order.
    pub tasks: Vec<TaskItem>,
    /// Pins that must already exist with this hash.
    pub catalog: Vec<CatalogItem>,
    /// Flows as their steps (each step is also one of `tasks`).
    pub flows: Vec<FlowItem>,
    /// What the pack may not mean as written, though it plans (a template
    /// key holding template syntax, which is kept as written); sorted, each
    /// at its file, line and field like a problem.
    pub warnings: Vec<Diagnostic>,
}

/// The pack's header from `pack.yaml` / `pack.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pack {
    /// The pack's name (`pack`); part of every task's idempotency key.
    pub name: String,
    /// The pack's own version string.
    pub version: String,
    /// The namespace of every noun and task in the pack.
    pub namespace: String,
    /// The producing surface, bare (without `surface:`).
    pub producer_surface: String,
}

/// Where an item was written.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Source {
    /// The file, relative to the pack folder.
    pub file: PathBuf,
    /// 1-based line of the item in that file.
    pub line: usize,
}

/// A noun to write (a new version unless the same body is already there).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NounItem {
    /// Store segment of the noun path.
    pub store: String,
    /// Key segment of the noun path.
    pub key: String,
    /// The noun's type, e.g. `noun.skill_pack`.
    pub noun_type: String,
    /// Visibility envelope; `None` leaves it to the daemon's default.
    pub visibility: Option<String>,
    /// Surfaces for `allowlist_surfaces`, bare.
    pub allowed_surfaces: Vec<String>,
    /// The body to store.
    pub body: NounBody,
    /// Where the noun was written.
    pub source: Source,
}

/// A noun's body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum NounBody {
    /// A JSON value (inline `body`, or a `.json`/`.yaml`/`.yml`/`.toml`
    /// `body_file`); the store keeps it in canonical form.
    Json(Value),
    /// Any other `body_file`, byte for byte.
    Bytes {
        /// The file's exact bytes.
        bytes: Vec<u8>,
        /// From the extension: `text/markdown`, `text/plain`, ... or
        /// `application/octet-stream`.
        media_type: String,
    },
}

/// A task to enqueue (idempotently, by its key).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskItem {
    /// The local id, unique in the pack (`<template>.<item>` for expansions).
    pub id: String,
    /// `seed:<pack>:<id>`.
    pub idempotency_key: String,
    /// The full TaskSpec, as the daemon reads it: defaults applied;
    /// namespace, producer_surface and idempotency_key set; without
    /// `depends_on`; noun refs in `brief` left unresolved.
    pub spec: TaskSpec,
    /// Local ids of upstream tasks, sorted, without repeats.
    pub depends_on: Vec<String>,
    /// Every `{noun: "store/key"}` inside `spec["brief"]`.
    pub noun_refs: Vec<NounRef>,
    /// Where the task (or its template item) was written.
    pub source: Source,
}

/// A reference from a brief to a noun of the same pack, to be replaced at
/// apply time by the pin the import wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NounRef {
    /// JSON pointer into `spec["brief"]`, e.g. `/contract_ref`.
    pub pointer: String,
    /// The noun's store.
    pub store: String,
    /// The noun's key.
    pub key: String,
}

/// A governed artifact reference: a pin that must exist with this hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CatalogItem {
    /// The entry's name, unique in the pack.
    pub name: String,
    /// Namespace of the pinned noun (the pack's unless written).
    pub namespace: String,
    /// Store of the pinned noun.
    pub store: String,
    /// Key of the pinned noun.
    pub key: String,
    /// The pinned version (from 1).
    pub version: u64,
    /// sha256 of the version's stored bytes, 64 lowercase hex digits.
    pub sha256: String,
    /// Where the entry was written.
    pub source: Source,
}

/// A flow (Blueprint) as its steps, in the order written.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowItem {
    /// The flow's id, unique among the pack's tasks' prefixes.
    pub id: String,
    /// Its steps.
    pub steps: Vec<FlowStep>,
    /// Where the flow was written.
    pub source: Source,
}

/// One step of a flow: the task it became and what it reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowStep {
    /// The step's name (the task's `brief.step`).
    pub name: String,
    /// The local id of its task, `<flow id>.<step name>`.
    pub task_id: String,
    /// The upstream outputs its brief consumes.
    pub consumes: Vec<FlowConsume>,
    /// Steps it waits for without reading them.
    pub after: Vec<String>,
}

/// One `consumes` entry: a local name for an upstream step's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowConsume {
    /// The name the consuming step knows it by.
    pub name: String,
    /// The upstream step.
    pub step: String,
    /// Which piece of its output.
    pub path: Address,
}
