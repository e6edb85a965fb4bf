//! Whether an event can be applied to a state: the preconditions
//! `State::apply` relies on (the tasks it names exist, new ids come next,
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
        let next = self.tasks.len() as u64 + 1;
        match ev {
            Event::QueueSet { .. } => Ok(()),
            Event::Enqueued { task, .. } if task.id.0 == next => Ok(()),
            Event::Enqueued { task, .. } => Err(format!(
                "it enqueues {} where the next task id is t{next}",
                task.id
            )),
            Event::Heartbeat { id, .. } => match self.tasks.get(id) {
                Some(t) if t.lease.is_some() => Ok(()),
                Some(_) => Err(format!("it extends a lease {id} does not have")),
                None => exists(id),
            },
            Event::Split { id, children, .. } => {
                exists(id)?;
                for (i, c) in children.iter().enumerate() {
                    if c.id.0 != next + i as u64 {
                        return Err(format!(
                            "child {} of {id} is not the next task id t{}",
                            c.id,
                            next + i as u64
                        ));
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
