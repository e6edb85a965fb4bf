//! `TaskTable`: every task, indexed by its id. Ids are dense (1, 2, 3, …,
//! assigned in journal order and never removed), so the table is a vector:
//! constant-time lookup, id-ordered iteration for listings and snapshots,
//! and no per-entry map overhead with a million tasks.
//!
//! The vector is cut into chunks of [`CHUNK`] tasks, each behind an `Arc`,
//! so a clone of the table costs one pointer per chunk and shares the
//! tasks: a fold takes such a clone of the live table and writes it out
//! while the queue goes on. Changing a task in a shared chunk copies that
//! chunk first (`Arc::make_mut`), so the clone keeps what it saw and only
//! the chunks changed meanwhile exist twice.

use std::ops::Index;
use std::sync::Arc;

use super::task::{Task, TaskId};

/// Tasks per chunk.
pub const CHUNK: usize = 1024;

/// Tasks by id.
#[derive(Debug, Default, Clone)]
pub struct TaskTable {
    chunks: Vec<Arc<Vec<Task>>>,
    len: usize,
}

fn slot(id: TaskId) -> Option<usize> {
    usize::try_from(id.0.checked_sub(1)?).ok()
}

impl TaskTable {
    /// An empty table with room for `n` tasks' chunk pointers.
    pub fn with_capacity(n: usize) -> TaskTable {
        TaskTable {
            chunks: Vec::with_capacity(n.div_ceil(CHUNK)),
            len: 0,
        }
    }

    /// Every task, in id order, a chunk at a time.
    pub fn chunks(&self) -> impl Iterator<Item = &[Task]> {
        self.chunks.iter().map(|c| c.as_slice())
    }

    /// The task with this id.
    pub fn get(&self, id: &TaskId) -> Option<&Task> {
        let at = slot(*id)?;
        self.chunks.get(at / CHUNK)?.get(at % CHUNK)
    }

    /// The task with this id, to change it (its chunk is copied first
    /// when a clone of the table shares it).
    pub fn get_mut(&mut self, id: &TaskId) -> Option<&mut Task> {
        let at = slot(*id)?;
        Arc::make_mut(self.chunks.get_mut(at / CHUNK)?).get_mut(at % CHUNK)
    }

    /// Adds the next task; its id must be the next one.
    pub fn push(&mut self, task: Task) {
        assert_eq!(
            task.id.0,
            self.len as u64 + 1,
            "task ids are dense and in order"
        );
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => Arc::make_mut(last).push(task),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(task);
                self.chunks.push(Arc::new(chunk));
            }
        }
        self.len += 1;
    }

    /// Every task, in id order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Task> {
        self.chunks.iter().flat_map(|c| c.iter())
    }

    /// Tasks after `cursor` (all when `None`), in id order.
    pub fn after(&self, cursor: Option<TaskId>) -> impl Iterator<Item = &Task> {
        let start = cursor
            .map_or(0, |c| usize::try_from(c.0).unwrap_or(usize::MAX))
            .min(self.len);
        let (first, skip) = (start / CHUNK, start % CHUNK);
        self.chunks
            .get(first..)
            .unwrap_or_default()
            .iter()
            .flat_map(|c| c.iter())
            .skip(skip)
    }

    /// How many tasks.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
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
