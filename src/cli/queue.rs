//! `tessera queue create|list|show`: thin clients of `POST /v1/queues`,
//! `GET /v1/queues` and `GET /v1/status`.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde::Serialize;

use super::remote::RemoteArgs;
use super::table::{self, OutputArgs, Table};
use crate::client::ClientError;
use crate::paths;
use crate::queue::spec::Backoff;
use crate::queue::{QueueConfig, QueuePatch, TaskState};
use crate::store::Name;
use crate::wire::{ProvisionedQueue, QueueList, QueueStatus, QueueView, Status};

/// Queue subcommands.
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Provision a queue (admin key); for an existing queue, the settings
    /// given change and the others keep their values.
    Create(CreateArgs),
    /// The queues the key was issued (all, for admin), with task counts.
    List {
        #[command(flatten)]
        out: OutputArgs,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// One queue: its settings, counts, oldest queued task and live leases.
    Show {
        /// The queue's name.
        name: String,
        #[command(flatten)]
        out: OutputArgs,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

/// Arguments of `queue create`: for a new queue, a setting left out takes
/// its default; for an existing one, it keeps its value.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The queue's name.
    #[arg(value_parser = parse_name)]
    name: Name,
    /// Lease length in seconds (1 to 86400; default 300).
    #[arg(long)]
    lease_ttl_s: Option<u32>,
    /// Claims before a task fails with attempts_exhausted (1 to 1000; default 3).
    #[arg(long)]
    max_attempts: Option<u32>,
    /// First retry delay after an expired lease, in milliseconds (default
    /// 1000; give --backoff-cap-ms with it).
    #[arg(long, requires = "backoff_cap_ms")]
    backoff_base_ms: Option<u64>,
    /// Longest retry delay, in milliseconds (default 60000; give
    /// --backoff-base-ms with it).
    #[arg(long, requires = "backoff_base_ms")]
    backoff_cap_ms: Option<u64>,
    /// A server queue: claimable only by keys that name it in their grants
    /// (`--server-queue=false` makes it an ordinary queue again; a value
    /// is taken only after `=`, so `--server-queue NAME` reads NAME as the
    /// queue).
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    server_queue: Option<bool>,
    /// The ctx-dir placement template for its tasks (such as
    /// runs/{task_id}); an empty value removes it.
    #[arg(long)]
    placement: Option<String>,
    /// A stage kind promotion to public requires (repeatable); the stages
    /// given replace the queue's list, and an empty value names none, so
    /// `--required-stage ''` alone clears it (back to the default pair,
    /// verb.solve_draft and verb.verify_gate).
    #[arg(long = "required-stage", value_parser = parse_stage)]
    required_stages: Vec<Option<Name>>,
    #[command(flatten)]
    out: OutputArgs,
    #[command(flatten)]
    remote: RemoteArgs,
}

impl CreateArgs {
    /// The settings given, as the patch `POST /v1/queues` takes.
    fn patch(&self) -> QueuePatch {
        let backoff = self
            .backoff_base_ms
            .zip(self.backoff_cap_ms)
            .map(|(base_ms, cap_ms)| Backoff { base_ms, cap_ms });
        QueuePatch {
            name: self.name.clone(),
            lease_ttl_s: self.lease_ttl_s,
            max_attempts: self.max_attempts,
            backoff,
            server: self.server_queue,
            placement: self
                .placement
                .clone()
                .map(|p| Some(p).filter(|p| !p.is_empty())),
            required_stages: (!self.required_stages.is_empty())
                .then(|| self.required_stages.iter().flatten().cloned().collect()),
        }
    }
}

/// What `queue create` did, in a sentence.
fn outcome(patch: &QueuePatch, created: bool) -> String {
    if created {
        return "created".into();
    }
    let named = serde_json::to_value(patch).expect("a patch serializes");
    let set: Vec<&str> = named
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .map(String::as_str)
        .filter(|k| *k != "name")
        .collect();
    if set.is_empty() {
        format!("queue {} exists; settings kept", patch.name)
    } else {
        format!(
            "queue {} exists; updated {} (others kept)",
            patch.name,
            set.join(", ")
        )
    }
}

fn parse_name(s: &str) -> Result<Name, String> {
    Name::parse("name", s).map_err(|e| e.to_string())
}

/// A `--required-stage` value: a stage kind, or none for an empty value.
fn parse_stage(s: &str) -> Result<Option<Name>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    Name::parse("required-stage", s)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// `queue show`: the listed queue and its status line.
#[derive(Debug, Serialize)]
struct Shown {
    #[serde(flatten)]
    queue: QueueView,
    #[serde(flatten)]
    status: Option<QueueStatus>,
}

/// Runs a queue subcommand.
pub async fn run(cmd: QueueCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        QueueCommand::Create(a) => {
            let patch = a.patch();
            let got: ProvisionedQueue = a
                .remote
                .client()?
                .post_json(&paths::QUEUE_PROVISION.at(&[]), &patch)
                .await?
                .success()?
                .json()?;
            table::print(a.out.output, &got, |q| {
                let mut t = settings(&q.config);
                t.row(vec!["outcome".into(), outcome(&patch, q.created)]);
                t
            });
        }
        QueueCommand::List { out, remote } => {
            let list: QueueList = remote
                .client()?
                .get(&paths::QUEUE_LIST.at(&[]))
                .await?
                .success()?
                .json()?;
            table::print(out.output, &list, |l| {
                let mut headers: Vec<String> = ["QUEUE", "SERVER", "LEASE_TTL_S", "MAX_ATTEMPTS"]
                    .map(String::from)
                    .into();
                headers.extend(state_headers());
                let mut t = Table::new(&headers);
                for q in &l.queues {
                    let mut row = vec![
                        q.config.name.to_string(),
                        yes_no(q.config.server),
                        q.config.lease_ttl_s.to_string(),
                        q.config.max_attempts.to_string(),
                    ];
                    row.extend(
                        TaskState::ALL
                            .iter()
                            .map(|s| q.counts.get(s.as_str()).copied().unwrap_or(0).to_string()),
                    );
                    t.row(row);
                }
                t
            });
        }
        QueueCommand::Show { name, out, remote } => {
            let client = remote.client()?;
            let list: QueueList = client
                .get(&paths::QUEUE_LIST.at(&[]))
                .await?
                .success()?
                .json()?;
            let Some(queue) = list
                .queues
                .into_iter()
                .find(|q| q.config.name.as_str() == name)
            else {
                return Err(ClientError::Api {
                    status: http::StatusCode::NOT_FOUND,
                    code: "unknown_queue".into(),
                    message: format!("queue {name} is not provisioned, or not issued to this key"),
                    details: serde_json::Value::Null,
                }
                .into());
            };
            let status: Status = client
                .get(&paths::STATUS.at(&[]))
                .await?
                .success()?
                .json()?;
            let now = status.now;
            let shown = Shown {
                status: status.queues.into_iter().find(|q| q.name.as_str() == name),
                queue,
            };
            table::print(out.output, &shown, |s| {
                let mut t = settings(&s.queue.config);
                for st in TaskState::ALL {
                    let n = s.queue.counts.get(st.as_str()).copied().unwrap_or(0);
                    t.row(vec![st.as_str().into(), n.to_string()]);
                }
                if let Some(q) = &s.status {
                    t.row(vec![
                        "oldest_queued".into(),
                        q.oldest_queued_since
                            .map_or("-".into(), |at| table::ago(at, now)),
                    ]);
                    t.row(vec!["live_leases".into(), q.live_leases.to_string()]);
                }
                t
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A queue's settings as FIELD / VALUE rows.
fn settings(q: &QueueConfig) -> Table {
    let mut t = Table::new(&["FIELD", "VALUE"]);
    let rows = [
        ("name", q.name.to_string()),
        ("server", yes_no(q.server)),
        ("lease_ttl_s", q.lease_ttl_s.to_string()),
        ("max_attempts", q.max_attempts.to_string()),
        (
            "backoff",
            format!(
                "{} ms, doubling to {} ms",
                q.backoff.base_ms, q.backoff.cap_ms
            ),
        ),
        (
            "placement",
            q.placement.clone().unwrap_or_else(|| "-".into()),
        ),
        ("required_stages", table::list(&q.required_stages)),
    ];
    for (k, v) in rows {
        t.row(vec![k.into(), v]);
    }
    t
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// One column header per task state, in table order.
pub fn state_headers() -> impl Iterator<Item = String> {
    TaskState::ALL.iter().map(|s| s.as_str().to_uppercase())
}
