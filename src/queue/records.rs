//! Journal records on their way from a segment into the state at replay:
//! read in batches, parsed (with each receipt encoded again and checked
//! against its name) on helper threads, and applied in journal order on
//! the replaying thread.

use std::io::Read;

use super::event::Event;
use super::machine::State;
use super::pipeline::Pool;
use super::recover::Recovery;
use crate::store::log::segment::{self as journal, ReadEnd};
use crate::store::{Sha256, Store};

/// Records per batch.
const BATCH: usize = 2048;

/// Consecutive records of a segment: their payloads, back to back.
#[derive(Debug, Default)]
pub struct Batch {
    /// Each record's byte offset in its segment.
    offsets: Vec<u64>,
    /// Where each record's payload ends in `bytes`.
    ends: Vec<usize>,
    bytes: Vec<u8>,
}

/// Why a segment read stopped early.
enum Stopped {
    Io(std::io::Error),
    /// The batches are no longer wanted.
    Unwanted,
}

impl From<std::io::Error> for Stopped {
    fn from(e: std::io::Error) -> Stopped {
        Stopped::Io(e)
    }
}

/// Reads a segment's valid records and hands them to `send` in batches
/// (from `pool`, which [`parse`] gives them back to): how the read ended,
/// or `None` once `send` refuses one.
pub fn read_segment(
    r: impl Read,
    pool: &Pool<Batch>,
    mut send: impl FnMut(Batch) -> bool,
) -> std::io::Result<Option<ReadEnd>> {
    let mut batch = pool.take();
    let end = journal::read(r, |offset, payload| {
        batch.offsets.push(offset);
        batch.bytes.extend_from_slice(payload);
        batch.ends.push(batch.bytes.len());
        if batch.offsets.len() == BATCH && !send(std::mem::replace(&mut batch, pool.take())) {
            return Err(Stopped::Unwanted);
        }
        Ok(())
    });
    match end {
        Ok(end) if batch.offsets.is_empty() || send(batch) => Ok(Some(end)),
        Ok(_) | Err(Stopped::Unwanted) => Ok(None),
        Err(Stopped::Io(e)) => Err(e),
    }
}

/// A record read as an event.
#[derive(Debug)]
pub struct Parsed {
    ev: Event,
    /// A submit's receipt: its canonical bytes and their hash, or why
    /// they do not hash to the name the record gives it.
    receipt: Option<Result<(Sha256, Vec<u8>), String>>,
}

/// A batch's records, each at its offset: parsed, or why it is not a
/// journal event.
pub type ParsedBatch = Vec<(u64, Result<Parsed, String>)>;

/// Parses a batch (the helpers' share of replay) into a vector from
/// `vecs` (which [`apply`] gives back), and gives the batch back to
/// `batches`.
pub fn parse(mut batch: Batch, batches: &Pool<Batch>, vecs: &Pool<ParsedBatch>) -> ParsedBatch {
    let mut out = vecs.take();
    let starts = std::iter::once(0).chain(batch.ends.iter().copied());
    for (offset, (from, to)) in batch
        .offsets
        .iter()
        .zip(starts.zip(batch.ends.iter().copied()))
    {
        out.push((*offset, parse_one(&batch.bytes[from..to])));
    }
    batch.offsets.clear();
    batch.ends.clear();
    batch.bytes.clear();
    batches.give(batch);
    out
}

fn parse_one(payload: &[u8]) -> Result<Parsed, String> {
    let ev: Event = serde_json::from_slice(payload)
        .map_err(|e| format!("a record that is not a journal event ({e})"))?;
    let receipt = match &ev {
        Event::Submitted {
            receipt,
            receipt_sha256,
            ..
        } => {
            let bytes = receipt.bytes();
            let sha = Sha256::of(&bytes);
            Some(if sha == *receipt_sha256 {
                Ok((sha, bytes))
            } else {
                Err(format!(
                    "receipt {receipt_sha256} does not hash to its name"
                ))
            })
        }
        _ => None,
    };
    Ok(Parsed { ev, receipt })
}

/// Applies parsed records in order, handing each receipt to the store to
/// be written again when `write` (a report only notes it), and gives the
/// emptied vector back to `vecs`. Stops at the
/// first record that is not an event, that the state cannot take, or
/// whose receipt does not hash to its name: its offset, and why.
pub fn apply(
    store: &Store,
    write: bool,
    state: &mut State,
    rec: &mut Recovery,
    mut parsed: ParsedBatch,
    vecs: &Pool<ParsedBatch>,
) -> Result<(), (u64, String)> {
    for (offset, record) in parsed.drain(..) {
        let Parsed { ev, receipt } = record.map_err(|what| (offset, what))?;
        state
            .applies(&ev)
            .map_err(|e| (offset, format!("a record the queue cannot apply: {e}")))?;
        if let Some(receipt) = receipt {
            let (sha, bytes) = receipt.map_err(|what| (offset, what))?;
            if write {
                store.put_object_later(sha, bytes);
            } else {
                rec.journal_receipts.insert(sha);
            }
        }
        state.apply_owned(ev);
    }
    vecs.give(parsed);
    Ok(())
}
