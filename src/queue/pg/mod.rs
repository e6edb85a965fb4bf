//! The queue on PostgreSQL (`--queue-url`, connected through
//! [`crate::database`]): tasks and their edges, leases, receipts, events,
//! every daemon's events streamed to its hub ([`stream`]), the
//! maintenance leader, and the grants rules rendered as SQL
//! ([`viewer`]).

pub mod batch;
mod claims;
/// The throwaway PostgreSQL the unit tests use.
#[cfg(test)]
#[path = "../../../tests/support/pg.rs"]
#[allow(dead_code, reason = "the integration tests use the rest of it")]
mod cluster;
pub mod complete;
mod configs;
pub mod event_ids;
pub mod events;
pub mod leader;
pub mod lease;
#[cfg(test)]
mod model_props;
pub mod receipt_rows;
mod shared;
pub mod shelves;
mod stream;
pub mod tasks;
pub mod transact;
pub mod viewer;
pub mod wake;

pub use shared::Shared;
