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

/// Writes what can change of `t` (a task already in the table, changed
/// since it was loaded) with its handles and staged parts (`had_staged`:
/// it had some when it was loaded), and the counters on its row. What a
/// task is made with is written once, by [`insert_many`].
pub async fn save(
    client: &impl GenericClient,
    t: &Task,
    counters: Counters,
    had_staged: bool,
) -> Result<(), Error> {
    let park = t
        .park
        .as_ref()
        .map(|p| serde_json::to_string(&**p).expect("a park serializes"));
    let lease = t.lease.as_deref();
    let children: Vec<i64> = t.children.iter().map(|c| c.0 as i64).collect();
    let dropped: Vec<&[u8]> = t.dropped.iter().map(|d| d.as_bytes().as_slice()).collect();
    let spec = serde_json::to_string(&*t.spec).expect("a spec serializes");
    let updated = client
        .execute(
            &client
                .prepare_cached(
                    "UPDATE tasks SET state = $2, not_before = micros($3), reason = $4, \
                       park = $5::text::json, attempt = $6, lease_id = $7, lease_holder = $8, \
                       lease_expires = micros($9), spec = $10::text::json, children = $11, \
                       dropped = $12, updated_at = micros($13), \
                       blocked = coalesce($14, blocked), open_children = coalesce($15, open_children) \
                     WHERE id = $1",
                )
                .await?,
            &[
                &(t.id.0 as i64),
                &t.state.as_str(),
                &t.not_before.map(|n| n.as_microsecond()),
                &t.reason,
                &park,
                &(t.attempt.0 as i32),
                &lease.map(|l| l.id.0.as_str()),
                &lease.map(|l| l.holder.as_str()),
                &lease.map(|l| l.expires_at.as_microsecond()),
                &spec,
                &children,
                &dropped,
                &t.updated_at.as_microsecond(),
                &counters.blocked,
                &counters.open_children,
            ],
        )
        .await?;
    if updated != 1 {
        return Err(Error::Corrupt(format!(
            "task {} changed but has no row to write it to",
            t.id
        )));
    }
    beside(client, t, had_staged).await
}

/// Writes the handles and staged parts of `t` (`had_staged`: it had
/// staged parts before), the rows beside its own.
async fn beside(client: &impl GenericClient, t: &Task, had_staged: bool) -> Result<(), Error> {
    let id = t.id.0 as i64;
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

/// Writes the new tasks `made`, each with its counters, in one statement
/// (a batch enqueue's rows), then whatever handles and staged parts they
/// already have.
pub async fn insert_many(
    client: &impl GenericClient,
    made: &[(&Task, Counters)],
) -> Result<(), Error> {
    if made.is_empty() {
        return Ok(());
    }
    fn json<T: serde::Serialize + ?Sized>(v: &T) -> String {
        serde_json::to_string(v).expect("a task's fields serialize")
    }
    let (mut ids, mut namespaces, mut queues, mut kinds) = (vec![], vec![], vec![], vec![]);
    let (mut effects, mut visibilities, mut surfaces, mut alloweds) =
        (vec![], vec![], vec![], vec![]);
    let (mut requesters, mut priorities, mut states, mut not_befores) =
        (vec![], vec![], vec![], vec![]);
    let (mut reasons, mut parks, mut attempts, mut parents) = (vec![], vec![], vec![], vec![]);
    let (mut depths, mut keys, mut fingerprints, mut packs) = (vec![], vec![], vec![], vec![]);
    let (mut specs, mut created) = (vec![], vec![]);
    let (mut updated, mut blocked, mut open, mut ttls) = (vec![], vec![], vec![], vec![]);
    let (mut max_attempts, mut lease_ids, mut holders, mut expiries) =
        (vec![], vec![], vec![], vec![]);
    let (mut children, mut dropped) = (vec![], vec![]);
    for (t, counters) in made {
        let s = &t.spec;
        ids.push(t.id.0 as i64);
        namespaces.push(s.namespace.as_str());
        queues.push(s.queue.as_str());
        kinds.push(s.kind.as_str());
        effects.push(wire(s.effect_class));
        visibilities.push(wire(s.visibility_scope));
        surfaces.push(s.producer_surface.as_ref().map(|n| n.as_str()));
        // Names hold no commas.
        alloweds.push(joined(s.allowed_surfaces.iter().map(|n| n.as_str())));
        requesters.push(t.requester.as_str());
        priorities.push(s.traits.priority);
        states.push(t.state.as_str());
        not_befores.push(t.not_before.map(|n| n.as_microsecond()));
        reasons.push(t.reason.as_deref());
        parks.push(t.park.as_ref().map(|p| json(&**p)));
        attempts.push(t.attempt.0 as i32);
        parents.push(t.parent.map(|p| p.0 as i64));
        depths.push(t.depth as i32);
        keys.push(s.idempotency_key.as_deref());
        fingerprints.push(t.fingerprint.as_ref().map(|f| f.as_bytes().as_slice()));
        packs.push(t.source_pack.as_ref().map(|n| n.as_str()));
        specs.push(json(&**s));
        created.push(t.created_at.as_microsecond());
        updated.push(t.updated_at.as_microsecond());
        blocked.push(counters.blocked.unwrap_or(0));
        open.push(counters.open_children.unwrap_or(0));
        ttls.push(s.traits.lease_ttl_s.map(|v| v as i32));
        max_attempts.push(s.max_attempts.map(|v| v as i32));
        let lease = t.lease.as_deref();
        lease_ids.push(lease.map(|l| l.id.0.as_str()));
        holders.push(lease.map(|l| l.holder.as_str()));
        expiries.push(lease.map(|l| l.expires_at.as_microsecond()));
        children.push(joined(t.children.iter().map(|c| c.0.to_string())));
        dropped.push(joined(t.dropped.iter().map(|d| d.hex())));
    }
    let (surfaces, alloweds, not_befores) =
        (sparse(surfaces), sparse(alloweds), sparse(not_befores));
    let (reasons, parks, parents, keys) = (
        sparse(reasons),
        sparse(parks),
        sparse(parents),
        sparse(keys),
    );
    let (fingerprints, packs, ttls) = (sparse(fingerprints), sparse(packs), sparse(ttls));
    let (max_attempts, lease_ids, holders) =
        (sparse(max_attempts), sparse(lease_ids), sparse(holders));
    let (expiries, children, dropped) = (sparse(expiries), sparse(children), sparse(dropped));
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 32] = [
        &ids,
        &namespaces,
        &queues,
        &kinds,
        &effects,
        &visibilities,
        &surfaces,
        &alloweds,
        &requesters,
        &priorities,
        &states,
        &not_befores,
        &reasons,
        &parks,
        &attempts,
        &parents,
        &depths,
        &keys,
        &fingerprints,
        &packs,
        &specs,
        &created,
        &updated,
        &blocked,
        &open,
        &ttls,
        &max_attempts,
        &lease_ids,
        &holders,
        &expiries,
        &children,
        &dropped,
    ];
    let statement = client.prepare_cached(INSERT_MANY).await?;
    client.execute(&statement, &params).await?;
    for (t, _) in made {
        if !t.handles.is_empty() || !t.staged.is_empty() {
            beside(client, t, false).await?;
        }
    }
    Ok(())
}

/// A row's array as one text value, its elements joined by commas
/// (`unnest` would flatten arrays of arrays; none of them holds a comma),
/// or none when it is empty.
fn joined<S: AsRef<str>>(items: impl Iterator<Item = S>) -> Option<String> {
    let mut text = String::new();
    for item in items {
        if !text.is_empty() {
            text.push(',');
        }
        text.push_str(item.as_ref());
    }
    (!text.is_empty()).then_some(text)
}

/// A column with no value in any row, sent as an empty array: `unnest`
/// pads a shorter array with nulls, so the database gets the same rows
/// without decoding a null per row (most of a batch's columns).
fn sparse<T>(column: Vec<Option<T>>) -> Vec<Option<T>> {
    if column.iter().all(Option::is_none) {
        Vec::new()
    } else {
        column
    }
}

/// [`insert_many`]'s statement: a row per element of its longest arrays
/// (the others padded with nulls, [`sparse`]); a row's allowed surfaces,
/// children and dropped parts (in hex) come joined by commas ([`joined`]).
const INSERT_MANY: &str = "\
INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, producer_surface, \
  allowed_surfaces, requester, priority, state, not_before, reason, park, attempt, parent, depth, \
  idempotency_key, fingerprint, source_pack, spec, created_at, updated_at, blocked, \
  open_children, lease_ttl_s, max_attempts, lease_id, lease_holder, lease_expires, children, \
  dropped) \
SELECT id, namespace, queue, kind, effect_class, visibility, producer_surface, \
  coalesce(string_to_array(allowed, ','), '{}'), requester, priority, state, \
  micros(not_before), reason, park::json, attempt, parent, depth, idempotency_key, fingerprint, \
  source_pack, spec::json, micros(created_at), micros(updated_at), blocked, open_children, \
  lease_ttl_s, max_attempts, lease_id, lease_holder, micros(lease_expires), \
  coalesce(string_to_array(children, ',')::int8[], '{}'), \
  CASE WHEN dropped IS NULL THEN '{}' \
       ELSE ARRAY(SELECT decode(d, 'hex') FROM unnest(string_to_array(dropped, ',')) \
                   WITH ORDINALITY AS u(d, n) ORDER BY n) END \
FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], \
  $8::text[], $9::text[], $10::int4[], $11::text[], $12::int8[], $13::text[], $14::text[], \
  $15::int4[], $16::int8[], $17::int4[], $18::text[], $19::bytea[], $20::text[], $21::text[], \
  $22::int8[], $23::int8[], $24::int4[], $25::int4[], $26::int4[], $27::int4[], $28::text[], \
  $29::text[], $30::int8[], $31::text[], $32::text[]) \
  AS x(id, namespace, queue, kind, effect_class, visibility, producer_surface, allowed, \
       requester, priority, state, not_before, reason, park, attempt, parent, depth, \
       idempotency_key, fingerprint, source_pack, spec, created_at, updated_at, blocked, \
       open_children, lease_ttl_s, max_attempts, lease_id, lease_holder, lease_expires, \
       children, dropped)";

/// Reads the tasks `ids` (those that exist, in the order they were
/// made); with `lock`,
/// locks their rows until the transaction `client` is in ends.
pub async fn load(
    client: &impl GenericClient,
    ids: &[TaskId],
    lock: bool,
) -> Result<Vec<Task>, Error> {
    let ids: Vec<i64> = ids.iter().map(|i| i.0 as i64).collect();
    let statement = client
        .prepare_cached(if lock { &LOAD_LOCKED } else { &LOAD })
        .await?;
    client
        .query(&statement, &[&ids])
        .await?
        .iter()
        .map(read)
        .collect()
}

/// [`load`]'s statement.
static LOAD: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| load_sql(""));

/// [`load`]'s statement, locking the rows it reads.
static LOAD_LOCKED: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| load_sql("FOR UPDATE OF t"));

fn load_sql(lock: &str) -> String {
    format!(
        "SELECT {} FROM tasks t {RECEIPT_JOIN} WHERE t.id = ANY($1) ORDER BY t.seq {lock}",
        columns(HANDLES, STAGED)
    )
}

/// The handles of task `t`, oldest first: the expression [`columns`]
/// usually takes.
pub const HANDLES: &str = "coalesce((SELECT array_agg(h.handle ORDER BY h.attempt) \
    FROM handles h WHERE h.task_id = t.id), '{}')";

/// The join that [`columns`] reads a task's latest receipt from (`l`).
pub const RECEIPT_JOIN: &str = "LEFT JOIN LATERAL ( \
    SELECT attempt, lease_id, request, sha256 FROM receipts r WHERE r.task_id = t.id \
    ORDER BY attempt DESC LIMIT 1) l ON true";

/// The names, then the hashes, of the parts task `t`'s attempt staged:
/// the expressions [`columns`] usually takes.
pub const STAGED: &str = "coalesce((SELECT array_agg(s.name ORDER BY s.name) FROM staged s \
      WHERE s.task_id = t.id AND s.attempt = t.attempt), '{}'), \
    coalesce((SELECT array_agg(s.sha256 ORDER BY s.name) FROM staged s \
      WHERE s.task_id = t.id AND s.attempt = t.attempt), '{}')";

/// No staged parts, as [`STAGED`] reads them: a new attempt's.
pub const NONE_STAGED: &str = "'{}'::text[], '{}'::bytea[]";

/// The columns a [`Task`] is read from ([`read`]), of a row `t` with the
/// `tasks` table's columns joined with [`RECEIPT_JOIN`]; `handles` is
/// the expression of its handles, oldest first ([`HANDLES`], or that
/// with a handle a claim is recording in the same statement), and
/// `staged` those of its staged parts ([`STAGED`], or [`NONE_STAGED`]).
pub fn columns(handles: &str, staged: &str) -> String {
    format!(
        "t.id, t.requester, t.source_pack, t.parent, t.depth, t.children, t.state, \
         t.attempt, t.lease_id, t.lease_holder, to_micros(t.lease_expires), \
         to_micros(t.not_before), t.dropped, t.fingerprint, \
         t.park::text, t.reason, to_micros(t.created_at), \
         to_micros(t.updated_at), t.spec::text, {handles}, \
         coalesce((SELECT array_agg(r.sha256 ORDER BY r.attempt) FROM receipts r WHERE r.task_id = t.id), '{{}}'), \
         {staged}, l.attempt, l.lease_id, l.request, l.sha256"
    )
}

/// A task from a row whose first columns are [`columns`].
pub fn read(r: &Row) -> Result<Task, Error> {
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
