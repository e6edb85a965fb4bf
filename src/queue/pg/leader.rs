//! The maintenance leader: one daemon at a time ends lapsed leases
//! (`Shared::sweep_until`), chosen by a lease row whose expiry is on the
//! database's clock, renewed well inside its time to live. (Delayed tasks
//! need no waking: a claim reads their `not_before`.)
//!
//! Not a session advisory lock: a daemon cut off from the database keeps
//! a session's lock until TCP gives up on it (hours, by default), while a
//! lease row lapses on time. Two daemons may both believe they lead for
//! a moment (a renewal trusted until it lapses on the other's clock), so
//! every maintenance statement re-checks what it changes under the row's
//! lock and is harmless when run twice.

use std::time::{Duration, Instant};

use crate::database::{Database, Error};

/// How long a lease row lives unless renewed.
pub const TTL: Duration = Duration::from_secs(5);

/// How often the leader renews (and a follower tries to take over).
pub const RENEW_EVERY: Duration = Duration::from_secs(1);

/// A renewal is trusted this much less than [`TTL`], measured from before
/// it was sent, for the two clocks' drift and the answer's way back.
pub const MARGIN: Duration = Duration::from_secs(1);

/// Leadership held: its term (a new one each time the row changes hands)
/// and until when this daemon may act on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Term {
    /// Grows by one each time another holder, or the same one after a
    /// lapse, takes the row.
    pub term: i64,
    /// Past this, the daemon must renew before it leads again.
    pub trusted_until: Instant,
}

/// Takes the lease row `name` for `holder`, or renews it if `holder`
/// holds it and it has not lapsed; `None` when another holder's lease is
/// live.
pub async fn acquire(
    db: &Database,
    name: &str,
    holder: &str,
    ttl: Duration,
) -> Result<Option<Term>, Error> {
    let sent = Instant::now();
    let ttl_ms = ttl.as_millis() as i64;
    let client = db.client().await?;
    let row = client
        .query_opt(
            "INSERT INTO leader AS l (name, holder, term, expires_at) \
             VALUES ($1, $2, 1, clock_timestamp() + make_interval(secs => $3::bigint / 1000.0)) \
             ON CONFLICT (name) DO UPDATE SET \
               term = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > clock_timestamp() \
                           THEN l.term ELSE l.term + 1 END, \
               holder = EXCLUDED.holder, \
               expires_at = EXCLUDED.expires_at \
             WHERE l.holder = EXCLUDED.holder OR l.expires_at <= clock_timestamp() \
             RETURNING term",
            &[&name, &holder, &ttl_ms],
        )
        .await?;
    Ok(row.map(|r| Term {
        term: r.get(0),
        trusted_until: sent + ttl.saturating_sub(MARGIN),
    }))
}

/// Gives the row up (shutdown) so a follower takes over at its next try;
/// true when `holder` still held it in `term`.
pub async fn resign(db: &Database, name: &str, holder: &str, term: i64) -> Result<bool, Error> {
    let client = db.client().await?;
    let n = client
        .execute(
            "DELETE FROM leader WHERE name = $1 AND holder = $2 AND term = $3",
            &[&name, &holder, &term],
        )
        .await?;
    Ok(n == 1)
}
