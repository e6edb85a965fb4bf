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
use super::refs::RefTable;
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
        keep: impl FnMut(NounRef) -> Option<T>,
    ) -> Result<Page<T>, Error> {
        let mut page = Filling {
            items: Vec::new(),
            limit,
            keep,
        };
        if let Some(table) = self.ref_table() {
            return table_page(table, within, after, namespace_ok, page);
        }
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
                    if let Some(full) = page.offer(noun) {
                        return Ok(full);
                    }
                }
            }
        }
        Ok(page.done())
    }
}

/// A page being filled: what `keep` returns, up to `limit`.
struct Filling<T, F> {
    items: Vec<T>,
    limit: usize,
    keep: F,
}

impl<T, F: FnMut(NounRef) -> Option<T>> Filling<T, F> {
    /// Offers `noun`: the full page once it makes the page full (its
    /// next page starts after `noun`).
    fn offer(&mut self, noun: NounRef) -> Option<Page<T>> {
        let path = noun.path();
        let item = (self.keep)(noun)?;
        self.items.push(item);
        (self.items.len() == self.limit).then(|| Page {
            items: std::mem::take(&mut self.items),
            next: Some(path),
        })
    }

    /// The last page: the walk reached the end.
    fn done(self) -> Page<T> {
        Page {
            items: self.items,
            next: None,
        }
    }
}

/// [`Store::list_nouns`] over a ref table: its rows read a batch at a time
/// until the page is full or none are left.
fn table_page<T>(
    table: &dyn RefTable,
    within: &Within,
    after: Option<&NounPath>,
    namespace_ok: &dyn Fn(&Name) -> bool,
    mut page: Filling<T, impl FnMut(NounRef) -> Option<T>>,
) -> Result<Page<T>, Error> {
    let mut after = after.cloned();
    let batch = page.limit.clamp(1, 500);
    loop {
        let rows = table.list(within, after.as_ref(), batch)?;
        let last_batch = rows.len() < batch;
        for noun in rows {
            after = Some(noun.path());
            if namespace_ok(&noun.namespace)
                && let Some(full) = page.offer(noun)
            {
                return Ok(full);
            }
        }
        if last_batch {
            return Ok(page.done());
        }
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
    let mut out: Vec<Name> = super::fsck::sorted_entries(dir, what)?
        .into_iter()
        .filter(|(_, is_dir)| *is_dir == suffix.is_empty())
        .filter_map(|(file, _)| Name::parse("name", file.strip_suffix(suffix)?).ok())
        .filter(|name| only.is_none_or(|o| o == name))
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Access, PutRequest, VersionMeta, Visibility};

    fn put(store: &Store, ns: &str, st: &str, key: &str, pack: Option<&str>) {
        let path = NounPath::parse(ns, st, key).unwrap();
        let req = PutRequest {
            expected_version: None,
            skip_unchanged: true,
            dry_run: false,
            media_type: "application/json".into(),
            noun_type: None,
            source_pack: pack.map(|p| Name::parse("pack", p).unwrap()),
        };
        store
            .put_noun::<Error>(
                &path,
                b"{}\n",
                &req,
                |_| true,
                |_| {
                    Ok(VersionMeta {
                        created_by: "k1".into(),
                        producer_surface: None,
                        visibility: Visibility::Public,
                        allowed_surfaces: Vec::new(),
                        owner: None,
                    })
                },
            )
            .unwrap();
    }

    fn keys(page: &Page<NounRef>) -> Vec<String> {
        page.items
            .iter()
            .map(|n| format!("{}/{}/{}", n.namespace, n.store, n.key))
            .collect()
    }

    #[test]
    fn nouns_list_in_name_order_page_by_page_within_a_namespace_or_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Access::Exclusive).unwrap();
        for (ns, st, key) in [
            ("b", "s", "k"),
            ("a", "t", "x"),
            ("a", "s", "a.b"),
            ("a", "s", "a"),
        ] {
            put(&store, ns, st, key, (key == "a").then_some("p"));
        }
        let all = |_: &Name| true;
        let list = |within: &Within, after: Option<&NounPath>, limit| {
            store.list_nouns(within, after, limit, &all, Some).unwrap()
        };
        let everything = list(&Within::default(), None, 10);
        assert_eq!(keys(&everything), ["a/s/a", "a/s/a.b", "a/t/x", "b/s/k"]);
        assert!(everything.next.is_none());
        let first = list(&Within::default(), None, 2);
        assert_eq!(keys(&first), ["a/s/a", "a/s/a.b"]);
        let rest = list(&Within::default(), first.next.as_ref(), 2);
        assert_eq!(keys(&rest), ["a/t/x", "b/s/k"]);
        assert!(
            list(&Within::default(), rest.next.as_ref(), 2)
                .items
                .is_empty()
        );
        let store_s = Within {
            namespace: None,
            store: Some(Name::parse("store", "s").unwrap()),
        };
        assert_eq!(
            keys(&list(&store_s, None, 10)),
            ["a/s/a", "a/s/a.b", "b/s/k"]
        );
        let hidden_a = store
            .list_nouns(&Within::default(), None, 10, &|ns| ns.as_str() != "a", Some)
            .unwrap();
        assert_eq!(keys(&hidden_a), ["b/s/k"]);
        let by_pack = store
            .list_nouns(&Within::default(), None, 10, &all, |n| {
                n.latest().source_pack.is_some().then_some(n)
            })
            .unwrap();
        assert_eq!(keys(&by_pack), ["a/s/a"]);
    }
}
