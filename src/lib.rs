//! Tessera routes agent work through nouns (versioned, content-addressed
//! records under a sandboxed root) and verbs (tasks that authorized workers
//! claim under a lease and finish with receipts).
//!
//! Modules, each above everything it uses: every arrow points down, and
//! the arrows are every `crate::` path a module names (a unit test below
//! reads the sources and checks both).
//!
//! ```text
//! cli        the `tessera` command                   -> daemon, mcp, config, promotion,
//!                                                       wire, worker, queue, auth, database,
//!                                                       store, paths, client
//! daemon     opens the root, recovers the queue,
//!            serves, drains                          -> http, config, garbage, metrics, events,
//!                                                       worker, queue, auth, database, store
//! http       hyper server, one route table, errors
//!            as responses                            -> mcp, config, metrics, events, promotion,
//!                                                       wire, worker, queue, auth, store,
//!                                                       paths
//! mcp        MCP tools over any way to the HTTP API  -> wire, queue, store, paths, client
//! config     defaults, config file, flags            -> events, queue, auth, store
//! garbage    collects unreferenced objects           -> promotion, queue, database, store
//! metrics    the counters a scrape renders           -> queue, store
//! events     the change stream readers follow        -> queue, store
//! wire       the API's bodies and error vocabulary,
//!            shared by both ends                     -> promotion, worker, queue, auth, store
//! promotion  the public promotion gate               -> queue, auth, store
//! worker     worker credentials, prompt, parts,
//!            submit, projection, contract checks     -> queue, auth, store, paths
//! queue      tasks, leases, fencing, receipts,
//!            journal; one interface (`Queue`, its
//!            calls and their durability listed in
//!            `queue`), answers (query) as owned
//!            snapshots; on PostgreSQL (`queue::pg`)  -> auth, database, store
//! auth       keys, grants, visibility decisions,
//!            tokens; keys in the shared database     -> database, store
//! database   the PostgreSQL several daemons share:
//!            pool, settings, schema migrations       -> store
//! store      the sandboxed root: objects, noun refs,
//!            the logs, envelope vocabulary           (bottom)
//! paths      every endpoint's method and path
//!            template, and paths built from them     (bottom)
//! client     a small HTTP client for the CLI, tests,
//!            benches, example                        (bottom)
//! ```
//!
//! The seed-pack importer is its own crate (`importer/`, pure: files in, a
//! validated plan out); `cli::import` applies a plan through the HTTP API.
//! What both read (names, digests, pins, the envelope vocabulary, a
//! task's id, spec and traits, a flow's output address, canonical JSON)
//! is in a third, pure crate, `core/`, so the daemon never depends on the
//! importer's, and a spec the importer plans is the type the daemon takes.

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
pub mod paths;
pub mod promotion;
pub mod queue;
pub mod store;
pub mod wire;
pub mod worker;

#[cfg(test)]
mod map {
    //! The module map above against the sources.

    use std::collections::{BTreeMap, BTreeSet};

    /// The map's arrows: each module, in order, with what it points to.
    fn drawn() -> Vec<(String, BTreeSet<String>)> {
        let doc = include_str!("lib.rs");
        let block = doc
            .split("//! ```text\n")
            .nth(1)
            .and_then(|rest| rest.split("//! ```").next())
            .expect("the map's text block");
        let mut map: Vec<(String, BTreeSet<String>)> = Vec::new();
        // An entry's description comes first; from its line with `->` on,
        // its lines hold arrows.
        let mut arrows_started = false;
        for line in block.lines() {
            let line = line
                .trim_start_matches("//!")
                .strip_prefix(' ')
                .unwrap_or("");
            if !line.starts_with(' ') && !line.is_empty() {
                let name = line.split_whitespace().next().unwrap().to_string();
                map.push((name, BTreeSet::new()));
                arrows_started = false;
            }
            let arrows = match line.split_once("-> ") {
                Some((_, a)) => Some(a),
                None => arrows_started.then_some(line),
            };
            if let (Some(arrows), Some((_, to))) = (arrows, map.last_mut()) {
                arrows_started = true;
                to.extend(
                    arrows
                        .split(',')
                        .map(|m| m.trim().to_string())
                        .filter(|m| !m.is_empty()),
                );
            }
        }
        map
    }

    /// The `.rs` files under `dir`, at any depth.
    fn rust_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut files = Vec::new();
        for path in entries.map(|e| e.unwrap().path()) {
            if path.is_dir() {
                files.extend(rust_files(&path));
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
        files
    }

    /// Each module's `crate::` paths, outside comments.
    fn used(modules: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for m in modules {
            let found = uses.entry(m.clone()).or_default();
            let file = src.join(format!("{m}.rs"));
            let mut files = rust_files(&src.join(m));
            files.extend(file.exists().then_some(file));
            for path in files {
                let text = std::fs::read_to_string(&path).unwrap();
                for line in text.lines() {
                    let code = line.split("//").next().unwrap_or("");
                    for (i, _) in code.match_indices("crate::") {
                        let after = &code[i + "crate::".len()..];
                        let names: Vec<&str> = match after.strip_prefix('{') {
                            Some(group) => group
                                .split(['}', ','])
                                .map(|n| n.trim().split("::").next().unwrap_or(""))
                                .collect(),
                            None => vec![
                                after
                                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                                    .next()
                                    .unwrap_or(""),
                            ],
                        };
                        found.extend(
                            names
                                .into_iter()
                                .filter(|n| modules.contains(*n) && *n != m)
                                .map(str::to_string),
                        );
                    }
                }
            }
        }
        uses
    }

    #[test]
    fn the_module_map_is_every_arrow_and_all_point_down() {
        let drawn = drawn();
        let declared: BTreeSet<String> = include_str!("lib.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("pub mod "))
            .map(|m| m.trim_end_matches(';').to_string())
            .collect();
        let listed: BTreeSet<String> = drawn.iter().map(|(m, _)| m.clone()).collect();
        assert_eq!(listed, declared, "the map's modules against lib.rs's");
        let used = used(&declared);
        for (i, (m, to)) in drawn.iter().enumerate() {
            assert_eq!(
                &used[m], to,
                "{m}: the arrows the sources draw against the map's"
            );
            let above: Vec<&String> = drawn[..i]
                .iter()
                .map(|(n, _)| n)
                .filter(|n| to.contains(*n))
                .collect();
            assert!(above.is_empty(), "{m} points up, to {above:?}");
        }
    }
}
