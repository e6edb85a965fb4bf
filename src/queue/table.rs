//! `TaskTable`: every task, in the order it was created, found by its id
//! through a map from id to position. Task ids are random (they say
//! nothing of how many tasks others created), positions dense, so the
//! tasks themselves are a vector: id-to-task is one hash lookup,
//! iteration in creation order serves listings and snapshots, and a
//! million tasks cost no per-entry map of whole tasks.
//!
//! The vector is cut into chunks of [`CHUNK`] tasks, each behind an `Arc`,
//! so [`TaskTable::frozen`] costs one pointer per chunk and shares the
//! tasks: a fold takes such a copy of the live table's tasks and writes it
//! out while the queue goes on. Changing a task in a shared chunk copies
//! that chunk first (`Arc::make_mut`), so the frozen copy keeps what it
//! saw and only the chunks changed meanwhile exist twice.

use std::ops::Index;
use std::sync::Arc;

use hashbrown::HashMap;

use super::task::{Task, TaskId};

/// Tasks per chunk.
pub const CHUNK: usize = 1024;

/// Tasks in creation order, by id.
#[derive(Debug, Default, Clone)]
pub struct TaskTable {
    chunks: Vec<Arc<Vec<Task>>>,
    /// Each task's position in `chunks` (its creation order).
    at: HashMap<TaskId, u32>,
    len: usize,
    /// Tasks read so far (tests count what a query reads).
    #[cfg(test)]
    reads: std::cell::Cell<usize>,
}

/// The tasks of a table at one moment, in creation order, sharing their
/// chunks with it (for a snapshot written beside the live queue).
#[derive(Debug, Default, Clone)]
pub struct Frozen {
    chunks: Vec<Arc<Vec<Task>>>,
    len: usize,
}

impl Frozen {
    /// Every task, a chunk at a time.
    pub fn chunks(&self) -> impl Iterator<Item = &[Task]> {
        self.chunks.iter().map(|c| c.as_slice())
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

impl TaskTable {
    /// An empty table with room for `n` tasks.
    pub fn with_capacity(n: usize) -> TaskTable {
        TaskTable {
            chunks: Vec::with_capacity(n.div_ceil(CHUNK)),
            at: HashMap::with_capacity(n),
            len: 0,
            #[cfg(test)]
            reads: Default::default(),
        }
    }

    fn slot(&self, id: &TaskId) -> Option<usize> {
        self.at.get(id).map(|&at| at as usize)
    }

    /// Where the task stands in creation order (0 for the first), which
    /// is also its claim order among tasks of one priority.
    pub fn position(&self, id: &TaskId) -> Option<u32> {
        self.at.get(id).copied()
    }

    /// The task at `pos` in creation order.
    pub fn at(&self, pos: u32) -> Option<&Task> {
        let at = pos as usize;
        self.read(1);
        self.chunks.get(at / CHUNK)?.get(at % CHUNK)
    }

    /// Whether a task has this id.
    pub fn contains(&self, id: &TaskId) -> bool {
        self.at.contains_key(id)
    }

    /// The tasks as they are now, sharing their chunks (one pointer each).
    pub fn frozen(&self) -> Frozen {
        Frozen {
            chunks: self.chunks.clone(),
            len: self.len,
        }
    }

    /// The task with this id.
    pub fn get(&self, id: &TaskId) -> Option<&Task> {
        let at = self.slot(id)?;
        self.read(1);
        self.chunks.get(at / CHUNK)?.get(at % CHUNK)
    }

    /// Counts `n` tasks read (in tests only).
    fn read(&self, n: usize) {
        #[cfg(test)]
        self.reads.set(self.reads.get() + n);
        #[cfg(not(test))]
        let _ = n;
    }

    /// How many tasks were read since the last call (tests only).
    #[cfg(test)]
    pub fn reads(&self) -> usize {
        self.reads.replace(0)
    }

    /// The task with this id, to change it (its chunk is copied first
    /// when a clone of the table shares it).
    pub fn get_mut(&mut self, id: &TaskId) -> Option<&mut Task> {
        let at = self.slot(id)?;
        Arc::make_mut(self.chunks.get_mut(at / CHUNK)?).get_mut(at % CHUNK)
    }

    /// Adds a task after every other; its id must be new.
    pub fn push(&mut self, task: Task) {
        let at = u32::try_from(self.len).expect("fewer than 2^32 tasks");
        let fresh = self.at.insert(task.id, at).is_none();
        assert!(fresh, "task ids are unique");
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

    /// Every task, in creation order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Task> {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .inspect(|_| self.read(1))
    }

    /// Tasks created after `cursor` (all when `None`; none after a task
    /// that does not exist), in creation order.
    pub fn after(&self, cursor: Option<TaskId>) -> impl Iterator<Item = &Task> {
        let start = match cursor {
            None => 0,
            Some(c) => self.slot(&c).map_or(self.len, |at| at + 1),
        };
        let (first, skip) = (start / CHUNK, start % CHUNK);
        self.chunks
            .get(first..)
            .unwrap_or_default()
            .iter()
            .flat_map(|c| c.iter())
            .skip(skip)
            .inspect(|_| self.read(1))
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
