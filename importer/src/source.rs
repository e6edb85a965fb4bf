//! The pack's files: finding the pack file, walking the folder in a stable
//! order, matching `include` globs, and reading files with every limit
//! applied.
//!
//! This is the only module that touches the file system, and it only reads.
//! Invariants:
//! 1. Nothing outside the pack folder is read: paths written in a pack are
//!    checked lexically (no absolute path, no `..` above the pack), and every
//!    file is canonicalized before it is opened, so a symlink pointing out is
//!    refused too. The walk never follows symlinks.
//! 2. Only regular files are opened (a FIFO or device would block), and at
//!    most [`MAX_FILE_BYTES`] of each.
//! 3. The walk is sorted by name and skips hidden entries (`.git`), so the
//!    same folder always yields the same file order.

use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use globset::GlobBuilder;
use walkdir::WalkDir;

use crate::raw::Format;
use crate::report::display_path;

/// Largest file the importer reads (pack files, items files, body files).
pub(crate) const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Most entries the walk of a pack folder visits.
pub(crate) const MAX_WALK_ENTRIES: usize = 100_000;
/// Deepest folder nesting the walk enters.
const MAX_WALK_DEPTH: usize = 32;

/// A problem reading the pack: the file it concerns and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceError {
    pub(crate) file: PathBuf,
    pub(crate) line: usize,
    pub(crate) message: String,
}

/// An opened pack folder.
#[derive(Debug)]
pub(crate) struct PackDir {
    /// Canonical path of the folder; every read must stay under it.
    root: PathBuf,
}

impl PackDir {
    /// Opens the pack folder `dir`.
    pub(crate) fn open(dir: &Path) -> Result<PackDir, SourceError> {
        let fail = |message: String| SourceError {
            file: PathBuf::from("pack.yaml"),
            line: 1,
            message,
        };
        let root = fs::canonicalize(dir).map_err(|e| {
            fail(format!(
                "cannot open the pack folder {}: {e}",
                dir.display()
            ))
        })?;
        if !root.is_dir() {
            return Err(fail(format!(
                "{} is not a folder; pass the pack's folder",
                dir.display()
            )));
        }
        Ok(PackDir { root })
    }

    /// The pack file: exactly one of `pack.yaml` and `pack.toml`.
    pub(crate) fn pack_file(&self) -> Result<(PathBuf, Format), SourceError> {
        let present = |name: &str| fs::symlink_metadata(self.root.join(name)).is_ok();
        match (present("pack.yaml"), present("pack.toml")) {
            (true, false) => Ok((PathBuf::from("pack.yaml"), Format::Yaml)),
            (false, true) => Ok((PathBuf::from("pack.toml"), Format::Toml)),
            (true, true) => Err(SourceError {
                file: PathBuf::from("pack.toml"),
                line: 1,
                message: "pack.yaml is here too; a pack has one pack file, so keep only one".into(),
            }),
            (false, false) => {
                let hint = if present("pack.yml") {
                    "; rename pack.yml to pack.yaml"
                } else {
                    ""
                };
                Err(SourceError {
                    file: PathBuf::from("pack.yaml"),
                    line: 1,
                    message: format!("not found: a pack folder needs pack.yaml or pack.toml{hint}"),
                })
            }
        }
    }

    /// Files and symlinks in the pack, relative, sorted, hidden ones skipped.
    pub(crate) fn walk(&self) -> Result<Vec<PathBuf>, SourceError> {
        let mut out = Vec::new();
        let walker = WalkDir::new(&self.root)
            .follow_links(false)
            .max_depth(MAX_WALK_DEPTH)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
        for (n, entry) in walker.enumerate() {
            if n >= MAX_WALK_ENTRIES {
                return Err(SourceError {
                    file: PathBuf::from("."),
                    line: 1,
                    message: format!("the pack folder has more than {MAX_WALK_ENTRIES} entries"),
                });
            }
            let entry = entry.map_err(|e| SourceError {
                file: e
                    .path()
                    .and_then(|p| p.strip_prefix(&self.root).ok())
                    .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
                line: 1,
                message: format!("cannot read: {e}"),
            })?;
            if entry.file_type().is_dir() {
                continue;
            }
            if let Ok(rel) = entry.path().strip_prefix(&self.root) {
                out.push(rel.to_path_buf());
            }
        }
        Ok(out)
    }

    /// Reads the bytes of `rel`, a path already known to be inside the pack
    /// lexically; refuses symlinks out, non-regular files and big files.
    pub(crate) fn read(&self, rel: &Path) -> Result<Vec<u8>, String> {
        let full = fs::canonicalize(self.root.join(rel)).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "not found in the pack".to_owned(),
            _ => format!("cannot read: {e}"),
        })?;
        if !full.starts_with(&self.root) {
            return Err(
                "is a symlink to a file outside the pack; files must be inside the pack folder"
                    .into(),
            );
        }
        let meta = fs::metadata(&full).map_err(|e| format!("cannot read: {e}"))?;
        if !meta.is_file() {
            return Err("is not a regular file".into());
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(too_big());
        }
        let file = fs::File::open(&full).map_err(|e| format!("cannot read: {e}"))?;
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read: {e}"))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(too_big());
        }
        Ok(bytes)
    }

    /// Reads `rel` as UTF-8 text.
    pub(crate) fn read_text(&self, rel: &Path) -> Result<String, TextError> {
        let bytes = self.read(rel).map_err(TextError::Read)?;
        String::from_utf8(bytes).map_err(|e| {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            TextError::NotUtf8 {
                line: 1 + valid.iter().filter(|&&b| b == b'\n').count(),
            }
        })
    }
}

/// Why a text file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TextError {
    /// The file could not be read at all (see [`PackDir::read`]).
    Read(String),
    /// The bytes are not UTF-8; `line` holds the first bad byte.
    NotUtf8 { line: usize },
}

impl TextError {
    /// The line to report: where the bad byte is, or the first.
    pub(crate) fn line(&self) -> usize {
        match self {
            TextError::Read(_) => 1,
            TextError::NotUtf8 { line } => *line,
        }
    }
}

impl std::fmt::Display for TextError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TextError::Read(message) => f.write_str(message),
            TextError::NotUtf8 { .. } => f.write_str("is not UTF-8 text; pack files must be UTF-8"),
        }
    }
}

fn too_big() -> String {
    format!("is larger than {} MiB", MAX_FILE_BYTES / (1024 * 1024))
}

/// Checks a path written in a pack (`body_file`, `items_file`) and returns
/// it normalized and relative to the pack, or why it may not be used.
pub(crate) fn pack_path(written: &str) -> Result<PathBuf, String> {
    let path = Path::new(written);
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(format!(
                        "{written:?} leaves the pack; write a path inside the pack folder"
                    ));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "{written:?} is absolute; write a path relative to the pack folder"
                ));
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(format!("{written:?} names no file"));
    }
    Ok(out)
}

/// The included files: every walked file matched by one of the `include`
/// globs, in walk order, except the pack file itself. Each glob that is
/// malformed, leaves the pack or matches nothing is reported with its index.
pub(crate) fn match_includes(
    globs: &[String],
    files: &[PathBuf],
    pack_file: &Path,
) -> (Vec<PathBuf>, Vec<(usize, String)>) {
    let mut problems = Vec::new();
    let mut matchers = Vec::new();
    for (i, pattern) in globs.iter().enumerate() {
        if pattern.starts_with('/') || pattern.split('/').any(|s| s == "..") {
            problems.push((
                i,
                format!("{pattern:?} leaves the pack; globs are relative to the pack folder"),
            ));
            continue;
        }
        match GlobBuilder::new(pattern).literal_separator(true).build() {
            Ok(glob) => matchers.push((i, glob.compile_matcher())),
            Err(e) => problems.push((i, format!("{pattern:?} is not a valid glob: {}", e.kind()))),
        }
    }
    let mut matched = vec![false; globs.len()];
    let mut out = Vec::new();
    for file in files {
        let shown = display_path(file);
        let mut hit = false;
        for (i, m) in &matchers {
            if m.is_match(&shown) {
                matched[*i] = true;
                hit = true;
            }
        }
        if !hit || file == pack_file {
            continue;
        }
        let ext = file
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        if Format::from_extension(ext).is_none() {
            let i = matchers
                .iter()
                .find(|(_, m)| m.is_match(&shown))
                .map_or(0, |(i, _)| *i);
            problems.push((
                i,
                format!(
                    "matches {shown:?}, which is not a .yaml, .yml or .toml file; narrow the glob"
                ),
            ));
            continue;
        }
        out.push(file.clone());
    }
    for (i, _) in &matchers {
        if !matched[*i] {
            problems.push((*i, format!("{:?} matches no file in the pack", globs[*i])));
        }
    }
    (out, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_paths_stay_inside_the_pack() {
        let cases: &[(&str, Result<&str, &str>)] = &[
            ("bodies/a.md", Ok("bodies/a.md")),
            ("./bodies/a.md", Ok("bodies/a.md")),
            ("bodies/../a.md", Ok("a.md")),
            ("../a.md", Err("leaves the pack")),
            ("bodies/../../a.md", Err("leaves the pack")),
            ("/etc/passwd", Err("is absolute")),
            (".", Err("names no file")),
        ];
        for (written, want) in cases {
            match (pack_path(written), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, Path::new(want), "{written:?}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{written:?}: {got}"),
                (got, want) => panic!("{written:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn includes_match_in_walk_order_and_report_bad_globs() {
        let files: Vec<PathBuf> = [
            "catalog.yaml",
            "nouns/a.yaml",
            "nouns/b.toml",
            "nouns/deep/c.yaml",
            "nouns/x.md",
            "pack.yaml",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        let globs = |g: &[&str]| g.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // (globs, files included, problems as (glob index, message part))
        type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a [(usize, &'a str)]);
        let cases: &[Case] = &[
            (&["nouns/*.yaml"], &["nouns/a.yaml"], &[]),
            (
                &["nouns/**/*.yaml", "catalog.yaml"],
                &["catalog.yaml", "nouns/a.yaml", "nouns/deep/c.yaml"],
                &[],
            ),
            (&["*.yaml"], &["catalog.yaml"], &[]),
            (
                &["nouns/*"],
                &["nouns/a.yaml", "nouns/b.toml"],
                &[(0, "which is not a .yaml")],
            ),
            (&["tasks/*.yaml"], &[], &[(0, "matches no file")]),
            (&["../x/*.yaml"], &[], &[(0, "leaves the pack")]),
            (&["nouns/[a.yaml"], &[], &[(0, "is not a valid glob")]),
        ];
        for (g, want_files, want_problems) in cases {
            let (got, problems) = match_includes(&globs(g), &files, Path::new("pack.yaml"));
            let got: Vec<String> = got.iter().map(|p| display_path(p)).collect();
            assert_eq!(got, *want_files, "globs {g:?}");
            assert_eq!(
                problems.len(),
                want_problems.len(),
                "globs {g:?}: {problems:?}"
            );
            for ((i, m), (wi, wm)) in problems.iter().zip(want_problems.iter()) {
                assert!(i == wi && m.contains(wm), "globs {g:?}: {problems:?}");
            }
        }
    }
}
