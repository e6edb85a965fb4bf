//! `Scope`, `EffectClass` and `Grants`: the closed vocabulary of what a key
//! may be issued. Strings are parsed once, at issuance: a key request's
//! grants arrive as [`RequestedGrants`] (scopes still text) and become
//! [`Grants`] only through [`RequestedGrants::check`], which refuses an
//! unknown scope by its place in the list, so a stored key can only hold
//! scopes this module knows.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::store::{EffectClass, Name};

/// One issued scope.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `namespace:X`: may act in namespace X.
    Namespace(Name),
    /// `surface:X`: acts for surface X (makes the key a service binding).
    Surface(Name),
    /// `nouns:read`.
    NounsRead,
    /// `cas:write`: may add noun versions.
    CasWrite,
    /// `verbs:claim`.
    VerbsClaim,
    /// `verbs:submit`.
    VerbsSubmit,
    /// `verbs:enqueue`: may enqueue and resume tasks.
    VerbsEnqueue,
    /// `metrics:read`: may scrape `GET /metrics` (daemon-wide figures).
    MetricsRead,
    /// `admin`: everything, including issuing keys.
    Admin,
}

/// A scope string this daemon does not know.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown scope {0:?}; scopes are namespace:X, surface:X, nouns:read, cas:write, verbs:claim, verbs:submit, verbs:enqueue, metrics:read, admin"
)]
pub struct UnknownScope(pub String);

impl FromStr for Scope {
    type Err = UnknownScope;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let unknown = || UnknownScope(s.chars().take(200).collect());
        Ok(match s {
            "nouns:read" => Scope::NounsRead,
            "cas:write" => Scope::CasWrite,
            "verbs:claim" => Scope::VerbsClaim,
            "verbs:submit" => Scope::VerbsSubmit,
            "verbs:enqueue" => Scope::VerbsEnqueue,
            "metrics:read" => Scope::MetricsRead,
            "admin" => Scope::Admin,
            _ => match s.split_once(':') {
                Some(("namespace", n)) => {
                    Scope::Namespace(Name::parse("namespace", n).map_err(|_| unknown())?)
                }
                Some(("surface", n)) => {
                    Scope::Surface(Name::parse("surface", n).map_err(|_| unknown())?)
                }
                _ => return Err(unknown()),
            },
        })
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Namespace(n) => write!(f, "namespace:{n}"),
            Scope::Surface(n) => write!(f, "surface:{n}"),
            Scope::NounsRead => f.write_str("nouns:read"),
            Scope::CasWrite => f.write_str("cas:write"),
            Scope::VerbsClaim => f.write_str("verbs:claim"),
            Scope::VerbsSubmit => f.write_str("verbs:submit"),
            Scope::VerbsEnqueue => f.write_str("verbs:enqueue"),
            Scope::MetricsRead => f.write_str("metrics:read"),
            Scope::Admin => f.write_str("admin"),
        }
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What a key was issued: the only source of its permissions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct Grants {
    /// Queues it may claim from or enqueue to.
    #[serde(default)]
    pub queues: Vec<Name>,
    /// Task kinds it may claim or enqueue.
    #[serde(default)]
    pub kinds: Vec<Name>,
    /// Effect classes it may claim or enqueue.
    #[serde(default)]
    pub effect_classes: Vec<EffectClass>,
    /// Scopes.
    #[serde(default)]
    pub scopes: Vec<Scope>,
}

/// The grants a key request asks for: [`Grants`] with the scopes as sent,
/// not yet checked. A body of the wrong shape is refused while it is read;
/// a scope this daemon does not know is a grant that cannot be issued,
/// found by [`RequestedGrants::check`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct RequestedGrants {
    /// Queues it may claim from or enqueue to.
    #[serde(default)]
    pub queues: Vec<Name>,
    /// Task kinds it may claim or enqueue.
    #[serde(default)]
    pub kinds: Vec<Name>,
    /// Effect classes it may claim or enqueue.
    #[serde(default)]
    pub effect_classes: Vec<EffectClass>,
    /// Scopes.
    #[serde(default)]
    #[schema(value_type = Vec<Scope>)]
    pub scopes: Vec<String>,
}

/// A requested scope this daemon does not know, and its place in the
/// request's list (the first such; the key is not issued).
#[derive(Debug, thiserror::Error)]
#[error("{unknown}")]
pub struct UnknownScopeAt {
    /// Its index in `grants.scopes`.
    pub index: usize,
    /// The scope, as sent (cut at 200 characters).
    pub unknown: UnknownScope,
}

impl RequestedGrants {
    /// The grants, once every scope is one this daemon knows.
    pub fn check(self) -> Result<Grants, UnknownScopeAt> {
        let scopes = self
            .scopes
            .iter()
            .enumerate()
            .map(|(index, s)| {
                s.parse()
                    .map_err(|unknown| UnknownScopeAt { index, unknown })
            })
            .collect::<Result<_, _>>()?;
        Ok(Grants {
            queues: self.queues,
            kinds: self.kinds,
            effect_classes: self.effect_classes,
            scopes,
        })
    }
}

impl From<Grants> for RequestedGrants {
    fn from(g: Grants) -> RequestedGrants {
        RequestedGrants {
            queues: g.queues,
            kinds: g.kinds,
            effect_classes: g.effect_classes,
            scopes: g.scopes.iter().map(Scope::to_string).collect(),
        }
    }
}

/// `Grants` compiled into sets, for checks that never touch the disk.
#[derive(Clone, Debug, Default)]
pub struct GrantSet {
    /// Holds `admin`.
    pub admin: bool,
    /// Namespaces from `namespace:X`.
    pub namespaces: HashSet<Name>,
    /// Surfaces from `surface:X`.
    pub surfaces: HashSet<Name>,
    /// Granted queues.
    pub queues: HashSet<Name>,
    /// Granted kinds.
    pub kinds: HashSet<Name>,
    /// Granted effect classes.
    pub effect_classes: HashSet<EffectClass>,
    /// The action scopes (`nouns:read`, `cas:write`, `verbs:*`).
    pub actions: HashSet<Scope>,
}

impl GrantSet {
    /// Compiles issued grants.
    pub fn compile(g: &Grants) -> GrantSet {
        let mut set = GrantSet {
            queues: g.queues.iter().cloned().collect(),
            kinds: g.kinds.iter().cloned().collect(),
            effect_classes: g.effect_classes.iter().copied().collect(),
            ..GrantSet::default()
        };
        for scope in &g.scopes {
            match scope {
                Scope::Admin => set.admin = true,
                Scope::Namespace(n) => {
                    set.namespaces.insert(n.clone());
                }
                Scope::Surface(n) => {
                    set.surfaces.insert(n.clone());
                }
                action => {
                    set.actions.insert(action.clone());
                }
            }
        }
        set
    }

    /// Whether the key holds an action scope (admin holds them all).
    pub fn can(&self, action: &Scope) -> bool {
        self.admin || self.actions.contains(action)
    }

    /// What both sets allow. Admin stands for every namespace, kind,
    /// effect class and non-server queue, so an admin side yields the
    /// other side's sets; the result is admin only when both are. Action
    /// scopes are `self`'s (the side on whose behalf the result acts),
    /// with everything admin implies made explicit.
    pub fn intersect(&self, other: &GrantSet) -> GrantSet {
        fn both<T: Clone + Eq + std::hash::Hash>(
            a: &HashSet<T>,
            a_admin: bool,
            b: &HashSet<T>,
            b_admin: bool,
        ) -> HashSet<T> {
            match (a_admin, b_admin) {
                (true, true) => a.union(b).cloned().collect(),
                (true, false) => b.clone(),
                (false, true) => a.clone(),
                (false, false) => a.intersection(b).cloned().collect(),
            }
        }
        let (a, b) = (self.admin, other.admin);
        let actions = if a {
            [
                Scope::NounsRead,
                Scope::CasWrite,
                Scope::VerbsClaim,
                Scope::VerbsSubmit,
                Scope::VerbsEnqueue,
                Scope::MetricsRead,
            ]
            .into_iter()
            .collect()
        } else {
            self.actions.clone()
        };
        GrantSet {
            admin: a && b,
            namespaces: both(&self.namespaces, a, &other.namespaces, b),
            surfaces: both(&self.surfaces, a, &other.surfaces, b),
            queues: both(&self.queues, a, &other.queues, b),
            kinds: both(&self.kinds, a, &other.kinds, b),
            effect_classes: both(&self.effect_classes, a, &other.effect_classes, b),
            actions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intersections_keep_only_what_both_sides_hold() {
        let set = |queues: &[&str], scopes: &[&str]| {
            GrantSet::compile(&Grants {
                queues: queues
                    .iter()
                    .map(|q| Name::parse("q", q).unwrap())
                    .collect(),
                kinds: vec![],
                effect_classes: vec![EffectClass::Read],
                scopes: scopes.iter().map(|s| s.parse().unwrap()).collect(),
            })
        };
        let requester = set(&["a", "b"], &["namespace:n", "verbs:enqueue"]);
        let worker = set(
            &["b", "srv"],
            &["namespace:n", "namespace:m", "verbs:claim"],
        );
        let both = requester.intersect(&worker);
        assert!(!both.admin);
        assert_eq!(both.queues.len(), 1);
        assert!(both.queues.contains(&Name::parse("q", "b").unwrap()));
        assert_eq!(both.namespaces.len(), 1);
        assert!(both.can(&Scope::VerbsEnqueue) && !both.can(&Scope::VerbsClaim));
        let admin = set(&[], &["admin"]);
        let from_admin = admin.intersect(&worker);
        assert!(!from_admin.admin && from_admin.can(&Scope::VerbsEnqueue));
        assert_eq!(from_admin.queues, worker.queues);
        assert!(admin.intersect(&admin).admin);
    }

    #[test]
    fn scope_strings_round_trip_and_unknown_ones_are_refused() {
        for s in [
            "namespace:team_example",
            "surface:team_example",
            "nouns:read",
            "cas:write",
            "verbs:claim",
            "verbs:submit",
            "verbs:enqueue",
            "admin",
        ] {
            assert_eq!(s.parse::<Scope>().unwrap().to_string(), s);
        }
        for bad in [
            "",
            "nouns:write",
            "namespace:",
            "namespace:../x",
            "surface:a/b",
            "ADMIN",
            "label:x",
        ] {
            assert!(bad.parse::<Scope>().is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn a_request_s_first_unknown_scope_is_refused_by_its_place() {
        let requested = |scopes: &[&str]| RequestedGrants {
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            ..RequestedGrants::default()
        };
        let granted = requested(&["nouns:read", "verbs:claim"]).check().unwrap();
        assert_eq!(granted.scopes, vec![Scope::NounsRead, Scope::VerbsClaim]);
        assert_eq!(
            RequestedGrants::from(granted),
            requested(&["nouns:read", "verbs:claim"])
        );
        let refused = requested(&["admin", "nouns:write", "verbs:fly"])
            .check()
            .unwrap_err();
        assert_eq!(
            (refused.index, refused.unknown.0.as_str()),
            (1, "nouns:write")
        );
    }
}
