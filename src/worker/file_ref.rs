//! `@file:<path>` bodies: a worker may name a file instead of sending its
//! bytes, when its task allows it (`allow_file_submit: true`). The file
//! must be in the task's own work dir, `workspace/<ns>/tasks/<id>/work/`,
//! which the daemon creates when the prompt is fetched:
//! 1. A relative path is taken inside the work dir; an absolute one only
//!    when it starts with the work dir's absolute path (a string check:
//!    no ambient path is ever opened).
//! 2. It is opened through the work dir's `Dir` handle, so `..` and
//!    symlinks that lead outside are refused; symlinks that stay inside work.
//! 3. It is opened with `O_NONBLOCK` and checked with `fstat` before any
//!    read: only a regular file with one link is read. A FIFO, device,
//!    socket or directory would otherwise hold a blocking thread (or read
//!    someone else's bytes), and a hard link could name a file outside.
//!
//! Refusals are `Error::FileRef` (422); a missing file or work dir is
//! `Error::FileRefMissing` (404).
//!
//! A body whose content really starts with `@file:` is sent escaped, with
//! one more `@`: `@@file:x` is taken as the bytes `@file:x` (and
//! `@@@file:x` as `@@file:x`), on any task, so every body can be sent
//! inline.

use std::io::Read;
use std::path::Path;

use cap_std::fs::{OpenOptions, OpenOptionsExt};
use rustix::fs::{FileType, OFlags};

use super::{Error, area};
use crate::queue::{Task, placement};
use crate::store::Store;

const PREFIX: &[u8] = b"@file:";

/// `why`, and, when the daemons share their nouns (so a worker may be
/// served by any of them), that `@file:` reads only the answering
/// daemon's disk.
fn on_this_host(store: &Store, why: String) -> String {
    if store.ref_table().is_none() {
        return why;
    }
    format!(
        "{why} on this daemon's host: @file: reads the disk of the daemon that answers, so submit through the daemon whose host has the task's work dir (the one that served its prompt to this worker), or send the content inline"
    )
}

/// Whether `body` is an escaped literal: two or more `@`, then `file:`.
fn escaped(body: &[u8]) -> bool {
    let ats = body.iter().take_while(|b| **b == b'@').count();
    ats >= 2 && body[ats..].starts_with(&PREFIX[1..])
}

/// The body to use: `body` itself, the literal an escaped body stands for,
/// or the file it names.
pub fn resolve(
    store: &Store,
    task: &Task,
    mut body: Vec<u8>,
    limit: usize,
) -> Result<Vec<u8>, Error> {
    if escaped(&body) {
        body.remove(0);
        return Ok(body);
    }
    let Some(rest) = body.strip_prefix(PREFIX) else {
        return Ok(body);
    };
    if !task.spec.allow_file_submit {
        return Err(Error::FileRef(
            "@file: bodies are off for this task; enqueue it with allow_file_submit: true, or, to send content that starts with @file: itself, escape it with one more @ (@@file:…)".into(),
        ));
    }
    let text = std::str::from_utf8(rest)
        .map_err(|_| Error::FileRef("the @file: path is not UTF-8".into()))?
        .trim_end_matches(['\n', '\r']);
    let ns = &task.spec.namespace;
    let work_rel = placement::work_dir(task.id);
    let shown = area::shown(ns, &work_rel);
    let outside = || {
        Error::FileRef(format!(
            "@file:{text} is outside the task's work dir ({shown})"
        ))
    };
    let abs_work_dir = area::absolute(store, ns, &work_rel);
    let path = Path::new(text);
    let relative = if path.is_absolute() {
        path.strip_prefix(&abs_work_dir).map_err(|_| outside())?
    } else {
        path
    };
    if relative.as_os_str().is_empty() {
        return Err(outside());
    }
    let dir = area::open_work_dir(store, ns, task.id)
        .map_err(Error::FileRef)?
        .ok_or_else(|| {
            Error::FileRefMissing(on_this_host(
                store,
                format!(
                    "the work dir {shown} does not exist yet; it is created when the prompt is fetched"
                ),
            ))
        })?;
    let flags = OFlags::NONBLOCK | OFlags::NOCTTY;
    let file = dir
        .open_with(
            relative,
            OpenOptions::new()
                .read(true)
                .custom_flags(flags.bits() as i32),
        )
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Error::FileRefMissing(on_this_host(store, format!("@file:{text} does not exist")))
            }
            // Opening a socket fails this way.
            _ if e.raw_os_error() == Some(rustix::io::Errno::NXIO.raw_os_error()) => {
                not_regular(text, "a socket")
            }
            _ => outside(),
        })?;
    let st = rustix::fs::fstat(&file)
        .map_err(|e| Error::Store(crate::store::io_err(format!("@file:{text}"), e.into())))?;
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => None,
        FileType::Directory => Some("a directory"),
        FileType::Fifo => Some("a FIFO"),
        FileType::Socket => Some("a socket"),
        FileType::CharacterDevice | FileType::BlockDevice => Some("a device"),
        _ => Some("something other than a regular file"),
    };
    if let Some(kind) = kind {
        return Err(not_regular(text, kind));
    }
    if st.st_nlink != 1 {
        return Err(Error::FileRef(format!(
            "@file:{text} has {} hard links; only a file with one link is read",
            st.st_nlink
        )));
    }
    if st.st_size as u64 > limit as u64 {
        return Err(Error::TooLarge { limit });
    }
    let mut bytes = Vec::with_capacity(st.st_size as usize);
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::Store(crate::store::io_err(format!("reading @file:{text}"), e)))?;
    if bytes.len() > limit {
        return Err(Error::TooLarge { limit });
    }
    Ok(bytes)
}

fn not_regular(text: &str, kind: &str) -> Error {
    Error::FileRef(format!(
        "@file:{text} is {kind}; only a regular file is read"
    ))
}

#[cfg(test)]
mod tests {
    use super::escaped;

    #[test]
    fn only_at_signs_then_file_colon_are_an_escape() {
        let table: &[(&[u8], bool)] = &[
            (b"@@file:x", true),
            (b"@@@file:x", true),
            (b"@@file:", true),
            (b"@file:x", false),
            (b"@@fil", false),
            (b"@@ file:x", false),
            (b"x@@file:x", false),
            (b"", false),
        ];
        for (body, want) in table {
            assert_eq!(escaped(body), *want, "{}", String::from_utf8_lossy(body));
        }
    }
}
