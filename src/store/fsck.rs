//! `tessera fsck`: re-hashes every object and checks every noun ref against
//! the objects it names (skipping the refs' hidden shadows, `noun.rs`). It reads only, through the root's `Dir` handles,
//! and reports each problem with its path under the root.

use std::fmt;

use cap_std::fs::Dir;

use super::noun::{NounRef, is_shadow};
use super::object::object_path;
use super::{Error, Sha256, Store, io_err};

/// One problem found, with the path it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Path under the root.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// What a check covered and what it found.
#[derive(Debug, Default)]
pub struct Report {
    /// Objects re-hashed.
    pub objects: u64,
    /// Noun ref files read.
    pub refs: u64,
    /// Noun log records the next start replays (a daemon that did not
    /// stop gracefully, or one running now): their ref files may lag.
    pub noun_log_records: u64,
    /// Every problem, in walk order.
    pub problems: Vec<Problem>,
}

/// Checks the whole store.
pub fn check(store: &Store) -> Result<Report, Error> {
    let mut report = Report::default();
    check_objects(store, &mut report)?;
    report.objects += store.packs().len() as u64;
    report.problems.extend(store.packs().check());
    check_refs(store, &mut report)?;
    let (records, damage) = super::noun_log::pending(store)?;
    report.noun_log_records = records;
    if let Some(Error::CorruptLog { path, message }) = damage {
        report.problems.push(Problem { path, message });
    }
    Ok(report)
}

/// The entries of `dir` as (name, is a directory), sorted by name.
pub(super) fn sorted_entries(dir: &Dir, what: &str) -> Result<Vec<(String, bool)>, Error> {
    let mut out = Vec::new();
    for entry in dir
        .entries()
        .map_err(|e| io_err(format!("listing {what}"), e))?
    {
        let entry = entry.map_err(|e| io_err(format!("listing {what}"), e))?;
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        out.push((entry.file_name().to_string_lossy().into_owned(), is_dir));
    }
    out.sort();
    Ok(out)
}

fn check_objects(store: &Store, report: &mut Report) -> Result<(), Error> {
    let top = store.objects().dir();
    for (fan, is_dir) in sorted_entries(top, "objects/sha256")? {
        let fan_path = format!("objects/sha256/{fan}");
        if !is_dir {
            report.problems.push(Problem {
                path: fan_path,
                message: "unexpected file in the object area".into(),
            });
            continue;
        }
        let dir = top
            .open_dir(&fan)
            .map_err(|e| io_err(format!("opening {fan_path}"), e))?;
        for (name, _) in sorted_entries(&dir, &fan_path)? {
            let path = format!("{fan_path}/{name}");
            let Ok(sha) = format!("{fan}{name}").parse::<Sha256>() else {
                report.problems.push(Problem {
                    path,
                    message: "file name is not a sha256".into(),
                });
                continue;
            };
            report.objects += 1;
            match store.get_object(&sha) {
                Ok(_) => {}
                Err(Error::CorruptObject { .. }) => report.problems.push(Problem {
                    path,
                    message: "bytes do not hash to the file name".into(),
                }),
                Err(e) => report.problems.push(Problem {
                    path,
                    message: e.to_string(),
                }),
            }
        }
    }
    Ok(())
}

fn check_refs(store: &Store, report: &mut Report) -> Result<(), Error> {
    let nouns = &store.root().nouns;
    for (ns, _) in sorted_entries(nouns, "nouns")? {
        let ns_dir = nouns
            .open_dir(&ns)
            .map_err(|e| io_err(format!("opening nouns/{ns}"), e))?;
        for (st, _) in sorted_entries(&ns_dir, &format!("nouns/{ns}"))? {
            let st_dir = ns_dir
                .open_dir(&st)
                .map_err(|e| io_err(format!("opening nouns/{ns}/{st}"), e))?;
            for (file, _) in sorted_entries(&st_dir, &format!("nouns/{ns}/{st}"))? {
                if is_shadow(&file) {
                    // A ref file's hidden shadow: the previous ref, or the
                    // next one before it is logged (`noun.rs`), not a noun.
                    continue;
                }
                let path = format!("nouns/{ns}/{st}/{file}");
                report.refs += 1;
                let parsed = st_dir
                    .read(&file)
                    .map_err(|e| e.to_string())
                    .and_then(|b| serde_json::from_slice::<NounRef>(&b).map_err(|e| e.to_string()));
                match parsed {
                    Ok(r) => check_ref(store, &path, &r, report),
                    Err(message) => report.problems.push(Problem { path, message }),
                }
            }
        }
    }
    Ok(())
}

fn check_ref(store: &Store, path: &str, r: &NounRef, report: &mut Report) {
    let mut problem = |message: String| {
        report.problems.push(Problem {
            path: path.to_string(),
            message,
        })
    };
    if r.versions.is_empty() {
        problem("no versions".into());
    }
    for (i, entry) in r.versions.iter().enumerate() {
        let v = entry.version;
        if v != i as u64 + 1 {
            problem(format!(
                "entry {} has version {v}; versions must be 1, 2, 3, ...",
                i + 1
            ));
        }
        match store.get_object(&entry.sha256) {
            Ok(bytes) if bytes.len() as u64 != entry.size => problem(format!(
                "version {v}: size {} recorded, object {} has {} bytes",
                entry.size,
                object_path(&entry.sha256),
                bytes.len()
            )),
            Ok(_) => {}
            Err(e) => problem(format!("version {v}: {e}")),
        }
    }
}
