//! The body budget: how many bytes of request bodies all requests together
//! may hold at once (`[limits] max_body_bytes_in_flight`).
//!
//! A request reserves its body before holding it: all of a declared
//! `Content-Length` up front, or chunk by chunk as a chunked body arrives.
//! The reservation lives in the `Req` and is returned when the handler has
//! answered. A reservation the budget cannot cover is refused at once
//! (`503 busy` with `Retry-After`); nothing ever waits for budget, so a
//! slow client holds its own bytes and never the others' turn. Bodies are
//! counted in KiB, rounded up. A JSON body's reservation then grows by
//! what parsing it may take ([`parsed_cost`]), held until the handler has
//! answered like the bytes. Reading the body itself, its size limit and
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

/// Bytes a JSON value's slot may take once parsed: a `serde_json::Value`
/// (32 bytes) in a `Vec` grown by doubling, or an entry of a `BTreeMap`
/// node filled to its minimum of 5 (11 keys and values in about 630 bytes).
const SLOT: u64 = 128;
/// Bytes an object may take besides its entries: one whole B-tree node,
/// even for one entry.
const OBJECT: u64 = 640;
/// Bytes a string takes besides its text: a `String` header and the
/// allocator's rounding.
const STRING: u64 = 40;

/// An upper bound of the memory parsing `text` as a `serde_json::Value`
/// takes besides the text (what a noun body, an MCP message or a worker's
/// JSON body becomes): a scan that counts slots (values and object
/// entries: the commas and openings of non-empty containers), non-empty
/// objects and strings, and half as much again as the text for string
/// contents and the parser's scratch (measured at about 1.3 times). Typed bodies (a `TaskSpec`, whose brief stays raw text) take
/// less. So the body budget holds what parsing a body takes, not only its
/// bytes: `[0,0,0,...]` is 2 bytes a value and 32 to 64 once parsed. Not
/// valid JSON is whatever the scan counts; the parse refuses it anyway.
pub fn parsed_cost(text: &[u8]) -> u64 {
    let (mut slots, mut objects, mut strings) = (1u64, 0u64, 0u64);
    // An opening bracket just seen: its container allocates (and holds a
    // first slot) only when something other than its closing follows.
    let mut opened: Option<u8> = None;
    for b in crate::store::canonical::outside_strings(text) {
        if b.is_ascii_whitespace() {
            continue;
        }
        if let Some(open) = opened.take()
            && b != b'}'
            && b != b']'
        {
            slots += 1;
            objects += u64::from(open == b'{');
        }
        match b {
            b'"' => strings += 1,
            b'{' | b'[' => opened = Some(b),
            b',' => slots += 1,
            _ => {}
        }
    }
    text.len() as u64 * 3 / 2 + slots * SLOT + objects * OBJECT + strings * STRING
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
