//! Diagnostics and the Report: every problem found in a pack, sorted and
//! rendered one per line as `file:line: field: message`.
//!
//! This module owns the wording rules shared by all checks (field paths from
//! JSON pointers, "did you mean" hints). It does not decide what is wrong;
//! `source`, `raw`, `schema`, `resolve` and `template` do, and push here.

use std::fmt;
use std::path::{Path, PathBuf};

/// One problem in a pack, located at a file, a line and a field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Diagnostic {
    /// The file, relative to the pack folder.
    pub file: PathBuf,
    /// 1-based line in that file.
    pub line: usize,
    /// The field, as a path such as `tasks[0].brief.contract_ref`, or a
    /// word for the whole file (`file`, `yaml`, `toml`, `pack`).
    pub field: String,
    /// What is wrong, and where possible what to write instead.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            display_path(&self.file),
            self.line,
            self.field,
            self.message
        )
    }
}

/// Every problem found in a pack. Nothing is planned while it is non-empty.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Report {
    /// Sorted by file, line, field and message; no duplicates.
    pub diagnostics: Vec<Diagnostic>,
}

impl Report {
    /// A report of these diagnostics, sorted and without duplicates.
    pub fn new(mut diagnostics: Vec<Diagnostic>) -> Report {
        diagnostics.sort();
        diagnostics.dedup();
        Report { diagnostics }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Report {}

/// Collects diagnostics while the checks run.
#[derive(Debug, Default)]
pub(crate) struct Diagnostics(Vec<Diagnostic>);

impl Diagnostics {
    pub(crate) fn push(
        &mut self,
        file: &Path,
        line: usize,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.0.push(Diagnostic {
            file: file.to_path_buf(),
            line: line.max(1),
            field: field.into(),
            message: message.into(),
        });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn into_report(self) -> Report {
        Report::new(self.0)
    }
}

/// A path with `/` separators whatever the platform, so reports are stable.
pub(crate) fn display_path(path: &Path) -> String {
    let parts: Vec<String> = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// Renders a JSON pointer as a field path: `/tasks/0/brief/x` becomes
/// `tasks[0].brief.x`. The root pointer becomes `(root)`.
pub(crate) fn field_path(pointer: &str) -> String {
    let mut out = String::new();
    for raw in pointer.split('/').skip(1) {
        let seg = raw.replace("~1", "/").replace("~0", "~");
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) && !out.is_empty() {
            out.push('[');
            out.push_str(&seg);
            out.push(']');
        } else if !seg.is_empty()
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&seg);
        } else {
            out.push_str(&format!("[{seg:?}]"));
        }
    }
    if out.is_empty() {
        out.push_str("(root)");
    }
    out
}

/// Appends one segment to a JSON pointer, escaping `~` and `/`.
pub(crate) fn push_pointer(pointer: &str, segment: &str) -> String {
    let escaped = segment.replace('~', "~0").replace('/', "~1");
    format!("{pointer}/{escaped}")
}

/// The closest candidate to `word`, if it is close enough to be a likely typo.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

/// Edit distance over chars where swapping two neighbours costs one
/// (optimal string alignment), so `slove` is one step from `solve`.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: distance between a[..i] and b[..j]; three rows suffice.
    let mut before: Vec<usize> = Vec::new();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j - 1] + cost).min(prev[j] + 1).min(cur[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                cur[j] = cur[j].min(before[j - 2] + 1);
            }
        }
        before = std::mem::replace(&mut prev, cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_paths_read_like_the_file() {
        let cases = [
            ("", "(root)"),
            ("/pack", "pack"),
            ("/tasks/0/brief/contract_ref", "tasks[0].brief.contract_ref"),
            ("/templates/1/items/2", "templates[1].items[2]"),
            ("/nouns/0/body/a.b", "nouns[0].body[\"a.b\"]"),
            ("/nouns/0/body/a~1b", "nouns[0].body[\"a/b\"]"),
            ("/0", "0"),
        ];
        for (pointer, want) in cases {
            assert_eq!(field_path(pointer), want, "pointer {pointer:?}");
        }
    }

    #[test]
    fn typos_get_a_suggestion_and_strangers_do_not() {
        let fields = ["priority", "queue", "kind", "tags", "solve"];
        let cases = [
            ("slove", Some("solve")),
            ("prioirty", Some("priority")),
            ("queu", Some("queue")),
            ("knd", Some("kind")),
            ("colour", None),
        ];
        for (word, want) in cases {
            assert_eq!(did_you_mean(word, fields), want, "word {word:?}");
        }
    }

    #[test]
    fn report_sorts_dedups_and_renders_one_line_each() {
        let d = |file: &str, line, field: &str| Diagnostic {
            file: file.into(),
            line,
            field: field.into(),
            message: "m".into(),
        };
        let report = Report::new(vec![
            d("b.yaml", 1, "x"),
            d("a.yaml", 9, "y"),
            d("a.yaml", 2, "z"),
            d("a.yaml", 9, "y"),
        ]);
        assert_eq!(
            report.to_string(),
            "a.yaml:2: z: m\na.yaml:9: y: m\nb.yaml:1: x: m"
        );
    }
}
