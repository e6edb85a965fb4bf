//! Tessera routes agent work through nouns (versioned, content-addressed
//! records under a sandboxed root) and verbs (tasks that authorized workers
//! claim under a lease and finish with receipts).
//!
//! Modules, and how they depend on each other (only downwards):
//!
//! ```text
//! daemon   opens the root, loads keys, serves, drains
//! http     hyper server, one routing table, JSON errors   -> auth, store
//! auth     keys, grants, visibility decisions             -> store
//! store    the sandboxed root: objects, noun refs         (bottom)
//! client   a small HTTP client for the CLI, tests and benchmarks
//! cli      the `tessera` command                          -> client, daemon, store
//! config   defaults, config file, flags
//! ```

pub mod auth;
pub mod cli;
pub mod client;
pub mod config;
pub mod daemon;
pub mod http;
pub mod promotion;
pub mod queue;
pub mod store;
pub mod worker;
