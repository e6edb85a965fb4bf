//! `ordered_map`: the CPU-heavy middle of a start (parsing the snapshot
//! or journal, encoding the snapshot) spread over helper threads, while
//! the calling thread reads, hashes and applies in the original order.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Mutex, PoisonError, mpsc};

/// Jobs handed out and not yet passed to the sink, at most.
const WINDOW: usize = 8;

/// Helper threads: one per core, at least one and at most four.
fn helpers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 4))
}

/// Runs `work` on each item of `items` on helper threads and hands the
/// results to `sink` in the items' order, with at most a few items in
/// flight. An error from `sink` stops it at once; one from `items` stops
/// it once the items before it have gone to `sink` (whose own error then
/// comes first). A panic in `work` is raised again on this thread.
pub fn ordered_map<T: Send, R: Send, E>(
    items: impl Iterator<Item = Result<T, E>>,
    work: impl Fn(T) -> R + Sync,
    mut sink: impl FnMut(R) -> Result<(), E>,
) -> Result<(), E> {
    let (job_tx, job_rx) = mpsc::channel::<(usize, T)>();
    let job_rx = Mutex::new(job_rx);
    let (out_tx, out_rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..helpers() {
            let (job_rx, out_tx, work) = (&job_rx, out_tx.clone(), &work);
            scope.spawn(move || {
                loop {
                    let job = job_rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok((i, item)) = job else { return };
                    let out = catch_unwind(AssertUnwindSafe(|| work(item)));
                    if out_tx.send((i, out)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(out_tx);
        let mut items = items.fuse();
        let mut done = BTreeMap::new();
        let (mut sent, mut next) = (0, 0);
        let mut stopped = None;
        let outcome = loop {
            while stopped.is_none() && sent - next < WINDOW {
                match items.next() {
                    Some(Ok(item)) => {
                        job_tx.send((sent, item)).expect("helpers run");
                        sent += 1;
                    }
                    Some(Err(e)) => stopped = Some(e),
                    None => break,
                }
            }
            if next == sent {
                break Ok(stopped.map_or(Ok(()), Err));
            }
            let out = loop {
                if let Some(out) = done.remove(&next) {
                    break out;
                }
                let (i, out) = out_rx.recv().expect("helpers answer every job");
                done.insert(i, out);
            };
            next += 1;
            match out.map(&mut sink) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => break Ok(Err(e)),
                Err(panic) => break Err(panic),
            }
        };
        drop(job_tx);
        outcome.unwrap_or_else(|panic| resume_unwind(panic))
    })
}

/// Buffers handed back for reuse, so a long pipeline does not leave the
/// heap full of holes where its buffers were (freed memory the process
/// keeps, between the tasks it made).
#[derive(Debug)]
pub struct Pool<T>(Mutex<Vec<T>>);

impl<T> Default for Pool<T> {
    fn default() -> Pool<T> {
        Pool(Mutex::new(Vec::new()))
    }
}

impl<T: Default> Pool<T> {
    /// A buffer given back before, or a new one.
    pub fn take(&self) -> T {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default()
    }

    /// Gives a buffer back (the caller empties it first).
    pub fn give(&self, buf: T) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_reach_the_sink_in_order_and_errors_stop_it_in_order() {
        let mut seen = Vec::new();
        let items = (0..100u64).map(Ok::<_, String>);
        ordered_map(
            items,
            |i| {
                std::thread::sleep(std::time::Duration::from_micros((100 - i) * 10));
                i * 2
            },
            |r| {
                seen.push(r);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen, (0..100).map(|i| i * 2).collect::<Vec<_>>());

        let mut seen = Vec::new();
        let items = (0..50u64).map(|i| {
            if i == 30 {
                Err(format!("item {i}"))
            } else {
                Ok(i)
            }
        });
        let err = ordered_map(
            items,
            |i| i,
            |r| {
                seen.push(r);
                Ok(())
            },
        );
        assert_eq!(err, Err("item 30".to_string()));
        assert_eq!(
            seen,
            (0..30).collect::<Vec<_>>(),
            "what came before the error went through"
        );

        let items = (0..50u64).map(|i| {
            if i == 30 {
                Err("late".to_string())
            } else {
                Ok(i)
            }
        });
        let err = ordered_map(
            items,
            |i| i,
            |r| {
                if r == 10 {
                    Err(format!("sink {r}"))
                } else {
                    Ok(())
                }
            },
        );
        assert_eq!(err, Err("sink 10".to_string()), "the earlier error wins");
    }

    #[test]
    fn a_panic_in_the_work_is_raised_on_the_caller() {
        let caught = std::panic::catch_unwind(|| {
            let items = (0..20u32).map(Ok::<_, ()>);
            let _ = ordered_map(items, |i| assert_ne!(i, 7, "boom"), |()| Ok(()));
        });
        assert!(caught.is_err());
    }
}
