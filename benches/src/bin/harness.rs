//! The benchmark harness: every workload against timewheel and its peers in one run,
//! interleaved, with a Markdown report, the raw results as JSON, and plots.
//!
//! ```sh
//! cargo run --release -p timewheel-benches -- [--quick] [--out DIR] [--update-docs]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use timewheel_benches::alloc_count::CountingAlloc;
use timewheel_benches::engine::store::horizon_child;
use timewheel_benches::harness::cli::{Options, execute, update_docs, write_report};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Runs every benchmark workload against timewheel and its peers (SQLite; Redis when
/// `redis-server` is on PATH), interleaved, and writes report.md, results.json and plots.
#[derive(Parser, Debug)]
#[command(name = "timewheel-benches", version)]
struct Args {
    /// Smaller sizes and fewer runs: every workload in under two minutes on 2 cores.
    #[arg(long)]
    quick: bool,
    /// Where report.md, results.json and the plots go.
    #[arg(long, default_value = "target/bench-report")]
    out: PathBuf,
    /// Also regenerate the generated section of docs/benchmarks.md and its plots (full runs
    /// only).
    #[arg(long, conflicts_with = "quick")]
    update_docs: bool,
    /// Runs per workload (default 3, quick 2).
    #[arg(long)]
    runs: Option<usize>,
    /// Only the workloads whose id starts with one of these, comma-separated (e.g.
    /// `batch,single,wheel`).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Leave out SQLite and Redis.
    #[arg(long)]
    no_peers: bool,
    /// Where the data directories go (default: a fresh one under the system temp dir; not
    /// tmpfs, where a sync costs nothing).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The `timewheel` binary the sidecar workloads drive (default: the release build beside
    /// this one, built first when run by cargo).
    #[arg(long)]
    sidecar_bin: Option<PathBuf>,
    /// Run nothing: regenerate docs/benchmarks.md's generated section, its plots and the
    /// README's Figures table from the results.json of an earlier full run.
    #[arg(long, conflicts_with_all = ["quick", "update_docs", "only"])]
    docs_from: Option<PathBuf>,
}

fn main() -> ExitCode {
    if horizon_child() {
        return ExitCode::SUCCESS;
    }
    let args = Args::parse();
    if let Some(path) = &args.docs_from {
        let results = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()));
        return match results.map(|r| update_docs(&r).map_err(|e| e.to_string())) {
            Ok(Ok(doc)) => {
                eprintln!("regenerated {} and README.md", doc.display());
                ExitCode::SUCCESS
            }
            Ok(Err(e)) | Err(e) => {
                eprintln!("regenerating the docs from {}: {e}", path.display());
                ExitCode::FAILURE
            }
        };
    }
    if args.update_docs && !args.only.is_empty() {
        eprintln!("--update-docs needs every workload: leave out --only");
        return ExitCode::FAILURE;
    }
    let given: Vec<String> = std::env::args().skip(1).collect();
    let command = if given.is_empty() {
        "cargo run --release -p timewheel-benches".to_owned()
    } else {
        format!(
            "cargo run --release -p timewheel-benches -- {}",
            given.join(" ")
        )
    };
    let opts = Options {
        quick: args.quick,
        runs: args.runs,
        only: args.only,
        no_peers: args.no_peers,
        data_dir: args.data_dir,
        sidecar_bin: args.sidecar_bin,
        command,
    };
    let results = execute(&opts);
    let md = match write_report(&results, &args.out) {
        Ok(md) => md,
        Err(e) => {
            eprintln!("writing the report into {}: {e}", args.out.display());
            return ExitCode::FAILURE;
        }
    };
    println!("{md}");
    eprintln!("report, results.json and plots in {}", args.out.display());
    if args.update_docs {
        match update_docs(&results) {
            Ok(path) => eprintln!("regenerated {}", path.display()),
            Err(e) => {
                eprintln!("updating docs/benchmarks.md: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let failed: usize = results.workloads.iter().map(|w| w.errors.len()).sum();
    if failed > 0 {
        eprintln!("{failed} measurement(s) failed: see the report");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
