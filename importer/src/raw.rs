//! Parsing pack files: YAML and TOML both land in one shape, a
//! `serde_json::Value` plus a map from JSON pointer to line number.
//!
//! One mechanism serves every later check: schema errors arrive with an
//! instance path and semantic errors know the pointer of what they looked
//! at; both ask [`Lines::line`] for a line. A pointer with no entry of its
//! own (inside an alias, say) takes the line of its nearest ancestor.
//!
//! Limits, so that no input can exhaust memory or the stack:
//! - nesting deeper than [`MAX_DEPTH`] is refused (both parsers also guard
//!   their own recursion);
//! - a YAML file may hold at most [`MAX_NODES`] values, counting every value
//!   an alias copies, which stops "billion laughs" anchor bombs before they
//!   expand;
//! - values JSON cannot hold (NaN, infinity, integers past 64 bits) and
//!   YAML tags other than the core schema's are refused.
//!
//! File sizes and UTF-8 are checked earlier, in `source`.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Tag};
use serde_json::{Map, Number, Value};
use toml::de::{DeTable, DeValue};

use crate::report::push_pointer;

/// Deepest nesting of lists and maps accepted in any file.
pub(crate) const MAX_DEPTH: usize = 64;
/// Most values one YAML file may produce, alias copies included.
pub(crate) const MAX_NODES: usize = 1_000_000;

/// The formats a pack file can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Yaml,
    Toml,
}

impl Format {
    /// The format for a file name's extension, if it is a pack format.
    pub(crate) fn from_extension(ext: &str) -> Option<Format> {
        match ext {
            "yaml" | "yml" => Some(Format::Yaml),
            "toml" => Some(Format::Toml),
            _ => None,
        }
    }
}

/// A parsed file: its value and where each part of it came from.
#[derive(Debug, Clone)]
pub(crate) struct Raw {
    pub(crate) value: Value,
    pub(crate) lines: Lines,
}

/// JSON pointer to 1-based line. Map entries point at their key's line.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lines(HashMap<String, usize>);

impl Lines {
    /// The line of `pointer`, or of its nearest ancestor that has one.
    pub(crate) fn line(&self, pointer: &str) -> usize {
        let mut p = pointer;
        loop {
            if let Some(line) = self.0.get(p) {
                return *line;
            }
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => return 1,
            }
        }
    }

    fn insert(&mut self, pointer: &str, line: usize) {
        self.0.entry(pointer.to_owned()).or_insert(line);
    }
}

/// A file that could not be parsed: the parser's line and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub(crate) line: usize,
    pub(crate) message: String,
}

/// Parses `text` written in `format`.
pub(crate) fn parse(format: Format, text: &str) -> Result<Raw, ParseError> {
    match format {
        Format::Yaml => parse_yaml(text),
        Format::Toml => parse_toml(text),
    }
}

fn err(line: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line,
        message: message.into(),
    }
}

// ---------------------------------------------------------------- YAML

/// A list or map under construction.
struct Frame {
    pointer: String,
    anchor: usize,
    nodes_at_start: usize,
    kind: FrameKind,
}

enum FrameKind {
    Seq(Vec<Value>),
    /// Entries so far, and the key waiting for its value (with its line).
    Map(Map<String, Value>, Option<(String, usize)>),
}

/// An anchored value, with what copying it costs.
struct Anchored {
    value: Value,
    nodes: usize,
    depth: usize,
}

fn parse_yaml(text: &str) -> Result<Raw, ParseError> {
    let mut lines = Lines::default();
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Anchored> = HashMap::new();
    let mut root: Option<Value> = None;
    let mut nodes = 0usize;
    let mut documents = 0usize;

    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| err(e.marker().line(), e.info()))?;
        let line = span.start.line();
        // Where a new node goes: its pointer and the line to record for it.
        // A scalar in key position is handled before this is used.
        let slot = |stack: &[Frame]| -> (String, usize) {
            match stack.last() {
                None => (String::new(), line),
                Some(f) => match &f.kind {
                    FrameKind::Seq(items) => {
                        (push_pointer(&f.pointer, &items.len().to_string()), line)
                    }
                    FrameKind::Map(_, Some((key, key_line))) => {
                        (push_pointer(&f.pointer, key), *key_line)
                    }
                    FrameKind::Map(_, None) => (f.pointer.clone(), line),
                },
            }
        };
        let in_key_position = matches!(
            stack.last(),
            Some(Frame {
                kind: FrameKind::Map(_, None),
                ..
            })
        );
        match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(err(
                        line,
                        "a file holds one YAML document; remove the second `---`",
                    ));
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                if in_key_position {
                    let Some(Frame {
                        kind: FrameKind::Map(map, pending),
                        ..
                    }) = stack.last_mut()
                    else {
                        unreachable!("checked above")
                    };
                    if anchor != 0 || tag.is_some() {
                        return Err(err(line, "anchors and tags are not allowed on keys"));
                    }
                    if map.contains_key(text.as_ref()) {
                        return Err(err(line, format!("duplicate key {:?}", text.as_ref())));
                    }
                    *pending = Some((text.into_owned(), line));
                    continue;
                }
                let value = scalar(&text, style, tag.as_deref()).map_err(|m| err(line, m))?;
                nodes += 1;
                if nodes > MAX_NODES {
                    return Err(err(
                        line,
                        format!("more than {MAX_NODES} values in one file"),
                    ));
                }
                let (pointer, rec_line) = slot(&stack);
                lines.insert(&pointer, rec_line);
                if anchor != 0 {
                    anchors.insert(
                        anchor,
                        Anchored {
                            value: value.clone(),
                            nodes: 1,
                            depth: 0,
                        },
                    );
                }
                attach(&mut stack, &mut root, value);
            }
            Event::SequenceStart(anchor, ref tag) | Event::MappingStart(anchor, ref tag) => {
                if in_key_position {
                    return Err(err(line, "keys must be plain strings, not lists or maps"));
                }
                if tag.is_some() {
                    return Err(err(
                        line,
                        "YAML tags are not supported here; write plain values",
                    ));
                }
                if stack.len() >= MAX_DEPTH {
                    return Err(err(line, format!("nested deeper than {MAX_DEPTH} levels")));
                }
                nodes += 1;
                let (pointer, rec_line) = slot(&stack);
                lines.insert(&pointer, rec_line);
                let kind = if matches!(event, Event::SequenceStart(..)) {
                    FrameKind::Seq(Vec::new())
                } else {
                    FrameKind::Map(Map::new(), None)
                };
                stack.push(Frame {
                    pointer,
                    anchor,
                    nodes_at_start: nodes,
                    kind,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = stack.pop() else {
                    return Err(err(line, "unbalanced YAML structure"));
                };
                let value = match frame.kind {
                    FrameKind::Seq(items) => Value::Array(items),
                    FrameKind::Map(map, _) => Value::Object(map),
                };
                if frame.anchor != 0 {
                    let anchored = Anchored {
                        value: value.clone(),
                        nodes: nodes - frame.nodes_at_start + 1,
                        depth: depth_of(&value),
                    };
                    anchors.insert(frame.anchor, anchored);
                }
                attach(&mut stack, &mut root, value);
            }
            Event::Alias(id) => {
                if in_key_position {
                    return Err(err(line, "keys must be plain strings, not aliases"));
                }
                let Some(anchored) = anchors.get(&id) else {
                    return Err(err(line, "alias to an unknown anchor"));
                };
                if stack.len() + anchored.depth > MAX_DEPTH {
                    return Err(err(
                        line,
                        format!("alias nests deeper than {MAX_DEPTH} levels"),
                    ));
                }
                nodes = nodes.saturating_add(anchored.nodes);
                if nodes > MAX_NODES {
                    return Err(err(
                        line,
                        format!(
                            "aliases expand to more than {MAX_NODES} values; write the data out instead of nesting anchors"
                        ),
                    ));
                }
                let value = anchored.value.clone();
                let (pointer, rec_line) = slot(&stack);
                lines.insert(&pointer, rec_line);
                attach(&mut stack, &mut root, value);
            }
        }
    }
    Ok(Raw {
        value: root.unwrap_or(Value::Null),
        lines,
    })
}

/// Puts a finished value into the open list or map, or makes it the root.
fn attach(stack: &mut [Frame], root: &mut Option<Value>, value: Value) {
    match stack.last_mut() {
        None => *root = Some(value),
        Some(frame) => match &mut frame.kind {
            FrameKind::Seq(items) => items.push(value),
            FrameKind::Map(map, pending) => {
                if let Some((key, _)) = pending.take() {
                    map.insert(key, value);
                }
            }
        },
    }
}

/// How deeply `value` nests lists and maps (a scalar is 0).
fn depth_of(value: &Value) -> usize {
    let mut max = 0;
    let mut todo = vec![(value, 0usize)];
    while let Some((v, d)) = todo.pop() {
        max = max.max(d);
        match v {
            Value::Array(items) => todo.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => todo.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    max
}

/// Resolves a scalar with the YAML 1.2 core schema. Quoted scalars and
/// `!!str` are strings; plain ones may be null, bool, int or float.
fn scalar(text: &str, style: ScalarStyle, tag: Option<&Tag>) -> Result<Value, String> {
    if let Some(tag) = tag {
        if tag.is_yaml_core_schema() && tag.suffix == "str" {
            return Ok(Value::String(text.to_owned()));
        }
        if !(tag.handle == "!" && tag.suffix.is_empty()) {
            return Err(format!(
                "YAML tag `{}{}` is not supported; write a plain value, or quote it for a string",
                tag.handle, tag.suffix
            ));
        }
        return Ok(Value::String(text.to_owned()));
    }
    if style != ScalarStyle::Plain {
        return Ok(Value::String(text.to_owned()));
    }
    Ok(match text {
        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
        "true" | "True" | "TRUE" => Value::Bool(true),
        "false" | "False" | "FALSE" => Value::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" | "-.inf" | "-.Inf" | "-.INF"
        | ".nan" | ".NaN" | ".NAN" => {
            return Err(format!(
                "{text} cannot be stored as JSON; quote it for a string"
            ));
        }
        _ => match number(text) {
            Some(n) => n?,
            None => Value::String(text.to_owned()),
        },
    })
}

/// A core-schema number, `None` when `text` is not written as one.
fn number(text: &str) -> Option<Result<Value, String>> {
    let too_big = || {
        Err(format!(
            "{text} does not fit in 64 bits; quote it for a string"
        ))
    };
    let (radix, digits) = if let Some(hex) = text.strip_prefix("0x") {
        (16, hex)
    } else if let Some(oct) = text.strip_prefix("0o") {
        (8, oct)
    } else {
        (10, text)
    };
    if radix != 10 {
        if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
            return None;
        }
        return Some(
            u64::from_str_radix(digits, radix)
                .map(Value::from)
                .or_else(|_| too_big()),
        );
    }
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit()) {
        let n = text.strip_prefix('+').unwrap_or(text);
        return Some(match (n.parse::<i64>(), n.parse::<u64>()) {
            (Ok(i), _) => Ok(Value::from(i)),
            (_, Ok(u)) => Ok(Value::from(u)),
            _ => too_big(),
        });
    }
    if is_core_float(unsigned) {
        let f: f64 = text.parse().ok()?;
        return Some(
            Number::from_f64(f)
                .map(Value::Number)
                .ok_or_else(|| format!("{text} cannot be stored as JSON; quote it for a string")),
        );
    }
    None
}

/// `(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`, sign already removed.
fn is_core_float(s: &str) -> bool {
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (int.is_empty() && digits(frac)) || (digits(int) && (frac.is_empty() || digits(frac)))
        }
        None => digits(mantissa),
    };
    let exponent_ok = match exponent {
        None => true,
        Some(e) => digits(e.strip_prefix(['-', '+']).unwrap_or(e)),
    };
    mantissa_ok && exponent_ok
}

// ---------------------------------------------------------------- TOML

fn parse_toml(text: &str) -> Result<Raw, ParseError> {
    let starts = line_starts(text);
    let table = DeTable::parse(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_at(&starts, s.start));
        err(line, e.message().trim_end().to_owned())
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

#[cfg(test)]
#[path = "raw_tests.rs"]
mod tests;
