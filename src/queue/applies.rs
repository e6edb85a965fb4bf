//! Whether an event can be applied to a state: the preconditions
//! `State::apply` relies on (the tasks it names exist, new ids are unused,
//! a heartbeat has a lease to extend). Replay checks every journal record
//! with it, so no record, however damaged, makes the daemon panic; the
//! live path checks each event it commits, so no request can either.

use super::event::Event;
use super::machine::State;
use super::task::TaskId;

impl State {
    /// `Ok` when `apply(ev)` is sound on this state; else what is wrong.
    pub fn applies(&self, ev: &Event) -> Result<(), String> {
        let exists = |id: &TaskId| {
            self.tasks
                .get(id)
                .map(|_| ())
                .ok_or_else(|| format!("it names task {id}, which does not exist"))
        };
        let new = |id: &TaskId| {
            if self.tasks.contains(id) {
                Err(format!("it creates task {id}, which already exists"))
            } else {
                Ok(())
            }
        };
        match ev {
            Event::QueueSet { .. } => Ok(()),
            Event::Enqueued { task, .. } => new(&task.id),
            Event::Heartbeat { id, .. } => match self.tasks.get(id) {
                Some(t) if t.lease.is_some() => Ok(()),
                Some(_) => Err(format!("it extends a lease {id} does not have")),
                None => exists(id),
            },
            Event::Split { id, children, .. } => {
                exists(id)?;
                for (i, c) in children.iter().enumerate() {
                    new(&c.id)?;
                    if children[..i].iter().any(|o| o.id == c.id) {
                        return Err(format!("it creates task {} twice", c.id));
                    }
                }
                Ok(())
            }
            Event::Submitted {
                id,
                ok: true,
                retry_at: Some(_),
                ..
            } => Err(format!("it retries {id} after a successful attempt")),
            Event::Retried { id, .. } => match self.tasks.get(id) {
                Some(t) if t.state.is_retryable() => Ok(()),
                Some(t) => Err(format!("it retries {id}, which is {}", t.state.as_str())),
                None => exists(id),
            },
            Event::Claimed { id, .. }
            | Event::Released { id, .. }
            | Event::Submitted { id, .. }
            | Event::Parked { id, .. }
            | Event::Resumed { id, .. }
            | Event::Cancelled { id, .. }
            | Event::Staged { id, .. } => exists(id),
        }
    }
}
