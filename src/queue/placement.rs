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
//!
//! Likewise a template's `{task_id}` directory (the path up to and with
//! that segment) is its task's alone: no fixed segment before `{task_id}`
//! may have the shape of a task id (`t` and digits, in any case), so no
//! template's fixed prefix can run through another task's `{task_id}`
//! directory, and no task can create, or block, a directory another
//! task's placement needs (such as `flows/t8/{task_id}` making
//! `flows/t8/`, where task t8 placed at `flows/{task_id}` projects).
//! Fixed segments after `{task_id}` lie inside the task's own directory
//! and may be anything else the rules allow.

use super::task::TaskId;

/// The ctx-dir template used when neither the task nor its queue names one.
pub const DEFAULT_PLACEMENT: &str = "tasks/{task_id}/ctx";

/// The placeholder a template must hold as one whole segment.
pub const TASK_ID: &str = "{task_id}";

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

/// Whether a fixed segment could name some task's `{task_id}` directory:
/// `t` and digits, of any length, with leading zeros or an upper-case `T`
/// too (a case-folding filesystem takes `T8` for `t8`).
fn task_id_shaped(seg: &str) -> bool {
    seg.strip_prefix(['t', 'T'])
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Checks a ctx-dir template: a relative path with exactly one segment
/// equal to `{task_id}` (so tasks never share or nest ctx-dirs by
/// accident), no other braces, not the owner mark, no segment before
/// `{task_id}` shaped like a task id, and inside `tasks/` only as
/// `tasks/{task_id}/<name>`, with `<name>` not `work`.
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
    let mut fixed = segs.iter().take_while(|s| **s != TASK_ID);
    if let Some(seg) = fixed.find(|s| task_id_shaped(s)) {
        return Err(format!(
            "segment {seg:?} has the shape of a task id: before {TASK_ID} it could be another task's {TASK_ID} directory, which only that task may create; use a name that is not t<digits>"
        ));
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
            ("runs/t5/{task_id}", false),
            ("t5/{task_id}", false),
            ("T5/{task_id}", false),
            ("runs/t05/{task_id}/ctx", false),
            ("a/t0/b/{task_id}", false),
            ("t18446744073709551615/{task_id}", false),
            ("{task_id}/t5", true),
            ("runs/{task_id}/t5/ctx", true),
            ("run-t5/{task_id}", true),
            ("t/{task_id}", true),
            ("tx5/{task_id}", true),
            ("t5x/{task_id}", true),
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

    /// Every accepted template over a small alphabet, each of up to four
    /// segments.
    fn accepted() -> Vec<String> {
        const ALPHABET: [&str; 9] = [
            "flows", "t8", "t9", "T8", "t08", "tasks", "work", "ctx", TASK_ID,
        ];
        let mut all: Vec<Vec<&str>> = vec![vec![]];
        let mut out = Vec::new();
        for _ in 0..4 {
            all = all
                .iter()
                .flat_map(|p| {
                    ALPHABET.iter().map(move |s| {
                        let mut next = p.clone();
                        next.push(*s);
                        next
                    })
                })
                .collect();
            out.extend(
                all.iter()
                    .map(|segs| segs.join("/"))
                    .filter(|t| check_template(t).is_ok()),
            );
        }
        out
    }

    /// Segments, case folded (what a case-folding filesystem compares).
    fn folded(path: &str) -> Vec<String> {
        path.split('/').map(|s| s.to_ascii_lowercase()).collect()
    }

    /// The directory a task owns through a template: the path up to and
    /// with its `{task_id}` segment.
    fn owned(template: &str, id: TaskId) -> Vec<String> {
        let at = template.split('/').position(|s| s == TASK_ID).unwrap();
        folded(&resolve(template, id))[..=at].to_vec()
    }

    #[test]
    fn no_accepted_template_runs_through_another_tasks_directory() {
        let ids = [TaskId(8), TaskId(9)];
        // Per template: its paths and the directories it owns, per id.
        type Resolved = (String, Vec<Vec<String>>, Vec<Vec<String>>);
        let templates: Vec<Resolved> = accepted()
            .into_iter()
            .map(|t| {
                let paths = ids.iter().map(|id| folded(&resolve(&t, *id))).collect();
                let owns = ids.iter().map(|id| owned(&t, *id)).collect();
                (t, paths, owns)
            })
            .collect();
        assert!(templates.len() > 100, "{}", templates.len());
        let work: Vec<Vec<String>> = ids
            .iter()
            .map(|id| folded(&format!("tasks/{id}")))
            .collect();
        for (a, paths, _) in &templates {
            for (x, y) in [(0, 1), (1, 0)] {
                let path = &paths[x];
                assert!(
                    !path.starts_with(&work[y]),
                    "{a} runs through tasks/{}",
                    ids[y]
                );
                for (b, _, owns) in &templates {
                    assert!(
                        !path.starts_with(&owns[y]),
                        "{a} for {} runs through {}, which {b} gives {}",
                        ids[x],
                        owns[y].join("/"),
                        ids[y]
                    );
                }
            }
        }
    }
}
