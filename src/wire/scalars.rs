//! OpenAPI schemas of the daemon's types that travel as checked strings
//! (the core crate's `Name` and `Sha256` carry theirs): each one says the
//! rule its parser enforces, so a generated request fits it.

use std::borrow::Cow;

use tessera_core::scalars::string;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;
use utoipa::{PartialSchema, ToSchema};

use crate::auth::Scope;

impl PartialSchema for Scope {
    fn schema() -> RefOr<Schema> {
        string(
            "^(nouns:read|cas:write|verbs:claim|verbs:submit|verbs:enqueue|metrics:read|admin|(namespace|surface):[A-Za-z0-9][A-Za-z0-9._-]{0,127})$",
            "A scope: namespace:X, surface:X, nouns:read, cas:write, verbs:claim, verbs:submit, verbs:enqueue, metrics:read or admin.",
        )
    }
}

impl ToSchema for Scope {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Scope")
    }
}
