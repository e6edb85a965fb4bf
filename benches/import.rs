//! Import benchmark: generates a seed pack of 10,000 nouns and 10,000 tasks
//! (chains of four through `depends_on`, half with a `{noun: ...}` ref),
//! starts a daemon on a temporary root, and times the real `tessera import`
//! binary against it over loopback:
//!
//! ```sh
//! cargo bench --bench import
//! cargo bench --bench import -- --nouns 2000 --tasks 2000
//! ```
//! Every write is durable (fsync on), exactly as in production.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::json;

#[derive(Parser, Debug)]
struct Args {
    /// Nouns in the generated pack.
    #[arg(long, default_value_t = 10_000)]
    nouns: usize,
    /// Tasks in the generated pack.
    #[arg(long, default_value_t = 10_000)]
    tasks: usize,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

/// Items per generated file.
const PER_FILE: usize = 1000;

/// Writes the pack: `pack.yaml`, `nouns/NN.yaml`, `tasks/NN.yaml`.
fn generate(dir: &Path, nouns: usize, tasks: usize) {
    std::fs::create_dir_all(dir.join("nouns")).expect("nouns dir");
    std::fs::create_dir_all(dir.join("tasks")).expect("tasks dir");
    std::fs::write(
        dir.join("pack.yaml"),
        "pack: bench\nversion: \"1\"\nnamespace: bench\nproducer_surface: bench\n\
         defaults:\n  queue: bench.work\n  effect_class: write-internal\n  visibility_scope: surface_only\n\
         include: [nouns/*.yaml, tasks/*.yaml]\n",
    )
    .expect("pack.yaml");
    for (f, start) in (0..nouns).step_by(PER_FILE).enumerate() {
        let mut text = String::from("nouns:\n");
        for i in start..(start + PER_FILE).min(nouns) {
            let _ = write!(
                text,
                "  - store: bench.inputs\n    key: n{i}\n    type: noun.input\n    body:\n      index: {i}\n      numbers: [{i}, {}, {}]\n      note: \"generated input {i} for the import benchmark\"\n",
                i + 1,
                i + 2
            );
        }
        std::fs::write(dir.join(format!("nouns/{f:02}.yaml")), text).expect("noun file");
    }
    for (f, start) in (0..tasks).step_by(PER_FILE).enumerate() {
        let mut text = String::from("tasks:\n");
        for i in start..(start + PER_FILE).min(tasks) {
            let _ = write!(
                text,
                "  - id: t{i}\n    kind: verb.compute\n    brief:\n      index: {i}\n"
            );
            if i % 2 == 0 && nouns > 0 {
                let _ = writeln!(
                    text,
                    "      input_ref: {{ noun: bench.inputs/n{} }}",
                    i % nouns
                );
            }
            if i % 4 != 0 {
                let _ = writeln!(text, "    depends_on: [t{}]", i - 1);
            }
        }
        std::fs::write(dir.join(format!("tasks/{f:02}.yaml")), text).expect("task file");
    }
}

/// Runs `tessera import PACK [extra]` and returns its time and exit code;
/// when it fails, also what it printed (each refused item with the
/// daemon's error), so a failed phase shows its cause.
fn import(pack: &Path, base: &str, key: &Path, extra: &[&str]) -> (Duration, i32, String) {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("import")
        .arg(pack)
        .args(extra)
        .args(["--server", base, "--key-file"])
        .arg(key)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run tessera import");
    let took = start.elapsed();
    let said = if out.status.success() {
        String::new()
    } else {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let errors: Vec<&str> = stdout
            .lines()
            .filter(|l| !l.starts_with("create") && !l.starts_with("unchanged"))
            .take(20)
            .collect();
        format!(
            "{}\n{}",
            errors.join("\n"),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    (took, out.status.code().unwrap_or(-1), said)
}

mod support;

fn main() {
    let args = Args::parse();
    let work = tempfile::tempdir().expect("temp dir");
    let pack = work.path().join("pack");
    generate(&pack, args.nouns, args.tasks);
    let daemon = support::start();
    let base = daemon.admin.base().to_string();
    let key = daemon.root.path().join("auth/admin.key");
    let rt = tokio::runtime::Runtime::new().expect("client runtime");
    rt.block_on(async {
        let admin = daemon.admin.clone();
        let r = admin
            .post_json("/v1/queues", &json!({"name": "bench.work"}))
            .await
            .expect("provision");
        assert!(
            r.status.is_success(),
            "provisioning bench.work: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    });
    println!(
        "tessera import benchmark: {} nouns, {} tasks, nproc {}",
        args.nouns,
        args.tasks,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let start = Instant::now();
    let plan = tessera_importer::plan(&pack).expect("the generated pack is valid");
    println!(
        "{:<26} {:>8.2} s   ({} nouns, {} tasks planned)",
        "plan (importer only)",
        start.elapsed().as_secs_f64(),
        plan.nouns.len(),
        plan.tasks.len()
    );
    let phases: [(&str, &[&str], i32); 3] = [
        ("first apply", &[], 0),
        ("unchanged re-plan", &["--plan"], 0),
        ("unchanged re-apply", &[], 0),
    ];
    for (name, extra, want) in phases {
        let (took, code, said) = import(&pack, &base, &key, extra);
        assert_eq!(code, want, "{name}: tessera import exited {code}:\n{said}");
        println!("{name:<26} {:>8.2} s", took.as_secs_f64());
    }
}
