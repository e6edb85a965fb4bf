//! Restart benchmark: fills a root's journal with N tasks (default
//! 1,000,000) through the queue API, then starts `tessera serve` on it twice
//! and prints how long each start took to serve and the daemon's resident
//! memory. The first start replays the journal (and compacts it into a
//! snapshot); the second loads the snapshot.
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

/// Starts `tessera serve` on `root` and prints how long it took to serve.
fn start(root: &std::path::Path, label: &str) {
    let served = support::serve(root, "tessera::daemon=info,warn");
    println!(
        "{label:<28} serving after {:>6.2} s   resident {}   journal+snapshot {} MiB",
        served.elapsed.as_secs_f64(),
        served.rss,
        support::journal_size(root) >> 20
    );
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
    support::fill(&root, args.tasks, args.submitted);
    println!("journal {} MiB", support::journal_size(&root) >> 20);
    if args.fill_only {
        return;
    }
    start(&root, "first start (replay)");
    start(&root, "second start (snapshot)");
}
