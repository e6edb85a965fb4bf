//! TOML to a JSON value and line map, from toml's spanned `DeTable`.
//!
//! Datetimes become their RFC 3339 text, so a TOML datetime and a YAML
//! string holding the same text are the same value. The toml parser guards
//! its own recursion; we also apply [`MAX_DEPTH`].
//!
//! One toml error has no place: a dotted key of more parts than the parser
//! nests (80, in a key like `a.b.c...` or a header like `[a.b.c...]`). Its
//! line is then found by [`deep_key`], which reads the file's key events
//! with toml's own push parser, so the error names the key's line instead
//! of line 1.

use serde_json::{Map, Number, Value};
use toml::de::{DeTable, DeValue};
use toml_parser::parser::{EventReceiver, RecursionGuard};
use toml_parser::{ErrorSink, Span};

use super::{Lines, MAX_DEPTH, ParseError, Raw, err};
use crate::report::push_pointer;

pub(super) fn parse(text: &str) -> Result<Raw, ParseError> {
    let starts = line_starts(text);
    let table = DeTable::parse(text).map_err(|e| match e.span() {
        Some(s) => err(line_at(&starts, s.start), e.message().trim_end()),
        None => deep_key(text, &starts).unwrap_or_else(|| err(1, e.message().trim_end())),
    })?;
    let mut lines = Lines::default();
    lines.insert("", 1);
    let value = toml_table(table.get_ref(), "", 0, &starts, &mut lines)?;
    Ok(Raw { value, lines })
}

fn toml_table(
    table: &DeTable<'_>,
    pointer: &str,
    depth: usize,
    starts: &[usize],
    lines: &mut Lines,
) -> Result<Value, ParseError> {
    let mut map = Map::new();
    for (key, value) in table.iter() {
        let child = push_pointer(pointer, key.get_ref());
        let line = line_at(starts, key.span().start);
        lines.insert(&child, line);
        let v = toml_value(value.get_ref(), &child, depth + 1, line, starts, lines)?;
        map.insert(key.get_ref().to_string(), v);
    }
    Ok(Value::Object(map))
}

fn toml_value(
    value: &DeValue<'_>,
    pointer: &str,
    depth: usize,
    line: usize,
    starts: &[usize],
    lines: &mut Lines,
) -> Result<Value, ParseError> {
    if depth > MAX_DEPTH {
        return Err(err(line, format!("nested deeper than {MAX_DEPTH} levels")));
    }
    Ok(match value {
        DeValue::String(s) => Value::String(s.to_string()),
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(d) => Value::String(d.to_string()),
        DeValue::Integer(i) => {
            let parsed = i64::from_str_radix(i.as_str(), i.radix())
                .map(Value::from)
                .or_else(|_| u64::from_str_radix(i.as_str(), i.radix()).map(Value::from));
            parsed.map_err(|_| err(line, format!("{i} does not fit in 64 bits")))?
        }
        DeValue::Float(f) => {
            let n = f.as_str().parse::<f64>().ok().and_then(Number::from_f64);
            let message = format!("{f} cannot be stored as JSON; quote it for a string");
            Value::Number(n.ok_or_else(|| err(line, message))?)
        }
        DeValue::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let child = push_pointer(pointer, &i.to_string());
                let item_line = line_at(starts, item.span().start);
                lines.insert(&child, item_line);
                out.push(toml_value(
                    item.get_ref(),
                    &child,
                    depth + 1,
                    item_line,
                    starts,
                    lines,
                )?);
            }
            Value::Array(out)
        }
        DeValue::Table(table) => toml_table(table, pointer, depth, starts, lines)?,
    })
}

/// The first key in `text` of more than [`MAX_DEPTH`] dotted parts, as an
/// error at its line; `None` when there is none.
fn deep_key(text: &str, starts: &[usize]) -> Option<ParseError> {
    let tokens = toml_parser::Source::new(text).lex().into_vec();
    let mut keys = DeepKey::default();
    // The guard stops deep arrays and inline tables, as toml's parser does,
    // so the push parser's recursion stays bounded.
    let mut guarded = RecursionGuard::new(&mut keys, MAX_DEPTH as u32);
    toml_parser::parser::parse_document(&tokens, &mut guarded, &mut ());
    let (start, parts) = keys.first?;
    Some(err(
        line_at(starts, start),
        format!("a dotted key of {parts} parts nests deeper than {MAX_DEPTH} levels"),
    ))
}

/// Counts the parts of each key the push parser reports; keeps the first
/// key of more than [`MAX_DEPTH`] parts.
#[derive(Default)]
struct DeepKey {
    /// Parts of the key being read, and where its first part starts.
    parts: usize,
    start: usize,
    /// Where the first too deep key starts, and its parts.
    first: Option<(usize, usize)>,
}

impl DeepKey {
    /// A key has ended (at `=`, `]` or `]]`).
    fn end(&mut self) {
        if self.parts > MAX_DEPTH && self.first.is_none() {
            self.first = Some((self.start, self.parts));
        }
        self.parts = 0;
    }
}

impl EventReceiver for DeepKey {
    fn simple_key(
        &mut self,
        span: Span,
        _kind: Option<toml_parser::decoder::Encoding>,
        _error: &mut dyn ErrorSink,
    ) {
        if self.parts == 0 {
            self.start = span.start();
        }
        self.parts += 1;
    }

    fn key_val_sep(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        self.end();
    }

    fn std_table_close(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        self.end();
    }

    fn array_table_close(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        self.end();
    }

    fn newline(&mut self, _span: Span, _error: &mut dyn ErrorSink) {
        self.end();
    }
}

/// Byte offsets where each line starts.
fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

/// The 1-based line holding byte `offset`.
fn line_at(starts: &[usize], offset: usize) -> usize {
    starts.partition_point(|&s| s <= offset).max(1)
}
