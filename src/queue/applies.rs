//! Whether an event can be applied to a state: the transition it records
//! must be one the state machine allows from the state it meets (a claim
//! of a queued task, for its next attempt; a submit under the task's live
//! lease; a resume of a parked task; new ids unused), as `decide` checked
//! when the event was made. Replay checks every journal record with it, so
//! no record, however damaged, makes the daemon panic, and a record that
//! does not follow from what precedes it (one before it is gone, or it was
//! replaced) refuses the start instead of being applied to a state it
//! never met; the live path checks each event it commits, so no request
//! can either.

use super::event::Event;
use super::machine::State;
use super::task::{Task, TaskId, TaskState};

impl State {
    /// `Ok` when `apply(ev)` is sound on this state; else what is wrong.
    pub fn applies(&self, ev: &Event) -> Result<(), String> {
        let task = |id: &TaskId| {
            self.tasks
                .get(id)
                .ok_or_else(|| format!("it names task {id}, which does not exist"))
        };
        let new = |id: &TaskId| {
            if self.tasks.contains(id) {
                Err(format!("it creates task {id}, which already exists"))
            } else {
                Ok(())
            }
        };
        let meets = |t: &Task, what: &str, ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "it {what} {}, which is {} at attempt {}",
                    t.id,
                    t.state.as_str(),
                    t.attempt.0
                ))
            }
        };
        let claimed = |t: &Task| t.state == TaskState::Claimed && t.lease.is_some();
        match ev {
            Event::QueueSet { .. } => Ok(()),
            Event::Enqueued { task, .. } => {
                new(&task.id)?;
                match task
                    .spec
                    .depends_on
                    .iter()
                    .find(|u| !self.tasks.contains(u))
                {
                    Some(u) => Err(format!("it names upstream {u}, which does not exist")),
                    None => Ok(()),
                }
            }
            Event::Claimed { id, lease, .. } => {
                let t = task(id)?;
                let next = lease.attempt.0 == t.attempt.0 + 1;
                meets(t, "claims", t.state == TaskState::Queued && next)
            }
            Event::Heartbeat { id, .. } => {
                let t = task(id)?;
                meets(t, "extends the lease of", claimed(t))
            }
            Event::Released { id, attempt, .. } => {
                let t = task(id)?;
                meets(t, "releases", claimed(t) && t.attempt == *attempt)
            }
            Event::Submitted {
                id,
                ok: true,
                retry_at: Some(_),
                ..
            } => Err(format!("it retries {id} after a successful attempt")),
            Event::Submitted { id, lease_id, .. } => {
                let t = task(id)?;
                let held = t.lease.as_ref().is_some_and(|l| l.id == *lease_id);
                meets(
                    t,
                    "submits under a lease that does not hold",
                    claimed(t) && held,
                )
            }
            Event::Parked { id, .. } => {
                let t = task(id)?;
                meets(t, "parks", claimed(t))
            }
            Event::Resumed { id, .. } => {
                let t = task(id)?;
                meets(t, "resumes", t.state == TaskState::Parked)
            }
            Event::Split { id, children, .. } => {
                let t = task(id)?;
                meets(t, "splits", claimed(t))?;
                for (i, c) in children.iter().enumerate() {
                    new(&c.id)?;
                    if children[..i].iter().any(|o| o.id == c.id) {
                        return Err(format!("it creates task {} twice", c.id));
                    }
                }
                Ok(())
            }
            Event::Cancelled { id, .. } => {
                let t = task(id)?;
                meets(t, "cancels", !t.state.is_terminal())
            }
            Event::Retried { id, .. } => {
                let t = task(id)?;
                meets(t, "retries", t.state.is_retryable())
            }
            Event::Staged { id, attempt, .. } => {
                let t = task(id)?;
                let what = format!("stages a part for attempt {} of", attempt.0);
                meets(t, &what, claimed(t) && t.attempt == *attempt)
            }
        }
    }
}
