//! `Names`: one shared copy of each name that tasks repeat (namespace,
//! queue, kind, surfaces, requester, lease holder), so a million tasks on
//! one queue hold its name once instead of a million times. Names are
//! never dropped from the set: tasks are never removed either.

use hashbrown::HashSet;

use super::spec::TaskSpec;
use super::task::Task;
use crate::store::Name;

/// Names looked up last, compared before hashing (tasks in a row mostly
/// repeat the same few).
const RECENT: usize = 8;

/// The shared names of a state.
#[derive(Debug, Default)]
pub struct Names {
    all: HashSet<Name>,
    recent: Vec<Name>,
}

impl Names {
    /// Replaces `name` with its shared copy (which it becomes if it is new).
    pub fn share(&mut self, name: &mut Name) {
        if let Some(shared) = self.recent.iter().find(|r| r.as_str() == name.as_str()) {
            *name = shared.clone();
            return;
        }
        match self.all.get(name) {
            Some(shared) => *name = shared.clone(),
            None => {
                self.all.insert(name.clone());
            }
        }
        if self.recent.len() == RECENT {
            self.recent.remove(0);
        }
        self.recent.push(name.clone());
    }

    /// Shares the names of a spec.
    pub fn share_spec(&mut self, spec: &mut TaskSpec) {
        self.share(&mut spec.namespace);
        self.share(&mut spec.queue);
        self.share(&mut spec.kind);
        if let Some(s) = &mut spec.producer_surface {
            self.share(s);
        }
        for s in &mut spec.allowed_surfaces {
            self.share(s);
        }
    }

    /// Shares the names of a task.
    pub fn share_task(&mut self, task: &mut Task) {
        self.share_spec(std::sync::Arc::make_mut(&mut task.spec));
        self.share(&mut task.requester);
        if let Some(l) = &mut task.lease {
            self.share(&mut l.holder);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_names_end_up_sharing_one_copy() {
        let mut names = Names::default();
        let mut a = Name::parse("queue", "work.q").unwrap();
        let mut b = Name::parse("queue", "work.q").unwrap();
        let mut c = Name::parse("queue", "other.q").unwrap();
        names.share(&mut a);
        names.share(&mut b);
        names.share(&mut c);
        assert_eq!(a, b);
        assert!(std::ptr::eq(a.as_str(), b.as_str()), "one copy");
        assert!(!std::ptr::eq(a.as_str(), c.as_str()));
    }
}
