//! The schemas of the core types that travel as checked strings: each
//! says the rule its parser enforces, so a generated request fits it.

use std::borrow::Cow;

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::task::TaskId;
use crate::{Name, Sha256};

/// A string schema with a pattern and a description.
pub fn string(pattern: &str, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .description(Some(description))
        .into()
}

impl PartialSchema for Name {
    fn schema() -> RefOr<Schema> {
        string(
            "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
            "A name segment (namespace, store, key, queue, kind, surface); never `.` or `..`.",
        )
    }
}

impl ToSchema for Name {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Name")
    }
}

impl PartialSchema for Sha256 {
    fn schema() -> RefOr<Schema> {
        string(
            "^[0-9a-f]{64}$",
            "A sha256 digest: 64 lowercase hex characters.",
        )
    }
}

impl ToSchema for Sha256 {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Sha256")
    }
}

impl PartialSchema for TaskId {
    fn schema() -> RefOr<Schema> {
        string("^t[0-9]{1,19}$", "A task id: `t` followed by digits.")
    }
}

impl ToSchema for TaskId {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("TaskId")
    }
}
