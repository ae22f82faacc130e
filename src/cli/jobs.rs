//! `timewheel jobs DIR`: the live jobs of a data directory as JSON lines, in due order, read in
//! place (the same paging as `Engine::jobs`, over the directory as the next open would find
//! it). Exit 0 listed, 2 could not read (locked by a running engine, missing, damaged).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use timewheel::{JobQuery, JobState};

/// Options of `timewheel jobs`.
#[derive(clap::Args, Debug)]
pub struct JobsArgs {
    /// The data directory. Read in place, never written.
    pub dir: PathBuf,
    /// Only jobs in this state.
    #[arg(long, value_parser = parse_state)]
    pub state: Option<JobState>,
    /// Only jobs due at or after this (ms since the Unix epoch).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub due_from: u64,
    /// Only jobs due before this (ms since the Unix epoch).
    #[arg(long, value_name = "MS", default_value_t = u64::MAX)]
    pub due_to: u64,
    /// At most this many jobs.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
}

fn parse_state(s: &str) -> Result<JobState, String> {
    match s {
        "scheduled" => Ok(JobState::Scheduled),
        "ready" => Ok(JobState::Ready),
        "running" => Ok(JobState::Running),
        _ => Err(format!("{s}: one of scheduled, ready, running")),
    }
}

fn state_name(s: JobState) -> &'static str {
    match s {
        JobState::Scheduled => "scheduled",
        JobState::Ready => "ready",
        JobState::Running => "running",
    }
}

pub fn run(args: &JobsArgs) -> ExitCode {
    if args.due_from > args.due_to {
        eprintln!("timewheel jobs: --due-from is after --due-to");
        return ExitCode::from(2);
    }
    let mut query = JobQuery::due_between(args.due_from, args.due_to);
    if let Some(state) = args.state {
        query = query.state(state);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let (mut written, mut failed) = (0u64, None);
    let result = timewheel::inspect::jobs(&args.dir, &query, |job| {
        if failed.is_some() || args.limit.is_some_and(|l| written >= l) {
            return;
        }
        let mut line = serde_json::json!({
            "id": job.id.0.to_string(),
            "state": state_name(job.state),
            "due_ms": job.due_ms,
            "attempt": job.attempt,
        });
        match std::str::from_utf8(&job.payload) {
            Ok(text) => line["payload"] = text.into(),
            Err(_) => {
                let hex: String = job.payload.iter().map(|b| format!("{b:02x}")).collect();
                line["payload_hex"] = hex.into();
            }
        }
        if let Err(e) = writeln!(out, "{line}") {
            failed = Some(e);
        }
        written += 1;
    });
    if let Err(e) = out.flush() {
        failed.get_or_insert(e);
    }
    match (result, failed) {
        (Ok(_), None) => ExitCode::SUCCESS,
        (Ok(_), Some(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        (Ok(_), Some(e)) => {
            eprintln!("timewheel jobs: writing: {e}");
            ExitCode::from(2)
        }
        (Err(e), _) => {
            eprintln!("timewheel jobs: {}: {e}", args.dir.display());
            ExitCode::from(2)
        }
    }
}
