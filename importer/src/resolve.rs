//! Meaning, once every file has passed the schema: nouns (see `noun`), the
//! catalog, tasks, template and flow expansions, then the checks
//! between items: duplicate ids and noun paths, unknown noun refs, unknown
//! `depends_on` ids, and dependency cycles; finally the dependency order.
//!
//! Every check runs to the end and pushes each problem to `Ctx::diags`;
//! nothing stops at the first. `lib::plan` returns the Plan only when none
//! were found.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::flow;
use crate::noun;
use crate::plan::{CatalogItem, NounRef, Pack, Plan, Source, TaskItem};
use crate::raw::{Budget, Raw};
use crate::report::{Diagnostics, did_you_mean, display_path, field_path, push_pointer};
use crate::source::PackDir;
use crate::task::{self, Draft};
use crate::template;

/// A parsed file of the pack.
#[derive(Debug)]
pub(crate) struct PackFile {
    /// Relative to the pack folder.
    pub(crate) rel: PathBuf,
    pub(crate) raw: Raw,
}

/// What the checks share: the folder, the parsed files (the pack file
/// first, then included files, then items files as templates read them) and
/// the problems found so far.
pub(crate) struct Ctx<'a> {
    pub(crate) dir: &'a PackDir,
    pub(crate) files: Vec<PackFile>,
    pub(crate) diags: Diagnostics,
    /// Warnings: things that plan but may not mean what the author meant.
    pub(crate) warnings: Diagnostics,
    /// What is left of the pack's expanded size.
    pub(crate) budget: Budget,
}

impl Ctx<'_> {
    /// The line of `pointer` in file `file`.
    pub(crate) fn line(&self, file: usize, pointer: &str) -> usize {
        self.files[file].raw.lines.line(pointer)
    }

    /// Reports a problem with the field at `pointer` in file `file`.
    pub(crate) fn at(&mut self, file: usize, pointer: &str, message: impl Into<String>) {
        let line = self.line(file, pointer);
        let rel = self.files[file].rel.clone();
        self.diags.push(&rel, line, field_path(pointer), message);
    }

    /// Warns about the field at `pointer` in file `file`.
    pub(crate) fn warn(&mut self, file: usize, pointer: &str, message: impl Into<String>) {
        let line = self.line(file, pointer);
        let rel = self.files[file].rel.clone();
        self.warnings.push(&rel, line, field_path(pointer), message);
    }

    /// Adds a file read during the checks (an items file); returns its index.
    pub(crate) fn add_file(&mut self, rel: PathBuf, raw: Raw) -> usize {
        self.files.push(PackFile { rel, raw });
        self.files.len() - 1
    }

    /// Where the item at `pointer` in file `file` was written.
    pub(crate) fn source(&self, file: usize, pointer: &str) -> Source {
        Source {
            file: self.files[file].rel.clone(),
            line: self.line(file, pointer),
        }
    }

    fn shown(&self, source: &Source) -> String {
        format!("{}:{}", display_path(&source.file), source.line)
    }
}

pub(crate) fn text(v: &Value, field: &str) -> String {
    v.get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

pub(crate) fn section<'v>(v: &'v Value, name: &str) -> &'v [Value] {
    v.get(name)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Builds the Plan from schema-valid files, reporting every problem.
pub(crate) fn resolve(ctx: &mut Ctx) -> Plan {
    let head = &ctx.files[0].raw.value;
    let pack = Pack {
        name: text(head, "pack"),
        version: text(head, "version"),
        namespace: text(head, "namespace"),
        producer_surface: task::bare_surface(&text(head, "producer_surface")),
    };
    let defaults = head
        .get("defaults")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();

    let mut nouns = Vec::new();
    let mut noun_at: HashMap<(String, String), Source> = HashMap::new();
    let mut catalog = Vec::new();
    let mut catalog_at: HashMap<String, Source> = HashMap::new();
    let mut drafts = Vec::new();
    let mut failed_ids = HashSet::new();
    let mut flows = Vec::new();
    let mut reads = Vec::new();
    // Items files are appended while templates expand; only walk the pack's own files.
    for f in 0..ctx.files.len() {
        let value = std::mem::take(&mut ctx.files[f].raw.value);
        for (i, noun) in section(&value, "nouns").iter().enumerate() {
            let pointer = format!("/nouns/{i}");
            let item = noun::noun_item(ctx, f, &pointer, noun);
            let path = (item.0.clone(), item.1.clone());
            if let Some(first) = noun_at.get(&path) {
                let message = format!(
                    "duplicate noun \"{}/{}\"; first defined at {}",
                    path.0,
                    path.1,
                    ctx.shown(first)
                );
                ctx.at(f, &pointer, message);
            } else {
                noun_at.insert(path, ctx.source(f, &pointer));
                nouns.extend(item.2);
            }
        }
        for (i, pin) in section(&value, "catalog").iter().enumerate() {
            let pointer = format!("/catalog/{i}");
            let item = CatalogItem {
                name: text(pin, "name"),
                namespace: pin
                    .get("namespace")
                    .and_then(Value::as_str)
                    .unwrap_or(&pack.namespace)
                    .to_owned(),
                store: text(pin, "store"),
                key: text(pin, "key"),
                version: pin
                    .get("version")
                    .and_then(Value::as_u64)
                    .unwrap_or_default(),
                sha256: text(pin, "sha256"),
                source: ctx.source(f, &pointer),
            };
            if let Some(first) = catalog_at.get(&item.name) {
                let message = format!(
                    "duplicate catalog name {:?}; first defined at {}",
                    item.name,
                    ctx.shown(first)
                );
                ctx.at(f, &push_pointer(&pointer, "name"), message);
            } else {
                catalog_at.insert(item.name.clone(), item.source.clone());
                catalog.push(item);
            }
        }
        for (i, t) in section(&value, "tasks").iter().enumerate() {
            let pointer = format!("/tasks/{i}");
            if let Some(map) = t.as_object() {
                let source = ctx.source(f, &pointer);
                drafts.push(task::draft(map, f, pointer, source));
            }
        }
        for (i, t) in section(&value, "templates").iter().enumerate() {
            if let Some(map) = t.as_object() {
                let expansion = template::expand(ctx, f, &format!("/templates/{i}"), map);
                drafts.extend(expansion.drafts);
                failed_ids.extend(expansion.failed_ids);
            }
        }
        for (i, fl) in section(&value, "flows").iter().enumerate() {
            if let Some(map) = fl.as_object() {
                let expansion = flow::expand(ctx, f, &format!("/flows/{i}"), map);
                drafts.extend(expansion.drafts);
                flows.push(expansion.flow);
                reads.extend(expansion.reads);
            }
        }
        ctx.files[f].raw.value = value;
    }
    flow::check_parts(ctx, &reads, &nouns);

    let noun_paths: BTreeSet<String> = noun_at.keys().map(|(s, k)| format!("{s}/{k}")).collect();
    let tasks = tasks(ctx, &pack, &defaults, drafts, &failed_ids, &noun_paths);
    Plan {
        pack,
        nouns,
        tasks,
        catalog,
        flows,
        warnings: Vec::new(),
    }
}

/// Checks drafts against each other and orders them by dependency.
fn tasks(
    ctx: &mut Ctx,
    pack: &Pack,
    defaults: &Map<String, Value>,
    drafts: Vec<Draft>,
    failed_ids: &HashSet<String>,
    noun_paths: &BTreeSet<String>,
) -> Vec<TaskItem> {
    let mut kept: Vec<Draft> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for d in drafts {
        if let Some(&first) = index.get(&d.id) {
            let message = format!(
                "duplicate task id {:?}; first defined at {}",
                d.id,
                ctx.shown(&kept[first].source)
            );
            ctx.at(d.id_file, &d.id_pointer, message);
            continue;
        }
        index.insert(d.id.clone(), kept.len());
        kept.push(d);
    }

    let mut slots: Vec<Option<TaskItem>> = Vec::with_capacity(kept.len());
    let mut upstream: Vec<Vec<usize>> = Vec::with_capacity(kept.len());
    for d in &kept {
        let spec = task::spec(pack, defaults, d)
            .map_err(|message| ctx.at(d.file, &d.pointer, message))
            .ok();
        let brief_at = push_pointer(&d.pointer, "brief");
        let mut noun_refs = Vec::new();
        for (pointer, found) in task::noun_refs(d.fields.get("brief").unwrap_or(&Value::Null)) {
            let at = format!("{brief_at}{pointer}");
            match found {
                Ok((store, key)) if noun_paths.contains(&format!("{store}/{key}")) => {
                    noun_refs.push(NounRef {
                        pointer,
                        store,
                        key,
                    });
                }
                Ok((store, key)) => {
                    let path = format!("{store}/{key}");
                    let hint = match did_you_mean(&path, noun_paths.iter().map(String::as_str)) {
                        Some(s) => format!("did you mean {s:?}?"),
                        None => "for a noun outside the pack write a full pin {store, key, version, sha256}".into(),
                    };
                    ctx.at(
                        d.file,
                        &at,
                        format!("no noun {path:?} in this pack; {hint}"),
                    );
                }
                Err(message) => ctx.at(d.file, &at, message),
            }
        }
        let mut ups = Vec::new();
        for (j, dep) in d.depends_on.iter().enumerate() {
            match index.get(dep) {
                Some(&u) => ups.push(u),
                None if failed_ids.contains(dep) => {}
                None => {
                    let hint = match did_you_mean(dep, index.keys().map(String::as_str)) {
                        Some(s) => format!("; did you mean {s:?}?"),
                        None => String::new(),
                    };
                    let at = format!("{}/depends_on/{j}", d.pointer);
                    ctx.at(d.file, &at, format!("no task {dep:?} in this pack{hint}"));
                }
            }
        }
        upstream.push(ups);
        slots.push(spec.map(|spec| TaskItem {
            id: d.id.clone(),
            idempotency_key: task::idempotency_key(&pack.name, &d.id),
            spec,
            depends_on: {
                let mut ids = d.depends_on.clone();
                ids.sort_unstable();
                ids.dedup();
                ids
            },
            noun_refs,
            source: d.source.clone(),
        }));
    }

    let order = dependency_order(ctx, &kept, &upstream);
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// Kahn's algorithm, taking the earliest ready task first so ties keep
/// source order. Tasks left over are on or behind a cycle; each cycle is
/// reported once, by its ids, at its earliest task.
fn dependency_order(ctx: &mut Ctx, drafts: &[Draft], upstream: &[Vec<usize>]) -> Vec<usize> {
    let n = drafts.len();
    let mut waiting: Vec<usize> = upstream
        .iter()
        .map(|u| u.iter().collect::<BTreeSet<_>>().len())
        .collect();
    let mut dependents: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for (i, ups) in upstream.iter().enumerate() {
        for &u in ups {
            dependents[u].insert(i);
        }
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &j in &dependents[i] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.insert(j);
            }
        }
    }
    if order.len() == n {
        return order;
    }
    // Walk upstream from each left-over task; every left-over task has a
    // left-over upstream, so the walk ends on a cycle or on a visited task.
    let mut visited = vec![false; n];
    for start in (0..n).filter(|&i| waiting[i] > 0) {
        let mut path: Vec<usize> = Vec::new();
        let mut cur = start;
        while !visited[cur] {
            visited[cur] = true;
            path.push(cur);
            let Some(&next) = upstream[cur].iter().find(|&&u| waiting[u] > 0) else {
                break;
            };
            if let Some(pos) = path.iter().position(|&p| p == next) {
                let mut cycle = path[pos..].to_vec();
                let first = cycle
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, i)| **i)
                    .map_or(0, |(k, _)| k);
                cycle.rotate_left(first);
                let mut ids: Vec<&str> = cycle.iter().map(|&i| drafts[i].id.as_str()).collect();
                ids.push(ids[0]);
                let d = &drafts[cycle[0]];
                let message = format!(
                    "dependency cycle: {} (each depends on the next)",
                    ids.join(" -> ")
                );
                ctx.at(d.file, &push_pointer(&d.pointer, "depends_on"), message);
                break;
            }
            cur = next;
        }
    }
    order
}
