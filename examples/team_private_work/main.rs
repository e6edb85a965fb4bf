//! The executable slice: team-private work routed end to end.
//!
//! ```sh
//! cargo run --release --example team_private_work
//! ```
//!
//! Starts the real daemon in this process on a temporary root and
//! `127.0.0.1:0`, runs the scenario (`scenario.rs`) against it over HTTP
//! only, prints what happened, and removes the root on exit, also on error
//! and on Ctrl-C. Keys stay in memory; nothing outside loopback is
//! contacted; no model is called and nothing is made public.

mod scenario;

use std::process::ExitCode;

use tessera::client::Client;
use tessera::config::Config;

fn print(rep: &scenario::Report) {
    println!("\nsteps:");
    for (i, s) in rep.steps.iter().enumerate() {
        println!("  {}. {s}", i + 1);
    }
    println!("\nparked with needs: {}", rep.park_needs);
    println!("\nresult: sum of squares = {}", rep.result);
    println!("contract checks on the final receipt:");
    for c in &rep.checks {
        println!(
            "  {:<34} {}  {}",
            c["name"].as_str().unwrap_or("?"),
            if c["ok"] == true { "ok  " } else { "FAIL" },
            c["detail"].as_str().unwrap_or("")
        );
    }
    println!("\nboundaries:");
    for b in &rep.boundaries {
        let verdict = if b.held() { "held" } else { "BROKEN" };
        println!(
            "  {verdict:<6} {} (expected {}, got {} {})",
            b.name, b.expected, b.got, b.code
        );
    }
    let held = rep.boundaries.iter().filter(|b| b.held()).count();
    println!("  {held}/{} boundaries held", rep.boundaries.len());
    println!("\nreceipts:");
    for (label, sha) in &rep.receipts {
        println!("  {sha}  {label}");
    }
    println!("\nrun fingerprint:     {}", rep.run_fingerprint());
    println!(
        "  (sha256 over the receipt hashes in order; differs between runs because each receipt holds its time `at` and its submitting key `by_key`)"
    );
    println!("content fingerprint: {}", rep.content_fingerprint());
    println!(
        "  (sha256 over the receipts without `task_id`, `at` and `by_key`; the same on every run of this input)"
    );
}

fn main() -> ExitCode {
    let root = match tempfile::Builder::new()
        .prefix("tessera-team-private-work-")
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: cannot create a temporary root: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "temporary root: {} (removed at exit)",
        root.path().display()
    );
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let code = runtime.block_on(async {
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: cannot bind 127.0.0.1:0: {e}");
                return ExitCode::FAILURE;
            }
        };
        let addr = listener.local_addr().expect("a bound address");
        let config = Config { root: root.path().to_path_buf(), ..Config::default() };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let daemon = tokio::spawn(tessera::daemon::run(config, listener, async {
            let _ = stopped.await;
        }));
        let key_file = root.path().join("auth/admin.key");
        while !key_file.exists() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let key = std::fs::read_to_string(&key_file).unwrap_or_default();
        let admin = Client::new(&format!("http://{addr}")).with_bearer(key.trim());
        println!("daemon listening on http://{addr}");
        let code = tokio::select! {
            outcome = scenario::run(&admin) => match outcome {
                Ok(rep) => {
                    print(&rep);
                    if rep.boundaries.iter().all(scenario::Boundary::held) { ExitCode::SUCCESS } else { ExitCode::FAILURE }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            },
            _ = tokio::signal::ctrl_c() => {
                eprintln!("interrupted; removing the temporary root");
                ExitCode::from(130)
            }
        };
        let _ = stop.send(());
        let _ = daemon.await;
        code
    });
    drop(runtime);
    if let Err(e) = root.close() {
        eprintln!("warning: could not remove the temporary root: {e}");
    }
    code
}
