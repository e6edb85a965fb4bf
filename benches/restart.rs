//! Restart benchmark: fills a root's journal with N tasks (default
//! 1,000,000) through the queue API, then starts `tessera serve` on it twice
//! and prints how long each start took to serve and the daemon's resident
//! memory. The queue folds its journal into snapshots while it fills, as a
//! running daemon does, so the first start loads the last snapshot and
//! replays the segments written after it; the fill prints what the folds
//! did and its own peak memory (the live state plus the chunks a fold
//! kept while they changed). The first
//! start's daemon folds that tail in the background while it serves when
//! a fold is due (`/v1/status` says); the second start loads what it left.
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
/// with `fold`, lets it run until its first look at the journal finds no
/// fold due (folding first when one is, at most 30 s) and prints how long
/// that took and its peak memory.
fn start(root: &std::path::Path, label: &str, fold: bool) {
    let log = "tessera::daemon=info,tessera::queue=info,warn";
    let served = support::serve_then(root, log, |pid, admin| {
        if !fold {
            return;
        }
        let started = std::time::Instant::now();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let settled = || {
            let r = rt.block_on(admin.get("/v1/status")).expect("status");
            let status: serde_json::Value = serde_json::from_slice(&r.body).expect("status JSON");
            let folds = &status["storage"]["folds"];
            folds["looks"].as_u64() > Some(0) && folds["due"] == false
        };
        while !settled() && started.elapsed() < std::time::Duration::from_secs(30) {
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
    std::fs::read_dir(root.join("journal"))
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log"))
            })
            .count()
        })
        .unwrap_or(0)
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
