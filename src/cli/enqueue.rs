//! `tessera task enqueue`: a TaskSpec from a file (JSON, or YAML by its
//! `.yaml`/`.yml` name), with flags for the common fields laid over it
//! (a flag wins over the file), sent to `POST /v1/tasks`. The daemon
//! checks the spec; this only assembles it.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde_json::{Map, Value};

use super::exit::Usage;
use super::remote::RemoteArgs;
use super::table::{Format, OutputArgs};
use crate::paths;
use crate::wire::{Enqueued, TaskOutcome};

/// Arguments of `task enqueue`. Without a brief (in the file or
/// `--brief`), the brief is `{}`.
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// A TaskSpec file: JSON, or YAML when named *.yaml or *.yml; `-` reads stdin.
    file: Option<PathBuf>,
    /// The namespace it lives in.
    #[arg(long)]
    namespace: Option<String>,
    /// The provisioned queue.
    #[arg(long)]
    queue: Option<String>,
    /// The verb, such as verb.solve_draft.
    #[arg(long)]
    kind: Option<String>,
    /// read, write-internal, write-repo or public.
    #[arg(long)]
    effect_class: Option<String>,
    /// The producing surface (defaults to the key's only surface).
    #[arg(long)]
    producer_surface: Option<String>,
    /// private, surface_only (the default), allowlist_surfaces or public.
    #[arg(long)]
    visibility_scope: Option<String>,
    /// A surface allowed with allowlist_surfaces (repeatable).
    #[arg(long = "allowed-surface")]
    allowed_surfaces: Vec<String>,
    /// A descriptive tag (repeatable; grants nothing).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// A descriptive cohort (repeatable; grants nothing).
    #[arg(long = "cohort")]
    target_cohorts: Vec<String>,
    /// Same key (per namespace and key) finds the same task again.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// The brief, as a JSON object.
    #[arg(long)]
    brief: Option<String>,
    /// An upstream task id (repeatable): pending until it ends.
    #[arg(long = "depends-on")]
    depends_on: Vec<String>,
    /// Higher is claimed first.
    #[arg(long)]
    priority: Option<i32>,
    /// Not claimable before this instant (RFC 3339).
    #[arg(long)]
    not_before: Option<jiff::Timestamp>,
    /// Overrides the queue's max_attempts.
    #[arg(long)]
    max_attempts: Option<u32>,
    /// Overrides the queue's lease_ttl_s.
    #[arg(long)]
    lease_ttl_s: Option<u32>,
    /// Check the spec and report what would happen; enqueue nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    out: OutputArgs,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// Enqueues and prints the outcome.
pub async fn run(a: EnqueueArgs) -> anyhow::Result<()> {
    let spec = spec(&a)?;
    let mut path = paths::TASK_ENQUEUE.at(&[]);
    if a.dry_run {
        path.push_str("?dry_run=true");
    }
    let reply = a
        .remote
        .client()?
        .post_json(&path, &spec)
        .await?
        .success()?;
    let value = reply.value();
    if a.out.output == Format::Json {
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if a.dry_run {
        let o: TaskOutcome = reply.json()?;
        let task = o.task_id.map_or(String::new(), |t| format!(" ({t})"));
        println!("dry run: {}{task}; nothing enqueued", o.outcome);
    } else {
        let e: Enqueued = reply.json()?;
        let how = if e.created {
            "created"
        } else {
            "unchanged: the same idempotency key and spec"
        };
        println!("{} {} ({how})", e.task_id, e.state.as_str());
    }
    Ok(())
}

/// The spec: the file's fields, then each flag given.
fn spec(a: &EnqueueArgs) -> anyhow::Result<Value> {
    let mut map = match &a.file {
        Some(path) => read_spec(path)?,
        None => Map::new(),
    };
    let mut set = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            map.insert(k.into(), v);
        }
    };
    let text = |s: &Option<String>| s.clone().map(Value::String);
    let many =
        |v: &[String]| (!v.is_empty()).then(|| v.iter().cloned().map(Value::String).collect());
    set("namespace", text(&a.namespace));
    set("queue", text(&a.queue));
    set("kind", text(&a.kind));
    set("effect_class", text(&a.effect_class));
    set("producer_surface", text(&a.producer_surface));
    set("visibility_scope", text(&a.visibility_scope));
    set("allowed_surfaces", many(&a.allowed_surfaces));
    set("tags", many(&a.tags));
    set("target_cohorts", many(&a.target_cohorts));
    set("idempotency_key", text(&a.idempotency_key));
    set("depends_on", many(&a.depends_on));
    set("priority", a.priority.map(Value::from));
    set(
        "not_before",
        a.not_before.map(|t| Value::String(t.to_string())),
    );
    set("max_attempts", a.max_attempts.map(Value::from));
    set("lease_ttl_s", a.lease_ttl_s.map(Value::from));
    if let Some(b) = &a.brief {
        let brief: Value = serde_json::from_str(b).map_err(|e| {
            Usage(format!(
                "--brief is not JSON ({e}); pass an object such as '{{\"directive\": \"...\"}}'"
            ))
        })?;
        map.insert("brief".into(), brief);
    }
    map.entry("brief")
        .or_insert_with(|| Value::Object(Map::new()));
    Ok(Value::Object(map))
}

/// A TaskSpec file as a JSON object.
fn read_spec(path: &Path) -> anyhow::Result<Map<String, Value>> {
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the spec from stdin")?
    } else {
        std::fs::read_to_string(path)
            .map_err(|e| Usage(format!("cannot read the spec file {}: {e}", path.display())))?
    };
    let yaml = path.extension().is_some_and(|e| e == "yaml" || e == "yml");
    let value = if yaml {
        tessera_importer::yaml_to_json(&text)
            .map_err(|e| Usage(format!("{}: {e}", path.display())))?
    } else {
        serde_json::from_str(&text).map_err(|e| {
            Usage(format!(
                "{} is not JSON ({e}); name a YAML file *.yaml or *.yml",
                path.display()
            ))
        })?
    };
    match value {
        Value::Object(m) => Ok(m),
        _ => Err(Usage(format!(
            "{} must hold one TaskSpec object (namespace, queue, kind, effect_class, brief, ...)",
            path.display()
        ))
        .into()),
    }
}
