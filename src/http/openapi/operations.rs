//! What a route takes and answers, for the document: its credential,
//! query parameters, request body and success answers, built by the
//! route's declaration in the router's table (`http/routes/table.rs`).
//! The error answers follow from the route's class (see
//! [`Operation::error_statuses`]).

use http::Method;
use serde_json::{Value, json};

use super::schemas::Schemas;
use crate::queue::TaskId;
use crate::store::{Name, Sha256};

/// The credential a route takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// None: the route serves no secrets.
    None,
    /// An issued key (`key` scheme).
    Key,
    /// A worker handle or capability token (`worker` scheme).
    Worker,
}

/// A success answer: status, description, and the body's media type and
/// schema (none for an empty body).
pub(crate) struct Answer {
    /// The status.
    pub status: u16,
    /// What it means.
    pub what: &'static str,
    /// Media type and schema.
    pub body: Option<(&'static str, Value)>,
}

/// One operation of the document.
pub(crate) struct Operation {
    /// The method.
    pub method: Method,
    /// The path template, as in the router's table.
    pub path: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// Its credential.
    pub auth: Auth,
    /// Query parameters: name, schema, required, description.
    pub query: Vec<(&'static str, Value, bool, &'static str)>,
    /// The request body: media type, schema, required.
    pub body: Option<(&'static str, Value, bool)>,
    /// Success answers.
    pub ok: Vec<Answer>,
    /// Whether it writes (and so may meet conflicts, rules and a full disk).
    pub writes: bool,
    /// Error statuses beyond its class's.
    pub also: Vec<u16>,
}

impl Operation {
    pub(crate) fn new(
        method: Method,
        path: &'static str,
        auth: Auth,
        summary: &'static str,
    ) -> Operation {
        Operation {
            method,
            path,
            summary,
            auth,
            query: Vec::new(),
            body: None,
            ok: Vec::new(),
            writes: false,
            also: Vec::new(),
        }
    }

    pub(crate) fn query(
        mut self,
        name: &'static str,
        schema: Value,
        description: &'static str,
    ) -> Self {
        self.query.push((name, schema, false, description));
        self
    }

    pub(crate) fn json(mut self, schema: Value) -> Self {
        self.body = Some(("application/json", schema, true));
        self
    }

    pub(crate) fn json_optional(mut self, schema: Value) -> Self {
        self.body = Some(("application/json", schema, false));
        self
    }

    pub(crate) fn bytes(mut self) -> Self {
        self.body = Some(("application/octet-stream", binary(), false));
        self
    }

    pub(crate) fn ok(self, status: u16, what: &'static str, schema: Value) -> Self {
        self.ok_as(status, what, "application/json", schema)
    }

    pub(crate) fn ok_as(
        mut self,
        status: u16,
        what: &'static str,
        media: &'static str,
        schema: Value,
    ) -> Self {
        self.ok.push(Answer {
            status,
            what,
            body: Some((media, schema)),
        });
        self
    }

    pub(crate) fn empty(mut self, status: u16, what: &'static str) -> Self {
        self.ok.push(Answer {
            status,
            what,
            body: None,
        });
        self
    }

    pub(crate) fn may(mut self, status: u16) -> Self {
        self.also.push(status);
        self
    }

    pub(crate) fn writes(mut self) -> Self {
        self.writes = true;
        self
    }

    /// The error statuses the route's class can answer, each with the
    /// error body: any route can meet a bad path (400), a missing or hidden
    /// thing (404), a bug or a failed store (500, 503); a credential adds
    /// 401 and 403, a worker credential also a dead attempt (409) and the
    /// failure budget (429); a body adds a slow body (408) and a large one
    /// (413); a write adds conflicts (409), rules (422) and a full disk (507);
    /// a read by pin adds a pin mismatch (409).
    pub fn error_statuses(&self) -> Vec<u16> {
        let mut s = vec![400, 404, 500, 503];
        match self.auth {
            Auth::None => {}
            Auth::Key => s.extend([401, 403]),
            Auth::Worker => s.extend([401, 403, 409, 429]),
        }
        if self.body.is_some() {
            s.extend([408, 413]);
        }
        if self.writes {
            s.extend([409, 422, 507]);
        }
        s.extend(&self.also);
        s.retain(|st| !self.ok.iter().any(|a| a.status == *st));
        s.sort_unstable();
        s.dedup();
        s
    }
}

impl Operation {
    /// Adds `?dry_run=`.
    pub(crate) fn dry_run(self) -> Self {
        self.query(
            "dry_run",
            boolean(),
            "Report what would happen; write nothing.",
        )
    }

    /// Adds `?source_pack=`, the label of a seed pack's writes.
    pub(crate) fn source_pack(self, s: &mut Schemas) -> Self {
        self.query(
            "source_pack",
            s.of::<Name>(),
            "The seed pack this write comes from (a label; grants nothing).",
        )
    }

    /// Adds `?task_id=`, which a worker route takes with a key.
    pub(crate) fn task_id(self, s: &mut Schemas) -> Self {
        self.query(
            "task_id",
            s.of::<TaskId>(),
            "The task, when the credential is a key rather than a handle.",
        )
    }

    /// Adds a read's pin: `?version=` and `?sha256=` (409 on a mismatch).
    pub(crate) fn pin_query(self, s: &mut Schemas) -> Self {
        self.query(
            "version",
            count(),
            "A version (default: the latest readable).",
        )
        .query(
            "sha256",
            s.of::<Sha256>(),
            "The version's expected sha256 (409 pin_mismatch otherwise).",
        )
        .may(409)
    }

    /// Answers 200 with stored bytes under the media type they were
    /// stored with, which the `content-type` header carries: declared as
    /// bytes (what a generated client reads them as, whatever their type)
    /// and as any type (what a checker matches the header against).
    pub(crate) fn raw(self, what: &'static str) -> Self {
        self.ok_as(200, what, "application/octet-stream", binary())
            .ok_as(200, what, "*/*", json!({}))
    }
}

/// A string of bytes.
pub(crate) fn binary() -> Value {
    json!({"type": "string", "format": "binary"})
}

/// Any string.
pub(crate) fn string() -> Value {
    json!({"type": "string"})
}

/// A comma-separated list of task states (`pending,queued,parked`), as a
/// cancel's `if_state` takes it.
pub(crate) fn state_list() -> Value {
    let one = crate::queue::TaskState::ALL.map(|s| s.as_str()).join("|");
    json!({"type": "string", "pattern": format!("^({one})(,({one}))*$")})
}

/// A piece of a task's output, as `Address::parse` takes it: `$.out`, or
/// `$.parts["<name>"]` with the name as a JSON string naming a part: no
/// `/` or `\` (the parser also refuses them `\u`-escaped, and `.` and
/// `..`, which the pattern does not say).
pub(crate) fn output_address() -> Value {
    json!({
        "type": "string",
        "pattern": r#"^\$\.out$|^\$\.parts\["(?:[^"\\/\x00-\x1f]|\\["bfnrt]|\\u[0-9a-fA-F]{4})+"\]$"#,
        "description": "`$.out`, or `$.parts[\"<part name>\"]` with the name as a JSON string.",
    })
}

/// A part's name, as `worker::artifact::check_name` takes it: a plain file
/// name, without a path separator or a control character, at most 255
/// bytes (never `.`, `..`, the daemon's owner mark or the step's own
/// `<step>.md`, which a pattern does not say).
pub(crate) fn part_name() -> Value {
    json!({
        "type": "string",
        "minLength": 1,
        "maxLength": crate::worker::artifact::MAX_PART_NAME,
        "pattern": r"^[^/\\\x00-\x1f\x7f]+$",
        "description": "A plain file name of at most 255 bytes: no path separator, no control or format character; not `.`, `..` or `<step>.md`.",
    })
}

/// A boolean.
pub(crate) fn boolean() -> Value {
    json!({"type": "boolean"})
}

/// A count: an integer, at least 0.
pub(crate) fn count() -> Value {
    json!({"type": "integer", "minimum": 0})
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{output_address, state_list};
    use crate::queue::TaskState;
    use crate::queue::brief::Address;

    fn matches(schema: &Value, text: &str) -> bool {
        jsonschema::validator_for(schema)
            .unwrap()
            .is_valid(&json!(text))
    }

    /// The documented `if_state` and output `path` patterns take what the
    /// daemon's parsers take, and refuse what they refuse.
    #[test]
    fn query_patterns_say_what_the_parsers_take() {
        let states = state_list();
        for s in TaskState::ALL {
            assert!(matches(&states, s.as_str()), "{s:?}");
        }
        for (text, taken) in [
            ("pending,queued,parked", true),
            ("", false),
            ("pending,", false),
            ("bogus", false),
            ("queued,bogus", false),
        ] {
            let parsed = text.split(',').all(|s| s.parse::<TaskState>().is_ok());
            assert_eq!((matches(&states, text), parsed), (taken, taken), "{text:?}");
        }
        let address = output_address();
        for (text, taken) in [
            ("$.out", true),
            (r#"$.parts["a.txt"]"#, true),
            (r#"$.parts["q\"uote"]"#, true),
            (r#"$.parts["\u0041\tb"]"#, true),
            (r#"$.parts["a/b"]"#, false),
            (r#"$.parts["a\/b"]"#, false),
            (r#"$.parts["a\\b"]"#, false),
            (r#"$.parts["\q"]"#, false),
            ("", false),
            ("i", false),
            ("$.parts[a]", false),
            (r#"$.parts[""]"#, false),
            ("$.out ", false),
        ] {
            let parsed = Address::parse(text).is_ok();
            assert_eq!(
                (matches(&address, text), parsed),
                (taken, taken),
                "{text:?}"
            );
        }
    }
}
