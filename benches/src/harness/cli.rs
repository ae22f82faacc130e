//! One harness run from its options: the plan, the interleaved runs, and the files written.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::machine::{Machine, command_line};
use super::report::{PlotLinks, markdown};
use super::results::Results;
use super::workloads::{Context, Sizes, plan};
use super::{Progress, docs, measurements, plot, run_workload};

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The smaller sizes of [`Sizes::quick`].
    pub quick: bool,
    /// Runs per workload instead of the default (workloads that take one run keep it).
    pub runs: Option<usize>,
    /// Only the workloads whose id starts with one of these (all when empty).
    pub only: Vec<String>,
    /// Leave out SQLite and Redis.
    pub no_peers: bool,
    /// Where the data directories go (a fresh directory under the system temp dir if none).
    pub data_dir: Option<PathBuf>,
    /// The `timewheel` binary for the sidecar workloads (else the release build beside us).
    pub sidecar_bin: Option<PathBuf>,
    /// The command line, for the report.
    pub command: String,
}

/// The workspace root (the benches crate's parent).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the benches crate is in the workspace")
        .to_owned()
}

fn commit() -> String {
    let root = workspace_root();
    let root = root.to_string_lossy();
    let head = command_line("git", &["-C", &root, "rev-parse", "--short=12", "HEAD"])
        .unwrap_or_else(|| "unknown".into());
    let dirty = std::process::Command::new("git")
        .args(["-C", &root, "status", "--porcelain", "--untracked-files=no"])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty());
    if dirty { format!("{head}-dirty") } else { head }
}

/// Runs the plan of `opts` and returns everything measured.
pub fn execute(opts: &Options) -> Results {
    // The build of the sidecar binary (when cargo runs us) is not part of the run's time.
    let build_started = Instant::now();
    let sidecar_bin = match &opts.sidecar_bin {
        Some(b) => Ok(b.clone()),
        None => crate::sidecar::release_binary(),
    };
    let build_s = build_started.elapsed().as_secs_f64();
    let started = Instant::now();
    let load_at_start = super::machine::load_average().unwrap_or(f64::NAN);
    let date = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut sizes = if opts.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    if let Some(runs) = opts.runs {
        sizes.runs = runs;
        for w in &mut sizes.wheel {
            w.2 = runs;
        }
    }
    let root = opts.data_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("timewheel-harness-{}", std::process::id()))
    });
    std::fs::create_dir_all(&root).expect("the data directory can be created");
    let cx = Context {
        root: root.clone(),
        peers: !opts.no_peers,
        redis: crate::peers::redis::version(),
        sidecar_bin,
        exe: std::env::current_exe().expect("our own path"),
    };
    let (mut workloads, mut skipped) = plan(&sizes, &cx);
    if !opts.only.is_empty() {
        workloads.retain(|w| opts.only.iter().any(|o| w.id.starts_with(o.as_str())));
        skipped.push(format!(
            "every workload but `{}` (`--only`)",
            opts.only.join(",")
        ));
    }
    let progress = Progress::new(measurements(&workloads));
    let results = workloads
        .iter_mut()
        .map(|w| run_workload(w, &progress))
        .collect();
    progress.finish();
    let machine = Machine {
        load_at_start,
        ..Machine::describe(&root)
    };
    std::fs::remove_dir_all(&root).ok();
    Results {
        command: opts.command.clone(),
        commit: commit(),
        date,
        quick: opts.quick,
        runs: sizes.runs,
        machine,
        elapsed_s: started.elapsed().as_secs_f64(),
        build_s,
        skipped,
        workloads: results,
    }
}

/// Writes `report.md`, `results.json` and the plots into `out`; returns the report's text.
pub fn write_report(r: &Results, out: &Path) -> Result<String, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("results.json"), serde_json::to_string_pretty(r)?)?;
    let stems = plot::write_all(r, out)?;
    let md = markdown(
        r,
        1,
        &PlotLinks {
            prefix: "",
            stems: &stems,
        },
    );
    std::fs::write(out.join("report.md"), &md)?;
    Ok(md)
}

/// Regenerates the generated section of docs/benchmarks.md, with its plots in
/// docs/benchmarks/.
pub fn update_docs(r: &Results) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let docs_dir = workspace_root().join("docs");
    let plots = docs_dir.join("benchmarks");
    std::fs::create_dir_all(&plots)?;
    let stems = plot::write_all(r, &plots)?;
    std::fs::write(plots.join("results.json"), serde_json::to_string_pretty(r)?)?;
    let md = markdown(
        r,
        2,
        &PlotLinks {
            prefix: "benchmarks/",
            stems: &stems,
        },
    );
    let path = docs_dir.join("benchmarks.md");
    let doc = std::fs::read_to_string(&path)?;
    std::fs::write(&path, docs::replace_generated(&doc, &md)?)?;
    // The README's Figures table, from the same results.
    let readme = workspace_root().join("README.md");
    let text = std::fs::read_to_string(&readme)?;
    std::fs::write(
        &readme,
        super::headline::replace_table(&text, &super::headline::table(r))?,
    )?;
    Ok(path)
}

/// The `cargo bench` targets' entry point: `cargo bench -p timewheel-benches --bench NAME --
/// [quick] [no-peers] [WORKLOAD...]` runs the harness workloads of `ids` (or only those named),
/// one run each, and prints the report's tables; it writes no files. `SIDECAR_BIN=path`
/// picks the binary the sidecar workloads drive.
pub fn bench_main(ids: &[&str]) {
    if crate::engine::store::horizon_child() {
        return;
    }
    // cargo passes `--bench` to a bench target without the libtest harness.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let named: Vec<String> = args
        .iter()
        .filter(|a| ids.iter().any(|id| id.starts_with(a.as_str())))
        .cloned()
        .collect();
    let only = if named.is_empty() {
        ids.iter().map(|s| (*s).to_owned()).collect()
    } else {
        named
    };
    let opts = Options {
        quick: args.iter().any(|a| a == "quick"),
        runs: Some(1),
        only,
        no_peers: args.iter().any(|a| a == "no-peers"),
        sidecar_bin: std::env::var_os("SIDECAR_BIN").map(PathBuf::from),
        command: format!("cargo bench -p timewheel-benches -- {}", args.join(" ")),
        ..Options::default()
    };
    let r = execute(&opts);
    println!(
        "{}",
        markdown(
            &r,
            1,
            &PlotLinks {
                prefix: "",
                stems: &[],
            },
        )
    );
}
