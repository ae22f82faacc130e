//! The `timewheel` binary: the demo (also what runs with no subcommand), the JSON-lines
//! sidecar (`timewheel serve --dir DIR`), the operator's checks (`timewheel verify DIR`,
//! `timewheel inspect DIR`, `timewheel dump DIR`), and the operator's last resort
//! (`timewheel repair DIR --truncate-at SEGMENT:OFFSET`).
//!
//! Logs go to stderr only, filtered by `RUST_LOG`: in `serve`, stdout is the protocol.

mod cli;

use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use timewheel::sidecar::{ServeOptions, serve};
use timewheel::{Config, Engine};

use cli::check;
use cli::demo::{self, DemoArgs};
use cli::repair;

/// An embedded, durable timer and job engine.
#[derive(Parser, Debug)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// With no subcommand, the demo runs with these options.
    #[command(flatten)]
    demo: DemoArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Schedule a million durable jobs, fire them, then crash and recover (the default).
    Demo(DemoArgs),
    /// Serve the engine as JSON lines on stdin/stdout (the sidecar protocol).
    Serve(ServeArgs),
    /// Check a data directory without changing it: every record's checksum and sequence, and
    /// a replay through the state machine. Exit 0 healthy, 1 damage (printed with segment and
    /// offset), 2 could not check (in use by a running engine, missing, I/O error).
    Verify(check::CheckArgs),
    /// Like verify, and also counts the jobs by state and shows their due range.
    Inspect(check::CheckArgs),
    /// The log's records as JSON lines (read in place, never written).
    Dump(check::DumpArgs),
    /// The live jobs as JSON lines in due order, by state and due range (read in place).
    Jobs(cli::jobs::JobsArgs),
    /// Cut the journal at a record boundary, with a backup of what is cut (after a verify).
    ///
    /// Gives up every record from SEGMENT:OFFSET on, so that an engine opens a directory
    /// whose acknowledged data is damaged. Runs verify first, holds
    /// the directory's lock, and refuses a cut that is not at a record boundary, lies past the
    /// damage or the end of the log, or would remove records the hour-bucket files already
    /// hold. Without --yes it only prints what it would cut; with it, it first copies every
    /// file it changes or removes into a backup directory, synced. Exit 0 repaired (or nothing
    /// to cut, or a dry run), 1 refused (or damage left after the cut), 2 could not run (in use
    /// by a running engine, missing, I/O error).
    Repair(repair::RepairArgs),
    /// The demo's crash part, in a process of its own that the demo kills (-9).
    #[command(hide = true)]
    DemoCrashChild(demo::CrashChildArgs),
}

/// Options of `timewheel serve`.
#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// The data directory (created if missing, locked while serving).
    #[arg(long)]
    dir: PathBuf,
    /// Complete each job right after printing its fired event.
    #[arg(long)]
    auto_complete: bool,
    /// How long a delivered job may go without complete or fail before it fires again.
    #[arg(long, value_name = "N", default_value_t = Config::new("").lease_ms)]
    lease_ms: u64,
    /// Longest request line accepted; longer ones get a bad_request error.
    #[arg(long, value_name = "N", default_value_t = ServeOptions::default().line_bytes_max)]
    max_line_bytes: usize,
    /// Serve the engine's metrics in the Prometheus text format at http://ADDR/metrics (for
    /// example 127.0.0.1:9464; port 0 picks a free one). The address bound is printed on
    /// stderr.
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Serve tenants fairly: fired jobs are handed out round-robin across tenants (the
    /// schedule's "tenant" field), each with at most N running deliveries (0: no limit).
    #[arg(long, value_name = "N")]
    fair_tenants: Option<u32>,
    /// Failed attempts a job may have before it is dead (the schedule's "max_attempts"
    /// overrides it).
    #[arg(long, value_name = "N", default_value_t = Config::new("").retry.max_attempts)]
    max_attempts: u32,
    /// How far ahead jobs are kept in memory, in milliseconds: later ones stay in their hour
    /// bucket's files once compacted (at least an hour).
    #[arg(long, value_name = "MS", default_value_t = Config::new("").horizon_ms)]
    horizon_ms: u64,
    /// How often the compactor folds sealed journal segments into hour buckets, in
    /// milliseconds (0: never).
    #[arg(long, value_name = "MS", default_value_t = Config::new("").compact_interval_ms)]
    compact_interval_ms: u64,
    /// Seal the journal segment appended to once it has held records this long, in
    /// milliseconds, so that compaction folds it without waiting for it to fill (0: only full
    /// segments; otherwise at least 1000).
    #[arg(long, value_name = "MS", default_value_t = Config::new("").seal_after_ms)]
    seal_after_ms: u64,
}

/// Input buffer of `serve`: large enough that a burst of requests is read, and batched, at
/// once.
const SERVE_INPUT_BUFFER_BYTES: usize = 64 << 10;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Serve(args)) => {
            init_logging("warn");
            run_serve(args)
        }
        Some(Command::Demo(args)) => run_demo(args),
        Some(Command::Verify(args)) => {
            init_logging("error");
            check::run(&args, check::Mode::Verify)
        }
        Some(Command::Dump(args)) => {
            init_logging("error");
            check::dump(&args)
        }
        Some(Command::Jobs(args)) => {
            init_logging("error");
            cli::jobs::run(&args)
        }
        Some(Command::Inspect(args)) => {
            init_logging("error");
            check::run(&args, check::Mode::Inspect)
        }
        Some(Command::Repair(args)) => {
            init_logging("error");
            repair::run(&args)
        }
        Some(Command::DemoCrashChild(args)) => match demo::crash_child(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("timewheel demo (crash part): {e}");
                ExitCode::FAILURE
            }
        },
        None => run_demo(cli.demo),
    }
}

fn run_demo(args: DemoArgs) -> ExitCode {
    init_logging("warn");
    match demo::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("timewheel demo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_serve(args: ServeArgs) -> ExitCode {
    let mut config = Config::new(&args.dir);
    config.lease_ms = args.lease_ms;
    config.retry.max_attempts = args.max_attempts;
    config.horizon_ms = args.horizon_ms;
    config.compact_interval_ms = args.compact_interval_ms;
    config.seal_after_ms = args.seal_after_ms;
    if let Some(limit) = args.fair_tenants {
        config = config.fair_tenants(limit);
    }
    // Installed first, so that a SIGTERM during a long recovery also ends in a flush and
    // exit 0 (serving stops at once) rather than in death by signal.
    let stop = match stop_on_signals() {
        Ok(stop) => stop,
        Err(e) => {
            eprintln!("timewheel serve: installing the SIGTERM handler: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(addr) = args.metrics_addr {
        match cli::prometheus::serve(addr) {
            Ok(bound) => eprintln!("timewheel serve: metrics at http://{bound}/metrics"),
            Err(e) => {
                eprintln!("timewheel serve: serving metrics on {addr}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let engine = match Engine::open(config.clone()) {
        Ok(engine) => engine,
        Err(e) => {
            eprintln!("timewheel serve: opening {}: {e}", args.dir.display());
            return ExitCode::FAILURE;
        }
    };
    let options = ServeOptions {
        line_bytes_max: args.max_line_bytes,
        auto_complete: args.auto_complete,
        stop: Some(stop),
    };
    let input = BufReader::with_capacity(SERVE_INPUT_BUFFER_BYTES, std::io::stdin());
    let result = serve(&engine, &config, input, std::io::stdout(), options);
    // Releases the directory lock before the process ends.
    drop(engine);
    match result {
        Ok(end) => {
            tracing::info!(?end, "sidecar stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("timewheel serve: {e}");
            ExitCode::FAILURE
        }
    }
}

/// SIGTERM (and SIGINT, for a terminal) stop serving the way EOF does: flush, exit 0.
fn stop_on_signals() -> std::io::Result<crossbeam_channel::Receiver<()>> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("timewheel-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                tracing::info!(signal, "stopping on a signal");
                // Full means a stop is already pending.
                let _ = tx.try_send(());
            }
        })?;
    Ok(rx)
}

fn init_logging(default_level: &str) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, not in a log file a supervisor collects.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
