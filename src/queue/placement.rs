//! Where a task's directories go: ctx-dir templates and the work dir, as
//! paths relative to the task's namespace area `workspace/<namespace>/`.
//! Templates are checked once, when a queue or task is created, so the
//! projection can trust their shape; whether the directories on the way
//! belong to another task is the projection's check (`worker::area`).
//!
//! `tasks/<task_id>/` inside a namespace area belongs to that task: its
//! work dir is `tasks/<task_id>/work` and the default ctx-dir
//! `tasks/<task_id>/ctx`. A template may reach into `tasks/` only through
//! its own `{task_id}`, and never onto or into the work dir.

use super::task::TaskId;

/// The ctx-dir template used when neither the task nor its queue names one.
pub const DEFAULT_PLACEMENT: &str = "tasks/{task_id}/ctx";

/// The placeholder a template must hold as one whole segment.
const TASK_ID: &str = "{task_id}";

/// The file the daemon puts in every ctx-dir and work dir it creates,
/// naming the task (and which of its directories this is).
pub const OWNER_MARK: &str = ".tessera-owner";

/// Longest accepted template.
const MAX_LEN: usize = 512;

/// Checks a relative path: non-empty segments, no `.` or `..`, no
/// backslash, NUL or leading `/`.
fn check_relative(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_LEN {
        return Err(format!("must be 1 to {MAX_LEN} bytes"));
    }
    if path.starts_with('/') {
        return Err("must be relative (to workspace/<namespace>/), not absolute".into());
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

/// Checks a ctx-dir template: a relative path with exactly one segment
/// equal to `{task_id}` (so tasks never share or nest ctx-dirs by
/// accident), no other braces, not the owner mark, and inside `tasks/`
/// only as `tasks/{task_id}/<name>`, with `<name>` not `work`.
pub fn check_template(template: &str) -> Result<(), String> {
    check_relative(template)?;
    let segs: Vec<&str> = template.split('/').collect();
    if segs.iter().filter(|s| **s == TASK_ID).count() != 1 {
        return Err("must hold {task_id} exactly once, as a whole path segment".into());
    }
    if segs.iter().any(|s| *s != TASK_ID && s.contains(['{', '}'])) {
        return Err("{task_id} must be a whole path segment; no other braces".into());
    }
    if segs.contains(&OWNER_MARK) {
        return Err(format!("{OWNER_MARK} is the daemon's owner mark"));
    }
    if segs[0] == "tasks" && (segs.len() < 3 || segs[1] != TASK_ID || segs[2] == "work") {
        return Err(
            "tasks/<task_id>/ belongs to that task: use tasks/{task_id}/<name> (not work), or another top directory"
                .into(),
        );
    }
    Ok(())
}

/// The ctx-dir of a task, relative to its namespace area.
pub fn resolve(template: &str, id: TaskId) -> String {
    template.replace(TASK_ID, &id.to_string())
}

/// The work dir of a task, relative to its namespace area.
pub fn work_dir(id: TaskId) -> String {
    format!("tasks/{id}/work")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_table() {
        let cases: &[(&str, bool)] = &[
            ("tasks/{task_id}/ctx", true),
            ("tasks/{task_id}/out/ctx", true),
            ("runs/{task_id}", true),
            ("runs/t5/{task_id}", true),
            ("{task_id}", true),
            ("{task_id}/ctx", true),
            ("tasks/ctx", false),
            ("/abs/{task_id}", false),
            ("../{task_id}", false),
            ("a/../{task_id}", false),
            ("a/./{task_id}", false),
            ("a//{task_id}", false),
            ("a\\b/{task_id}", false),
            ("", false),
            ("tasks/{task_id}5/ctx", false),
            ("x{task_id}", false),
            ("{task_id}x/ctx", false),
            ("runs/{task_id}/{task_id}", false),
            ("{task_id}/a/{task_id}", false),
            ("runs/{task_id}/{other}", false),
            ("runs/{/{task_id}", false),
            ("runs/}/{task_id}", false),
            ("{task_id}/.tessera-owner", false),
            ("tasks/{task_id}", false),
            ("tasks/{task_id}/work", false),
            ("tasks/{task_id}/work/ctx", false),
            ("tasks/t5/{task_id}", false),
            ("tasks/{task_id}/t5/ctx", true),
        ];
        for (t, ok) in cases {
            assert_eq!(
                check_template(t).is_ok(),
                *ok,
                "{t:?}: {:?}",
                check_template(t)
            );
        }
        assert_eq!(resolve(DEFAULT_PLACEMENT, TaskId(7)), "tasks/t7/ctx");
        assert_eq!(work_dir(TaskId(7)), "tasks/t7/work");
    }
}
