//! The vocabulary the daemon and the seed-pack importer share, pure: no
//! runtime, no network, no files (`.ci/run` fails if this crate or the
//! importer comes to depend on tokio, hyper, cap-std or rustix). Both
//! sides read these types from here, so a rule is written once.
//!
//! - [`Address`]: `$.out` or `$.parts["name"]`, one piece of a finished
//!   task's output, as flows' `consumes` and the output route name it.

mod address;

pub use address::Address;
