//! `tessera fsck`: re-hashes every object and checks every noun ref against
//! the objects it names (a ref's hidden shadow, `noun.rs`, is not a noun;
//! one left without its ref file says the ref file was deleted). It
//! records what the refs name, so the caller, which knows what the queue
//! names too, can report the objects nothing names. It reads only,
//! through the root's `Dir` handles, and reports each problem with its
//! path under the root; [`set_aside`] is the one write, for `tessera
//! recover --accept-loss`.

use std::collections::{BTreeMap, HashSet};
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
    /// Every object under `objects/sha256/` whose name is a sha256, with
    /// its size.
    pub loose: Vec<(Sha256, u64)>,
    /// Every version the ref files hold, as `(namespace/store/key,
    /// version, sha256)`: the objects they name, and what a pin may name.
    pub versions: HashSet<(String, u64, Sha256)>,
    /// Each key id a ref file names (a version's writer or owner), with
    /// the first file naming it.
    pub writers: BTreeMap<String, String>,
}

impl Report {
    /// Whether a ref file holds `version` of `ns/store/key` with `sha`.
    pub fn holds(&self, noun: &str, version: u64, sha: Sha256) -> bool {
        self.versions.contains(&(noun.to_string(), version, sha))
    }

    /// The loose objects that neither a ref file nor `named` (the
    /// receipts, staged parts and records the queue and others keep)
    /// names, with their sizes. A ref's hidden shadow names nothing: a
    /// put places its object only once its record is durable (`noun.rs`).
    pub fn unreferenced(&self, named: &HashSet<Sha256>) -> Vec<(Sha256, u64)> {
        let by_refs: HashSet<Sha256> = self.versions.iter().map(|(_, _, sha)| *sha).collect();
        self.loose
            .iter()
            .filter(|(sha, _)| !by_refs.contains(sha) && !named.contains(sha))
            .copied()
            .collect()
    }
}

/// Checks the whole store.
pub fn check(store: &Store) -> Result<Report, Error> {
    let mut report = Report::default();
    check_objects(store, &mut report)?;
    report.objects += store.packs().len() as u64;
    report.problems.extend(store.packs().check());
    check_refs(store, &mut report)?;
    check_table(store, &mut report)?;
    let (records, damage) = noun_log(store, &mut report)?;
    report.noun_log_records = records;
    report.problems.extend(damage);
    Ok(report)
}

/// The noun log's records waiting for the next start (the versions they
/// name join `report.versions`: their ref files hold them once replayed),
/// and the damage that would refuse it (the start's own reading, without
/// changing anything).
pub fn noun_log(store: &Store, report: &mut Report) -> Result<(u64, Option<Problem>), Error> {
    let pending = super::noun_log::pending(store)?;
    report.versions.extend(pending.versions);
    let problem = match pending.refusal {
        Some(Error::CorruptLog { path, message }) => Some(Problem { path, message }),
        Some(other) => Some(Problem {
            path: "journal/nouns/".into(),
            message: other.to_string(),
        }),
        None => None,
    };
    Ok((pending.records, problem))
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
                Ok(bytes) => report.loose.push((sha, bytes.len() as u64)),
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
            let files = sorted_entries(&st_dir, &format!("nouns/{ns}/{st}"))?;
            for (file, _) in &files {
                if is_shadow(file) {
                    let has_ref = |name: &str| files.iter().any(|(f, _)| f == name);
                    shadow(&st_dir, &format!("nouns/{ns}/{st}"), file, has_ref, report);
                }
            }
            for (file, _) in files {
                if is_shadow(&file) {
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

/// Checks the refs of the ref table, when the nouns are shared (their
/// refs in the database, their objects in the bucket), as the ref files
/// are checked: every version's object present, hashing to its name, of
/// its recorded size.
fn check_table(store: &Store, report: &mut Report) -> Result<(), Error> {
    if store.ref_table().is_none() {
        return Ok(());
    }
    let within = super::listing::Within::default();
    store.list_nouns(&within, None, usize::MAX, &|_| true, |noun| {
        report.refs += 1;
        let path = format!("noun {} (database)", noun.path());
        check_ref(store, &path, &noun, report);
        None::<()>
    })?;
    Ok(())
}

/// A ref file's hidden shadow is not a noun: it holds the previous ref,
/// or the next one before its record is logged (`noun.rs`). With no ref
/// file beside it, a shadow of one version may be a first put a crash cut
/// short; one of more versions is what a deleted ref file leaves, since a
/// ref file is only ever one version behind its shadow.
fn shadow(dir: &Dir, at: &str, file: &str, has_ref: impl Fn(&str) -> bool, report: &mut Report) {
    let Some(parsed) = dir
        .read(file)
        .ok()
        .and_then(|b| serde_json::from_slice::<NounRef>(&b).ok())
    else {
        // Torn by a crash while it was rewritten: it says nothing.
        return;
    };
    let ref_file = format!("{}.json", parsed.key);
    if parsed.versions.len() >= 2 && !has_ref(&ref_file) {
        let held = parsed.versions.len() + 1;
        report.problems.push(Problem {
            path: format!("{at}/{ref_file}"),
            message: format!(
                "missing, but its shadow {file} shows it held at least {held} versions: the ref file was deleted (its versions' objects are listed as unreferenced); restore it from a backup"
            ),
        });
    }
}

fn check_ref(store: &Store, path: &str, r: &NounRef, report: &mut Report) {
    let mut problems = Vec::new();
    if r.versions.is_empty() {
        problems.push("no versions".to_string());
    }
    let noun = format!("{}/{}/{}", r.namespace, r.store, r.key);
    for (i, entry) in r.versions.iter().enumerate() {
        let v = entry.version;
        report.versions.insert((noun.clone(), v, entry.sha256));
        for id in std::iter::once(&entry.created_by).chain(&entry.owner) {
            if !report.writers.contains_key(id) {
                report
                    .writers
                    .insert(id.clone(), format!("{path} version {v}"));
            }
        }
        if v != i as u64 + 1 {
            problems.push(format!(
                "entry {} has version {v}; versions must be 1, 2, 3, ...",
                i + 1
            ));
        }
        match store.get_object(&entry.sha256) {
            Ok(bytes) if bytes.len() as u64 != entry.size => problems.push(format!(
                "version {v}: size {} recorded, object {} has {} bytes",
                entry.size,
                object_path(&entry.sha256),
                bytes.len()
            )),
            Ok(_) => {}
            Err(e) => problems.push(format!("version {v}: {e}")),
        }
    }
    report
        .problems
        .extend(problems.into_iter().map(|message| Problem {
            path: path.to_string(),
            message,
        }));
}

/// Where [`set_aside`] moves unreferenced objects, under `objects/`.
pub const SET_ASIDE: &str = "unreferenced";

/// Moves each of `objects` (loose objects nothing names) from
/// `objects/sha256/` to `objects/unreferenced/<sha256>`, durably; the root
/// is held exclusively. Nothing is deleted: an object a restored ref file
/// turns out to name can be moved back.
pub fn set_aside(store: &Store, objects: &[(Sha256, u64)]) -> Result<(), Error> {
    let root = store.root();
    super::root::create_dir_if_missing(&root.object_area, SET_ASIDE)?;
    let aside = root
        .object_area
        .open_dir(SET_ASIDE)
        .map_err(|e| io_err(format!("opening objects/{SET_ASIDE}"), e))?;
    let mut fanouts = std::collections::BTreeSet::new();
    for (sha, _) in objects {
        let hex = sha.hex();
        let fan = root
            .objects
            .open_dir(&hex[..2])
            .map_err(|e| io_err(format!("opening objects/sha256/{}", &hex[..2]), e))?;
        fan.rename(&hex[2..], &aside, &hex)
            .map_err(|e| io_err(format!("moving {} aside", object_path(sha)), e))?;
        fanouts.insert(hex[..2].to_string());
    }
    let sync = |dir: &Dir, what: &str| {
        super::atomic::sync_dir(dir).map_err(|e| io_err(format!("syncing {what}"), e))
    };
    sync(&aside, "objects/unreferenced")?;
    for fan in fanouts {
        let dir = root
            .objects
            .open_dir(&fan)
            .map_err(|e| io_err(format!("opening objects/sha256/{fan}"), e))?;
        sync(&dir, &format!("objects/sha256/{fan}"))?;
    }
    Ok(())
}
