//! A [`Viewer`] as SQL: the same sight and claim rules as
//! `Viewer::sees_task` and `Viewer::claim_refusal`, as predicates over the
//! `tasks` table with the viewer's grants bound as parameters, so a page,
//! a count or a claim filters rows in the database exactly as the
//! embedded queue filters them in memory.
//!
//! The rules' decisions stay in Rust where they are data: which effect
//! classes need admin ([`needs_admin`](crate::store::envelope::EffectClass::needs_admin)) is applied to the
//! bound effect list, not written again in SQL.

use tokio_postgres::types::ToSql;

use crate::store::envelope::{Viewer, Visibility};

/// A viewer's grants as the parameters of [`Grants::sees`] (the first
/// [`SIGHT`] of [`Grants::params`]) and [`Grants::may_claim`] (all
/// [`PARAMS`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Grants {
    admin: bool,
    claims: bool,
    /// The key whose private tasks are its own (none for a split's
    /// authority, which owns nothing).
    owner: Option<String>,
    namespaces: Vec<String>,
    surfaces: Vec<String>,
    queues: Vec<String>,
    kinds: Vec<String>,
    /// Granted effect classes that a key without admin may use.
    effects: Vec<String>,
}

/// How many parameters [`Grants::may_claim`] binds.
pub const PARAMS: usize = 8;

/// How many parameters [`Grants::sees`] binds: the first of
/// [`Grants::params`].
pub const SIGHT: usize = 4;

impl Grants {
    /// The grants of `viewer`.
    pub fn of(viewer: &Viewer) -> Grants {
        let names = |set: &std::collections::HashSet<crate::store::Name>| {
            let mut v: Vec<String> = set.iter().map(|n| n.as_str().to_string()).collect();
            v.sort();
            v
        };
        let mut effects: Vec<String> = viewer
            .effect_classes
            .iter()
            .filter(|e| !e.needs_admin())
            .map(|e| wire(*e))
            .collect();
        effects.sort();
        Grants {
            admin: viewer.admin,
            claims: viewer.claims,
            owner: viewer.owns.then(|| viewer.key.as_str().to_string()),
            namespaces: names(&viewer.namespaces),
            surfaces: names(&viewer.surfaces),
            queues: names(&viewer.queues),
            kinds: names(&viewer.kinds),
            effects,
        }
    }

    /// The parameters, to bind from `$first` on (the first [`SIGHT`] for
    /// [`Grants::sees`]).
    pub fn params(&self) -> [&(dyn ToSql + Sync); PARAMS] {
        [
            &self.admin,
            &self.owner,
            &self.namespaces,
            &self.surfaces,
            &self.claims,
            &self.queues,
            &self.kinds,
            &self.effects,
        ]
    }

    /// Whether the viewer sees the row `t` of `tasks` (`Viewer::sees_task`),
    /// with the parameters bound from `$first`.
    pub fn sees(t: &str, first: usize) -> String {
        let [admin, owner, namespaces, surfaces, ..] = slots(first);
        let holds = format!("{t}.producer_surface = ANY({surfaces})");
        format!(
            "coalesce({admin} OR ({t}.namespace = ANY({namespaces}) AND (\
               {t}.visibility = '{public}' \
               OR ({t}.visibility = '{private}' AND {t}.requester = {owner}) \
               OR ({t}.visibility = '{surface}' AND {holds}) \
               OR ({t}.visibility = '{allowlist}' AND ({holds} OR {t}.allowed_surfaces && {surfaces})))), false)",
            public = wire(Visibility::Public),
            private = wire(Visibility::Private),
            surface = wire(Visibility::SurfaceOnly),
            allowlist = wire(Visibility::AllowlistSurfaces),
        )
    }

    /// Whether the viewer may claim the row `t` of `tasks`, whose queue's
    /// server flag is the SQL expression `server`
    /// (`Viewer::claim_refusal` is none), with the parameters bound from
    /// `$first`.
    pub fn may_claim(t: &str, server: &str, first: usize) -> String {
        let [admin, _, _, _, claims, queues, kinds, effects] = slots(first);
        format!(
            "coalesce({claims} AND {sees} \
               AND ({t}.queue = ANY({queues}) OR ({admin} AND NOT {server})) \
               AND ({admin} OR ({t}.kind = ANY({kinds}) AND {t}.effect_class = ANY({effects}))), false)",
            sees = Grants::sees(t, first),
        )
    }
}

/// `$first` … `$first + PARAMS - 1`, typed, as the predicates name them.
fn slots(first: usize) -> [String; PARAMS] {
    const TYPES: [&str; PARAMS] = [
        "bool", "text", "text[]", "text[]", "bool", "text[]", "text[]", "text[]",
    ];
    std::array::from_fn(|i| format!("${}::{}", first + i, TYPES[i]))
}

/// A visibility or effect class as the wire (and the `tasks` table)
/// spells it.
pub fn wire<T: serde::Serialize>(value: T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        other => unreachable!("a unit variant serializes as a string, not {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::envelope::EffectClass;

    #[test]
    fn effect_classes_that_need_admin_are_never_bound_for_a_key_without_it() {
        let mut v = Viewer::admin(crate::store::Name::parse("key", "k1").unwrap());
        v.admin = false;
        v.effect_classes = [
            EffectClass::Read,
            EffectClass::WriteInternal,
            EffectClass::WriteRepo,
            EffectClass::Public,
        ]
        .into();
        assert_eq!(Grants::of(&v).effects, ["read", "write-internal"]);
    }

    #[test]
    fn the_predicates_number_their_parameters_from_the_first_slot() {
        let sql = Grants::may_claim("t", "q.server", 3);
        assert!(sql.contains("$3::bool") && sql.contains("$10::text[]"));
        assert!(!sql.contains("$2::") && !sql.contains("$11::"));
    }
}
