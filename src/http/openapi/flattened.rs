//! The schema of a wire type that flattens a strict request type into a
//! reply: the derive would say `allOf` with the strict type, whose
//! `additionalProperties: false` then refuses the reply's own fields.

use std::borrow::Cow;

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::http::wire::QueueView;
use crate::queue::QueueConfig;

impl PartialSchema for QueueView {
    fn schema() -> RefOr<Schema> {
        match QueueConfig::schema() {
            RefOr::T(Schema::Object(mut o)) => {
                o.additional_properties = None;
                o.description = Some("A queue's config with its task counts by state.".into());
                let counts = ObjectBuilder::new()
                    .schema_type(Type::Object)
                    .additional_properties(Some(
                        ObjectBuilder::new()
                            .schema_type(Type::Integer)
                            .minimum(Some(0)),
                    ))
                    .description(Some("Tasks by state (those the key may see)."));
                o.properties.insert("counts".into(), counts.into());
                o.required.push("counts".into());
                o.into()
            }
            other => other,
        }
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
