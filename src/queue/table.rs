//! `TaskTable`: every task, indexed by its id. Ids are dense (1, 2, 3, …,
//! assigned in journal order and never removed), so the table is a vector:
//! constant-time lookup, id-ordered iteration for listings and snapshots,
//! and no per-entry map overhead with a million tasks.

use std::ops::Index;

use super::task::{Task, TaskId};

/// Tasks by id.
#[derive(Debug, Default, Clone)]
pub struct TaskTable(Vec<Task>);

fn slot(id: TaskId) -> Option<usize> {
    usize::try_from(id.0.checked_sub(1)?).ok()
}

impl TaskTable {
    /// An empty table with room for `n` tasks.
    pub fn with_capacity(n: usize) -> TaskTable {
        TaskTable(Vec::with_capacity(n))
    }

    /// Every task, in id order, as a slice.
    pub fn as_slice(&self) -> &[Task] {
        &self.0
    }

    /// The task with this id.
    pub fn get(&self, id: &TaskId) -> Option<&Task> {
        self.0.get(slot(*id)?)
    }

    /// The task with this id, to change it.
    pub fn get_mut(&mut self, id: &TaskId) -> Option<&mut Task> {
        self.0.get_mut(slot(*id)?)
    }

    /// Adds the next task; its id must be the next one.
    pub fn push(&mut self, task: Task) {
        assert_eq!(
            task.id.0,
            self.0.len() as u64 + 1,
            "task ids are dense and in order"
        );
        self.0.push(task);
    }

    /// Every task, in id order.
    pub fn values(&self) -> std::slice::Iter<'_, Task> {
        self.0.iter()
    }

    /// Tasks after `cursor` (all when `None`), in id order.
    pub fn after(&self, cursor: Option<TaskId>) -> impl Iterator<Item = &Task> {
        let start = cursor.map_or(0, |c| usize::try_from(c.0).unwrap_or(usize::MAX));
        self.0
            .get(start.min(self.0.len())..)
            .unwrap_or_default()
            .iter()
    }

    /// How many tasks.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Index<&TaskId> for TaskTable {
    type Output = Task;

    fn index(&self, id: &TaskId) -> &Task {
        self.get(id).expect("a known task id")
    }
}

impl FromIterator<Task> for TaskTable {
    fn from_iter<I: IntoIterator<Item = Task>>(iter: I) -> TaskTable {
        let mut t = TaskTable::default();
        for task in iter {
            t.push(task);
        }
        t
    }
}
