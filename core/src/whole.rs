//! Integer fields that take integer-valued JSON numbers (`2468.0`,
//! `2.468e3`), as JSON Schema's `integer` allows, for fields read where a
//! body's own parse cannot rewrite them (fields flattened into a holder,
//! which serde buffers before reading).

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, Visitor};

/// The largest integer a float holds exactly (2^53).
const EXACT: f64 = 9_007_199_254_740_992.0;

/// The integer `v` is, when it is a whole number a float holds exactly:
/// the one rule for integer-valued numbers, here and in the daemon's
/// rewrite of a body's refused numbers.
pub fn exact_integer(v: f64) -> Option<i64> {
    (v.is_finite() && v.fract() == 0.0 && v.abs() <= EXACT).then_some(v as i64)
}

/// Reads an integer, or a float that is one, as `T`.
pub fn number<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64> + TryFrom<u64>,
{
    d.deserialize_any(Whole(PhantomData))
}

/// [`number`] for an optional field: `null` is `None`.
pub fn optional<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i64> + TryFrom<u64>,
{
    d.deserialize_option(Optional(PhantomData))
}

struct Whole<T>(PhantomData<T>);

impl<T: TryFrom<i64> + TryFrom<u64>> Visitor<'_> for Whole<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an integer in range ({})", std::any::type_name::<T>())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        T::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        T::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        match exact_integer(v) {
            Some(n) => self.visit_i64(n),
            None => Err(E::invalid_type(de::Unexpected::Float(v), &self)),
        }
    }
}

struct Optional<T>(PhantomData<T>);

impl<'de, T: TryFrom<i64> + TryFrom<u64>> Visitor<'de> for Optional<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "null or an integer ({})", std::any::type_name::<T>())
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        number(d).map(Some)
    }
}
