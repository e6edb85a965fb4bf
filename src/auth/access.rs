//! May-read, may-write, may-claim: every authorization decision, made from
//! the principal's compiled grants and the record's own metadata, in memory.
//!
//! Order of checks, so that nothing leaks existence:
//! 1. what needs no record (action scopes → 403, namespace → 404) is
//!    checked before the store is touched, so a missing record and a
//!    present one answer alike;
//! 2. then visibility and quarantine (→ 404, the same answer as missing);
//! 3. then what the key may do to a record it can see (→ 403).

use super::scope::{GrantSet, Scope};
use super::{Error, Principal, PrincipalInfo};
pub use crate::store::envelope::{Envelope, Refusal, TaskFacts, Viewer};
use crate::store::{EffectClass, Name, VersionEntry, VersionMeta, Visibility};

/// Whether the principal may see a record with this envelope (namespace
/// membership is checked separately, before the record is read): the
/// rule is its viewer's (`store::envelope::Viewer::sees`).
pub fn sees(p: &Principal, env: Envelope<'_>) -> bool {
    p.viewer.sees(env)
}

/// Requires an action scope (403 without it).
pub fn require(p: &Principal, action: Scope) -> Result<(), Error> {
    if p.grants.can(&action) {
        Ok(())
    } else {
        Err(Error::Forbidden(format!(
            "this key was not issued `{action}`"
        )))
    }
}

/// Requires the namespace (404 without it: the key may not see it at all).
pub fn require_namespace(p: &Principal, ns: &Name) -> Result<(), Error> {
    if in_namespace(&p.grants, ns) {
        Ok(())
    } else {
        Err(Error::Hidden)
    }
}

fn in_namespace(g: &GrantSet, ns: &Name) -> bool {
    g.admin || g.namespaces.contains(ns)
}

/// Before a noun read touches the store: `nouns:read` and the namespace.
pub fn may_read_nouns(p: &Principal, ns: &Name) -> Result<(), Error> {
    require(p, Scope::NounsRead)?;
    require_namespace(p, ns)
}

/// A noun version the principal wants to read (after `may_read_nouns`).
pub fn read_noun(p: &Principal, entry: &VersionEntry) -> Result<(), Error> {
    if sees(p, entry.into()) {
        Ok(())
    } else {
        Err(Error::Hidden)
    }
}

/// Before a noun write touches the store: `cas:write` and the namespace.
pub fn may_write_nouns(p: &Principal, ns: &Name) -> Result<(), Error> {
    require(p, Scope::CasWrite)?;
    require_namespace(p, ns)
}

/// What a writer asks of a new version's envelope.
#[derive(Clone, Debug, Default)]
pub struct WantedMeta {
    /// Requested visibility.
    pub visibility: Option<Visibility>,
    /// Requested allowlist.
    pub allowed_surfaces: Option<Vec<Name>>,
    /// Requested producer surface (fixed once the noun exists).
    pub producer_surface: Option<Name>,
}

/// Decides a noun write under the key's lock: the new version's metadata,
/// or why the key may not write it. `latest` is `None` for a new noun.
pub fn write_noun(
    p: &Principal,
    latest: Option<&VersionEntry>,
    wanted: &WantedMeta,
) -> Result<VersionMeta, Error> {
    if wanted.visibility == Some(Visibility::Public) && !p.is_admin() {
        return Err(Error::Forbidden(
            "only admin may make a noun public; promotion to public goes through POST /v1/promotions".into(),
        ));
    }
    let producer_surface = match latest {
        Some(e) => {
            if !sees(p, e.into()) {
                return Err(Error::Hidden);
            }
            if e.visibility == Visibility::Public && !p.is_admin() {
                return Err(Error::Forbidden(
                    "the latest version of this noun is public: only admin may add versions to it, and a new public version comes from POST /v1/promotions".into(),
                ));
            }
            let own = e.visibility == Visibility::Private
                || e.producer_surface
                    .as_ref()
                    .is_some_and(|s| p.grants.surfaces.contains(s));
            if !p.is_admin() && !own {
                return Err(Error::Forbidden(
                    "this key may add versions only to nouns produced by a surface it holds".into(),
                ));
            }
            if wanted.producer_surface.is_some() && wanted.producer_surface != e.producer_surface {
                return Err(Error::ProducerSurfaceFixed);
            }
            e.producer_surface.clone()
        }
        None => new_producer_surface(p, wanted.producer_surface.as_ref())?,
    };
    Ok(VersionMeta {
        created_by: p.key_id.to_string(),
        producer_surface,
        visibility: wanted
            .visibility
            .or(latest.map(|e| e.visibility))
            .unwrap_or(Visibility::SurfaceOnly),
        allowed_surfaces: wanted
            .allowed_surfaces
            .clone()
            .or_else(|| latest.map(|e| e.allowed_surfaces.clone()))
            .unwrap_or_default(),
        owner: match latest {
            Some(e) => e.owner.clone(),
            None => Some(p.key_id.to_string()),
        },
    })
}

/// The producer surface of a new record: the one asked for, which the key
/// must hold (admin may name any), or the key's only surface.
pub fn new_producer_surface(p: &Principal, wanted: Option<&Name>) -> Result<Option<Name>, Error> {
    match wanted {
        Some(s) if p.is_admin() || p.grants.surfaces.contains(s) => Ok(Some(s.clone())),
        Some(s) => Err(Error::Forbidden(format!(
            "this key does not hold surface:{s}; a record's producer surface must be one of the key's surfaces"
        ))),
        None if p.grants.surfaces.len() == 1 => Ok(p.grants.surfaces.iter().next().cloned()),
        None if p.is_admin() && p.grants.surfaces.is_empty() => Ok(None),
        None => Err(Error::ProducerSurfaceRequired),
    }
}

/// Whether the principal may see a task at all.
pub fn sees_task(p: &Principal, f: &TaskFacts<'_>) -> bool {
    p.viewer.sees_task(f)
}

/// A task the principal wants to read.
pub fn read_task(p: &Principal, f: &TaskFacts<'_>) -> Result<(), Error> {
    if sees_task(p, f) {
        Ok(())
    } else {
        Err(Error::Hidden)
    }
}

/// Whether the key was issued this queue, when the caller names the
/// queue (an enqueue, a queue claim): to a key that was not issued it, a
/// queue answers exactly like one that was never provisioned.
pub fn may_use_queue(p: &Principal, queue: &Name, server: bool) -> Result<(), Error> {
    match queue_granted(p, queue, server) {
        Err(_) if !p.is_admin() => Err(Error::HiddenQueue(queue.to_string())),
        other => other,
    }
}

/// Whether `p` is shown the name of `queue` where a task it sees names it
/// (a task view, a task event, a list filter): only when it was issued the
/// queue, or is admin. To a key that was not issued it a queue answers as
/// one never provisioned ([`may_use_queue`]), so no answer names it
/// either: a key may see a task (by namespace and surface) on a server
/// queue or another queue of its team, but not where it runs.
pub fn shows_queue(p: &Principal, queue: &Name) -> bool {
    p.viewer.shows_queue(queue)
}

/// Whether the key was issued the queue of a task it can see. A server
/// queue must be named explicitly, by admin keys too; no tag, contract
/// field or model name routes work into it. The refusal names the queue
/// (and that it is a server queue) only to admin: to any other key the
/// queue is one it was not issued, whose name it is never shown.
fn queue_granted(p: &Principal, queue: &Name, server: bool) -> Result<(), Error> {
    if p.viewer.has_queue(queue, server) {
        Ok(())
    } else if p.is_admin() {
        Err(Error::Forbidden(format!(
            "{queue} is a server queue: only keys issued with that queue by name may use it"
        )))
    } else {
        Err(Error::Forbidden(
            "this key was not issued the task's queue".into(),
        ))
    }
}

fn may_do_kind_and_effect(p: &Principal, kind: &Name, effect: EffectClass) -> Result<(), Error> {
    p.viewer
        .kind_and_effect(kind, effect)
        .map_or(Ok(()), |r| Err(refused(r, kind, effect)))
}

/// The words of a viewer's refusal (`Refusal::Queue` and `Hidden` are
/// answered where the queue and the task are known).
fn refused(r: Refusal, kind: &Name, effect: EffectClass) -> Error {
    match r {
        Refusal::AdminEffect => Error::Forbidden(format!(
            "{} tasks need an admin key",
            serde_json::to_value(effect)
                .expect("effect classes serialize")
                .as_str()
                .unwrap_or("this effect class")
        )),
        Refusal::Kind => Error::Forbidden(format!("this key was not issued kind {kind}")),
        Refusal::Effect => Error::Forbidden("this key was not issued that effect class".into()),
        Refusal::NoClaimScope => Error::Forbidden("this key was not issued `verbs:claim`".into()),
        Refusal::Hidden => Error::Hidden,
        Refusal::Queue { .. } => {
            Error::Forbidden("this key was not issued the task's queue".into())
        }
    }
}

/// Before a queue claim touches the queue: `verbs:claim` and the queue.
pub fn may_claim_from(p: &Principal, queue: &Name, server: bool) -> Result<(), Error> {
    require(p, Scope::VerbsClaim)?;
    may_use_queue(p, queue, server)
}

/// Whether the principal may claim this task: it sees it (else hidden),
/// holds `verbs:claim`, the queue, the kind and the effect class.
pub fn may_claim(p: &Principal, f: &TaskFacts<'_>) -> Result<(), Error> {
    match p.viewer.claim_refusal(f) {
        None => Ok(()),
        Some(Refusal::Queue { .. }) => queue_granted(p, f.queue, f.server_queue),
        Some(r) => Err(refused(r, f.kind, f.effect_class)),
    }
}

/// Whether the principal may enqueue a task with these facts; returns the
/// producer surface the task gets (the one named, or the key's only one).
pub fn may_enqueue(p: &Principal, f: &TaskFacts<'_>) -> Result<Option<Name>, Error> {
    require(p, Scope::VerbsEnqueue)?;
    require_namespace(p, f.namespace)?;
    may_use_queue(p, f.queue, f.server_queue)?;
    may_do_kind_and_effect(p, f.kind, f.effect_class)?;
    if f.envelope.visibility == Visibility::Public && !p.is_admin() {
        return Err(Error::Forbidden(
            "only admin may enqueue public tasks".into(),
        ));
    }
    new_producer_surface(p, f.envelope.producer_surface)
}

/// Whether a key that is not an admin could ever see (and so claim) a
/// task with this envelope: `surface_only` needs a producer surface and
/// `allowlist_surfaces` a producer or an allowed surface, since only keys
/// holding one see it. `Err` says what is missing. A `private` task is
/// its requester's by choice, and `public` any key's in the namespace.
pub fn reachable(env: &Envelope<'_>) -> Result<(), String> {
    let surfaces = env.producer_surface.is_some() || !env.allowed_surfaces.is_empty();
    match env.visibility {
        Visibility::SurfaceOnly if env.producer_surface.is_none() => Err(
            "visibility_scope surface_only names no producer_surface, so only admin keys could ever see or claim this task; name producer_surface (surface:X), or choose visibility_scope private or public".into(),
        ),
        Visibility::AllowlistSurfaces if !surfaces => Err(
            "visibility_scope allowlist_surfaces names no producer_surface and no allowed_surfaces, so only admin keys could ever see or claim this task; name a surface".into(),
        ),
        _ => Ok(()),
    }
}

/// Whether the principal may resume a parked task: resuming is an
/// enqueue-level act, so it sees the task and holds `verbs:enqueue` and
/// the task's queue, kind and effect class. That it is not the key that
/// parked the task is the queue's to decide, with the park it applies to
/// (`State::decide_resume`).
pub fn may_resume(p: &Principal, f: &TaskFacts<'_>) -> Result<(), Error> {
    read_task(p, f)?;
    require(p, Scope::VerbsEnqueue)?;
    queue_granted(p, f.queue, f.server_queue)?;
    may_do_kind_and_effect(p, f.kind, f.effect_class)
}

/// The authority a split's children are enqueued under: the task's
/// requester's grants intersected with the splitting worker's. The
/// children stay the requester's (its key id and `verbs:enqueue`), and no
/// child gets a queue, kind, effect class, namespace or surface that
/// either key lacks. It owns nothing (unless both are one key): what it
/// may read, both keys may read, so a child can neither pin a noun nor
/// depend on a task that is private to one of them.
pub fn split_authority(requester: &Principal, splitter: &Principal) -> Result<Principal, Error> {
    require(requester, Scope::VerbsEnqueue).map_err(|_| {
        Error::Forbidden(
            "the task's requester key was not issued verbs:enqueue, so its task cannot gain children".into(),
        )
    })?;
    let grants = requester.grants.intersect(&splitter.grants);
    Ok(Principal::new(PrincipalInfo::new(
        requester.key_id.clone(),
        requester.account_id.clone(),
        requester.kind,
        grants,
        requester.key_id == splitter.key_id,
    )))
}

/// Whether a split child may be enqueued under `within` (from
/// [`split_authority`]): an enqueue check, and further a server queue or
/// an admin-only effect class only where the parent had that very one,
/// and a priority at most the parent's.
pub fn may_split_child(
    within: &Principal,
    parent: &TaskFacts<'_>,
    parent_priority: i32,
    child: &TaskFacts<'_>,
    child_priority: i32,
) -> Result<(), Error> {
    may_enqueue(within, child)?;
    if child.server_queue && child.queue != parent.queue {
        return Err(Error::Forbidden(format!(
            "{} is a server queue: a child may use a server queue only when its parent runs in it",
            child.queue
        )));
    }
    if child.effect_class.needs_admin() && child.effect_class != parent.effect_class {
        return Err(Error::Forbidden(
            "a child may have an admin-only effect class only when its parent has that class"
                .into(),
        ));
    }
    if child_priority > parent_priority {
        return Err(Error::Forbidden(format!(
            "a child's priority is at most its parent's ({parent_priority})"
        )));
    }
    Ok(())
}

/// Whether the principal may cancel: the requester or an admin.
pub fn may_cancel(p: &Principal, f: &TaskFacts<'_>) -> Result<(), Error> {
    requester_or_admin(p, f, "cancel")
}

/// Whether the principal may retry a failed or cancelled task: the
/// requester or an admin.
pub fn may_retry(p: &Principal, f: &TaskFacts<'_>) -> Result<(), Error> {
    requester_or_admin(p, f, "retry")
}

/// A task the key sees (else hidden) that it enqueued, or any for admin.
fn requester_or_admin(p: &Principal, f: &TaskFacts<'_>, what: &str) -> Result<(), Error> {
    read_task(p, f)?;
    if p.viewer.may_end(f) {
        Ok(())
    } else {
        Err(Error::Forbidden(format!(
            "only the requester or an admin may {what} a task"
        )))
    }
}

/// Whether the principal may act on a claimed task it works on
/// (heartbeat, release, park, split): `verbs:claim` and sight of the task.
/// The lease id then proves it holds the claim.
pub fn may_work(p: &Principal, f: &TaskFacts<'_>) -> Result<(), Error> {
    require(p, Scope::VerbsClaim)?;
    read_task(p, f)
}

/// Whether the principal may submit: `verbs:submit` and sight of the task.
pub fn may_submit(p: &Principal, f: &TaskFacts<'_>) -> Result<(), Error> {
    require(p, Scope::VerbsSubmit)?;
    read_task(p, f)
}
