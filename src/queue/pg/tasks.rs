//! A [`Task`] as rows: the `tasks` row holds its facts (the columns that
//! claims filter on and the spec as written) and where it is (state,
//! attempt, lease, delay, park); the rows beside it hold what grows with
//! each attempt: its worker handles (`handles`), its receipts, whose
//! latest is the submission a resend is recognised by (`receipts`), and
//! the parts the current attempt staged (`staged`).
//!
//! [`save`] writes a task as the embedded queue holds it and [`load`]
//! reads it back the same, so a call that needs the whole task decides on
//! it with the embedded queue's own rules. Receipts are written only by
//! the completing statement ([`super::lease::complete_many`]), with their
//! bodies; `save` leaves them alone. Times are kept to the microsecond,
//! the database's precision.

use std::collections::BTreeMap;
use std::sync::Arc;

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::viewer::wire;
use crate::database::Error;
use crate::queue::task::Submission;
use crate::queue::{Attempt, Lease, LeaseId, Park, Sight, Task, TaskId, TaskSpec};
use crate::store::Name;

/// The counters a claim and a completion keep on a task's row ([`super::lease`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Open upstreams of a pending task (`None`: leave as it is).
    pub blocked: Option<i32>,
    /// Open children (`None`: leave as it is).
    pub open_children: Option<i32>,
}

/// The columns of a task's [`Sight`], in the order [`sight`] reads them.
pub const SIGHT: &str = "t.queue, t.namespace, t.kind, t.effect_class, t.visibility, \
    t.producer_surface, t.allowed_surfaces, t.requester, t.source_pack";

/// A task's sight from the [`SIGHT`] columns of `r`, from column `at`.
pub fn sight(r: &Row, at: usize) -> Result<Sight, Error> {
    let bad = |e: String| Error::Corrupt(format!("a task row has an unreadable column: {e}"));
    let name = |field: &'static str, i: usize| {
        Name::parse(field, r.get::<_, &str>(at + i)).map_err(|e| bad(e.to_string()))
    };
    let optional = |field: &'static str, i: usize| {
        r.get::<_, Option<&str>>(at + i)
            .map(|v| Name::parse(field, v).map_err(|e| bad(e.to_string())))
            .transpose()
    };
    fn word<T: serde::de::DeserializeOwned>(r: &Row, i: usize) -> Result<T, String> {
        let v = serde_json::Value::String(r.get::<_, &str>(i).to_string());
        serde_json::from_value(v).map_err(|e| e.to_string())
    }
    let allowed: Vec<&str> = r.get(at + 6);
    Ok(Sight {
        queue: name("queue", 0)?,
        namespace: name("namespace", 1)?,
        kind: name("kind", 2)?,
        effect_class: word(r, at + 3).map_err(bad)?,
        visibility: word(r, at + 4).map_err(bad)?,
        producer_surface: optional("producer_surface", 5)?,
        allowed_surfaces: allowed
            .into_iter()
            .map(|v| Name::parse("allowed_surfaces", v).map_err(|e| bad(e.to_string())))
            .collect::<Result<_, _>>()?,
        requester: name("requester", 7)?,
        source_pack: optional("source_pack", 8)?,
    })
}

/// Locks the rows of `ids` (in id order) until the transaction `client`
/// is in ends.
pub async fn lock(client: &impl GenericClient, ids: &[TaskId]) -> Result<(), Error> {
    let ids: Vec<i64> = ids.iter().map(|i| i.0 as i64).collect();
    let statement = client
        .prepare_cached("SELECT id FROM tasks WHERE id = ANY($1) ORDER BY id FOR UPDATE")
        .await?;
    client.query(&statement, &[&ids]).await?;
    Ok(())
}

/// Writes `t` (new, or changed since it was loaded) with its handles and
/// staged parts (`had_staged`: it had some when it was loaded), and the
/// counters on its row.
pub async fn save(
    client: &impl GenericClient,
    t: &Task,
    counters: Counters,
    had_staged: bool,
) -> Result<(), Error> {
    let s = &t.spec;
    let spec = serde_json::to_string(&**s).expect("a spec serializes");
    let park = t
        .park
        .as_ref()
        .map(|p| serde_json::to_string(&**p).expect("a park serializes"));
    let lease = t.lease.as_deref();
    let allowed: Vec<&str> = s.allowed_surfaces.iter().map(|n| n.as_str()).collect();
    let children: Vec<i64> = t.children.iter().map(|c| c.0 as i64).collect();
    let dropped: Vec<&[u8]> = t.dropped.iter().map(|d| d.as_bytes().as_slice()).collect();
    let id = t.id.0 as i64;
    client
        .execute(
            &client.prepare_cached("INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, \
               producer_surface, allowed_surfaces, requester, priority, state, not_before, \
               reason, park, attempt, lease_id, lease_holder, lease_expires, parent, depth, \
               idempotency_key, fingerprint, source_pack, spec, children, dropped, \
               created_at, updated_at, blocked, open_children, lease_ttl_s, max_attempts) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, micros($12), $13, $14::text::json, \
               $15, $16, $17, micros($18), $19, $20, $21, $22, $23, $24::text::json, $25, $26, \
               micros($27), micros($28), coalesce($29, 0), coalesce($30, 0), $31, $32) \
             ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, \
               not_before = EXCLUDED.not_before, reason = EXCLUDED.reason, park = EXCLUDED.park, \
               attempt = EXCLUDED.attempt, lease_id = EXCLUDED.lease_id, \
               lease_holder = EXCLUDED.lease_holder, lease_expires = EXCLUDED.lease_expires, \
               spec = EXCLUDED.spec, children = EXCLUDED.children, dropped = EXCLUDED.dropped, \
               updated_at = EXCLUDED.updated_at, \
               blocked = coalesce($29, tasks.blocked), \
               open_children = coalesce($30, tasks.open_children)").await?,
            &[
                &id,
                &s.namespace.as_str(),
                &s.queue.as_str(),
                &s.kind.as_str(),
                &wire(s.effect_class),
                &wire(s.visibility_scope),
                &s.producer_surface.as_ref().map(|n| n.as_str()),
                &allowed,
                &t.requester.as_str(),
                &s.priority,
                &t.state.as_str(),
                &t.not_before.map(|n| n.as_microsecond()),
                &t.reason,
                &park,
                &(t.attempt.0 as i32),
                &lease.map(|l| l.id.0.as_str()),
                &lease.map(|l| l.holder.as_str()),
                &lease.map(|l| l.expires_at.as_microsecond()),
                &t.parent.map(|p| p.0 as i64),
                &(t.depth as i32),
                &s.idempotency_key.as_deref(),
                &t.fingerprint.as_ref().map(|f| f.as_bytes().as_slice()),
                &t.source_pack.as_ref().map(|n| n.as_str()),
                &spec,
                &children,
                &dropped,
                &t.created_at.as_microsecond(),
                &t.updated_at.as_microsecond(),
                &counters.blocked,
                &counters.open_children,
                &s.lease_ttl_s.map(|v| v as i32),
                &s.max_attempts.map(|v| v as i32),
            ],
        )
        .await?;
    if !t.handles.is_empty() {
        client
            .execute(
                &client
                    .prepare_cached(
                        "INSERT INTO handles (handle, task_id, attempt) \
                 SELECT h, $2, n::int FROM unnest($1::text[]) WITH ORDINALITY AS x(h, n) \
                 ON CONFLICT (handle) DO NOTHING",
                    )
                    .await?,
                &[&t.handles, &id],
            )
            .await?;
    }
    if !had_staged && t.staged.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = t.staged.keys().map(String::as_str).collect();
    let shas: Vec<&[u8]> = t.staged.values().map(|s| s.as_bytes().as_slice()).collect();
    // Two statements: a row deleted in a statement's CTE still counts
    // against the unique key of the same statement's insert.
    client
        .execute(
            &client.prepare_cached("DELETE FROM staged WHERE task_id = $1 AND NOT (attempt = $2 AND name = ANY($3))").await?,
            &[&id, &(t.attempt.0 as i32), &names],
        )
        .await?;
    if !names.is_empty() {
        client
            .execute(
                &client
                    .prepare_cached(
                        "INSERT INTO staged (task_id, attempt, name, sha256) \
                 SELECT $1, $2, n, s FROM unnest($3::text[], $4::bytea[]) AS x(n, s) \
                 ON CONFLICT (task_id, attempt, name) DO UPDATE SET sha256 = EXCLUDED.sha256",
                    )
                    .await?,
                &[&id, &(t.attempt.0 as i32), &names, &shas],
            )
            .await?;
    }
    Ok(())
}

/// Reads the tasks `ids` (those that exist, in the order they were
/// made); with `lock`,
/// locks their rows until the transaction `client` is in ends.
pub async fn load(
    client: &impl GenericClient,
    ids: &[TaskId],
    lock: bool,
) -> Result<Vec<Task>, Error> {
    let ids: Vec<i64> = ids.iter().map(|i| i.0 as i64).collect();
    let sql = format!(
        "SELECT t.id, t.requester, t.source_pack, t.parent, t.depth, t.children, t.state, \
           t.attempt, t.lease_id, t.lease_holder, to_micros(t.lease_expires), \
           to_micros(t.not_before), t.dropped, t.fingerprint, \
           t.park::text, t.reason, to_micros(t.created_at), \
           to_micros(t.updated_at), t.spec::text, \
           coalesce((SELECT array_agg(h.handle ORDER BY h.attempt) FROM handles h WHERE h.task_id = t.id), '{{}}'), \
           coalesce((SELECT array_agg(r.sha256 ORDER BY r.attempt) FROM receipts r WHERE r.task_id = t.id), '{{}}'), \
           coalesce((SELECT array_agg(s.name ORDER BY s.name) FROM staged s \
                     WHERE s.task_id = t.id AND s.attempt = t.attempt), '{{}}'), \
           coalesce((SELECT array_agg(s.sha256 ORDER BY s.name) FROM staged s \
                     WHERE s.task_id = t.id AND s.attempt = t.attempt), '{{}}'), \
           l.attempt, l.lease_id, l.request, l.sha256 \
         FROM tasks t LEFT JOIN LATERAL ( \
           SELECT attempt, lease_id, request, sha256 FROM receipts r WHERE r.task_id = t.id \
           ORDER BY attempt DESC LIMIT 1) l ON true \
         WHERE t.id = ANY($1) ORDER BY t.seq {}",
        if lock { "FOR UPDATE OF t" } else { "" }
    );
    let statement = client.prepare_cached(&sql).await?;
    client
        .query(&statement, &[&ids])
        .await?
        .iter()
        .map(task)
        .collect()
}

fn task(r: &Row) -> Result<Task, Error> {
    let id = TaskId(r.get::<_, i64>(0) as u64);
    let bad = |what: &str| Error::Corrupt(format!("task {id}: {what}"));
    let name = |s: &str| Name::parse("name", s).map_err(|_| bad("a name"));
    let sha = |b: &[u8]| crate::database::sha256(b).map_err(|_| bad("a hash"));
    let time = |us: i64| crate::database::time(us).map_err(|_| bad("a time"));
    let spec: TaskSpec = serde_json::from_str(r.get(18)).map_err(|_| bad("its spec"))?;
    let handles: Vec<String> = r.get(19);
    let attempt = Attempt(r.get::<_, i32>(7) as u32);
    let lease = match r.get::<_, Option<String>>(8) {
        None => None,
        Some(lease) => Some(Box::new(Lease {
            id: LeaseId(lease),
            attempt,
            holder: name(
                r.get::<_, Option<&str>>(9)
                    .ok_or_else(|| bad("a lease holder"))?,
            )?,
            expires_at: time(
                r.get::<_, Option<i64>>(10)
                    .ok_or_else(|| bad("a lease expiry"))?,
            )?,
            handle: handles
                .get((attempt.0 as usize).wrapping_sub(1))
                .cloned()
                .ok_or_else(|| bad("the lease's handle"))?,
        })),
    };
    let staged_names: Vec<String> = r.get(21);
    let staged_shas: Vec<&[u8]> = r.get(22);
    let staged = staged_names
        .into_iter()
        .zip(staged_shas)
        .map(|(n, s)| Ok((n, sha(s)?)))
        .collect::<Result<BTreeMap<_, _>, Error>>()?;
    let submission = match r.get::<_, Option<i32>>(23) {
        None => None,
        Some(a) => Some(Box::new(Submission {
            attempt: Attempt(a as u32),
            lease_id: LeaseId(r.get(24)),
            request: sha(r.get(25))?,
            receipt: sha(r.get(26))?,
        })),
    };
    let park = match r.get::<_, Option<&str>>(14) {
        None => None,
        Some(p) => Some(Box::new(
            serde_json::from_str::<Park>(p).map_err(|_| bad("its park"))?,
        )),
    };
    Ok(Task {
        id,
        spec: Arc::new(spec),
        requester: name(r.get(1))?,
        source_pack: r.get::<_, Option<&str>>(2).map(name).transpose()?,
        parent: r.get::<_, Option<i64>>(3).map(|p| TaskId(p as u64)),
        depth: r.get::<_, i32>(4) as u32,
        children: r
            .get::<_, Vec<i64>>(5)
            .into_iter()
            .map(|c| TaskId(c as u64))
            .collect(),
        state: r.get::<_, &str>(6).parse().map_err(|_| bad("its state"))?,
        attempt,
        lease,
        not_before: r.get::<_, Option<i64>>(11).map(time).transpose()?,
        receipts: r
            .get::<_, Vec<&[u8]>>(20)
            .into_iter()
            .map(sha)
            .collect::<Result<_, _>>()?,
        staged,
        dropped: r
            .get::<_, Vec<&[u8]>>(12)
            .into_iter()
            .map(sha)
            .collect::<Result<_, _>>()?,
        handles,
        fingerprint: r.get::<_, Option<&[u8]>>(13).map(sha).transpose()?,
        submission,
        park,
        reason: r.get(15),
        created_at: time(r.get(16))?,
        updated_at: time(r.get(17))?,
    })
}
