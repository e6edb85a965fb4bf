//! Listings and counts whose memory follows the answer, not the table:
//! counts and summaries come from one grouped statement (a row per
//! shelf: a sight and a state), pages and bulk selections from a scan in
//! creation order, [`CHUNK`] rows at a time. Each shelf and each row is
//! judged by the embedded queue's own rules on its [`ShelfView`]
//! (`Filter::selects`, `query::shows`, `State::bulk_takes`); the
//! filter's columns also narrow the statement, so a scan reads only rows
//! those rules could take.

use deadpool_postgres::GenericClient;
use jiff::Timestamp;

use super::tasks::{SIGHT, sight};
use crate::database::{Error, time};
use crate::queue::query::{Filter, Totals};
use crate::queue::shelf::ShelfView;
use crate::queue::{Sight, TaskId, TaskState};

/// Rows a scan reads per statement.
const CHUNK: i64 = 512;

/// One shelf as the grouped statement counts it.
#[derive(Clone, Debug)]
pub struct Shelf {
    sight: Sight,
    state: TaskState,
    len: usize,
    oldest_queued: Option<Timestamp>,
    live_leases: u64,
}

impl Shelf {
    /// Its totals, as counts and summaries read them.
    pub fn totals(&self) -> Totals<'_> {
        Totals {
            view: ShelfView {
                sight: &self.sight,
                state: self.state,
                len: self.len,
            },
            oldest_queued: self.oldest_queued,
            live_leases: self.live_leases,
        }
    }
}

/// Every shelf that holds a task, with its leases live now on the
/// database's clock.
pub async fn all(client: &impl GenericClient) -> Result<Vec<Shelf>, Error> {
    let statement = client
        .prepare_cached(&format!(
            "SELECT {SIGHT}, t.state, count(*), \
               to_micros(min(t.updated_at) FILTER (WHERE t.state = 'queued')), \
               count(*) FILTER (WHERE t.state = 'claimed' AND t.lease_expires > now()) \
             FROM tasks t GROUP BY {SIGHT}, t.state"
        ))
        .await?;
    client
        .query(&statement, &[])
        .await?
        .iter()
        .map(|r| {
            Ok(Shelf {
                sight: sight(r, 0)?,
                state: state(r.get(9))?,
                len: r.get::<_, i64>(10) as usize,
                oldest_queued: r.get::<_, Option<i64>>(11).map(time).transpose()?,
                live_leases: r.get::<_, i64>(12) as u64,
            })
        })
        .collect()
}

/// Up to `limit` tasks that `keep` takes, among those `filter` narrows
/// to, in creation order after task `after` (none after a task that
/// does not exist); and whether more follow.
pub async fn scan(
    client: &impl GenericClient,
    filter: &Filter,
    after: Option<TaskId>,
    limit: usize,
    keep: impl Fn(ShelfView<'_>) -> bool,
) -> Result<(Vec<TaskId>, bool), Error> {
    let mut from = match after {
        None => 0,
        Some(id) => {
            let row = client
                .query_opt("SELECT seq FROM tasks WHERE id = $1", &[&(id.0 as i64)])
                .await?;
            match row {
                Some(r) => r.get::<_, i64>(0),
                None => return Ok((Vec::new(), false)),
            }
        }
    };
    let statement = client
        .prepare_cached(&format!(
            "SELECT t.seq, t.id, {SIGHT}, t.state FROM tasks t \
             WHERE t.seq > $1 AND ($3::text IS NULL OR t.queue = $3) \
               AND ($4::text IS NULL OR t.kind = $4) AND ($5::text IS NULL OR t.state = $5) \
               AND ($6::text IS NULL OR t.namespace = $6) \
               AND ($7::text IS NULL OR t.source_pack = $7) \
             ORDER BY t.seq LIMIT $2"
        ))
        .await?;
    let text = |n: Option<&crate::store::Name>| n.map(|n| n.as_str().to_string());
    let (queue, kind, namespace, pack) = (
        text(filter.queue.as_ref()),
        text(filter.kind.as_ref()),
        text(filter.namespace.as_ref()),
        text(filter.source_pack.as_ref()),
    );
    let wanted = filter.state.map(|s| s.as_str().to_string());
    let mut ids = Vec::new();
    loop {
        let rows = client
            .query(
                &statement,
                &[&from, &CHUNK, &queue, &kind, &wanted, &namespace, &pack],
            )
            .await?;
        for r in &rows {
            from = r.get(0);
            let view = ShelfView {
                sight: &sight(r, 2)?,
                state: state(r.get(11))?,
                len: 1,
            };
            if keep(view) {
                if ids.len() == limit {
                    return Ok((ids, true));
                }
                ids.push(TaskId(r.get::<_, i64>(1) as u64));
            }
        }
        if (rows.len() as i64) < CHUNK {
            return Ok((ids, false));
        }
    }
}

fn state(s: &str) -> Result<TaskState, Error> {
    s.parse()
        .map_err(|_| Error::Corrupt(format!("a task row has the unknown state {s:?}")))
}
