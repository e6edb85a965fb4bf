//! Staged parts: named pieces a worker stages before its final submit
//! (last write wins; staging never completes the attempt). A part name is
//! a call argument, never a path: it must be a plain file name.

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

use super::{Error, Session};
use crate::queue::placement::OWNER_MARK;
use crate::queue::{self, Queue};
use crate::store::{Durability, Sha256, Store};

/// Longest part name, in bytes.
pub const MAX_PART_NAME: usize = 255;

/// Checks a part name against the rules; `step` is the task's step name,
/// whose `<step>.md` file the final body owns.
pub fn check_name(name: &str, step: &str) -> Result<(), Error> {
    let why = if name.is_empty() {
        Some("it is empty")
    } else if name == "." || name == ".." {
        Some("`.` and `..` are not file names")
    } else if name.contains(['/', '\\']) {
        Some("it contains a path separator")
    } else if name.chars().any(unprintable) {
        Some(
            "it contains a control or format character (a newline, a tab, a bidi override such as U+202E, a zero-width character), which would hide or reorder what a file listing shows",
        )
    } else if name == format!("{step}.md") {
        Some("the final body owns <step>.md")
    } else if name == OWNER_MARK {
        Some("the daemon's owner mark has this name")
    } else if name.len() > MAX_PART_NAME {
        Some("it is longer than 255 bytes")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::InvalidPartName {
            name: name.chars().take(300).collect(),
            why,
        }),
        None => Ok(()),
    }
}

/// Whether a character shows nothing of itself, or changes how the text
/// around it reads: controls (`Cc`), format characters (`Cf`: bidi
/// overrides and isolates, zero-width characters) and line or paragraph
/// separators.
fn unprintable(c: char) -> bool {
    matches!(
        c.general_category(),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

/// Stores a part's bytes and records the part for the session's attempt.
/// The caller holds the task's turn ([`super::order`]) and re-checked the
/// session under it.
pub async fn stage(
    store: &Store,
    queue: &Queue,
    s: &Session,
    name: String,
    bytes: Vec<u8>,
) -> Result<Sha256, Error> {
    let sha = store
        .blocking(move |store| store.put_object(&bytes, Durability::Synced))
        .await?;
    queue
        .stage(s.task.id, s.attempt, name, sha)
        .await
        .map_err(|e| match e {
            queue::TaskCallError::StaleLease { state, attempt } => {
                Error::StaleLease { state, attempt }
            }
            other => other.into(),
        })?;
    Ok(sha)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_name_table() {
        let long = "p".repeat(256);
        let cases: &[(&str, bool)] = &[
            ("plan.md", true),
            ("notes.md", true),
            (".env", true),
            ("a b.txt", true),
            ("", false),
            (".", false),
            ("..", false),
            ("a/b", false),
            ("/abs", false),
            ("a\\b", false),
            ("..\\..\\x", false),
            ("a\0b", false),
            ("a\nb", false),
            ("a\tb", false),
            ("a\rb", false),
            ("a\u{7f}b", false),
            ("a\u{85}b", false),
            ("evil\u{202e}dm.exe", false),
            ("a\u{2066}b", false),
            ("a\u{200b}b", false),
            ("\u{feff}plan.md", false),
            ("a\u{2028}b", false),
            ("plan-é-中.md", true),
            ("emoji-🙂.md", true),
            ("draft.md", false),
            (".tessera-owner", false),
            (".tessera-owner.md", true),
            (&long, false),
        ];
        for (name, ok) in cases {
            assert_eq!(check_name(name, "draft").is_ok(), *ok, "{name:?}");
        }
    }
}
