//! The body budget: how many bytes of request bodies all requests together
//! may hold at once (`[limits] max_body_bytes_in_flight`).
//!
//! A request reserves its body before holding it: all of a declared
//! `Content-Length` up front, or chunk by chunk as a chunked body arrives.
//! The reservation lives in the `Req` and is returned when the handler has
//! answered. A reservation the budget cannot cover is refused at once
//! (`503 busy` with `Retry-After`); nothing ever waits for budget, so a
//! slow client holds its own bytes and never the others' turn. Bodies are
//! counted in KiB, rounded up. Reading the body itself, its size limit and
//! its pauses, is `request.rs`'s.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes per unit of the budget.
const UNIT: u64 = 1024;

/// The shared body budget: cheap to clone (an `Arc`).
#[derive(Clone, Debug)]
pub struct BodyBudget {
    units: Arc<Semaphore>,
    total_units: u32,
    stall: Duration,
}

/// Bytes reserved for one request's body; returned to the budget on drop.
#[derive(Debug, Default)]
pub struct Reservation {
    permit: Option<OwnedSemaphorePermit>,
    units: u32,
}

/// The budget cannot cover a reservation right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy;

impl BodyBudget {
    /// A budget of `bytes`; a body that pauses for `stall` is refused.
    pub fn new(bytes: usize, stall: Duration) -> BodyBudget {
        let total_units = u32::try_from(bytes as u64 / UNIT).unwrap_or(u32::MAX);
        BodyBudget {
            units: Arc::new(Semaphore::new(total_units as usize)),
            total_units,
            stall,
        }
    }

    /// The whole budget in bytes: no one body may be larger.
    pub fn total_bytes(&self) -> u64 {
        u64::from(self.total_units) * UNIT
    }

    /// How long a body may pause between two chunks.
    pub fn stall(&self) -> Duration {
        self.stall
    }

    /// Bytes reserved by all requests now (for `/metrics`).
    pub fn held_bytes(&self) -> u64 {
        u64::from(self.total_units).saturating_sub(self.units.available_permits() as u64) * UNIT
    }

    /// Grows `held` to cover `bytes` in all, without waiting.
    pub fn cover(&self, held: &mut Reservation, bytes: u64) -> Result<(), Busy> {
        let want = u32::try_from(bytes.div_ceil(UNIT)).map_err(|_| Busy)?;
        let more = want.saturating_sub(held.units);
        if more == 0 {
            return Ok(());
        }
        let permit = self
            .units
            .clone()
            .try_acquire_many_owned(more)
            .map_err(|_| Busy)?;
        match &mut held.permit {
            Some(p) => p.merge(permit),
            None => held.permit = Some(permit),
        }
        held.units = want;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_refused_past_the_budget_and_returned_on_drop() {
        let b = BodyBudget::new(10 * 1024, Duration::from_secs(1));
        let mut first = Reservation::default();
        b.cover(&mut first, 6 * 1024).unwrap();
        let mut second = Reservation::default();
        assert_eq!(b.cover(&mut second, 5 * 1024), Err(Busy));
        b.cover(&mut second, 1).unwrap();
        b.cover(&mut second, 1024).unwrap();
        assert_eq!(
            b.held_bytes(),
            7 * 1024,
            "1 byte and 1024 bytes are one KiB"
        );
        b.cover(&mut second, 4 * 1024).unwrap();
        assert_eq!(b.cover(&mut second, 4 * 1024 + 1), Err(Busy));
        drop(first);
        b.cover(&mut second, 10 * 1024).unwrap();
        drop(second);
        assert_eq!(b.held_bytes(), 0);
        assert_eq!(b.total_bytes(), 10 * 1024);
    }
}
