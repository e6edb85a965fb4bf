//! `tessera import PACK --watch`: import, then import again once per
//! settled change to the pack's files, until Ctrl-C.
//!
//! What counts as a change (invariants):
//! 1. Only events that can change a file: reads (open, close after
//!    reading, access times) are ignored, so the importer's own reads of
//!    the pack never wake it.
//! 2. Only files of the pack: hidden entries (`.git`, `.#x`), editor swap
//!    and backup files (`x.swp`, `x~`, vim's `4913`) are ignored.
//! 3. A burst settles first: after a change the watcher waits until the
//!    pack has been quiet for [`SETTLE`] (editors write a temp file and
//!    rename it; a script may save a hundred times), then imports once.
//! 4. A round whose plan equals the last one applied sends nothing, so an
//!    idle watch makes no requests at all.
//! 5. The pack folder itself being replaced (a `git checkout`, a rename
//!    over it) is seen through a watch on its parent, and the folder is
//!    watched again.
//! 6. The pack's warnings are printed on the first round and then only
//!    when they differ from the ones printed last, so an edit that leaves
//!    them as they were does not repeat them.
//!
//! Events are hints (notify can miss files created right after their
//! folder), so every round re-plans the whole pack from its files. An
//! invalid edit prints its diagnostics and leaves the records as they
//! were; a round that changes nothing prints nothing.

use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use notify::event::{EventKind, MetadataKind, ModifyKind};
use notify::{Event, RecursiveMode, Watcher};
use tessera_importer::{Diagnostic, Plan};
use tokio::sync::mpsc::UnboundedReceiver;

use super::outcome::{self, Show};
use super::{Mode, import, planned};
use crate::client::Client;

/// Quiet time after the last change before a round starts.
const SETTLE: Duration = Duration::from_millis(300);

/// What a file event means for the watched pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// Nothing that can change the pack.
    Nothing,
    /// A pack file changed.
    Change,
    /// The pack folder itself was created, removed or renamed.
    Folder,
}

/// Watches `dir` and imports it into the daemon behind `client`.
pub(super) async fn run(dir: &Path, client: &Client) -> anyhow::Result<ExitCode> {
    let root = std::fs::canonicalize(dir)
        .with_context(|| format!("watching {}; is it a folder?", dir.display()))?;
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event| {
        let _ = tx.send(event);
    })
    .context("starting the file watcher")?;
    watcher
        .watch(&root, RecursiveMode::Recursive)
        .with_context(|| format!("watching {}; is it a folder?", dir.display()))?;
    if let Some(parent) = root.parent() {
        watcher
            .watch(parent, RecursiveMode::NonRecursive)
            .with_context(|| format!("watching {}", parent.display()))?;
    }
    let mut last = Rounds::default();
    round(dir, client, true, &mut last).await;
    eprintln!("watching {} for changes; Ctrl-C stops", dir.display());
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            event = events.recv() => {
                let Some(event) = event else {
                    bail!("the file watcher stopped; run the command again");
                };
                let mut folder = match event {
                    Ok(event) => match seen(&root, &event) {
                        Seen::Nothing => continue,
                        Seen::Change => false,
                        Seen::Folder => true,
                    },
                    Err(e) => {
                        eprintln!("watch: {e}; re-planning from the files");
                        false
                    }
                };
                folder |= settle(&root, &mut events).await?;
                if folder {
                    // The old watch went with the old folder; a missing
                    // folder is watched again when the parent sees it.
                    let _ = watcher.unwatch(&root);
                    let _ = watcher.watch(&root, RecursiveMode::Recursive);
                }
                round(dir, client, false, &mut last).await;
            }
            _ = &mut stop => {
                eprintln!("stopped watching {}", dir.display());
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}

/// Waits until no change has been seen for [`SETTLE`]; whether the pack
/// folder itself was replaced meanwhile.
async fn settle(
    root: &Path,
    events: &mut UnboundedReceiver<notify::Result<Event>>,
) -> anyhow::Result<bool> {
    let mut folder = false;
    loop {
        match tokio::time::timeout(SETTLE, events.recv()).await {
            Err(_quiet) => return Ok(folder),
            Ok(None) => bail!("the file watcher stopped; run the command again"),
            Ok(Some(Ok(event))) => folder |= seen(root, &event) == Seen::Folder,
            Ok(Some(Err(_))) => {}
        }
    }
}

/// What `event` means for the pack at `root` (see the module's invariants).
fn seen(root: &Path, event: &Event) -> Seen {
    match event.kind {
        EventKind::Access(_)
        | EventKind::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => {
            return Seen::Nothing;
        }
        _ => {}
    }
    let mut out = Seen::Nothing;
    for path in &event.paths {
        if path == root {
            return Seen::Folder;
        }
        if let Ok(rel) = path.strip_prefix(root)
            && is_pack_file(rel)
        {
            out = Seen::Change;
        }
    }
    out
}

/// Whether `rel` (relative to the pack) can be part of the pack: not
/// hidden, not an editor's swap, backup or probe file.
fn is_pack_file(rel: &Path) -> bool {
    let names: Vec<PathBuf> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(PathBuf::from(name)),
            _ => None,
        })
        .collect();
    let Some(last) = names.last().and_then(|n| n.to_str()) else {
        return false;
    };
    let hidden = names.iter().any(|n| n.to_string_lossy().starts_with('.'));
    let scratch = last.ends_with('~')
        || last.ends_with(".swp")
        || last.ends_with(".swx")
        || last.ends_with(".tmp")
        || last == "4913";
    !hidden && !scratch
}

/// What the earlier rounds left for the next one.
#[derive(Debug, Default)]
struct Rounds {
    /// The plan applied last.
    applied: Option<Plan>,
    /// The pack's warnings as printed last (sorted, as a plan holds them).
    warned: Vec<Diagnostic>,
}

/// Re-plans the pack from its files and applies it unless the plan is the
/// one applied last. The pack's warnings are printed when they differ from
/// the ones printed last (on the first round, when there are any). The
/// first round shows what changed, like a plain import; later rounds print
/// one summary line (and any failures) only when something changed or
/// failed.
async fn round(dir: &Path, client: &Client, first: bool, last: &mut Rounds) {
    let Some(plan) = planned(dir) else {
        eprintln!("the records are left as they were; fix the pack and save again");
        return;
    };
    if plan.warnings != last.warned {
        outcome::print_warnings(&plan.warnings);
        last.warned.clone_from(&plan.warnings);
    }
    if last.applied.as_ref() == Some(&plan) {
        return;
    }
    match import(client, &plan, Mode::Apply, false).await {
        Ok(done) => {
            if first {
                outcome::print(&done.lines, Show::Changes, &done.summary);
            } else if done.tally.changed() || done.tally.failed() {
                outcome::print(&done.lines, Show::Failures, &done.summary);
            }
            last.applied = Some(plan);
        }
        Err(e) => eprintln!("error: {e:#}; trying again on the next change"),
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{AccessKind, AccessMode, DataChange, RemoveKind};

    use super::*;

    #[test]
    fn only_changes_to_pack_files_count() {
        let root = Path::new("/p/pack");
        let event = |kind: EventKind, path: &str| Event::new(kind).add_path(PathBuf::from(path));
        let write = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        let cases = [
            (event(write, "/p/pack/nouns/a.yaml"), Seen::Change),
            (event(write, "/p/pack/bodies/a.md"), Seen::Change),
            (
                event(
                    EventKind::Access(AccessKind::Open(AccessMode::Read)),
                    "/p/pack/pack.yaml",
                ),
                Seen::Nothing,
            ),
            (
                event(
                    EventKind::Access(AccessKind::Close(AccessMode::Read)),
                    "/p/pack/pack.yaml",
                ),
                Seen::Nothing,
            ),
            (event(write, "/p/pack/.git/index"), Seen::Nothing),
            (event(write, "/p/pack/nouns/.a.yaml.swp"), Seen::Nothing),
            (event(write, "/p/pack/nouns/a.yaml~"), Seen::Nothing),
            (event(write, "/p/pack/4913"), Seen::Nothing),
            (event(write, "/p/other.yaml"), Seen::Nothing),
            (
                event(EventKind::Remove(RemoveKind::Folder), "/p/pack"),
                Seen::Folder,
            ),
        ];
        for (event, want) in cases {
            assert_eq!(seen(root, &event), want, "{event:?}");
        }
    }
}
