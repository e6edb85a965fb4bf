//! Noun refs kept outside the root: with `--objects-url`, the version
//! lists of every noun live in the database several daemons share
//! (`database::nouns`), so that any daemon serves any noun and a key's
//! compare-and-swap has one winner across all of them. The store asks a
//! [`RefTable`] where it would read or swap a ref file; the decisions (the
//! access rule, `expected_version`, `skip_unchanged`, hidden versions) are
//! the same code on either side.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use super::listing::Within;
use super::noun::{NounRef, VersionEntry};
use super::{Error, NounPath};

/// One change of a noun's ref.
#[derive(Clone, Debug, PartialEq)]
pub enum RefChange {
    /// A new latest version (version 1 makes the noun).
    Append(Box<VersionEntry>),
    /// Sets or clears the quarantine flag of every version.
    Quarantine(bool),
}

/// What a ref change is decided on: the noun's ref as it is now (`None`
/// when it does not exist), locked until the change is made or refused.
pub type Decide<'a> = dyn FnMut(Option<&NounRef>) -> Result<Option<RefChange>, Error> + 'a;

/// Work that a ref change runs beside its own (a new version's object
/// going up to the bucket): the change is made only once it has
/// succeeded, and refused with its error when it failed.
pub type Beside = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// Where noun refs live when not in the root's ref files.
pub trait RefTable: Send + Sync + fmt::Debug {
    /// The ref of `path`; `None` when the noun does not exist.
    fn read(&self, path: &NounPath) -> Result<Option<NounRef>, Error>;

    /// Locks `path`'s ref against every other change (on any daemon),
    /// calls `decide` once with it, and makes the change `decide` returns
    /// before the lock is let go, with the event that tells every
    /// daemon's stream of it; durable when this returns `Ok`. Nothing is
    /// changed when `decide` returns `None` or an error. `beside` runs
    /// while the ref is locked and read; the change waits for it.
    fn change(
        &self,
        path: &NounPath,
        decide: &mut Decide<'_>,
        beside: Option<Beside>,
    ) -> Result<(), Error>;

    /// Up to `limit` refs after `after` within `within`, in (namespace,
    /// store, key) order.
    fn list(
        &self,
        within: &Within,
        after: Option<&NounPath>,
        limit: usize,
    ) -> Result<Vec<NounRef>, Error>;
}
