//! Request bodies as strict JSON: the depth limit, unknown fields and
//! wrong types refused with the field or the position, integer-valued
//! numbers read into integer fields ([`super::whole_numbers`]).

use serde::de::DeserializeOwned;
use serde_json::json;

use super::error::{ApiError, ErrorCode};
use crate::store::canonical::{MAX_JSON_DEPTH, json_depth};

/// Parses strict JSON: JSON nested deeper than `MAX_JSON_DEPTH`, unknown
/// fields, wrong types and syntax errors are 400s naming the limit, the
/// field or the position.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if json_depth(bytes) > MAX_JSON_DEPTH {
        return Err(ApiError::new(ErrorCode::TooDeep,
            format!(
                "the JSON body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels; flatten it"
            ),
        )
        .with(json!({"limit": MAX_JSON_DEPTH})));
    }
    super::whole_numbers::from_slice(bytes).map_err(|e| json_refusal(&e))
}

/// The answer to JSON that `serde_json` refused, for a body or for values
/// taken out of one (an MCP tool's arguments): an unknown field, a wrong
/// shape, or a syntax error, with the position when the error has one.
pub fn json_refusal(e: &serde_json::Error) -> ApiError {
    let mut details = serde_json::Map::new();
    if e.line() > 0 {
        details.insert("line".into(), json!(e.line()));
        details.insert("column".into(), json!(e.column()));
    }
    let msg = e.to_string();
    let (code, message) = match e.classify() {
        serde_json::error::Category::Data => match msg
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split('`').next())
        {
            Some(field) => {
                details.insert("field".into(), json!(field));
                (ErrorCode::UnknownField, format!("unknown field `{field}`"))
            }
            None => (ErrorCode::InvalidBody, msg),
        },
        _ => (ErrorCode::MalformedJson, format!("malformed JSON: {msg}")),
    };
    ApiError::new(code, message).with(serde_json::Value::Object(details))
}
