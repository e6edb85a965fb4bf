//! The schemas of types that flatten a strict type into their own fields:
//! the derive would say `allOf` with the strict type, whose
//! `additionalProperties: false` then refuses the outer type's own fields.
//! Each is the inner type's schema with the outer fields added: open for
//! a reply ([`QueueView`], [`ProvisionedQueue`]), closed for a request
//! (see [`with_fields`]).

use std::borrow::Cow;

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::queue::QueueConfig;
use crate::wire::{ProvisionedQueue, QueueView};

/// `T`'s object schema with `fields` added (each required), described by
/// `description`; still closed to any other field when `T`'s is. For a
/// request type that flattens `T` beside fields of its own.
pub fn with_fields<T: PartialSchema>(
    description: &str,
    fields: Vec<(&str, RefOr<Schema>)>,
) -> RefOr<Schema> {
    match T::schema() {
        RefOr::T(Schema::Object(mut o)) => {
            o.description = Some(description.into());
            for (name, schema) in fields {
                o.properties.insert(name.into(), schema);
                o.required.push(name.into());
            }
            o.into()
        }
        other => other,
    }
}

/// [`QueueConfig`]'s schema, open to other fields, with `field` added
/// (required) and `description` as its own.
fn config_with(description: &str, field: &str, schema: ObjectBuilder) -> RefOr<Schema> {
    match with_fields::<QueueConfig>(description, vec![(field, schema.into())]) {
        RefOr::T(Schema::Object(mut o)) => {
            o.additional_properties = None;
            o.into()
        }
        other => other,
    }
}

impl PartialSchema for QueueView {
    fn schema() -> RefOr<Schema> {
        let counts = ObjectBuilder::new()
            .schema_type(Type::Object)
            .additional_properties(Some(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0)),
            ))
            .description(Some("Tasks by state (those the key may see)."));
        config_with(
            "A queue's config with its task counts by state.",
            "counts",
            counts,
        )
    }
}

impl ToSchema for QueueView {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("QueueView")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        QueueConfig::schemas(schemas);
    }
}

impl PartialSchema for ProvisionedQueue {
    fn schema() -> RefOr<Schema> {
        let created = ObjectBuilder::new()
            .schema_type(Type::Boolean)
            .description(Some(
                "True (201) when the post made the queue; false (200) when it existed, and the \
                 post changed only the fields it named.",
            ));
        config_with(
            "The queue's whole config after the post, and whether the post made it.",
            "created",
            created,
        )
    }
}

impl ToSchema for ProvisionedQueue {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ProvisionedQueue")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        QueueConfig::schemas(schemas);
    }
}
