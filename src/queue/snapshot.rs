//! Snapshots: the whole queue state in one file, so replay starts from it
//! and older journal segments can be deleted.
//!
//! ```text
//! journal/snapshot.jsonl
//!   line 1: {"format": "tessera-snapshot-2", "next_segment": N, "next_id": M,
//!            "queues": [...], "tasks": count}
//!   then one Task as JSON per line, in id order
//!   last line: {"sha256": "<hex of every byte before this line>"}
//! ```
//! A snapshot whose checksum, count or order does not hold is refused
//! with its line: the daemon does not start on a damaged snapshot.
//! Written through the atomic writer (temp, fsync, rename, dir fsync), so a
//! crash leaves the old snapshot or the new one. It covers every journal
//! segment numbered below `next_segment`; those are deleted only after it
//! is durable, and receipt objects are synced (syncfs) before that, since
//! the deleted segments were their durable copy.

use std::io::{BufRead, BufReader, Write};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::Error;
use super::machine::{SplitLimits, State};
use super::names::Names;
use super::spec::QueueConfig;
use super::table::TaskTable;
use super::task::Task;
use crate::store::{self, Store};

/// The snapshot's file name in `journal/`.
pub const FILE: &str = "snapshot.jsonl";

const FORMAT: &str = "tessera-snapshot-2";

/// The last line: the checksum of every byte before it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Trailer {
    sha256: crate::store::Sha256,
}

/// A writer that hashes what passes through it.
struct Hashing<'a> {
    inner: &'a mut dyn std::io::Write,
    hash: sha2::Sha256,
}

impl std::io::Write for Hashing<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        sha2::Digest::update(&mut self.hash, &buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

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
        .write_with(&store.root().journal, FILE, |out| {
            let mut w = Hashing {
                inner: out,
                hash: sha2::Digest::new(),
            };
            serde_json::to_writer(&mut w, &meta)?;
            w.write_all(b"\n")?;
            for t in state.tasks.values() {
                serde_json::to_writer(&mut w, t)?;
                w.write_all(b"\n")?;
            }
            let sha256 = crate::store::Sha256::from_digest(sha2::Digest::finalize(w.hash));
            serde_json::to_writer(&mut *out, &Trailer { sha256 })?;
            out.write_all(b"\n")
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
    let mut lines = BufReader::with_capacity(1 << 20, file).split(b'\n');
    let mut hash: sha2::Sha256 = sha2::Digest::new();
    let mut next_line = |n: usize| -> Result<Vec<u8>, Error> {
        lines
            .next()
            .ok_or_else(|| corrupt(n, "the file ends early (no checksum line)".into()))?
            .map_err(|e| store::io_err("reading the snapshot", e).into())
    };
    let first = next_line(1)?;
    sha2::Digest::update(&mut hash, &first);
    sha2::Digest::update(&mut hash, b"\n");
    let meta: Meta = serde_json::from_slice(&first).map_err(|e| corrupt(1, e.to_string()))?;
    if meta.format != FORMAT {
        return Err(corrupt(1, format!("unknown format {:?}", meta.format)));
    }
    let mut tasks = TaskTable::default();
    let mut names = Names::default();
    for i in 0..meta.tasks {
        let n = usize::try_from(i).unwrap_or(usize::MAX).saturating_add(2);
        let line = next_line(n)?;
        sha2::Digest::update(&mut hash, &line);
        sha2::Digest::update(&mut hash, b"\n");
        let mut t: Task = serde_json::from_slice(&line).map_err(|e| corrupt(n, e.to_string()))?;
        names.share_task(&mut t);
        if t.id.0 != tasks.len() as u64 + 1 {
            return Err(corrupt(n, format!("task {} is out of order", t.id)));
        }
        tasks.push(t);
    }
    let n = tasks.len() + 2;
    let trailer: Trailer = serde_json::from_slice(&next_line(n)?)
        .map_err(|e| corrupt(n, format!("not the checksum line: {e}")))?;
    let actual = crate::store::Sha256::from_digest(sha2::Digest::finalize(hash));
    if trailer.sha256 != actual {
        return Err(corrupt(
            n,
            "the checksum does not match the snapshot's bytes: it is damaged".into(),
        ));
    }
    let queues = meta
        .queues
        .into_iter()
        .map(|q| (q.name.clone(), q))
        .collect();
    let state = State::restore(queues, tasks, names, meta.next_id, limits, Timestamp::now());
    Ok(Some((state, meta.next_segment)))
}
