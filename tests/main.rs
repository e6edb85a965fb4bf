//! The integration suite, one test binary: each file beside this one is a
//! module of it and a subject of its own (`cargo test --test integration
//! pg_tasks::` runs one). One binary means one link and one build of the
//! shared support code, where a binary per file linked the daemon and
//! every dependency fifty times over.

#[macro_use]
mod support;

mod abandoned_claims;
mod bearer_scheme;
mod cli;
mod cli_ops;
mod connections;
mod ctx_settle;
mod delivery_doc;
mod durability;
mod events;
mod example;
mod export;
mod external_access_edge;
mod fault_matrix;
mod flows;
mod folding;
mod generated_client;
mod headers;
mod hidden_is_missing;
mod importer;
mod journal_faults;
mod key_scopes;
mod log_reach;
mod malformed_credentials;
mod mcp;
mod metrics;
mod noun_log;
mod noun_store;
mod openapi;
mod outside_the_logs;
mod parse_cost;
mod pg_coordination;
mod pg_database_loss;
mod pg_fence;
mod pg_partition;
mod pg_schema;
mod pg_several_daemons;
mod pg_shared_keys;
mod pg_tasks;
mod placement_squat;
mod python_worker;
mod queue_config;
mod readme;
mod retries;
mod shared_nouns;
mod site;
mod storage_faults;
mod thin_claims;
mod trust_boundary;
mod work_routing;
mod worker_agent;
mod worker_credentials;
mod worker_files;
mod worker_io;
