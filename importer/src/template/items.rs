//! A template's items: inline `items`, or an `items_file` inside the pack
//! holding `items: [...]`, read, parsed and checked against the schema's
//! `items_file` definition.

use serde_json::{Map, Value};

use crate::raw::{self, Format};
use crate::report::{field_path, push_pointer};
use crate::resolve::Ctx;
use crate::schema::{self, Doc};
use crate::source::{TextError, pack_path};

/// An item: its value, and where it was written.
pub(super) struct Item {
    pub(super) value: Map<String, Value>,
    pub(super) file: usize,
    pub(super) pointer: String,
}

/// The template's items, inline or from its `items_file`.
pub(super) fn items(
    ctx: &mut Ctx,
    file: usize,
    pointer: &str,
    template: &Map<String, Value>,
) -> Option<Vec<Item>> {
    let (items_file, items_value) = match (template.get("items"), template.get("items_file")) {
        (Some(v), _) => (file, v.clone()),
        (None, Some(Value::String(written))) => {
            let at = push_pointer(pointer, "items_file");
            let rel = match pack_path(written) {
                Ok(rel) => rel,
                Err(message) => {
                    ctx.at(file, &at, message);
                    return None;
                }
            };
            let ext = rel.extension().and_then(|e| e.to_str()).unwrap_or_default();
            let Some(format) = Format::from_extension(ext) else {
                ctx.at(
                    file,
                    &at,
                    format!("{written:?} is not a .yaml, .yml or .toml file"),
                );
                return None;
            };
            let text = match ctx.dir.read_text(&rel) {
                Ok(text) => text,
                Err(TextError::Read(message)) => {
                    ctx.at(file, &at, format!("{written:?} {message}"));
                    return None;
                }
                Err(e @ TextError::NotUtf8 { .. }) => {
                    ctx.diags.push(&rel, e.line(), "file", e.to_string());
                    return None;
                }
            };
            let parsed = match raw::parse(format, &text, &mut ctx.budget) {
                Ok(parsed) => parsed,
                Err(e) => {
                    let field = if format == Format::Yaml {
                        "yaml"
                    } else {
                        "toml"
                    };
                    ctx.diags.push(&rel, e.line, field, e.message);
                    return None;
                }
            };
            let index = ctx.add_file(rel, parsed);
            let problems = schema::check(Doc::ItemsFile, &ctx.files[index].raw.value);
            if !problems.is_empty() {
                for p in problems {
                    let line = ctx.line(index, &p.line_pointer);
                    let rel = ctx.files[index].rel.clone();
                    ctx.diags
                        .push(&rel, line, field_path(&p.pointer), p.message);
                }
                return None;
            }
            (index, ctx.files[index].raw.value["items"].clone())
        }
        _ => return None,
    };
    let base = if items_file == file {
        push_pointer(pointer, "items")
    } else {
        "/items".to_owned()
    };
    let list = items_value.as_array()?;
    Some(
        list.iter()
            .enumerate()
            .filter_map(|(i, v)| {
                let value = v.as_object()?.clone();
                Some(Item {
                    value,
                    file: items_file,
                    pointer: push_pointer(&base, &i.to_string()),
                })
            })
            .collect(),
    )
}

pub(super) fn item_label(item: &Item, index: usize) -> String {
    match item.value.get("id") {
        Some(Value::String(s)) => format!("{s:?}"),
        Some(Value::Number(n)) => n.to_string(),
        _ => format!("#{index}"),
    }
}
