//! The idempotency index: (namespace, requester key, idempotency key) →
//! the task enqueued under it. Keys are scoped per requesting key, so one
//! key's idempotency key never reveals another key's task.
//!
//! The index holds task ids and key hashes only: an entry's key and
//! fingerprint are read from its task, so a keyed task costs a slot of 17
//! bytes instead of a copy of its key; the hash is kept so growing the
//! table need not visit every task again.

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
    /// (hash of the key, task).
    table: HashTable<(u64, TaskId)>,
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
        let hash = self.hasher.hash_one(wanted);
        self.table
            .find(hash, |(h, id)| {
                *h == hash && key_of(&tasks[id]) == Some(wanted)
            })
            .map(|(_, id)| *id)
    }

    /// Files task `id` (already in `tasks`) under its key, if it has one,
    /// in place of any task filed under the same key.
    pub fn insert(&mut self, tasks: &TaskTable, id: TaskId) {
        let Some(key) = key_of(&tasks[&id]) else {
            return;
        };
        let hash = self.hasher.hash_one(key);
        match self.table.entry(
            hash,
            |(h, other)| *h == hash && key_of(&tasks[other]) == Some(key),
            |(h, _)| *h,
        ) {
            Entry::Occupied(mut e) => e.get_mut().1 = id,
            Entry::Vacant(e) => {
                e.insert((hash, id));
            }
        }
    }

    /// Every filed task, in no order.
    #[cfg(test)]
    pub fn ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.table.iter().map(|(_, id)| *id)
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
