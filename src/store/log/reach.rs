//! How far a log reaches: `reach.json` in each log's directory (the task
//! journal's `journal/`, the noun log's `journal/nouns/`) names every
//! segment the log made and not yet let go, with the space it was made
//! with, and for each segment that will take no more records its exact
//! length and record count. A log read alone cannot tell a segment that
//! was deleted, emptied or cut at a record boundary from one that never
//! held more; with its reach it can, and its owner refuses to start
//! naming the file.
//!
//! ```text
//! <dir>/reach.json
//!   {"format": "tessera-log-reach-1",
//!    "segments": [{"number": N, "preallocated": BYTES, "sealed": {"len": L, "records": R}}, ...]}
//! ```
//!
//! Every segment also opens with a header record, `{"log_segment":N}`,
//! written and synced when the segment is made (see `segment.rs`), so a
//! segment says which one it is, and a missing `reach.json` beside
//! segments that carry headers is damage too, not an old root.
//!
//! When it is written (atomically, synced, through the root's one writer):
//! 1. a segment is listed once it exists with its header and its space,
//!    before any record goes into it;
//! 2. a segment is sealed once its last record is durable, before its
//!    unused space is trimmed: so a segment not sealed still has all the
//!    space it was made with, and one shorter than that was cut;
//! 3. a segment is let go (dropped from the list) before it is deleted:
//!    a fold's (whose snapshot then covers it), or the noun log's once its
//!    records are materialized.
//!
//! What a start checks ([`Reach::judge`], [`Reach::missing`]): every
//! listed segment exists; a sealed one holds exactly its records and
//! bytes; an open one is as long as it was made. A root written before
//! this file existed has none and segments without headers: it is taken
//! as found, and its first start writes the file.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};

use super::super::atomic::{AtomicWriter, Durability};
use super::super::{Error, io_err};
use super::segment::{ReadEnd, segment_name};

/// The file's name in a log's directory.
pub const FILE: &str = "reach.json";

const FORMAT: &str = "tessera-log-reach-1";

/// A segment that takes no more records: its exact length and records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sealed {
    /// Bytes of records (its header included).
    pub len: u64,
    /// Records, its header not counted.
    pub records: u64,
}

/// What the log says of one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The space it was made with.
    pub preallocated: u64,
    /// Its final length and records, once sealed.
    pub sealed: Option<Sealed>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    format: String,
    segments: Vec<StoredSegment>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredSegment {
    number: u64,
    preallocated: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed: Option<Sealed>,
}

/// A log's reach, as loaded and as it changes: cheap to share (an `Arc`).
#[derive(Clone, Debug)]
pub struct Reach {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The log's directory and the root's writer; `None` for a read-only
    /// check (fsck, a report): nothing is written.
    writer: Option<(Dir, Arc<AtomicWriter>)>,
    /// The path of the log's directory under the root, for messages.
    path: String,
    /// A `std` mutex is enough: held to change the list and write it
    /// (a few milliseconds, once per segment), never across `.await`.
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    segments: BTreeMap<u64, Expected>,
    /// Whether the file exists (or was written by this run).
    known: bool,
}

impl Reach {
    /// Loads `dir/reach.json` (`path` names `dir` under the root); a
    /// missing file is an old root's, or a new one's. With `writer`, the
    /// reach is kept up to date; without, it is only read.
    pub fn load(dir: Dir, path: &str, writer: Option<Arc<AtomicWriter>>) -> Result<Reach, Error> {
        let file = format!("{path}/{FILE}");
        let (segments, known) = match dir.read(FILE) {
            Ok(bytes) => {
                let stored: Stored =
                    serde_json::from_slice(&bytes).map_err(|e| Error::CorruptLog {
                        path: file.clone(),
                        message: format!("not a log reach: {e}; restore it from a backup"),
                    })?;
                if stored.format != FORMAT {
                    return Err(Error::CorruptLog {
                        path: file,
                        message: format!("unknown format {:?}", stored.format),
                    });
                }
                let segments = stored
                    .segments
                    .into_iter()
                    .map(|s| {
                        let e = Expected {
                            preallocated: s.preallocated,
                            sealed: s.sealed,
                        };
                        (s.number, e)
                    })
                    .collect();
                (segments, true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (BTreeMap::new(), false),
            Err(e) => return Err(io_err(format!("reading {file}"), e)),
        };
        Ok(Reach::with(
            writer.map(|w| (dir, w)),
            path,
            State { segments, known },
        ))
    }

    /// The reach of a log whose directory does not exist (a read-only
    /// look at a root that never had it): nothing listed.
    pub fn load_none(path: &str) -> Result<Reach, Error> {
        let state = State {
            segments: BTreeMap::new(),
            known: false,
        };
        Ok(Reach::with(None, path, state))
    }

    fn with(writer: Option<(Dir, Arc<AtomicWriter>)>, path: &str, state: State) -> Reach {
        Reach {
            inner: Arc::new(Inner {
                writer,
                path: path.to_string(),
                state: Mutex::new(state),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the log's reach was written (by this run or an earlier one).
    pub fn known(&self) -> bool {
        self.state().known
    }

    /// What the log says of segment `n`, if it lists it.
    pub fn expected(&self, n: u64) -> Option<Expected> {
        self.state().segments.get(&n).copied()
    }

    /// The listed segments from `first` on that are not among `present`.
    pub fn missing(&self, first: u64, present: &[u64]) -> Vec<u64> {
        self.state()
            .segments
            .range(first..)
            .map(|(n, _)| *n)
            .filter(|n| !present.contains(n))
            .collect()
    }

    /// What is wrong with segment `n`, read to `end` from a file of
    /// `file_len` bytes, against what the log says of it; `None` when it
    /// is as the log left it. A torn final record is the reader's to
    /// judge (it may end an open segment).
    pub fn judge(&self, n: u64, file_len: u64, end: &ReadEnd) -> Option<String> {
        let state = self.state();
        let Some(exp) = state.segments.get(&n) else {
            return (state.known && end.records > 0 && state.segments.keys().any(|k| *k < n)).then(
                || {
                    "it holds records, yet the log never made it (reach.json does not list it)"
                        .into()
                },
            );
        };
        if end.header != Some(n) {
            return Some(format!(
                "its header record (the first, naming segment {n}) is gone: the segment was emptied, cut or overwritten"
            ));
        }
        match exp.sealed {
            Some(s)
                if (end.records, end.valid_len) != (s.records, s.len) || end.damage.is_some() =>
            {
                Some(format!(
                    "it was sealed holding {} record(s) in {} bytes, and {} record(s) in {} bytes are readable: acknowledged records are gone",
                    s.records, s.len, end.records, end.valid_len
                ))
            }
            Some(_) => None,
            None if file_len < exp.preallocated => Some(format!(
                "it is {file_len} bytes, shorter than the {} it was made with, and it was never sealed (a stop or a later segment seals it first): it was cut, and acknowledged records may be gone",
                exp.preallocated
            )),
            None => None,
        }
    }

    /// Lists segment `n`, just made with `preallocated` bytes and its
    /// header, before any record goes into it.
    pub fn created(&self, n: u64, preallocated: u64) -> Result<(), Error> {
        self.change(|s| {
            s.insert(
                n,
                Expected {
                    preallocated,
                    sealed: None,
                },
            );
        })
    }

    /// Seals segment `n` (every record of it durable, before any of its
    /// space is trimmed).
    pub fn sealed(&self, n: u64, sealed: Sealed) -> Result<(), Error> {
        self.change(|s| {
            let e = s.entry(n).or_insert(Expected {
                preallocated: sealed.len,
                sealed: None,
            });
            e.sealed = Some(sealed);
        })
    }

    /// Lets go of the segments `gone` says, before they are deleted
    /// (nothing to write while the reach was never written: it lists
    /// nothing, and writing it would claim to know the log).
    pub fn forget(&self, gone: impl Fn(u64) -> bool) -> Result<(), Error> {
        if !self.known() {
            return Ok(());
        }
        self.change(|s| s.retain(|n, _| !gone(*n)))
    }

    /// Changes the list and writes it, durably (nothing for a read-only
    /// reach).
    fn change(&self, f: impl FnOnce(&mut BTreeMap<u64, Expected>)) -> Result<(), Error> {
        let Some((dir, writer)) = &self.inner.writer else {
            return Ok(());
        };
        let mut state = self.state();
        f(&mut state.segments);
        let stored = Stored {
            format: FORMAT.into(),
            segments: state
                .segments
                .iter()
                .map(|(n, e)| StoredSegment {
                    number: *n,
                    preallocated: e.preallocated,
                    sealed: e.sealed,
                })
                .collect(),
        };
        let mut bytes = serde_json::to_vec_pretty(&stored).expect("a reach serializes");
        bytes.push(b'\n');
        writer.write(dir, FILE, &bytes, Durability::Synced)?;
        state.known = true;
        Ok(())
    }

    /// The message for a listed segment that is not there.
    pub fn missing_message(&self, n: u64) -> String {
        format!(
            "this segment is missing: {}/{FILE} lists {} as made and not let go, so the records it held are gone",
            self.inner.path,
            segment_name(n)
        )
    }

    /// The message for headered segments with no `reach.json` beside them.
    pub fn lost_message(&self) -> String {
        format!(
            "{}/{FILE} is missing, yet the segments carry headers (only a log that keeps its reach writes them): which segments should exist, and how long, is unknown; restore the file from a backup",
            self.inner.path
        )
    }
}
