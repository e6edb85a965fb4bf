//! Snapshots: the whole queue state in one file, so replay starts from it
//! and older journal segments can be deleted.
//!
//! ```text
//! journal/snapshot.jsonl
//!   line 1: {"format": "tessera-snapshot-2", "next_segment": N,
//!            "queues": [...], "tasks": count}
//!   then one Task as JSON per line, in creation order
//!   last line: {"sha256": "<hex of every byte before this line>"}
//! ```
//! A snapshot whose checksum or count does not hold, or that names a task
//! id twice, is refused
//! with its line: the daemon does not start on a damaged snapshot.
//! Written through the atomic writer (temp, fsync, rename, dir fsync), so a
//! crash leaves the old snapshot or the new one. It covers every journal
//! segment numbered below `next_segment`; those are deleted only after it
//! is durable, and receipt objects are synced (syncfs) before that, since
//! the deleted segments were their durable copy.

use std::io::{BufRead, BufReader};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::machine::{SplitLimits, State};
use super::names::Names;
use super::pipeline::{self, Pool};
use super::spec::QueueConfig;
use super::table::{Frozen, TaskTable};
use super::task::Task;
use super::{Error, Stopping};
use crate::store::{self, Store};

/// The snapshot's file name in `journal/`.
pub const FILE: &str = "snapshot.jsonl";

const FORMAT: &str = "tessera-snapshot-2";

/// The last line: the checksum of every byte before it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Trailer {
    sha256: crate::store::Sha256,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Meta {
    format: String,
    next_segment: u64,
    /// Written by daemons whose task ids were a sequence; read and
    /// ignored, so their snapshots still load.
    #[serde(default, skip_serializing, rename = "next_id")]
    _next_id: Option<serde::de::IgnoredAny>,
    queues: Vec<QueueConfig>,
    tasks: u64,
}

/// Tasks parsed per job of the load's pipeline.
const CHUNK: usize = 4096;

/// What a snapshot holds of a state: its tasks and queues. The tasks are
/// a frozen copy of the state's table, which shares their chunks, so an
/// image of the live state is cheap to take and the state goes on
/// changing beside it (see [`TaskTable`]).
#[derive(Clone, Debug)]
pub struct Image {
    tasks: Frozen,
    queues: Vec<QueueConfig>,
}

impl Image {
    /// The image of `state` as it is now.
    pub fn of(state: &State) -> Image {
        Image {
            tasks: state.tasks.frozen(),
            queues: state.queues.values().cloned().collect(),
        }
    }

    /// How many tasks it holds.
    pub fn tasks(&self) -> usize {
        self.tasks.len()
    }
}

/// Writes a snapshot of `image` covering segments below `next_segment`.
/// Helper threads encode the tasks a chunk at a time; this thread hashes
/// and writes them, asking `stopping` before each chunk: once it says
/// yes, the temp file is dropped, the snapshot in place stays, and the
/// answer is [`Error::Stopping`].
pub fn write(
    store: &Store,
    image: &Image,
    next_segment: u64,
    stopping: Stopping<'_>,
) -> Result<(), Error> {
    let meta = Meta {
        format: FORMAT.into(),
        next_segment,
        _next_id: None,
        queues: image.queues.clone(),
        tasks: image.tasks.len() as u64,
    };
    let stopped = std::cell::Cell::new(false);
    let written = store
        .writer()
        .write_with(&store.root().journal, FILE, |out| {
            let mut hash: sha2::Sha256 = sha2::Digest::new();
            let mut put = |bytes: &[u8]| {
                sha2::Digest::update(&mut hash, bytes);
                out.write_all(bytes)
            };
            let mut head = serde_json::to_vec(&meta)?;
            head.push(b'\n');
            put(&head)?;
            let bufs = Pool::default();
            pipeline::ordered_map(
                image.tasks.chunks().map(Ok::<_, std::io::Error>),
                |tasks| encode(tasks, &bufs),
                |lines| {
                    if stopping() {
                        stopped.set(true);
                        return Err(std::io::ErrorKind::Interrupted.into());
                    }
                    let mut lines = lines?;
                    put(&lines)?;
                    lines.clear();
                    bufs.give(lines);
                    Ok(())
                },
            )?;
            let sha256 = crate::store::Sha256::from_digest(sha2::Digest::finalize(hash));
            serde_json::to_writer(&mut *out, &Trailer { sha256 })?;
            out.write_all(b"\n")
        });
    match written {
        Err(_) if stopped.get() => Err(Error::Stopping),
        other => Ok(other?),
    }
}

/// Tasks as JSON lines, into a buffer from `bufs`.
fn encode(tasks: &[Task], bufs: &Pool<Vec<u8>>) -> std::io::Result<Vec<u8>> {
    let mut out = bufs.take();
    for t in tasks {
        serde_json::to_writer(&mut out, t)?;
        out.push(b'\n');
    }
    Ok(out)
}

/// Task lines read in one piece: the line number of the first, and the
/// lines, each ending in a newline.
struct Lines {
    first: usize,
    bytes: Vec<u8>,
}

fn corrupt(line: usize, message: impl std::fmt::Display) -> Error {
    Error::CorruptJournal {
        path: format!("journal/{FILE}"),
        message: format!("line {line}: {message}"),
    }
}

/// Parses task lines, checking nothing but their JSON, into a vector
/// from `vecs`; hands the lines' buffer back with the tasks. Each task's
/// spare capacity goes here, on a helper, rather than on the thread that
/// reads and applies.
fn parse(lines: Lines, vecs: &Pool<Vec<Task>>) -> Result<(Vec<Task>, Vec<u8>), Error> {
    let mut tasks = vecs.take();
    // One UTF-8 check for the piece rather than one per string in it.
    let text = std::str::from_utf8(&lines.bytes).map_err(|e| {
        let before = &lines.bytes[..e.valid_up_to()];
        corrupt(
            lines.first + before.iter().filter(|b| **b == b'\n').count(),
            e,
        )
    })?;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let mut task: Task = serde_json::from_str(line).map_err(|e| corrupt(lines.first + i, e))?;
        task.shrink_to_fit();
        tasks.push(task);
    }
    Ok((tasks, lines.bytes))
}

/// Loads the snapshot, if there is one: the state and its `next_segment`.
/// This thread reads and hashes the lines; helper threads parse them.
pub fn load(store: &Store, limits: SplitLimits) -> Result<Option<(State, u64)>, Error> {
    let dir = &store.root().journal;
    let file = match dir.open(FILE) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(store::io_err("opening journal/snapshot.jsonl", e).into()),
    };
    let len = file
        .metadata()
        .map_err(|e| store::io_err("reading the snapshot's size", e))?
        .len();
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut hash: sha2::Sha256 = sha2::Digest::new();
    // Appends line `n` to `buf`, with its newline when it has one.
    let mut read_line = |n: usize, buf: &mut Vec<u8>| -> Result<(), Error> {
        match r.read_until(b'\n', buf) {
            Ok(0) => Err(corrupt(n, "the file ends early (no checksum line)")),
            Ok(_) => Ok(()),
            Err(e) => Err(store::io_err("reading the snapshot", e).into()),
        }
    };
    let mut first = Vec::new();
    read_line(1, &mut first)?;
    sha2::Digest::update(&mut hash, &first);
    let meta: Meta = serde_json::from_slice(trim(&first)).map_err(|e| corrupt(1, e))?;
    if meta.format != FORMAT {
        return Err(corrupt(1, format!("unknown format {:?}", meta.format)));
    }
    let count = usize::try_from(meta.tasks).unwrap_or(usize::MAX);
    let mut tasks = TaskTable::with_capacity(count.min(usize::try_from(len / 64).unwrap_or(0)));
    let mut names = Names::default();
    let (bufs, vecs) = (Pool::default(), Pool::default());
    let mut read = 0;
    let pieces = std::iter::from_fn(|| {
        (read < count).then(|| {
            let lines = CHUNK.min(count - read);
            let mut piece = Lines {
                first: read + 2,
                bytes: bufs.take(),
            };
            for n in piece.first..piece.first + lines {
                read_line(n, &mut piece.bytes)?;
            }
            read += lines;
            sha2::Digest::update(&mut hash, &piece.bytes);
            Ok(piece)
        })
    });
    pipeline::ordered_map(
        pieces,
        |lines| parse(lines, &vecs),
        |parsed| {
            let (mut parsed, mut bytes) = parsed?;
            for mut t in parsed.drain(..) {
                if tasks.contains(&t.id) {
                    return Err(corrupt(
                        tasks.len() + 2,
                        format!("task {} appears twice", t.id),
                    ));
                }
                names.share_task(&mut t);
                tasks.push(t);
            }
            vecs.give(parsed);
            bytes.clear();
            bufs.give(bytes);
            Ok(())
        },
    )?;
    let n = tasks.len() + 2;
    let mut last = Vec::new();
    read_line(n, &mut last)?;
    let trailer: Trailer = serde_json::from_slice(trim(&last))
        .map_err(|e| corrupt(n, format!("not the checksum line: {e}")))?;
    let actual = crate::store::Sha256::from_digest(sha2::Digest::finalize(hash));
    if trailer.sha256 != actual {
        return Err(corrupt(
            n,
            "the checksum does not match the snapshot's bytes: it is damaged",
        ));
    }
    let queues = meta
        .queues
        .into_iter()
        .map(|q| (q.name.clone(), q))
        .collect();
    let state = State::restore(queues, tasks, names, limits, Timestamp::now());
    Ok(Some((state, meta.next_segment)))
}

/// A line without its newline.
fn trim(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\n").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::json;

    use super::*;
    use crate::queue::{Enqueue, QueueConfig, TaskSpec};
    use crate::store::{Access, Name};

    const LIMITS: SplitLimits = SplitLimits {
        max_depth: 2,
        max_children: 4,
    };

    /// A state with `n` tasks, some keyed, one claimed: more than one
    /// chunk of the pipeline.
    fn state(n: usize) -> State {
        let mut st = State::new(LIMITS);
        let config: QueueConfig = serde_json::from_value(json!({"name": "q"})).unwrap();
        st.apply(&st.decide_queue(config).unwrap());
        let me = Name::parse("key", "k1").unwrap();
        let at = Timestamp::from_second(1_900_000_000).unwrap();
        let mut last = 0;
        let mut draw = || {
            last += 1;
            crate::queue::TaskId(last)
        };
        for i in 0..n {
            let spec: TaskSpec = serde_json::from_value(json!({
                "namespace": "ns", "queue": "q", "kind": "verb.k", "effect_class": "read",
                "tags": ["a", format!("t{}", i % 3)], "brief": {"i": i},
                "idempotency_key": (i % 2 == 0).then(|| format!("key-{i}")),
            }))
            .unwrap();
            let Ok(Enqueue::New(ev, _)) = st.decide_enqueue(
                spec,
                None,
                at,
                &crate::store::envelope::Viewer::admin(me.clone()),
                &mut draw,
            ) else {
                panic!("a new task");
            };
            st.apply(&ev);
        }
        let claim = st
            .decide_claim(
                crate::queue::TaskId(2),
                &me,
                crate::queue::task::new_lease_id(),
                "wh-x".into(),
                at,
            )
            .unwrap();
        st.apply(&claim);
        st
    }

    fn tasks_json(st: &State) -> Vec<String> {
        st.tasks
            .values()
            .map(|t| serde_json::to_string(t).unwrap())
            .collect()
    }

    #[test]
    fn a_written_snapshot_loads_back_to_the_same_state() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open(root.path(), Access::Exclusive).unwrap();
        let st = state(2 * CHUNK + 7);
        write(&store, &Image::of(&st), 5, &|| false).unwrap();
        let (back, next) = load(&store, LIMITS).unwrap().expect("a snapshot");
        assert_eq!(next, 5);
        assert_eq!(back.queues, st.queues);
        assert_eq!(tasks_json(&back), tasks_json(&st));
        let me = Name::parse("key", "k1").unwrap();
        let ns = Name::parse("ns", "ns").unwrap();
        assert_eq!(
            back.idempotent(&ns, &me, "key-4").map(|(id, _)| *id),
            st.idempotent(&ns, &me, "key-4").map(|(id, _)| *id)
        );
        assert!(back.idempotent(&ns, &me, "key-5").is_none());
        assert_eq!(
            back.index_counts(&st.tasks[&crate::queue::TaskId(1)].spec.queue),
            st.index_counts(&st.tasks[&crate::queue::TaskId(1)].spec.queue)
        );
    }

    #[test]
    fn a_bad_line_past_the_first_chunk_is_named_and_a_cut_file_refused() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open(root.path(), Access::Exclusive).unwrap();
        write(&store, &Image::of(&state(CHUNK + 10)), 1, &|| false).unwrap();
        let path = root.path().join("journal").join(FILE);
        let good = std::fs::read(&path).unwrap();
        let line = CHUNK + 5;
        let mut bad = good.clone();
        let at = good
            .split_inclusive(|b| *b == b'\n')
            .take(line - 1)
            .map(<[u8]>::len)
            .sum::<usize>();
        bad[at] = b'x';
        std::fs::write(&path, &bad).unwrap();
        let err = load(&store, LIMITS).unwrap_err().to_string();
        assert!(err.contains(&format!("line {line}:")), "{err}");
        std::fs::write(&path, &good[..good.len() / 2]).unwrap();
        let err = load(&store, LIMITS).unwrap_err().to_string();
        assert!(err.contains("ends early") || err.contains("line"), "{err}");
    }

    /// An image keeps the tasks as they were when it was taken while the
    /// state goes on changing (a fold writes one of the live state).
    #[test]
    fn an_image_keeps_what_it_saw_while_the_state_changes() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open(root.path(), Access::Exclusive).unwrap();
        let mut st = state(2 * crate::queue::table::CHUNK + 5);
        let seen = tasks_json(&st);
        let image = Image::of(&st);
        let me = Name::parse("key", "k1").unwrap();
        let at = Timestamp::from_second(1_900_000_100).unwrap();
        for id in [1, crate::queue::table::CHUNK as u64 + 3] {
            let ev = st
                .decide_claim(
                    crate::queue::TaskId(id),
                    &me,
                    crate::queue::task::new_lease_id(),
                    format!("wh-{id}"),
                    at,
                )
                .unwrap();
            st.apply(&ev);
        }
        assert_ne!(tasks_json(&st), seen, "the state changed");
        write(&store, &image, 7, &|| false).unwrap();
        let (back, next) = load(&store, LIMITS).unwrap().expect("a snapshot");
        assert_eq!((next, tasks_json(&back)), (7, seen));
    }

    /// A stop part-way (a fold's, when the daemon stops) leaves the
    /// snapshot in place as it was and no temp file behind.
    #[test]
    fn a_stop_part_way_leaves_the_old_snapshot_whole() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::open(root.path(), Access::Exclusive).unwrap();
        let old = state(10);
        write(&store, &Image::of(&old), 3, &|| false).unwrap();
        let before = std::fs::read(root.path().join("journal").join(FILE)).unwrap();
        let asked = std::cell::Cell::new(0);
        let second_piece = || {
            asked.set(asked.get() + 1);
            asked.get() > 1
        };
        let err = write(&store, &Image::of(&state(3 * CHUNK)), 9, &second_piece).unwrap_err();
        assert!(matches!(err, Error::Stopping), "{err}");
        assert_eq!(asked.get(), 2, "asked before each piece, up to the stop");
        let after = std::fs::read(root.path().join("journal").join(FILE)).unwrap();
        assert_eq!(after, before);
        assert_eq!(
            std::fs::read_dir(root.path().join("tmp")).unwrap().count(),
            0
        );
        let (back, next) = load(&store, LIMITS).unwrap().unwrap();
        assert_eq!((next, tasks_json(&back)), (3, tasks_json(&old)));
    }
}
