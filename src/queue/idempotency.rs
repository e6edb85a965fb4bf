//! The idempotency index: (namespace, requester key, idempotency key) →
//! the task enqueued under it. Keys are scoped per requesting key, so one
//! key's idempotency key never reveals another key's task.
//!
//! The index holds task ids only: an entry's key and fingerprint are read
//! from its task, so a million keyed tasks cost a slot of 9 bytes each
//! instead of a copy of every key.

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

use super::machine::State;
use super::table::TaskTable;
use super::task::{Task, TaskId};
use crate::store::{Name, Sha256};

/// Keyed tasks by (namespace, requester, idempotency key).
#[derive(Debug, Default)]
pub struct Idempotency {
    table: HashTable<TaskId>,
    hasher: RandomState,
}

/// A task's key as filed.
type Key<'a> = (&'a str, &'a str, &'a str);

/// The key a task is filed under: it has an idempotency key and a
/// fingerprint.
fn key_of(t: &Task) -> Option<Key<'_>> {
    t.fingerprint?;
    Some((
        t.spec.namespace.as_str(),
        t.requester.as_str(),
        t.spec.idempotency_key.as_deref()?,
    ))
}

impl Idempotency {
    /// The task filed under the key.
    pub fn get(
        &self,
        tasks: &TaskTable,
        namespace: &Name,
        requester: &Name,
        key: &str,
    ) -> Option<TaskId> {
        let wanted = (namespace.as_str(), requester.as_str(), key);
        self.table
            .find(self.hasher.hash_one(wanted), |id| {
                key_of(&tasks[id]) == Some(wanted)
            })
            .copied()
    }

    /// Files task `id` (already in `tasks`) under its key, if it has one,
    /// in place of any task filed under the same key.
    pub fn insert(&mut self, tasks: &TaskTable, id: TaskId) {
        let Some(key) = key_of(&tasks[&id]) else {
            return;
        };
        let Idempotency { table, hasher } = self;
        let rehash =
            |other: &TaskId| hasher.hash_one(key_of(&tasks[other]).expect("filed tasks have keys"));
        match table.entry(
            hasher.hash_one(key),
            |other| key_of(&tasks[other]) == Some(key),
            rehash,
        ) {
            Entry::Occupied(mut e) => *e.get_mut() = id,
            Entry::Vacant(e) => {
                e.insert(id);
            }
        }
    }

    /// Every filed task, in no order.
    pub fn ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.table.iter().copied()
    }
}

impl State {
    /// The task enqueued by `requester` in `namespace` under the
    /// idempotency key, and its spec's fingerprint.
    pub fn idempotent(
        &self,
        namespace: &Name,
        requester: &Name,
        key: &str,
    ) -> Option<(&TaskId, &Sha256)> {
        let id = self
            .index
            .idempotency
            .get(&self.tasks, namespace, requester, key)?;
        let t = &self.tasks[&id];
        Some((&t.id, t.fingerprint.as_ref()?))
    }
}
