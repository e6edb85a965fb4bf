//! Templates: one task written once, expanded over a list of items.
//!
//! Every string of the template that contains `{{`, `{%` or `{#` is a
//! minijinja template rendered with `item` bound to one item, with strict
//! undefined behaviour (a missing field is an error, never an empty string)
//! and bounded fuel. Other strings are copied unchanged. Map keys are never
//! rendered: a key holding template syntax is copied as written, and the
//! plan warns about it at the key's line (every task would get the same
//! literal key, which is seldom what was meant). Expansion is
//! deterministic: items in order, no clock, no randomness, no environment.
//!
//! Expanded ids are `<template id>.<item id>` when the item has an `id`,
//! else `<template id>.<zero-based index>`, so appending items never changes
//! the ids (or specs) of earlier ones. Each expansion is then checked
//! against the schema's `task` definition, since a substituted string may
//! be anything.

use std::collections::{BTreeMap, BTreeSet};

use minijinja::value::Serde;
use minijinja::{Environment, UndefinedBehavior, context};
use serde_json::{Map, Value};

use crate::plan::Source;
use crate::raw::Budget;
use crate::report::{did_you_mean, field_path, push_pointer};
use crate::resolve::Ctx;
use crate::schema::{self, Doc};
use crate::task::{self, Draft};

mod items;

use items::{Item, item_label};

/// Most template instructions one string may run for one item.
const FUEL: u64 = 100_000;
/// Longest string one expansion may produce.
const MAX_RENDERED_BYTES: usize = 1024 * 1024;

/// The result of expanding one template.
pub(crate) struct Expansion {
    /// One draft per item that expanded cleanly.
    pub(crate) drafts: Vec<Draft>,
    /// Ids of items that failed: they exist, so `depends_on` naming them
    /// is not reported a second time as unknown.
    pub(crate) failed_ids: Vec<String>,
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(32);
    let mut syntax = minijinja::syntax::SyntaxConfig::builder();
    syntax.keep_trailing_newline(true);
    if let Ok(config) = syntax.build() {
        env.set_syntax(config);
    }
    env
}

fn is_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%") || s.contains("{#")
}

fn template_error(e: &minijinja::Error) -> String {
    match e.detail() {
        Some(detail) => format!("{}: {detail}", e.kind()),
        None => e.kind().to_string(),
    }
}

/// Expands the template at `pointer` in file `file`.
pub(crate) fn expand(
    ctx: &mut Ctx,
    file: usize,
    pointer: &str,
    template: &Map<String, Value>,
) -> Expansion {
    let mut out = Expansion {
        drafts: Vec::new(),
        failed_ids: Vec::new(),
    };
    let tid = template
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let Some(items) = items::items(ctx, file, pointer, template) else {
        return out;
    };
    let mut body = template.clone();
    for k in ["id", "items", "items_file"] {
        body.remove(k);
    }
    let body = Value::Object(body);
    // Each item copies the body: the whole cost is taken before any copy.
    let body_bytes = serde_json::to_vec(&body).map_or(0, |b| b.len());
    if let Err(message) = ctx.budget.take(body_bytes.saturating_mul(items.len())) {
        ctx.at(
            file,
            pointer,
            format!("{} items of {body_bytes} bytes: {message}", items.len()),
        );
        return out;
    }

    warn_templated_keys(ctx, file, pointer, &body);
    let env = environment();
    let Compiled {
        strings,
        used,
        mut broken,
    } = compile(ctx, &env, file, pointer, &body);

    // A field no item has is the template's mistake; a field some items lack
    // is those items' mistake.
    let known: BTreeSet<&str> = items
        .iter()
        .flat_map(|i| i.value.keys().map(String::as_str))
        .collect();
    for (field, at) in &used {
        if !known.contains(field.as_str()) {
            let hint = match did_you_mean(field, known.iter().copied()) {
                Some(s) => format!("; did you mean {{{{ item.{s} }}}}?"),
                None => format!("; add `{field}` to the items or fix the name"),
            };
            ctx.at(
                file,
                at,
                format!("uses {{{{ item.{field} }}}} but no item has a field {field:?}{hint}"),
            );
            broken = true;
        }
    }

    for (index, item) in items.iter().enumerate() {
        let label = item_label(item, index);
        let id = match item.value.get("id") {
            None => format!("{tid}.{index}"),
            Some(Value::String(s)) => format!("{tid}.{s}"),
            Some(Value::Number(n)) if n.is_u64() => format!("{tid}.{n}"),
            Some(_) => {
                ctx.at(
                    item.file,
                    &push_pointer(&item.pointer, "id"),
                    "an item id must be a string or a whole number",
                );
                continue;
            }
        };
        if broken {
            out.failed_ids.push(id);
            continue;
        }
        let missing: Vec<(&String, &String)> = used
            .iter()
            .filter(|(f, _)| !item.value.contains_key(*f))
            .collect();
        for (field, at) in &missing {
            let used_at = field_path(at);
            ctx.at(
                item.file,
                &item.pointer,
                format!(
                    "item {label} has no field {field:?}, which the template uses at {used_at}"
                ),
            );
        }
        if !missing.is_empty() {
            out.failed_ids.push(id);
            continue;
        }
        match render(&body, &strings, item, &label, &mut ctx.budget) {
            Ok(mut expanded) => {
                if let Value::Object(map) = &mut expanded {
                    map.insert("id".into(), Value::String(id.clone()));
                }
                if check_expansion(ctx, file, pointer, &body, item, &label, &expanded) {
                    let source = Source {
                        file: ctx.files[item.file].rel.clone(),
                        line: ctx.line(item.file, &item.pointer),
                    };
                    if let Value::Object(map) = &expanded {
                        let mut d = task::draft(map, file, pointer.to_owned(), source);
                        d.id_file = item.file;
                        d.id_pointer = item.pointer.clone();
                        out.drafts.push(d);
                        continue;
                    }
                }
                out.failed_ids.push(id);
            }
            Err((sub, message)) => {
                ctx.at(file, &format!("{pointer}{sub}"), message);
                out.failed_ids.push(id);
            }
        }
    }
    out
}

/// The templated strings of a template body, compiled once.
struct Compiled<'env, 'source> {
    /// Pointer (relative to the body) and compiled template of each string.
    strings: Vec<(String, minijinja::Template<'env, 'source>)>,
    /// Each item field used, with the first pointer (in the file) using it.
    used: BTreeMap<String, String>,
    /// A string failed to compile or names something other than `item`.
    broken: bool,
}

/// Compiles each templated string of `body` and learns which item fields
/// it uses; problems are reported at the string.
fn compile<'env, 'source>(
    ctx: &mut Ctx,
    env: &'env Environment<'static>,
    file: usize,
    pointer: &str,
    body: &'source Value,
) -> Compiled<'env, 'source> {
    let mut out = Compiled {
        strings: Vec::new(),
        used: BTreeMap::new(),
        broken: false,
    };
    for (sub, text) in strings_of(body) {
        let at = format!("{pointer}{sub}");
        let t = match env.template_from_str(text) {
            Ok(t) => t,
            Err(e) => {
                ctx.at(file, &at, format!("template error: {}", template_error(&e)));
                out.broken = true;
                continue;
            }
        };
        let mut vars: Vec<String> = t.undeclared_variables(true).into_iter().collect();
        vars.sort();
        for var in vars {
            let root = var.split('.').next().unwrap_or(&var);
            if let Some(path) = var.strip_prefix("item.") {
                // `item.a.b` uses the item's field `a`.
                let field = path.split('.').next().unwrap_or(path);
                out.used
                    .entry(field.to_owned())
                    .or_insert_with(|| at.clone());
            } else if root != "item" && env.globals().all(|(g, _)| g != root) {
                let message =
                    format!("unknown variable `{var}`; a template can use {{{{ item.<field> }}}}");
                ctx.at(file, &at, message);
                out.broken = true;
            }
        }
        out.strings.push((sub, t));
    }
    out
}

/// Warns at each map key of `body` that holds template syntax: keys are
/// copied as written, never rendered.
fn warn_templated_keys(ctx: &mut Ctx, file: usize, pointer: &str, body: &Value) {
    let mut todo = vec![(pointer.to_owned(), body)];
    while let Some((at, v)) = todo.pop() {
        match v {
            Value::Object(map) => {
                for (k, v) in map.iter().rev() {
                    let child = push_pointer(&at, k);
                    if is_template(k) {
                        let message = format!(
                            "the key {k:?} holds template syntax, but only values are expanded: every task gets this key as written; put the varying part in a value"
                        );
                        ctx.warn(file, &child, message);
                    }
                    todo.push((child, v));
                }
            }
            Value::Array(list) => todo.extend(
                list.iter()
                    .enumerate()
                    .rev()
                    .map(|(i, v)| (push_pointer(&at, &i.to_string()), v)),
            ),
            _ => {}
        }
    }
}

/// Every string in `value` with its pointer (relative to `value`) that
/// contains template syntax, in document order.
fn strings_of(value: &Value) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    let mut todo = vec![(String::new(), value)];
    while let Some((pointer, v)) = todo.pop() {
        match v {
            Value::String(s) if is_template(s) => out.push((pointer, s.as_str())),
            Value::Object(map) => todo.extend(
                map.iter()
                    .rev()
                    .map(|(k, v)| (push_pointer(&pointer, k), v)),
            ),
            Value::Array(list) => {
                todo.extend(
                    list.iter()
                        .enumerate()
                        .rev()
                        .map(|(i, v)| (push_pointer(&pointer, &i.to_string()), v)),
                );
            }
            _ => {}
        }
    }
    out
}

/// `body` with every templated string rendered for `item`.
fn render(
    body: &Value,
    strings: &[(String, minijinja::Template<'_, '_>)],
    item: &Item,
    label: &str,
    budget: &mut Budget,
) -> Result<Value, (String, String)> {
    let mut out = body.clone();
    let ctx = context! { item => Serde(&item.value) };
    for (sub, t) in strings {
        let mut text = Bounded(Vec::new());
        if let Err(e) = t.render_captured_to(&ctx, &mut text) {
            let message = if text.0.len() > MAX_RENDERED_BYTES {
                format!("expands to more than {MAX_RENDERED_BYTES} bytes")
            } else {
                format!("template error: {}", template_error(&e))
            };
            return Err((sub.clone(), format!("for item {label}: {message}")));
        }
        budget
            .take(text.0.len())
            .map_err(|m| (sub.clone(), format!("for item {label}: {m}")))?;
        let text = String::from_utf8(text.0).map_err(|_| {
            (
                sub.clone(),
                format!("for item {label}: expands to text that is not UTF-8"),
            )
        })?;
        if let Some(slot) = out.pointer_mut(sub) {
            *slot = Value::String(text);
        }
    }
    Ok(out)
}

/// A rendering's output, refused once it passes [`MAX_RENDERED_BYTES`]:
/// the rendering stops there rather than after it has filled memory.
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_RENDERED_BYTES {
            self.0.resize(MAX_RENDERED_BYTES + 1, 0);
            return Err(std::io::Error::other("rendered text too long"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Checks one expansion against the task schema; problems point into the
/// template (or at the item, for the id). A problem in a templated string
/// names the item, since it may differ per item. True when it is valid.
fn check_expansion(
    ctx: &mut Ctx,
    file: usize,
    pointer: &str,
    body: &Value,
    item: &Item,
    label: &str,
    expanded: &Value,
) -> bool {
    let problems = schema::check(Doc::Task, expanded);
    let ok = problems.is_empty();
    for p in problems {
        if p.pointer == "/id" {
            let id = schema::describe(&expanded["id"]);
            ctx.at(item.file, &item.pointer, format!("expands to task id {id}, which is not a valid name; item ids use letters, digits, '.', '_' or '-'"));
            continue;
        }
        let field = format!("{pointer}{}", p.pointer);
        let line_at = format!("{pointer}{}", p.line_pointer);
        let written = body
            .pointer(&p.pointer)
            .and_then(Value::as_str)
            .is_some_and(is_template);
        let message = match (written, p.message.starts_with("expected ")) {
            (false, _) => p.message,
            (true, false) => format!("for item {label}: {}", p.message),
            (true, true) => format!(
                "for item {label}: {} (substitution always makes a string)",
                p.message
            ),
        };
        let line = ctx.line(file, &line_at);
        let rel = ctx.files[file].rel.clone();
        ctx.diags.push(&rel, line, field_path(&field), message);
    }
    ok
}
