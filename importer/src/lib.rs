//! `tessera-importer`: a seed pack folder (YAML or TOML, committed to git)
//! becomes a validated [`Plan`] of nouns, tasks and catalog pins, each with
//! the file and line it came from, or a [`Report`] of every problem.
//!
//! The crate is pure. It reads the pack's own files and nothing else: no
//! network, no Tessera root, no writes, no clock. Applying a plan is the
//! daemon's `tessera import`. The pack format is documented for authors in
//! `seeds/README.md`; its shape is `seeds/schema/seed-pack.schema.json`.
//!
//! Modules, each depending only on those listed after it:
//! - `resolve`: meaning once the shape is right: nouns and body files, the
//!   catalog, duplicate ids, noun refs, `depends_on`, cycles, order;
//! - `flow`: a flow's steps as tasks, their `consumes` and parts checks;
//! - `noun`: a noun entry and its body, inline or from a `body_file`;
//! - `json`: JSON body files, read with exact numbers and no repeated keys;
//! - `template`: expands a template over its items (minijinja, strict);
//! - `task`: a task as written, its full TaskSpec, the refs in its brief;
//! - `schema`: JSON Schema checks, errors worded for authors;
//! - `source`: the folder: pack file, sorted walk, includes, confined reads;
//! - `raw`: YAML and TOML into one JSON value plus a pointer → line map;
//! - `plan` and `report`: the output types (a flow's addresses, `$.out`
//!   and `$.parts["name"]`, are `tessera_core::Address`, which the daemon
//!   reads too).
//!
//! `plan` runs in two phases. First every file is read, parsed and checked
//! against the schema; problems in any file are all reported, and meaning
//! is not checked on a pack whose shape is wrong (that would only report
//! follow-on errors). Then `resolve` checks meaning and reports every
//! problem it finds.

mod flow;
mod json;
mod noun;
mod plan;
mod raw;
mod report;
mod resolve;
mod schema;
mod source;
mod task;
mod template;

use std::path::Path;

pub use plan::{
    CatalogItem, FlowConsume, FlowItem, FlowStep, NounBody, NounItem, NounRef, Pack, Plan, Source,
    TaskItem,
};
pub use report::{Diagnostic, Report};
pub use tessera_core::Address;

pub use raw::MAX_PACK_BYTES;
use raw::{Budget, Format};
use report::{Diagnostics, field_path};
use resolve::{Ctx, PackFile};
use schema::Doc;
use source::PackDir;

/// Parses one YAML document into JSON with the limits pack files have
/// (depth, alias expansion, JSON-safe values), for a client that reads a
/// single YAML file outside a pack, such as `tessera task enqueue`. The
/// error names the line.
pub fn yaml_to_json(text: &str) -> Result<serde_json::Value, String> {
    raw::parse(Format::Yaml, text, &mut Budget::new())
        .map(|raw| raw.value)
        .map_err(|e| format!("line {}: {}", e.line, e.message))
}

/// Reads the pack in `dir` and returns its Plan (with any warnings), or
/// every problem found.
///
/// ```no_run
/// match tessera_importer::plan(std::path::Path::new("seeds/frontier-example")) {
///     Ok(plan) => println!("{} nouns, {} tasks", plan.nouns.len(), plan.tasks.len()),
///     Err(report) => eprintln!("{report}"),
/// }
/// ```
pub fn plan(dir: &Path) -> Result<Plan, Report> {
    let mut diags = Diagnostics::default();
    let pack_dir = match PackDir::open(dir) {
        Ok(d) => d,
        Err(e) => {
            diags.push(&e.file, e.line, "file", e.message);
            return Err(diags.into_report());
        }
    };
    let mut budget = Budget::new();
    let files = load(&pack_dir, &mut budget, &mut diags);
    if !diags.is_empty() {
        return Err(diags.into_report());
    }
    let mut ctx = Ctx {
        dir: &pack_dir,
        files,
        diags,
        warnings: Diagnostics::default(),
        budget,
    };
    let mut plan = resolve::resolve(&mut ctx);
    if ctx.diags.is_empty() {
        plan.warnings = ctx.warnings.into_report().diagnostics;
        Ok(plan)
    } else {
        Err(ctx.diags.into_report())
    }
}

/// Phase one: the pack file and every included file, parsed and checked
/// against the schema. Files that parse are returned even with schema
/// problems, so that all files get checked.
fn load(dir: &PackDir, budget: &mut Budget, diags: &mut Diagnostics) -> Vec<PackFile> {
    let (rel, format) = match dir.pack_file() {
        Ok(found) => found,
        Err(e) => {
            diags.push(&e.file, e.line, "file", e.message);
            return Vec::new();
        }
    };
    let Some(pack) = parse_file(dir, &rel, format, Doc::PackFile, budget, diags) else {
        return Vec::new();
    };
    let globs: Vec<String> = pack
        .raw
        .value
        .get("include")
        .and_then(|v| v.as_array())
        .map(|list| {
            list.iter()
                .filter_map(|g| g.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let include_lines: Vec<usize> = (0..globs.len())
        .map(|i| pack.raw.lines.line(&format!("/include/{i}")))
        .collect();
    let mut files = vec![pack];
    if globs.is_empty() {
        return files;
    }
    let walked = match dir.walk() {
        Ok(walked) => walked,
        Err(e) => {
            diags.push(&e.file, e.line, "file", e.message);
            return files;
        }
    };
    let (included, problems) = source::match_includes(&globs, &walked, &rel);
    for (i, message) in problems {
        diags.push(&rel, include_lines[i], format!("include[{i}]"), message);
    }
    for inc in included {
        let ext = inc.extension().and_then(|e| e.to_str()).unwrap_or_default();
        if let Some(format) = Format::from_extension(ext)
            && let Some(file) = parse_file(dir, &inc, format, Doc::SectionFile, budget, diags)
        {
            files.push(file);
        }
    }
    files
}

/// Reads, parses and schema-checks one file; `None` if it cannot be parsed.
fn parse_file(
    dir: &PackDir,
    rel: &Path,
    format: Format,
    doc: Doc,
    budget: &mut Budget,
    diags: &mut Diagnostics,
) -> Option<PackFile> {
    let text = match dir.read_text(rel) {
        Ok(text) => text,
        Err(e) => {
            diags.push(rel, e.line(), "file", e.to_string());
            return None;
        }
    };
    let raw = match raw::parse(format, &text, budget) {
        Ok(raw) => raw,
        Err(e) => {
            let field = if format == Format::Yaml {
                "yaml"
            } else {
                "toml"
            };
            diags.push(rel, e.line, field, e.message);
            return None;
        }
    };
    for p in schema::check(doc, &raw.value) {
        diags.push(
            rel,
            raw.lines.line(&p.line_pointer),
            field_path(&p.pointer),
            p.message,
        );
    }
    Some(PackFile {
        rel: rel.to_path_buf(),
        raw,
    })
}
