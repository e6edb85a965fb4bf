//! `@file:<path>` bodies: a worker may name a file instead of sending its
//! bytes, when its task allows it (`allow_file_submit: true`). The path,
//! absolute or relative, must resolve inside the task's `work_dir` under
//! `workspace/`, symlinks included: it is opened through that directory's
//! `Dir` handle, which refuses anything that leads outside.

use std::io::Read;
use std::path::Path;

use super::Error;
use crate::queue::Task;
use crate::store::Store;

const PREFIX: &[u8] = b"@file:";

/// The body to use: `body` itself, or the file it names.
pub fn resolve(store: &Store, task: &Task, body: Vec<u8>, limit: usize) -> Result<Vec<u8>, Error> {
    let Some(rest) = body.strip_prefix(PREFIX) else {
        return Ok(body);
    };
    if !task.spec.allow_file_submit {
        return Err(Error::FileRef(
            "@file: bodies are off for this task; enqueue it with allow_file_submit: true, or send the content inline".into(),
        ));
    }
    let Some(work_dir) = &task.spec.work_dir else {
        return Err(Error::FileRef(
            "@file: needs the task to name a work_dir".into(),
        ));
    };
    let text = std::str::from_utf8(rest)
        .map_err(|_| Error::FileRef("the @file: path is not UTF-8".into()))?
        .trim_end_matches(['\n', '\r']);
    let outside = || {
        Error::FileRef(format!(
            "@file:{text} is outside the task's work_dir ({work_dir})"
        ))
    };
    let abs_work_dir = store.root().absolute.join("workspace").join(work_dir);
    let path = Path::new(text);
    let relative = if path.is_absolute() {
        path.strip_prefix(&abs_work_dir).map_err(|_| outside())?
    } else {
        path
    };
    if relative.as_os_str().is_empty() {
        return Err(outside());
    }
    let dir = store
        .root()
        .workspace
        .open_dir(work_dir)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Error::FileRefMissing(format!("the work_dir {work_dir} does not exist"))
            }
            _ => outside(),
        })?;
    let mut file = dir.open(relative).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::FileRefMissing(format!("@file:{text} does not exist"))
        }
        _ => outside(),
    })?;
    let meta = file.metadata().map_err(|_| outside())?;
    if !meta.is_file() {
        return Err(Error::FileRef(format!(
            "@file:{text} is not a regular file"
        )));
    }
    if meta.len() > limit as u64 {
        return Err(Error::TooLarge { limit });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.by_ref()
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::Store(crate::store::io_err(format!("reading @file:{text}"), e)))?;
    if bytes.len() > limit {
        return Err(Error::TooLarge { limit });
    }
    Ok(bytes)
}
