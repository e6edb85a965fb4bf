//! The shared output of read commands: an aligned table with headers by
//! default, or the daemon's JSON with `-o json` for scripts.

use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use jiff::Timestamp;
use serde::Serialize;

/// How a command prints its answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// An aligned table with headers.
    #[default]
    Table,
    /// The answer as JSON (pretty, one document).
    Json,
}

/// The `-o` flag.
#[derive(Clone, Copy, Debug, Args)]
pub struct OutputArgs {
    /// Output format: table (for people) or json (for scripts).
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: Format,
}

/// Rows under headers; columns holding only numbers are right-aligned.
#[derive(Debug)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<S: AsRef<str>>(headers: &[S]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.as_ref().to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (one cell per header).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, columns two spaces apart.
    pub fn render(&self) -> String {
        let n = self.headers.len();
        let width = |i: usize| {
            self.rows
                .iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .chain([self.headers[i].len()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..n).map(width).collect();
        let numeric: Vec<bool> = (0..n)
            .map(|i| {
                !self.rows.is_empty()
                    && self.rows.iter().all(|r| {
                        r.get(i)
                            .is_some_and(|c| c == "-" || c.parse::<f64>().is_ok())
                    })
            })
            .collect();
        let mut out = String::new();
        for cells in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, w) in widths.iter().enumerate() {
                let cell = cells.get(i).map_or("", String::as_str);
                let sep = if i == 0 { "" } else { "  " };
                let _ = if numeric[i] {
                    write!(line, "{sep}{cell:>w$}")
                } else {
                    write!(line, "{sep}{cell:<w$}")
                };
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Prints `value` as JSON, or the table `table` builds from it.
pub fn print<T: Serialize>(format: Format, value: &T, table: impl FnOnce(&T) -> Table) {
    match format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(value).expect("answers serialize")
        ),
        Format::Table => print!("{}", table(value).render()),
    }
}

/// How long ago `since` was, compactly: `42s`, `3m05s`, `2h10m`, `4d03h`.
pub fn ago(since: Timestamp, now: Timestamp) -> String {
    let s = now.duration_since(since).as_secs().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86400, (s % 86400) / 3600),
    }
}

/// A byte count for people: `512 B`, `64.0 MiB`, `12.3 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A unit enum as its JSON word (`write-internal`, `surface_only`).
pub fn word<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        other => format!("{other:?}"),
    }
}

/// A list as one cell: comma-separated, or `-` when empty.
pub fn list<T: ToString>(items: &[T]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_numbers_go_right() {
        let mut t = Table::new(&["NAME", "COUNT"]);
        t.row(vec!["work.external".into(), "3".into()]);
        t.row(vec!["q".into(), "12".into()]);
        assert_eq!(
            t.render(),
            "NAME           COUNT\nwork.external      3\nq                 12\n"
        );
    }

    #[test]
    fn ages_and_sizes_read_compactly() {
        let t0 = Timestamp::UNIX_EPOCH;
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let cases = [
            (42, "42s"),
            (185, "3m05s"),
            (7800, "2h10m"),
            (356_400, "4d03h"),
        ];
        for (s, want) in cases {
            assert_eq!(ago(t0, at(s)), want);
        }
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(64 << 20), "64.0 MiB");
    }
}
