//! Append-only logs with group commit, shared by the root's two logs: the
//! task journal (`journal/`, owned by the queue) and the noun log
//! (`journal/nouns/`, owned by `store::noun_log`). This module knows
//! segments and records as bytes; what a payload means, how a log is
//! replayed and when its segments go are the owner's.
//!
//! - [`segment`]: the on-disk format (length, checksum, payload), the
//!   reader that tells a torn tail from corruption, preallocated segments.
//! - [`commit`]: the group committer (one write and one fsync per batch of
//!   waiting records), with async and blocking waits.
//! - [`reach`]: how far a log reaches (`reach.json`): every segment it
//!   made, the space it was made with, and the exact length of those it
//!   sealed, so a start refuses a segment deleted, emptied or cut.
//!
//! Invariants both logs rely on: records reach the disk in append order;
//! nothing is acknowledged before its record is durable; after a failed
//! write or fsync nothing more is appended until restart (one [`Health`]).
//!
//! [`Health`]: super::Health

pub mod commit;
pub mod reach;
pub mod segment;

use std::time::Duration;

pub use commit::{Appended, Committer};

/// Told of every sync of a log (the daemon's metrics), after the fact.
pub trait SyncObserver: Send + Sync + std::fmt::Debug {
    /// The commit thread wrote and synced `records` records in `took`;
    /// every record up to `durable` is now on disk. Called before anyone
    /// waiting for them is told, so what an observer publishes precedes
    /// the acknowledgements.
    fn synced(&self, durable: u64, records: u64, took: Duration);
}
