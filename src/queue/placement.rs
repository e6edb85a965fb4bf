//! Path templates for ctx-dirs and work dirs: relative paths under
//! `workspace/`, checked once when a queue or task is created, so the
//! projection can trust them. The default ctx-dir is `tasks/{task_id}/ctx`.

use super::task::TaskId;

/// The ctx-dir template used when neither the task nor its queue names one.
pub const DEFAULT_PLACEMENT: &str = "tasks/{task_id}/ctx";

/// Longest accepted template.
const MAX_LEN: usize = 512;

/// Checks a relative path: non-empty segments, no `.` or `..`, no
/// backslash, NUL or leading `/`.
pub fn check_relative(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_LEN {
        return Err(format!("must be 1 to {MAX_LEN} bytes"));
    }
    if path.starts_with('/') {
        return Err("must be relative (under workspace/), not absolute".into());
    }
    for seg in path.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." {
            return Err(format!(
                "segment {seg:?} is not allowed (no empty, `.` or `..` segments)"
            ));
        }
        if seg.contains(['\\', '\0']) {
            return Err("backslashes and NUL are not allowed".into());
        }
    }
    Ok(())
}

/// Checks a ctx-dir template: a relative path containing `{task_id}`.
pub fn check_template(template: &str) -> Result<(), String> {
    check_relative(template)?;
    if !template.contains("{task_id}") {
        return Err("must contain {task_id}, so tasks never share a ctx-dir".into());
    }
    Ok(())
}

/// The ctx-dir of a task under `workspace/`.
pub fn resolve(template: &str, id: TaskId) -> String {
    template.replace("{task_id}", &id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_table() {
        let cases: &[(&str, bool)] = &[
            ("tasks/{task_id}/ctx", true),
            ("runs/{task_id}", true),
            ("{task_id}", true),
            ("tasks/ctx", false),
            ("/abs/{task_id}", false),
            ("../{task_id}", false),
            ("a/../{task_id}", false),
            ("a/./{task_id}", false),
            ("a//{task_id}", false),
            ("a\\b/{task_id}", false),
            ("", false),
        ];
        for (t, ok) in cases {
            assert_eq!(check_template(t).is_ok(), *ok, "{t:?}");
        }
        assert_eq!(resolve(DEFAULT_PLACEMENT, TaskId(7)), "tasks/t7/ctx");
    }
}
