//! Leases over time: the sweeper ends lapsed leases (the attempt counts,
//! backoff applies, attempts may run out) and makes delayed retries ready.
//! A lease id itself is minted in `task::new_lease_id`; fencing (a call
//! naming an older lease changes nothing) is `State::held` in `decide`.

use std::time::Duration;

use jiff::Timestamp;

use super::{Event, JournalError as Error, Queue};

/// How often lapsed leases and due retries are looked for.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

impl Queue {
    /// One sweep: lapsed leases end (counting the attempt), due retries
    /// become ready. Returns how many leases expired.
    pub fn sweep(&self) -> Result<usize, Error> {
        let now = Timestamp::now();
        let (promoted, expired) = {
            let mut st = self.lock();
            let promoted = st.promote_due(now);
            let events = st.decide_expiries(now);
            for ev in &events {
                if let Event::Released { id, attempt, .. } = ev {
                    tracing::info!(task = %id, attempt = attempt.0, "lease expired");
                }
                self.commit(&mut st, ev)?;
            }
            (promoted, events.len())
        };
        if promoted || expired > 0 {
            self.inner.ready.notify_waiters();
        }
        Ok(expired)
    }

    /// Sweeps every 100 ms until `stop` resolves.
    pub async fn sweep_until(&self, stop: impl std::future::Future<Output = ()>) {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = tick.tick() => match self.sweep() {
                    Ok(_) => {}
                    // A full disk refuses the expiry before it is applied;
                    // the next sweep tries again (the store logs the state).
                    Err(Error::Store(crate::store::Error::OutOfSpace { .. })) => {}
                    // A journal failure is final until restart: say so
                    // once, then stop.
                    Err(e) => {
                        tracing::error!(error = %e, "queue sweeps stopped; leases will not expire until restart");
                        return;
                    }
                },
                () = &mut stop => return,
            }
        }
    }
}
