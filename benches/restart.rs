//! Restart benchmark: fills a root's journal with N tasks (default
//! 1,000,000) through the queue API, then starts `tessera serve` on it twice
//! and prints how long each start took to serve and the daemon's resident
//! memory. The queue folds its journal into snapshots while it fills, as a
//! running daemon does, so the first start loads the last snapshot and
//! replays the segments written after it; the fill prints what the folds
//! did and its own peak memory (the live state plus the chunks a fold
//! kept while they changed). The first
//! start's daemon folds that tail in the background while it serves; the
//! second start loads what it left.
//!
//! With `--submitted N` the first N tasks are also claimed and submitted,
//! so the journal holds their receipts and the start re-packs them and
//! indexes the packs.
//!
//! ```sh
//! cargo bench --bench restart                 # 1,000,000 tasks
//! cargo bench --bench restart -- --tasks 100000 --submitted 100000
//! ```

use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// Tasks to put in the journal.
    #[arg(long, default_value_t = 1_000_000)]
    tasks: usize,
    /// Use (and keep) this root instead of a temporary one.
    #[arg(long)]
    root: Option<std::path::PathBuf>,
    /// Tasks to claim and submit after the fill (receipts in the journal).
    #[arg(long, default_value_t = 0)]
    submitted: usize,
    /// Only fill the root (give `--root`), to copy it and time starts
    /// by hand or under a profiler.
    #[arg(long, requires = "root")]
    fill_only: bool,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

/// Starts `tessera serve` on `root` and prints how long it took to serve;
/// with `fold`, lets it run until it has folded the closed segments when a
/// fold is due (at most 30 s) and prints how long that took and its peak
/// memory.
fn start(root: &std::path::Path, label: &str, fold: bool) {
    let log = "tessera::daemon=info,tessera::queue=info,warn";
    let served = support::serve_then(root, log, |pid| {
        if !fold {
            return;
        }
        let started = std::time::Instant::now();
        while fold_due(root) && started.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let peak = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .unwrap_or("?")
            .trim();
        println!(
            "{label:<28} left {} segment(s) after {:.2} s serving; daemon peak {peak}",
            segments(root),
            started.elapsed().as_secs_f64()
        );
    });
    println!(
        "{label:<28} serving after {:>6.2} s   resident {}   journal+snapshot {} MiB",
        served.elapsed.as_secs_f64(),
        served.rss,
        support::journal_size(root) >> 20
    );
}

/// Journal segments in `root`.
fn segments(root: &std::path::Path) -> usize {
    segment_sizes(root).len()
}

/// Whether the daemon on `root` has a fold due, by its rule (`fold.rs`):
/// the closed segments (all but the last) hold at least 64 MiB and at
/// least half the snapshot's bytes, or there are more than 8.
fn fold_due(root: &std::path::Path) -> bool {
    let mut sizes = segment_sizes(root);
    sizes.pop();
    let snapshot = std::fs::metadata(root.join("journal/snapshot.jsonl")).map_or(0, |m| m.len());
    let closed: u64 = sizes.iter().sum();
    !sizes.is_empty() && (closed >= (64 << 20).max(snapshot / 2) || sizes.len() > 8)
}

/// The sizes of `root`'s journal segments, in segment order.
fn segment_sizes(root: &std::path::Path) -> Vec<u64> {
    let mut found: Vec<(String, u64)> = std::fs::read_dir(root.join("journal"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let len = e.metadata().ok()?.len();
                    name.ends_with(".log").then_some((name, len))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.into_iter().map(|(_, len)| len).collect()
}

mod support;

fn main() {
    let args = Args::parse();
    let temp = tempfile::tempdir().expect("temp root");
    let root = args
        .root
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    println!(
        "tessera restart benchmark: {} tasks, nproc {}",
        args.tasks,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let folds = support::fill(&root, args.tasks, args.submitted);
    let (rss, peak) = support::memory();
    println!(
        "folds during the fill: {} ({} failed), {} segments, {:.1} s in all, the last {:.2} s for {} tasks; fill resident {rss}, peak {peak}",
        folds.done,
        folds.failed,
        folds.segments,
        folds.total_ms as f64 / 1000.0,
        folds.last_ms as f64 / 1000.0,
        folds.last_tasks
    );
    println!(
        "journal+snapshot {} MiB",
        support::journal_size(&root) >> 20
    );
    if args.fill_only {
        return;
    }
    start(&root, "first start (snapshot+tail)", true);
    start(&root, "second start", false);
}
