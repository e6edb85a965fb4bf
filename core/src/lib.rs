//! The vocabulary the daemon and the seed-pack importer share, pure: no
//! runtime, no network, no files (`.ci/run` fails if this crate or the
//! importer comes to depend on tokio, hyper, cap-std or rustix). Both
//! sides read these types from here, so a rule is written once.
//!
//! - [`Address`]: `$.out` or `$.parts["name"]`, one piece of a finished
//!   task's output, as flows' `consumes` and the output route name it.
//! - [`Name`]: the name rule for every namespace, store, key, queue,
//!   kind and surface segment.
//! - [`Sha256`]: a content digest, parsed once.
//! - [`NounPath`] and [`Pin`]: where a noun is, and one exact version.
//! - [`task::TaskSpec`] and [`task::TaskId`]: a task as enqueued, which
//!   the importer plans and the daemon takes.
//! - [`canonical`]: canonical JSON, which fingerprints and records use.
//! - [`Visibility`] and [`EffectClass`]: who may see a record, what a
//!   task's effect may touch.
//! - [`Traits`]: the task fields a spec, a split's child and every view
//!   of the task carry alike (priority, labels, upstream failure, lease,
//!   check policy), declared once and flattened into each.
//! - [`whole`]: integer fields that take integer-valued numbers.

mod address;
pub mod canonical;
mod envelope;
pub mod name;
pub mod noun;
pub mod scalars;
pub mod sha256;
pub mod task;
mod traits;
pub mod whole;

pub use address::Address;
pub use envelope::{EffectClass, Visibility};
pub use name::Name;
pub use noun::{NounPath, Pin};
pub use sha256::Sha256;
pub use traits::{CheckPolicy, MAX_LABEL, MAX_LEASE_TTL_S, Traits, UpstreamFailure, set};
