//! Tessera routes agent work through nouns (versioned, content-addressed
//! records under a sandboxed root) and verbs (tasks that authorized workers
//! claim under a lease and finish with receipts).
//!
//! Modules, and how they depend on each other (only downwards):
//!
//! ```text
//! daemon     opens the root, recovers the queue, serves, drains
//! http       hyper server, one routing table, JSON errors  -> promotion, worker, queue, auth, store
//! promotion  the public promotion gate                     -> queue, auth, store
//! worker     worker credentials, prompt, parts, submit,
//!            projection, contract checks                   -> queue, auth, store
//! queue      tasks, leases, fencing, receipts, journal; one
//!            interface (`Queue`, its calls and their
//!            durability listed in `queue`), answers (query)
//!            as owned snapshots from its shelves; on
//!            PostgreSQL (`queue::pg`)                      -> auth (handles), database, store
//! auth       keys, grants, visibility decisions, tokens;
//!            keys in the shared database (`auth::shared`)  -> database, store
//! database   the PostgreSQL several daemons share: pool,
//!            settings, schema migrations                   -> store
//! store      the sandboxed root: objects, noun refs, the
//!            logs (segments, group commit; the noun log),
//!            envelope vocabulary (visibility, effect class) (bottom)
//! mcp        MCP tools over any way to the HTTP API           -> client (http mounts it at /mcp)
//! client     a small HTTP client for the CLI, tests, benches, example
//! cli        the `tessera` command                         -> client, mcp, daemon, store, importer
//! config     defaults, config file, flags
//! ```
//!
//! The seed-pack importer is its own crate (`importer/`, pure: files in, a
//! validated plan out); `cli::import` applies a plan through the HTTP API.

pub mod auth;
pub mod cli;
pub mod client;
pub mod config;
pub mod daemon;
pub mod database;
pub mod events;
pub mod garbage;
pub mod http;
pub mod mcp;
pub mod metrics;
pub mod promotion;
pub mod queue;
pub mod store;
pub mod worker;
