//! Shelves: the tasks grouped by everything a listing filters on and a
//! key's sight depends on (queue, namespace, kind, effect class, seed
//! pack, requester, envelope) and by state. Each shelf holds its tasks'
//! positions in creation order, so a page is a merge of the few shelves
//! a viewer may see, a count is a sum of shelf sizes, and neither walks
//! the table: the work of a query follows the shelves and the page, not
//! the number of tasks.
//!
//! Shelves are derived, like every index (`index`): `machine` moves a
//! task between them on each change of state and rebuilds them on
//! restore. A shelf that empties is dropped, so their number follows
//! the combinations in use, not the history.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use hashbrown::{Equivalent, HashMap};
use jiff::Timestamp;

use super::index::ReadyKey;
use super::task::{Task, TaskState};
use crate::store::envelope::{Envelope, TaskFacts};
use crate::store::{EffectClass, Name, Visibility};

/// What never changes about a task after enqueue and decides who sees
/// it and which listings select it: owned, sharing the task's names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sight {
    /// Its queue.
    pub queue: Name,
    /// Its namespace.
    pub namespace: Name,
    /// Its kind.
    pub kind: Name,
    /// Its effect class.
    pub effect_class: EffectClass,
    /// The seed pack whose import enqueued it.
    pub source_pack: Option<Name>,
    /// The key that enqueued it (the owner of a private task).
    pub requester: Name,
    /// Its visibility.
    pub visibility: Visibility,
    /// The surface that produced it.
    pub producer_surface: Option<Name>,
    /// The extra surfaces of `allowlist_surfaces`.
    pub allowed_surfaces: Box<[Name]>,
}

impl Sight {
    /// A task's sight.
    pub fn of(t: &Task) -> Sight {
        let s = &t.spec;
        Sight {
            queue: s.queue.clone(),
            namespace: s.namespace.clone(),
            kind: s.kind.clone(),
            effect_class: s.effect_class,
            source_pack: t.source_pack.clone(),
            requester: t.requester.clone(),
            visibility: s.visibility_scope,
            producer_surface: s.producer_surface.clone(),
            allowed_surfaces: s.allowed_surfaces.clone(),
        }
    }

    /// What the access rules need to know (`server`: whether the queue
    /// is a server queue).
    pub fn facts(&self, server: bool) -> TaskFacts<'_> {
        TaskFacts {
            namespace: &self.namespace,
            queue: &self.queue,
            server_queue: server,
            kind: &self.kind,
            effect_class: self.effect_class,
            envelope: Envelope {
                visibility: self.visibility,
                owner: Some(self.requester.as_str()),
                producer_surface: self.producer_surface.as_ref(),
                allowed_surfaces: &self.allowed_surfaces,
                quarantined: false,
            },
        }
    }
}

/// One shelf's tasks: positions in creation order, and for queued tasks
/// how many were queued at each instant (the oldest wait). Tasks queued
/// together (a batch) share one instant, so that map stays small.
#[derive(Debug, Default)]
struct Shelved {
    at: BTreeSet<u32>,
    since: BTreeMap<Timestamp, u32>,
}

/// The tasks of one sight: a shelf per state, and the queued ones that
/// are ready now, in claim order.
#[derive(Debug, Default)]
struct Row {
    states: [Shelved; TaskState::ALL.len()],
    ready: BTreeSet<ReadyKey>,
}

impl Row {
    fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.states.iter().all(|s| s.at.is_empty())
    }
}

/// A task's sight as the task holds it: borrowed fields in `Sight`'s
/// order, so it hashes as the owned [`Sight`] does and a lookup copies
/// nothing.
#[derive(Hash)]
struct SightRef<'a> {
    queue: &'a Name,
    namespace: &'a Name,
    kind: &'a Name,
    effect_class: EffectClass,
    source_pack: Option<&'a Name>,
    requester: &'a Name,
    visibility: Visibility,
    producer_surface: Option<&'a Name>,
    allowed_surfaces: &'a [Name],
}

impl<'a> SightRef<'a> {
    fn of(t: &'a Task) -> SightRef<'a> {
        let s = &t.spec;
        SightRef {
            queue: &s.queue,
            namespace: &s.namespace,
            kind: &s.kind,
            effect_class: s.effect_class,
            source_pack: t.source_pack.as_ref(),
            requester: &t.requester,
            visibility: s.visibility_scope,
            producer_surface: s.producer_surface.as_ref(),
            allowed_surfaces: &s.allowed_surfaces,
        }
    }
}

impl Equivalent<Sight> for SightRef<'_> {
    fn equivalent(&self, s: &Sight) -> bool {
        *self.queue == s.queue
            && *self.namespace == s.namespace
            && *self.kind == s.kind
            && self.effect_class == s.effect_class
            && self.source_pack == s.source_pack.as_ref()
            && *self.requester == s.requester
            && self.visibility == s.visibility
            && self.producer_surface == s.producer_surface.as_ref()
            && *self.allowed_surfaces == *s.allowed_surfaces
    }
}

/// Every shelf and ready set, by sight.
#[derive(Debug, Default)]
pub struct Shelves {
    rows: HashMap<Sight, Row>,
}

/// A shelf as a query sees it: its sight, its state, how many tasks.
#[derive(Clone, Copy, Debug)]
pub struct ShelfView<'a> {
    /// Its sight.
    pub sight: &'a Sight,
    /// Its state.
    pub state: TaskState,
    /// Its tasks.
    pub len: usize,
}

fn slot(s: TaskState) -> usize {
    TaskState::ALL
        .iter()
        .position(|x| *x == s)
        .expect("every state is listed")
}

impl Shelves {
    fn row_mut(&mut self, t: &Task) -> &mut Row {
        let key = SightRef::of(t);
        if !self.rows.contains_key(&key) {
            self.rows.insert(Sight::of(t), Row::default());
        }
        self.rows.get_mut(&key).expect("just made")
    }

    /// Changes the row of `t`'s sight, if there is one, and drops it once
    /// nothing is left in it.
    fn change(&mut self, t: &Task, f: impl FnOnce(&mut Row)) {
        let key = SightRef::of(t);
        let emptied = self.rows.get_mut(&key).is_some_and(|row| {
            f(row);
            row.is_empty()
        });
        if emptied {
            self.rows.remove(&key);
        }
    }

    /// Builds the shelves of a restored state in one pass: each task (at
    /// its position, in creation order) on the shelf of its state, and in
    /// its sight's ready set when it has a key there. Each set is built
    /// from its sorted entries at once, so its nodes are full (filed one
    /// by one in order, they would be half empty).
    pub fn build<'a>(tasks: impl Iterator<Item = (&'a Task, u32, Option<ReadyKey>)>) -> Shelves {
        #[derive(Default)]
        struct Parts {
            at: [Vec<u32>; TaskState::ALL.len()],
            since: BTreeMap<Timestamp, u32>,
            ready: Vec<ReadyKey>,
        }
        let mut parts: HashMap<Sight, Parts> = HashMap::new();
        for (t, pos, ready) in tasks {
            let key = SightRef::of(t);
            if !parts.contains_key(&key) {
                parts.insert(Sight::of(t), Parts::default());
            }
            let p = parts.get_mut(&key).expect("just made");
            p.at[slot(t.state)].push(pos);
            if t.state == TaskState::Queued {
                *p.since.entry(t.updated_at).or_default() += 1;
            }
            p.ready.extend(ready);
        }
        let rows = parts
            .into_iter()
            .map(|(sight, Parts { at, since, ready })| {
                let mut states = at.map(|at| Shelved {
                    at: at.into_iter().collect(),
                    since: BTreeMap::new(),
                });
                states[slot(TaskState::Queued)].since = since;
                let ready = ready.into_iter().collect();
                (sight, Row { states, ready })
            })
            .collect();
        Shelves { rows }
    }

    /// Files task `t` (at `pos` in creation order) on the shelf of its
    /// state, as of `t.updated_at`.
    pub fn put(&mut self, t: &Task, pos: u32) {
        let shelf = &mut self.row_mut(t).states[slot(t.state)];
        if shelf.at.insert(pos) && t.state == TaskState::Queued {
            *shelf.since.entry(t.updated_at).or_default() += 1;
        }
    }

    /// Takes task `t` (at `pos`) off the shelf of its state, which it
    /// entered at `t.updated_at`.
    pub fn take(&mut self, t: &Task, pos: u32) {
        self.change(t, |row| {
            let shelf = &mut row.states[slot(t.state)];
            if shelf.at.remove(&pos)
                && let Some(n) = shelf.since.get_mut(&t.updated_at)
            {
                *n -= 1;
                if *n == 0 {
                    shelf.since.remove(&t.updated_at);
                }
            }
        });
    }

    /// Files queued task `t` as ready to claim, at `key`.
    pub fn ready(&mut self, t: &Task, key: ReadyKey) {
        self.row_mut(t).ready.insert(key);
    }

    /// Takes task `t` out of the ready set (a no-op if it is not in it).
    pub fn unready(&mut self, t: &Task, key: ReadyKey) {
        self.change(t, |row| {
            row.ready.remove(&key);
        });
    }

    /// Each sight's ready tasks, in claim order.
    pub fn ready_sets(&self) -> impl Iterator<Item = (&Sight, &BTreeSet<ReadyKey>)> {
        self.rows
            .iter()
            .filter(|(_, r)| !r.ready.is_empty())
            .map(|(s, r)| (s, &r.ready))
    }

    /// Every shelf that holds a task.
    pub fn all(&self) -> impl Iterator<Item = ShelfView<'_>> {
        self.shelves().map(|(v, _)| v)
    }

    fn shelves(&self) -> impl Iterator<Item = (ShelfView<'_>, &Shelved)> {
        self.rows.iter().flat_map(|(sight, row)| {
            TaskState::ALL
                .iter()
                .zip(&row.states)
                .filter(|(_, s)| !s.at.is_empty())
                .map(move |(state, s)| {
                    let v = ShelfView {
                        sight,
                        state: *state,
                        len: s.at.len(),
                    };
                    (v, s)
                })
        })
    }

    /// How many sights hold tasks (each has a shelf per state).
    #[cfg(test)]
    pub fn sights(&self) -> usize {
        self.rows.len()
    }

    /// The positions after `after` on the shelves `keep` selects, merged
    /// in creation order; the iterator reads each position once, when it
    /// is taken.
    pub fn positions<'a>(
        &'a self,
        keep: impl Fn(ShelfView<'_>) -> bool,
        after: Option<u32>,
    ) -> Merged<'a> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut runs: Vec<_> = self
            .shelves()
            .filter(|(v, _)| keep(*v))
            .map(|(_, s)| s.at.range((from, Bound::Unbounded)).peekable())
            .collect();
        runs.retain_mut(|r| r.peek().is_some());
        Merged { runs }
    }

    /// Every shelf that holds a task, with when its oldest task was
    /// queued (a queued shelf).
    pub fn all_since(&self) -> impl Iterator<Item = (ShelfView<'_>, Option<Timestamp>)> {
        self.shelves()
            .map(|(v, s)| (v, s.since.first_key_value().map(|(t, _)| *t)))
    }
}

#[cfg(test)]
impl Shelves {
    /// Every shelf and ready set as sorted text, to compare two states'.
    pub fn dump(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .shelves()
            .map(|(v, s)| {
                let since: Vec<_> = s.since.iter().map(|(t, n)| format!("{t}x{n}")).collect();
                format!("{:?} {:?}: {:?} {since:?}", v.sight, v.state, s.at)
            })
            .chain(
                self.ready_sets()
                    .map(|(sight, set)| format!("{sight:?} ready: {set:?}")),
            )
            .collect();
        out.sort();
        out
    }
}

/// Positions from several shelves, merged in ascending order.
pub struct Merged<'a> {
    runs: Vec<std::iter::Peekable<std::collections::btree_set::Range<'a, u32>>>,
}

impl Iterator for Merged<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let (i, pos) = self
            .runs
            .iter_mut()
            .enumerate()
            .filter_map(|(i, r)| r.peek().map(|p| (i, **p)))
            .min_by_key(|(_, p)| *p)?;
        self.runs[i].next();
        if self.runs[i].peek().is_none() {
            self.runs.retain_mut(|r| r.peek().is_some());
        }
        Some(pos)
    }
}
