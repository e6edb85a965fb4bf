//! Listing nouns: a walk of `nouns/<ns>/<store>/<key>.json` in
//! (namespace, store, key) order, resumable after any noun, narrowed to a
//! namespace or store. What a caller may see is the caller's to decide
//! (`keep`); this module only walks and reads ref files.
//!
//! Names are sorted as names, not as file names: `a` comes before `a.b`
//! although `a.b.json` sorts before `a.json`. Entries that are not valid
//! names (or not `.json` ref files) are skipped here and reported by fsck.

use cap_std::fs::Dir;

use super::noun::NounRef;
use super::{Error, Name, NounPath, Store, io_err};

/// Which part of the tree a listing walks.
#[derive(Clone, Debug, Default)]
pub struct Within {
    /// Only this namespace.
    pub namespace: Option<Name>,
    /// Only this store (in every namespace walked).
    pub store: Option<Name>,
}

/// One page of a listing.
#[derive(Debug)]
pub struct Page<T> {
    /// What `keep` returned, in walk order.
    pub items: Vec<T>,
    /// The last noun kept when the page is full: the next page starts after
    /// it (and may be empty). `None` when the walk reached the end.
    pub next: Option<NounPath>,
}

impl Store {
    /// Up to `limit` nouns after `after`, within `within`, in namespaces
    /// `namespace_ok` accepts, each read and passed to `keep`; what `keep`
    /// returns `Some` for counts towards the page.
    pub fn list_nouns<T>(
        &self,
        within: &Within,
        after: Option<&NounPath>,
        limit: usize,
        namespace_ok: &dyn Fn(&Name) -> bool,
        mut keep: impl FnMut(NounRef) -> Option<T>,
    ) -> Result<Page<T>, Error> {
        let mut items = Vec::new();
        let nouns = self.nouns_dir();
        for ns in names(nouns, "nouns", "", within.namespace.as_ref())? {
            if after.is_some_and(|a| ns < a.namespace) || !namespace_ok(&ns) {
                continue;
            }
            let ns_dir = open(nouns, &ns, &format!("nouns/{ns}"))?;
            for st in names(&ns_dir, &format!("nouns/{ns}"), "", within.store.as_ref())? {
                if after.is_some_and(|a| (&ns, &st) < (&a.namespace, &a.store)) {
                    continue;
                }
                let where_ = format!("nouns/{ns}/{st}");
                let st_dir = open(&ns_dir, &st, &where_)?;
                for key in names(&st_dir, &where_, ".json", None)? {
                    let path = NounPath {
                        namespace: ns.clone(),
                        store: st.clone(),
                        key,
                    };
                    if after.is_some_and(|a| path_order(&path) <= path_order(a)) {
                        continue;
                    }
                    let Some(noun) = self.read_ref(&path)? else {
                        continue;
                    };
                    if let Some(item) = keep(noun) {
                        items.push(item);
                        if items.len() == limit {
                            return Ok(Page {
                                items,
                                next: Some(path),
                            });
                        }
                    }
                }
            }
        }
        Ok(Page { items, next: None })
    }
}

fn path_order(p: &NounPath) -> (&Name, &Name, &Name) {
    (&p.namespace, &p.store, &p.key)
}

fn open(dir: &Dir, name: &Name, what: &str) -> Result<Dir, Error> {
    dir.open_dir(name.as_str())
        .map_err(|e| io_err(format!("opening {what}"), e))
}

/// The valid names in `dir` (file names with `suffix` stripped, or
/// directories when `suffix` is empty), sorted; only `only` when given.
fn names(dir: &Dir, what: &str, suffix: &str, only: Option<&Name>) -> Result<Vec<Name>, Error> {
    let mut out = Vec::new();
    for entry in dir
        .entries()
        .map_err(|e| io_err(format!("listing {what}"), e))?
    {
        let entry = entry.map_err(|e| io_err(format!("listing {what}"), e))?;
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir != suffix.is_empty() {
            continue;
        }
        let file = entry.file_name();
        let Some(stem) = file.to_str().and_then(|f| f.strip_suffix(suffix)) else {
            continue;
        };
        if let Ok(name) = Name::parse("name", stem)
            && only.is_none_or(|o| *o == name)
        {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}
