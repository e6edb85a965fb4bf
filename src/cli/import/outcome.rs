//! What an import did, or would do, to each item of a pack, and how that is
//! shown: one line per item, a summary line, the exit code, and a progress
//! bar on a terminal for large packs.

use std::fmt;
use std::io::IsTerminal;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use tessera_importer::{Diagnostic, Source};

use super::Mode;
use super::diff::Change;

/// Ids are padded to line up, up to this many characters.
const ID_COLUMN: usize = 40;

/// Packs with more items than this get a progress bar (on a terminal).
const PROGRESS_OVER: usize = 300;

/// What happens to one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Outcome {
    /// A new noun or task.
    Create,
    /// A new version of an existing noun.
    NewVersion,
    /// Already there as written; nothing to write.
    Unchanged,
    /// A task whose idempotency key is taken by a task with another spec.
    Conflict,
    /// The daemon refused the item, or it depends on one that failed.
    Error,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Outcome::Create => "create",
            Outcome::NewVersion => "new version",
            Outcome::Unchanged => "unchanged",
            Outcome::Conflict => "conflict",
            Outcome::Error => "error",
        }
    }
}

/// What kind of item a line is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Kind {
    /// A noun, named `store/key`.
    Noun,
    /// A task, named by its local id.
    Task,
    /// A catalog pin, named by its catalog name.
    Pin,
}

/// One entry of the plan: an item's outcome, with where it was written,
/// for conflicts and errors why, and in a `--plan` what differs from the
/// record the daemon holds. `kind` says what the entry is about, so other
/// kinds of entries can join the list.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Line {
    pub(super) outcome: Outcome,
    pub(super) kind: Kind,
    pub(super) id: String,
    pub(super) source: Source,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) note: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) changes: Vec<Change>,
}

impl Line {
    /// A line without a note.
    pub(super) fn new(outcome: Outcome, kind: Kind, id: &str, source: &Source) -> Line {
        Line {
            outcome,
            kind,
            id: id.to_owned(),
            source: source.clone(),
            note: None,
            changes: Vec::new(),
        }
    }

    /// Whether the item conflicts or failed.
    pub(super) fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Conflict | Outcome::Error)
    }

    /// The same line, explained.
    pub(super) fn because(mut self, note: impl Into<String>) -> Line {
        self.note = Some(note.into());
        self
    }
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Noun => "noun",
            Kind::Task => "task",
            Kind::Pin => "pin",
        };
        let width = f.width().unwrap_or(0);
        write!(
            f,
            "{:<11}  {kind:<4}  {:<width$}  ({}:{})",
            self.outcome.word(),
            self.id,
            self.source.file.display(),
            self.source.line
        )?;
        if let Some(note) = &self.note {
            write!(f, ": {note}")?;
        }
        for change in &self.changes {
            write!(f, "\n    {change}")?;
        }
        Ok(())
    }
}

/// Which lines to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Show {
    /// Every item (`--plan`).
    All,
    /// Items that changed or failed (an apply).
    Changes,
    /// Items that failed (re-applies in `--watch`).
    Failures,
}

impl Show {
    fn wants(self, outcome: Outcome) -> bool {
        match self {
            Show::All => true,
            Show::Changes => outcome != Outcome::Unchanged,
            Show::Failures => matches!(outcome, Outcome::Conflict | Outcome::Error),
        }
    }
}

/// Counts of outcomes over a whole import.
#[derive(Clone, Debug, Default)]
pub(super) struct Tally {
    create: usize,
    new_version: usize,
    unchanged: usize,
    conflict: usize,
    error: usize,
    nouns: usize,
    tasks: usize,
    pins: usize,
}

impl Tally {
    /// Counts `lines` (catalog pins are checked, not counted).
    pub(super) fn of(lines: &[Line]) -> Tally {
        let mut t = Tally::default();
        for line in lines {
            match line.kind {
                Kind::Noun => t.nouns += 1,
                Kind::Task => t.tasks += 1,
                Kind::Pin => {}
            }
            match line.outcome {
                Outcome::Create => t.create += 1,
                Outcome::NewVersion => t.new_version += 1,
                Outcome::Unchanged => t.unchanged += 1,
                Outcome::Conflict => t.conflict += 1,
                Outcome::Error => t.error += 1,
            }
        }
        t
    }

    /// The same tally, noting `n` catalog pins that were checked and hold.
    pub(super) fn with_pins(mut self, n: usize) -> Tally {
        self.pins = n;
        self
    }

    /// Whether anything was (or would be) written.
    pub(super) fn changed(&self) -> bool {
        self.create + self.new_version > 0
    }

    /// Whether any item conflicts or failed.
    pub(super) fn failed(&self) -> bool {
        self.conflict + self.error > 0
    }

    /// The summary line.
    pub(super) fn summary(&self, mode: Mode) -> String {
        let pins = match self.pins {
            0 => String::new(),
            1 => "; its catalog pin holds".into(),
            n => format!("; all {n} catalog pins hold"),
        };
        if !self.changed() && !self.failed() {
            return format!(
                "nothing to change: {} nouns, {} tasks unchanged{pins}",
                self.nouns, self.tasks
            );
        }
        let next = match (mode, self.failed()) {
            (Mode::Plan, false) => "; nothing written, run without --plan to apply",
            (Mode::Plan, true) => {
                "; nothing written, and an import would stop at the conflicts and errors above"
            }
            (Mode::Apply, false) => "",
            (Mode::Apply, true) => "; fix the conflicts and errors above and import again",
        };
        let head = match mode {
            Mode::Plan => "plan",
            Mode::Apply => "import",
        };
        format!("{head}: {}{pins}{next}", self.counts())
    }

    /// The summary of an import whose dry run found conflicts or errors.
    pub(super) fn stopped(&self) -> String {
        format!(
            "import stopped before writing anything: {}; fix the conflicts and errors above and import again",
            self.counts()
        )
    }

    fn counts(&self) -> String {
        format!(
            "{} create, {} new version, {} unchanged, {} conflict, {} error ({} nouns, {} tasks)",
            self.create,
            self.new_version,
            self.unchanged,
            self.conflict,
            self.error,
            self.nouns,
            self.tasks
        )
    }

    /// 0 when nothing would change or all went well, 2 when a plan would
    /// change something, 1 when an item conflicts or failed.
    pub(super) fn exit_code(&self, mode: Mode) -> ExitCode {
        if self.failed() {
            ExitCode::FAILURE
        } else if mode == Mode::Plan && self.changed() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    }
}

/// Prints every line and the summary on stdout as one JSON document:
/// `{"warnings": [{file, line, field, message}], "entries": [{kind, id,
/// outcome, source: {file, line}, note?, changes?: [{pointer, old, new}]}],
/// "summary", "orphans": {"entries": [{kind, id, outcome}], "summary"}}`
/// (the orphan section's findings).
pub(super) fn print_json(
    warnings: &[Diagnostic],
    lines: &[Line],
    summary: &str,
    found: &super::orphans::Report,
) {
    let doc = serde_json::json!({
        "warnings": warnings,
        "entries": lines,
        "summary": summary,
        "orphans": {"entries": found.entries, "summary": found.summary},
    });
    println!("{doc:#}");
}

/// Prints the plan's warnings on stdout, one line each:
/// `warning: file:line: field: message`.
pub(super) fn print_warnings(warnings: &[Diagnostic]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for w in warnings {
        let _ = writeln!(out, "warning: {w}");
    }
}

/// Prints the wanted lines and the summary on stdout.
pub(super) fn print(lines: &[Line], show: Show, summary: &str) {
    use std::io::Write;
    let shown: Vec<&Line> = lines.iter().filter(|l| show.wants(l.outcome)).collect();
    let width = shown
        .iter()
        .map(|l| l.id.chars().count())
        .max()
        .unwrap_or(0)
        .min(ID_COLUMN);
    let mut out = std::io::stdout().lock();
    for line in shown {
        let _ = writeln!(out, "{line:width$}");
    }
    let _ = writeln!(out, "{summary}");
}

/// A progress bar on stderr for packs of more than a few hundred items,
/// when stderr is a terminal; otherwise it draws nothing.
pub(super) struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar over `items` items.
    pub(super) fn new(items: usize, what: &'static str) -> Progress {
        if items <= PROGRESS_OVER || !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let style = ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} items ({eta})")
            .expect("a valid template")
            .progress_chars("=> ");
        let bar = ProgressBar::with_draw_target(Some(items as u64), ProgressDrawTarget::stderr())
            .with_style(style)
            .with_prefix(what);
        Progress(Some(bar))
    }

    /// `n` more items done.
    pub(super) fn inc(&self, n: usize) {
        if let Some(bar) = &self.0 {
            bar.inc(n as u64);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
