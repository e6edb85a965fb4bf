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
//! - a pack may expand to at most [`MAX_PACK_BYTES`] of text ([`Budget`]),
//!   checked before each value or alias copy is made, so one big string
//!   aliased many times fails at the alias's line;
//! - values JSON cannot hold (NaN, infinity, integers past 64 bits) and
//!   YAML tags other than the core schema's are refused.
//!
//! `from_yaml` and `from_toml` build the value and map; file sizes and
//! UTF-8 are checked earlier, in `source`.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::Value;

mod from_toml;
mod from_yaml;

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

    pub(crate) fn insert(&mut self, pointer: &str, line: usize) {
        self.0.entry(pointer.to_owned()).or_insert(line);
    }
}

/// A file that could not be parsed: the parser's line and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub(crate) line: usize,
    pub(crate) message: String,
}

/// Most bytes of text a whole pack may expand to: every string, key and
/// number of every file (each alias copy and merge counted again), every
/// body file, and every template expansion. It bounds the importer's
/// memory; a pack past it fails at the file and line where it crossed.
pub const MAX_PACK_BYTES: usize = 128 * 1024 * 1024;

/// What is left of [`MAX_PACK_BYTES`] while a pack is read.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    used: usize,
}

impl Budget {
    /// The whole allowance.
    pub(crate) fn new() -> Budget {
        Budget { used: 0 }
    }

    /// Bytes taken so far.
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// Takes `n` bytes, or says why not (before anything is allocated).
    pub(crate) fn take(&mut self, n: usize) -> Result<(), String> {
        self.used = self.used.saturating_add(n);
        if self.used > MAX_PACK_BYTES {
            return Err(format!(
                "the pack expands to more than {} MiB of text (aliases, merges and template expansions counted in full); write less, or split the pack",
                MAX_PACK_BYTES / (1024 * 1024)
            ));
        }
        Ok(())
    }
}

/// Parses `text` written in `format`. Line ends are `\n` first: a CRLF
/// checkout of a pack (git's `autocrlf` on Windows) gives the same values,
/// multi-line strings included, and so the same records on every platform.
/// The parsed value's text is taken from `budget`.
pub(crate) fn parse(format: Format, text: &str, budget: &mut Budget) -> Result<Raw, ParseError> {
    let text = lf(text);
    match format {
        Format::Yaml => from_yaml::parse(&text, budget),
        Format::Toml => {
            budget.take(text.len()).map_err(|m| err(1, m))?;
            from_toml::parse(&text)
        }
    }
}

/// `text` with every CRLF line end made LF (line numbers are unchanged).
pub(crate) fn lf(text: &str) -> Cow<'_, str> {
    if text.contains("\r\n") {
        Cow::Owned(text.replace("\r\n", "\n"))
    } else {
        Cow::Borrowed(text)
    }
}

pub(crate) fn err(line: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests;
