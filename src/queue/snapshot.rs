//! Snapshots: the whole queue state in one file, so replay starts from it
//! and older journal segments can be deleted.
//!
//! ```text
//! journal/snapshot.jsonl
//!   line 1: {"format": "tessera-snapshot-1", "next_segment": N, "next_id": M,
//!            "queues": [...], "tasks": count}
//!   then one Task as JSON per line, in id order
//! ```
//! Written through the atomic writer (temp, fsync, rename, dir fsync), so a
//! crash leaves the old snapshot or the new one. It covers every journal
//! segment numbered below `next_segment`; those are deleted only after it
//! is durable, and receipt objects are synced (syncfs) before that, since
//! the deleted segments were their durable copy.

use std::io::{BufRead, BufReader};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::Error;
use super::machine::{SplitLimits, State};
use super::spec::QueueConfig;
use super::table::TaskTable;
use super::task::Task;
use crate::store::{self, Store};

/// The snapshot's file name in `journal/`.
pub const FILE: &str = "snapshot.jsonl";

const FORMAT: &str = "tessera-snapshot-1";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Meta {
    format: String,
    next_segment: u64,
    next_id: u64,
    queues: Vec<QueueConfig>,
    tasks: u64,
}

/// Writes a snapshot of `state` covering segments below `next_segment`.
pub fn write(store: &Store, state: &State, next_segment: u64) -> Result<(), Error> {
    let meta = Meta {
        format: FORMAT.into(),
        next_segment,
        next_id: state.next_id,
        queues: state.queues.values().cloned().collect(),
        tasks: state.tasks.len() as u64,
    };
    store
        .writer()
        .write_with(&store.root().journal, FILE, |w| {
            serde_json::to_writer(&mut *w, &meta)?;
            w.write_all(b"\n")?;
            for t in state.tasks.values() {
                serde_json::to_writer(&mut *w, t)?;
                w.write_all(b"\n")?;
            }
            Ok(())
        })?;
    Ok(())
}

/// Loads the snapshot, if there is one: the state and its `next_segment`.
pub fn load(store: &Store, limits: SplitLimits) -> Result<Option<(State, u64)>, Error> {
    let dir = &store.root().journal;
    let file = match dir.open(FILE) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(store::io_err("opening journal/snapshot.jsonl", e).into()),
    };
    let corrupt = |line: usize, message: String| Error::CorruptJournal {
        path: format!("journal/{FILE}"),
        message: format!("line {line}: {message}"),
    };
    let mut lines = BufReader::with_capacity(1 << 20, file).lines();
    let first = lines
        .next()
        .ok_or_else(|| corrupt(1, "empty".into()))?
        .map_err(|e| store::io_err("reading the snapshot", e))?;
    let meta: Meta = serde_json::from_str(&first).map_err(|e| corrupt(1, e.to_string()))?;
    if meta.format != FORMAT {
        return Err(corrupt(1, format!("unknown format {:?}", meta.format)));
    }
    let mut tasks = TaskTable::default();
    for (i, line) in lines.enumerate() {
        let line = line.map_err(|e| store::io_err("reading the snapshot", e))?;
        let t: Task = serde_json::from_str(&line).map_err(|e| corrupt(i + 2, e.to_string()))?;
        if t.id.0 != tasks.len() as u64 + 1 {
            return Err(corrupt(i + 2, format!("task {} is out of order", t.id)));
        }
        tasks.push(t);
    }
    if tasks.len() as u64 != meta.tasks {
        return Err(corrupt(
            0,
            format!("{} tasks listed, {} present", meta.tasks, tasks.len()),
        ));
    }
    let queues = meta
        .queues
        .into_iter()
        .map(|q| (q.name.clone(), q))
        .collect();
    let state = State::restore(queues, tasks, meta.next_id, limits, Timestamp::now());
    Ok(Some((state, meta.next_segment)))
}
