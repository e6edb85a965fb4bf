//! The envelope vocabulary: who may see a record and what a task's effect
//! may touch, as plain data. It sits on the ground floor so that the queue
//! and the access rules (`auth::access`) both read it and neither imports
//! the other: the queue describes a task with [`TaskFacts`], and `auth`
//! decides from them.

pub use tessera_core::{EffectClass, Visibility};

use super::{Error, Name, VersionEntry};

/// A surface named with or without its `surface:` prefix; stored bare.
pub fn parse_surface(field: &'static str, s: &str) -> Result<Name, Error> {
    Ok(Name::surface(field, s)?)
}

/// What a record says about who may see it.
#[derive(Clone, Copy, Debug)]
pub struct Envelope<'a> {
    /// Its visibility.
    pub visibility: Visibility,
    /// The key id that owns it.
    pub owner: Option<&'a str>,
    /// The surface that produced it.
    pub producer_surface: Option<&'a Name>,
    /// The extra surfaces of `allowlist_surfaces`.
    pub allowed_surfaces: &'a [Name],
    /// Quarantined records are admin-only.
    pub quarantined: bool,
}

impl<'a> From<&'a VersionEntry> for Envelope<'a> {
    fn from(e: &'a VersionEntry) -> Envelope<'a> {
        Envelope {
            visibility: e.visibility,
            owner: e.owner.as_deref(),
            producer_surface: e.producer_surface.as_ref(),
            allowed_surfaces: &e.allowed_surfaces,
            quarantined: e.quarantined,
        }
    }
}

/// What the rules need to know about a task.
#[derive(Clone, Copy, Debug)]
pub struct TaskFacts<'a> {
    /// Its namespace.
    pub namespace: &'a Name,
    /// Its queue.
    pub queue: &'a Name,
    /// Whether the queue is a server queue.
    pub server_queue: bool,
    /// Its kind.
    pub kind: &'a Name,
    /// Its effect class.
    pub effect_class: EffectClass,
    /// Its visibility envelope (owner = the requester key).
    pub envelope: Envelope<'a>,
}

/// What one key may see and claim, as plain data: compiled once from its
/// grants by `auth` (`PrincipalInfo::viewer`), and the one place the
/// visibility and claim rules are decided, so the queue filters tasks by
/// them without knowing keys, and `auth::access` words the refusals.
#[derive(Clone, Debug)]
pub struct Viewer {
    /// The key id.
    pub key: Name,
    /// Whether what `key` owns (private records) is the viewer's own (false
    /// for a split's authority, which owns nothing).
    pub owns: bool,
    /// Holds `admin`: sees everything.
    pub admin: bool,
    /// Holds `verbs:claim`.
    pub claims: bool,
    /// Its namespaces.
    pub namespaces: std::collections::HashSet<Name>,
    /// Its surfaces.
    pub surfaces: std::collections::HashSet<Name>,
    /// Its queues.
    pub queues: std::collections::HashSet<Name>,
    /// Its kinds.
    pub kinds: std::collections::HashSet<Name>,
    /// Its effect classes.
    pub effect_classes: std::collections::HashSet<EffectClass>,
}

/// Why a viewer may not claim a task it asked for (`auth` words it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The key was not issued `verbs:claim`.
    NoClaimScope,
    /// The task is not one it may see (answered as missing).
    Hidden,
    /// The task's queue was not issued to it (`server`: a server queue,
    /// which even admin must be issued by name).
    Queue {
        /// Whether the queue is a server queue.
        server: bool,
    },
    /// The effect class needs an admin key.
    AdminEffect,
    /// The kind was not issued to it.
    Kind,
    /// The effect class was not issued to it.
    Effect,
}

impl Viewer {
    /// A viewer for `key` that sees and may claim every task, as an admin
    /// key does (benchmarks and tests of the queue alone).
    pub fn admin(key: Name) -> Viewer {
        Viewer {
            key,
            owns: true,
            admin: true,
            claims: true,
            namespaces: Default::default(),
            surfaces: Default::default(),
            queues: Default::default(),
            kinds: Default::default(),
            effect_classes: Default::default(),
        }
    }

    /// Whether what `owner` (a key id) owns is this viewer's own.
    pub fn owns(&self, owner: Option<&str>) -> bool {
        self.owns && owner == Some(self.key.as_str())
    }

    /// Whether it may see a record with this envelope (its namespace is
    /// checked separately).
    pub fn sees(&self, env: Envelope<'_>) -> bool {
        if self.admin {
            return true;
        }
        if env.quarantined {
            return false;
        }
        let holds = |s: Option<&Name>| s.is_some_and(|s| self.surfaces.contains(s));
        match env.visibility {
            Visibility::Private => self.owns(env.owner),
            Visibility::SurfaceOnly => holds(env.producer_surface),
            Visibility::AllowlistSurfaces => {
                holds(env.producer_surface) || env.allowed_surfaces.iter().any(|s| holds(Some(s)))
            }
            Visibility::Public => true,
        }
    }

    /// Whether it may see a task: its namespace and its envelope.
    pub fn sees_task(&self, f: &TaskFacts<'_>) -> bool {
        self.admin || (self.namespaces.contains(f.namespace) && self.sees(f.envelope))
    }

    /// Whether a queue's name may be shown to it: issued, or admin.
    pub fn shows_queue(&self, queue: &Name) -> bool {
        self.admin || self.queues.contains(queue)
    }

    /// Whether it was issued `queue` (a server queue by name, even for
    /// admin).
    pub fn has_queue(&self, queue: &Name, server: bool) -> bool {
        self.queues.contains(queue) || (self.admin && !server)
    }

    /// Why it may not do a task of this kind and effect class, if it may not.
    pub fn kind_and_effect(&self, kind: &Name, effect: EffectClass) -> Option<Refusal> {
        if effect.needs_admin() && !self.admin {
            Some(Refusal::AdminEffect)
        } else if !self.admin && !self.kinds.contains(kind) {
            Some(Refusal::Kind)
        } else if !self.admin && !self.effect_classes.contains(&effect) {
            Some(Refusal::Effect)
        } else {
            None
        }
    }

    /// Whether it may end or restart the task (cancel, retry): it sees it,
    /// and it is the task's requester or admin.
    pub fn may_end(&self, f: &TaskFacts<'_>) -> bool {
        self.sees_task(f) && (self.admin || self.owns(f.envelope.owner))
    }

    /// Why it may not claim the task, if it may not: `verbs:claim`, sight
    /// of the task, its queue, its kind and effect class, in that order.
    pub fn claim_refusal(&self, f: &TaskFacts<'_>) -> Option<Refusal> {
        if !self.claims {
            Some(Refusal::NoClaimScope)
        } else if !self.sees_task(f) {
            Some(Refusal::Hidden)
        } else if !self.has_queue(f.queue, f.server_queue) {
            Some(Refusal::Queue {
                server: f.server_queue,
            })
        } else {
            self.kind_and_effect(f.kind, f.effect_class)
        }
    }
}
