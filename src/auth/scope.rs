//! `Scope`, `EffectClass` and `Grants`: the closed vocabulary of what a key
//! may be issued. Strings are parsed once, at issuance; an unknown scope is
//! refused there, so a stored key can only hold scopes this module knows.

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
    /// `admin`: everything, including issuing keys.
    Admin,
}

/// A scope string this daemon does not know.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown scope {0:?}; scopes are namespace:X, surface:X, nouns:read, cas:write, verbs:claim, verbs:submit, verbs:enqueue, admin"
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
