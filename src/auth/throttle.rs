//! The failure throttle: guessing worker credentials is slowed, counted
//! and logged.
//!
//! Each failed worker credential spends one unit from two token buckets:
//! its peer's (an IPv4 address, or an IPv6 /64, which one host usually
//! holds whole) and the overall one. A failed credential from a peer whose
//! bucket is empty, or while the overall bucket is empty, is answered
//! with the seconds to wait ([`TooManyFailures`], `429`) instead of `401`,
//! so a guesser is told to slow down and learns nothing more. A valid
//! credential is always served, whatever its address or anyone else has
//! spent: guessers only ever spend their own failures, never a live
//! worker's calls (handles carry 130 random bits and tokens an HMAC, so
//! the budget is for noticing and slowing guessers, not for making a
//! guess unlikely).
//!
//! [`Failures`] counts failures (for `/metrics`) and decides which to log:
//! at most one line a second, carrying how many were not logged. A log
//! line never carries a credential. The key check in `keyring.rs` counts
//! and logs its failures the same way but is not throttled.
//!
//! Memory: a peer's bucket is kept only while it is below full; full ones
//! are pruned whenever the map has doubled, so the map holds about what
//! the overall budget lets fail within one per-peer refill time.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How often a failure may be logged.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// The peer map is not pruned below this size.
const MIN_PRUNE: usize = 1024;

/// A token-bucket budget: `burst` failures at once, regained at
/// `per_second`. Both are taken as at least 1, since a budget that never
/// refills would lock workers out until a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Failures allowed at once.
    pub burst: u32,
    /// Failures regained per second.
    pub per_second: u32,
}

impl Budget {
    fn burst(self) -> f64 {
        f64::from(self.burst.max(1))
    }

    fn rate(self) -> f64 {
        f64::from(self.per_second.max(1))
    }
}

/// A refusal: this peer (or everyone) spent its failure budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("too many failed worker credentials; retry after {retry_after_s} s")]
pub struct TooManyFailures {
    /// Whole seconds until one more try is allowed (at least 1).
    pub retry_after_s: u64,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(b: Budget, now: Instant) -> Bucket {
        Bucket {
            tokens: b.burst(),
            at: now,
        }
    }

    fn refill(&mut self, b: Budget, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * b.rate()).min(b.burst());
        self.at = now;
    }

    /// How long until one unit is available; zero when one is.
    fn wait(&self, b: Budget) -> Duration {
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / b.rate())
        }
    }

    fn spend(&mut self) {
        self.tokens = (self.tokens - 1.0).max(0.0);
    }

    fn is_full(&self, b: Budget) -> bool {
        self.tokens >= b.burst()
    }
}

/// The failure throttle for worker credentials: cheap to clone (an
/// `Arc`).
#[derive(Clone, Debug)]
pub struct Throttle {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    per_peer: Budget,
    overall: Budget,
    /// A `std` mutex is enough: it guards a few float updates and a map
    /// lookup, never I/O or an `.await`.
    buckets: Mutex<Buckets>,
    failures: Failures,
}

#[derive(Debug)]
struct Buckets {
    overall: Bucket,
    peers: HashMap<IpAddr, Bucket>,
    prune_at: usize,
}

/// The address a peer's budget is kept under: IPv4 as is (also when
/// mapped into IPv6), IPv6 by its /64.
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & (u128::MAX << 64))),
        v4 => v4,
    }
}

impl Throttle {
    /// A throttle with full buckets.
    pub fn new(per_peer: Budget, overall: Budget) -> Throttle {
        Throttle {
            inner: Arc::new(Inner {
                per_peer,
                overall,
                buckets: Mutex::new(Buckets {
                    overall: Bucket::full(overall, Instant::now()),
                    peers: HashMap::new(),
                    prune_at: MIN_PRUNE,
                }),
                failures: Failures::default(),
            }),
        }
    }

    /// Counts a failed worker credential from `peer`, logs it (sampled)
    /// and spends one unit of `peer`'s and the overall budget; `Err` when
    /// either was already spent, so the failure is answered `429` rather
    /// than `401`. `reason` is a fixed phrase, never the credential.
    pub fn failed(&self, peer: IpAddr, reason: &'static str) -> Result<(), TooManyFailures> {
        let now = Instant::now();
        let admitted = self.admit_at(peer, now);
        self.spend_at(peer, now);
        if let Some(suppressed) = self.inner.failures.record() {
            tracing::info!(
                peer = %peer,
                reason,
                suppressed,
                failures = self.inner.failures.total(),
                "worker credential refused"
            );
        }
        admitted
    }

    /// Failed worker credentials since start.
    pub fn failures(&self) -> u64 {
        self.inner.failures.total()
    }

    fn admit_at(&self, peer: IpAddr, now: Instant) -> Result<(), TooManyFailures> {
        let (per_peer, overall) = (self.inner.per_peer, self.inner.overall);
        let mut b = self
            .inner
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        b.overall.refill(overall, now);
        let mut wait = b.overall.wait(overall);
        if let Some(mine) = b.peers.get_mut(&peer_key(peer)) {
            mine.refill(per_peer, now);
            wait = wait.max(mine.wait(per_peer));
        }
        if wait.is_zero() {
            Ok(())
        } else {
            Err(TooManyFailures {
                retry_after_s: wait.as_secs_f64().ceil().max(1.0) as u64,
            })
        }
    }

    fn spend_at(&self, peer: IpAddr, now: Instant) {
        let (per_peer, overall) = (self.inner.per_peer, self.inner.overall);
        let mut b = self
            .inner
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        b.overall.refill(overall, now);
        b.overall.spend();
        let mine = b
            .peers
            .entry(peer_key(peer))
            .or_insert_with(|| Bucket::full(per_peer, now));
        mine.refill(per_peer, now);
        mine.spend();
        if b.peers.len() > b.prune_at {
            b.peers.retain(|_, bucket| {
                bucket.refill(per_peer, now);
                !bucket.is_full(per_peer)
            });
            b.prune_at = (b.peers.len() * 2).max(MIN_PRUNE);
        }
    }
}

/// A failure counter with a sampled log: cheap to share, safe to call on
/// every failure.
#[derive(Debug, Default)]
pub struct Failures {
    total: AtomicU64,
    /// A `std` mutex is enough: it guards two integers for a moment.
    sample: Mutex<Sample>,
}

#[derive(Debug, Default)]
struct Sample {
    next_line: Option<Instant>,
    suppressed: u64,
}

impl Failures {
    /// Counts one failure. `Some(n)` when this one should be logged, `n`
    /// being how many were not logged since the last line; `None` when it
    /// is not to be logged.
    pub fn record(&self) -> Option<u64> {
        self.record_at(Instant::now())
    }

    /// Failures counted since start.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    fn record_at(&self, now: Instant) -> Option<u64> {
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut s = self
            .sample
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.next_line.is_some_and(|next| now < next) {
            s.suppressed += 1;
            return None;
        }
        s.next_line = Some(now + LOG_EVERY);
        Some(std::mem::take(&mut s.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEER: Budget = Budget {
        burst: 3,
        per_second: 2,
    };
    const OVERALL: Budget = Budget {
        burst: 5,
        per_second: 1,
    };

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_peer_is_refused_after_its_burst_and_readmitted_after_the_refill() {
        let t = Throttle::new(PEER, OVERALL);
        let t0 = Instant::now();
        let a = ip("10.0.0.1");
        for _ in 0..3 {
            assert_eq!(t.admit_at(a, t0), Ok(()));
            t.spend_at(a, t0);
        }
        assert_eq!(
            t.admit_at(a, t0),
            Err(TooManyFailures { retry_after_s: 1 }),
            "half a second to regain one unit, rounded up"
        );
        assert_eq!(
            t.admit_at(ip("10.0.0.2"), t0),
            Ok(()),
            "another peer still has its budget"
        );
        assert_eq!(t.admit_at(a, t0 + Duration::from_millis(500)), Ok(()));
    }

    #[test]
    fn each_failure_is_counted_and_refused_once_the_budget_is_spent() {
        let t = Throttle::new(PEER, OVERALL);
        let a = ip("10.0.0.1");
        let answers: Vec<bool> = (0..4)
            .map(|_| t.failed(a, "unknown handle").is_ok())
            .collect();
        assert_eq!(
            answers,
            [true, true, true, false],
            "401 three times, then 429"
        );
        assert!(t.failed(ip("10.0.0.2"), "unknown handle").is_ok());
        assert_eq!(t.failures(), 5);
    }

    #[test]
    fn the_overall_budget_stops_every_peer() {
        let t = Throttle::new(PEER, OVERALL);
        let t0 = Instant::now();
        for i in 0..5 {
            let peer = ip(&format!("10.0.1.{i}"));
            assert_eq!(t.admit_at(peer, t0), Ok(()));
            t.spend_at(peer, t0);
        }
        assert_eq!(
            t.admit_at(ip("10.0.2.1"), t0),
            Err(TooManyFailures { retry_after_s: 1 }),
            "a fresh peer is refused while the overall budget is spent"
        );
        assert_eq!(
            t.admit_at(ip("10.0.2.1"), t0 + Duration::from_secs(1)),
            Ok(())
        );
    }

    #[test]
    fn retry_after_is_whole_seconds_until_one_unit() {
        let slow = Budget {
            burst: 1,
            per_second: 1,
        };
        let t = Throttle::new(slow, OVERALL);
        let t0 = Instant::now();
        t.spend_at(ip("10.0.0.1"), t0);
        assert_eq!(
            t.admit_at(ip("10.0.0.1"), t0 + Duration::from_millis(100)),
            Err(TooManyFailures { retry_after_s: 1 })
        );
        let zero = Budget {
            burst: 0,
            per_second: 0,
        };
        let t = Throttle::new(zero, zero);
        assert_eq!(t.admit_at(ip("10.0.0.1"), t0), Ok(()), "taken as 1 and 1");
    }

    #[test]
    fn an_ipv6_64_shares_one_budget_and_mapped_ipv4_is_ipv4() {
        let t = Throttle::new(PEER, OVERALL);
        let t0 = Instant::now();
        for i in 1..=3 {
            t.spend_at(ip(&format!("2001:db8::{i}")), t0);
        }
        assert!(t.admit_at(ip("2001:db8::ffff"), t0).is_err());
        assert!(t.admit_at(ip("2001:db8:0:1::1"), t0).is_ok());
        assert_eq!(peer_key(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
    }

    #[test]
    fn full_buckets_are_pruned() {
        let roomy = Budget {
            burst: 1_000_000,
            per_second: 1_000_000,
        };
        let t = Throttle::new(PEER, roomy);
        let t0 = Instant::now();
        for i in 0..MIN_PRUNE as u32 {
            t.spend_at(IpAddr::from(i.to_be_bytes()), t0);
        }
        t.spend_at(ip("10.9.9.9"), t0 + Duration::from_secs(10));
        let b = t.inner.buckets.lock().unwrap();
        assert_eq!(b.peers.len(), 1, "only the peer still below full is kept");
    }

    #[test]
    fn failures_are_counted_and_logged_once_a_second_with_the_suppressed_count() {
        let f = Failures::default();
        let t0 = Instant::now();
        assert_eq!(f.record_at(t0), Some(0));
        assert_eq!(f.record_at(t0 + Duration::from_millis(10)), None);
        assert_eq!(f.record_at(t0 + Duration::from_millis(20)), None);
        assert_eq!(f.record_at(t0 + Duration::from_millis(1000)), Some(2));
        assert_eq!(f.total(), 4);
    }
}
