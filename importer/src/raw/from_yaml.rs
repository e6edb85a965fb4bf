//! YAML to a JSON value and line map, built from saphyr-parser's events.
//!
//! Building the value ourselves (rather than through a YAML tree) is what
//! lets us count every value an alias copies before copying it, refuse
//! duplicate keys and unsupported tags, and resolve scalars by the YAML 1.2
//! core schema, with a line for every node.
//!
//! Merge keys (YAML 1.1's `<<: *base` or `<<: [*a, *b]`, plain `<<` only)
//! are applied when their map ends: keys written in the map win over
//! merged ones, and earlier maps in a merge list win over later ones. A
//! quoted `"<<"` is an ordinary key.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Tag};
use serde_json::{Map, Number, Value};

use super::{Budget, Lines, MAX_DEPTH, MAX_NODES, ParseError, Raw, err};
use crate::report::push_pointer;

/// A list or map under construction.
struct Frame {
    pointer: String,
    anchor: usize,
    nodes_at_start: usize,
    bytes_at_start: usize,
    kind: FrameKind,
}

/// The key that merges maps into its map.
const MERGE_KEY: &str = "<<";

enum FrameKind {
    Seq(Vec<Value>),
    /// Entries so far, and the key waiting for its value (with its line).
    Map(Map<String, Value>, Option<(String, usize)>, Merges),
}

/// A map's merge key: whether its value is awaited, and the maps it
/// merges with the line of the `<<`.
#[derive(Default)]
struct Merges {
    pending: bool,
    maps: Vec<Map<String, Value>>,
    line: Option<usize>,
}

/// An anchored value, with what copying it costs.
struct Anchored {
    value: Value,
    nodes: usize,
    bytes: usize,
    depth: usize,
}

pub(super) fn parse(text: &str, budget: &mut Budget) -> Result<Raw, ParseError> {
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
                    FrameKind::Map(_, Some((key, key_line)), _) => {
                        (push_pointer(&f.pointer, key), *key_line)
                    }
                    FrameKind::Map(_, None, _) => (f.pointer.clone(), line),
                },
            }
        };
        let in_key_position = matches!(
            stack.last(),
            Some(Frame {
                kind: FrameKind::Map(_, None, _),
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
                        kind: FrameKind::Map(map, pending, merges),
                        ..
                    }) = stack.last_mut()
                    else {
                        unreachable!("checked above")
                    };
                    if anchor != 0 || tag.is_some() {
                        return Err(err(line, "anchors and tags are not allowed on keys"));
                    }
                    if style == ScalarStyle::Plain && text == MERGE_KEY {
                        if merges.line.is_some() {
                            return Err(err(
                                line,
                                "a second `<<` in one map; merge a list instead: `<<: [*a, *b]`",
                            ));
                        }
                        merges.pending = true;
                        merges.line = Some(line);
                    } else if map.contains_key(text.as_ref()) {
                        return Err(err(line, format!("duplicate key {:?}", text.as_ref())));
                    }
                    budget.take(text.len()).map_err(|m| err(line, m))?;
                    *pending = Some((text.into_owned(), line));
                    continue;
                }
                budget.take(text.len()).map_err(|m| err(line, m))?;
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
                            bytes: text.len(),
                            depth: 0,
                        },
                    );
                }
                attach(&mut stack, &mut root, value).map_err(|m| err(line, m))?;
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
                    FrameKind::Map(Map::new(), None, Merges::default())
                };
                stack.push(Frame {
                    pointer,
                    anchor,
                    nodes_at_start: nodes,
                    bytes_at_start: budget.used(),
                    kind,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = stack.pop() else {
                    return Err(err(line, "unbalanced YAML structure"));
                };
                let value = match frame.kind {
                    FrameKind::Seq(items) => Value::Array(items),
                    FrameKind::Map(map, _, merges) => {
                        Value::Object(merge(map, merges, &frame.pointer, &mut lines))
                    }
                };
                if frame.anchor != 0 {
                    let anchored = Anchored {
                        value: value.clone(),
                        nodes: nodes - frame.nodes_at_start + 1,
                        bytes: budget.used() - frame.bytes_at_start,
                        depth: depth_of(&value),
                    };
                    anchors.insert(frame.anchor, anchored);
                }
                attach(&mut stack, &mut root, value).map_err(|m| err(line, m))?;
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
                budget.take(anchored.bytes).map_err(|m| err(line, m))?;
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
                attach(&mut stack, &mut root, value).map_err(|m| err(line, m))?;
            }
        }
    }
    Ok(Raw {
        value: root.unwrap_or(Value::Null),
        lines,
    })
}

/// Puts a finished value into the open list or map, or makes it the root;
/// the value of a merge key is kept aside for [`merge`].
fn attach(stack: &mut [Frame], root: &mut Option<Value>, value: Value) -> Result<(), String> {
    match stack.last_mut() {
        None => *root = Some(value),
        Some(frame) => match &mut frame.kind {
            FrameKind::Seq(items) => items.push(value),
            FrameKind::Map(map, pending, merges) => {
                let Some((key, _)) = pending.take() else {
                    return Ok(());
                };
                if !std::mem::take(&mut merges.pending) {
                    map.insert(key, value);
                    return Ok(());
                }
                let refused =
                    || "`<<` merges a map or a list of maps, such as `<<: *base`".to_owned();
                match value {
                    Value::Object(m) => merges.maps.push(m),
                    Value::Array(list) => {
                        for item in list {
                            let Value::Object(m) = item else {
                                return Err(refused());
                            };
                            merges.maps.push(m);
                        }
                    }
                    _ => return Err(refused()),
                }
            }
        },
    }
    Ok(())
}

/// `map` with the keys of its merged maps that it does not set itself
/// (earlier merged maps first); merged keys take the line of the `<<`.
fn merge(
    mut map: Map<String, Value>,
    merges: Merges,
    pointer: &str,
    lines: &mut Lines,
) -> Map<String, Value> {
    let Some(line) = merges.line else {
        return map;
    };
    for merged in merges.maps {
        for (key, value) in merged {
            if !map.contains_key(&key) {
                lines.insert(&push_pointer(pointer, &key), line);
                map.insert(key, value);
            }
        }
    }
    map
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
