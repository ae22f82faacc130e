//! `timewheel inspect DIR` and `timewheel verify DIR`: what the next open of a data directory
//! would find, without changing it ([`timewheel::inspect`]); `timewheel dump DIR`: its
//! records as JSON lines.
//!
//! Exit codes, for scripts (`verify`; `inspect` uses the same):
//! - 0: healthy. Every record checks out; a torn tail (the unacknowledged writes a crash
//!   leaves) is reported but is not damage.
//! - 1: damage. A copy of a group commit was damaged and would be repaired from the other (the
//!   data is intact, but the medium lost bytes), or acknowledged data is damaged and the
//!   engine would refuse to open: the segment and offset are printed.
//! - 2: could not check: the directory is in use by a running engine, is missing, or an I/O
//!   error stopped the scan.

/// `println!` that stops quietly when stdout is closed (`timewheel verify DIR | head`): the
/// scan goes on and the exit code still says what it found.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use timewheel::Error;
use timewheel::inspect::{Inspection, Verification, inspect, verify};
use timewheel::stats::{RecoveryStats, StoreStats};

/// Options of `timewheel inspect` and `timewheel verify`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The data directory. Read in place, never written; locked while it is read, so no
    /// engine opens it meanwhile.
    pub dir: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// `verify` only: also replay every record through the state machine, as an open does
    /// (what `inspect` does), instead of checking the files' format alone. Slower: it rebuilds
    /// every job in memory.
    #[arg(long)]
    pub deep: bool,
}

/// Exit code: healthy.
const HEALTHY: u8 = 0;
/// Exit code: damage found.
const DAMAGED: u8 = 1;
/// Exit code: the directory could not be checked.
const UNCHECKED: u8 = 2;

/// Which command: `inspect` prints the jobs too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Inspect,
    Verify,
}

pub fn run(args: &CheckArgs, mode: Mode) -> ExitCode {
    if !args.dir.is_dir() {
        eprintln!("timewheel: {} is not a directory", args.dir.display());
        return ExitCode::from(UNCHECKED);
    }
    // One call does the whole scan; the spinner shows it is alive on a large directory.
    let spinner = (!args.json).then(|| {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("valid template"),
        );
        bar.set_message(format!("reading {}", args.dir.display()));
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    });
    let found = if mode == Mode::Verify && !args.deep {
        verify(&args.dir).map(Found::Scanned)
    } else {
        inspect(&args.dir).map(Found::Replayed)
    };
    if let Some(bar) = spinner {
        bar.finish_and_clear();
    }
    match found {
        Ok(found) => {
            report(args, mode, &found);
            let (recovery, _) = found.files();
            ExitCode::from(
                if recovery.repaired.is_empty() && recovery.damaged_mirrors == 0 {
                    HEALTHY
                } else {
                    DAMAGED
                },
            )
        }
        Err(e) => {
            let code = match e {
                Error::Corrupted { .. }
                | Error::CorruptedStore { .. }
                | Error::UndecodableRecord { .. } => DAMAGED,
                _ => UNCHECKED,
            };
            refused(args, &e, code);
            ExitCode::from(code)
        }
    }
}

/// What the check found: the files' format alone (`verify`), or the whole open (`verify
/// --deep`, `inspect`).
enum Found {
    Scanned(Verification),
    Replayed(Inspection),
}

impl Found {
    /// The journal's scan and the files.
    fn files(&self) -> (&RecoveryStats, &StoreStats) {
        match self {
            Found::Scanned(v) => (&v.recovery, &v.store),
            Found::Replayed(i) => (&i.recovery, &i.store),
        }
    }

    fn is_healthy(&self) -> bool {
        match self {
            Found::Scanned(v) => v.is_healthy(),
            Found::Replayed(i) => i.is_healthy(),
        }
    }
}

fn report(args: &CheckArgs, mode: Mode, found: &Found) {
    let (r, st) = found.files();
    let damaged_mirrors = r.damaged_mirrors;
    let replayed = match found {
        Found::Replayed(i) => Some(i),
        Found::Scanned(_) => None,
    };
    if args.json {
        let mut out = serde_json::json!({
            "dir": args.dir,
            "healthy": found.is_healthy(),
            "replayed": replayed.is_some(),
            "records": r.records,
            "segments": r.segments,
            "bytes": r.bytes,
            "skipped_records": r.skipped,
            "torn_tail": r.torn_tail.map(|(segment, offset)| serde_json::json!({"segment": segment, "offset": offset})),
            "repaired": r.repaired.iter().map(|(segment, offset, reason)| serde_json::json!({"segment": segment, "offset": offset, "reason": reason.to_string()})).collect::<Vec<_>>(),
            "damaged_mirrors": damaged_mirrors,
            "store": serde_json::json!({
                "journal_segments": st.journal_segments,
                "journal_bytes": st.journal_bytes,
                "buckets": st.buckets,
                "bucket_files": st.bucket_files,
                "bucket_bytes": st.bucket_bytes,
                "bucket_jobs": st.bucket_jobs,
                "covered_lsn": st.covered_lsn,
            }),
        });
        if mode == Mode::Inspect
            && let Some(f) = replayed
        {
            out["jobs"] = serde_json::json!({
                "scheduled": f.scheduled,
                "ready": f.ready,
                "missed": r.missed,
                "interrupted": r.interrupted,
                "completed": f.completed,
                "cancelled": f.cancelled,
                "failed": f.failed,
                "due_min_ms": f.due_range.map(|d| d.0),
                "due_max_ms": f.due_range.map(|d| d.1),
            });
        }
        outln!("{out}");
        return;
    }
    outln!("{}", args.dir.display());
    outln!(
        "  log: {} records in {} segments, {} bytes scanned, every record's checksum, \
         sequence and copy checked, {}",
        r.records,
        r.segments,
        r.bytes,
        if replayed.is_some() {
            "and replayed through the state machine"
        } else {
            "every body decoded (not replayed: `verify --deep` replays, as an open does)"
        }
    );
    outln!(
        "  buckets: {} hour buckets in {} files, {} bytes, {} jobs, covering the journal up to \
         LSN {} (every file's checksums checked); journal: {} segment files, {} bytes",
        st.buckets,
        st.bucket_files,
        st.bucket_bytes,
        st.bucket_jobs,
        st.covered_lsn,
        st.journal_segments,
        st.journal_bytes
    );
    if r.skipped > 0 {
        outln!(
            "  {} records of a later version, marked skippable, were skipped",
            r.skipped
        );
    }
    match r.torn_tail {
        Some((segment, offset)) => outln!(
            "  torn tail: segment {segment} from offset {offset}: writes a crash interrupted, \
             never acknowledged; the next open cuts them"
        ),
        None => outln!("  no torn tail"),
    }
    for (segment, offset, reason) in &r.repaired {
        outln!(
            "  DAMAGE: segment {segment} offset {offset}: {reason}; the other copy of that \
             group commit is intact, and the next open repairs it (check the disk)"
        );
    }
    if damaged_mirrors > 0 {
        outln!(
            "  DAMAGE: {damaged_mirrors} group commits have intact records but a damaged second \
             copy; the next open writes fresh copies (check the disk)"
        );
    }
    if mode == Mode::Inspect
        && let Some(f) = replayed
    {
        outln!(
            "  jobs: {} scheduled, {} to deliver at the next open ({} missed while down, {} \
             interrupted while running); over the directory's life {} completed, {} \
             cancelled, {} failed",
            f.scheduled,
            f.ready,
            r.missed,
            r.interrupted,
            f.completed,
            f.cancelled,
            f.failed
        );
        if let Some((lo, hi)) = f.due_range {
            outln!("  due: from {} to {}", utc(lo), utc(hi));
        }
    }
    outln!(
        "  {}",
        if r.repaired.is_empty() && damaged_mirrors == 0 {
            "healthy"
        } else {
            "DAMAGED (repairable)"
        }
    );
}

/// Where an error says the damage is, as JSON (`segment`/`offset`, `lsn`, or `file`/`offset`,
/// with the reason); `None` for an error that names no place.
pub fn damage_json(e: &Error) -> Option<serde_json::Value> {
    Some(match e {
        Error::Corrupted {
            segment,
            offset,
            reason,
        } => {
            serde_json::json!({"segment": segment, "offset": offset, "reason": reason.to_string()})
        }
        Error::UndecodableRecord { lsn, reason } => {
            serde_json::json!({"lsn": lsn, "reason": reason})
        }
        Error::CorruptedStore {
            file,
            offset,
            reason,
        } => serde_json::json!({"file": file, "offset": offset, "reason": reason}),
        _ => return None,
    })
}

fn refused(args: &CheckArgs, e: &Error, code: u8) {
    let why = why(e);
    if args.json {
        let mut out = serde_json::json!({"dir": args.dir, "healthy": false, "error": why});
        if let Some(damage) = damage_json(e) {
            out["damage"] = damage;
        }
        outln!("{out}");
    } else if code == DAMAGED {
        outln!("{}", args.dir.display());
        outln!("  DAMAGE: {why}");
        outln!("  the engine refuses to open this directory rather than lose acknowledged data");
    } else {
        eprintln!("timewheel: {}: {why}", args.dir.display());
    }
}

/// A due time as an RFC 3339 UTC date, with the milliseconds.
pub fn utc(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || format!("{ms} ms"),
            |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        )
}

/// Options of `timewheel dump`.
#[derive(clap::Args, Debug)]
pub struct DumpArgs {
    /// The data directory (read in place, never written).
    pub dir: PathBuf,
    /// Only records from this LSN on.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub from_lsn: u64,
    /// Only the records of this job.
    #[arg(long, value_name = "ID")]
    pub job: Option<u64>,
}

/// `timewheel dump`: the log's records as JSON lines on stdout. Exit codes as for `verify`
/// (1: the log itself is damaged and could not be read past the damage).
pub fn dump(args: &DumpArgs) -> ExitCode {
    if !args.dir.is_dir() {
        eprintln!("timewheel: {} is not a directory", args.dir.display());
        return ExitCode::from(UNCHECKED);
    }
    let mut filter = timewheel::inspect::DumpFilter::all().from_lsn(args.from_lsn);
    if let Some(job) = args.job {
        filter = filter.job(timewheel::JobId(job));
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = timewheel::inspect::dump(&args.dir, filter, &mut out);
    let flushed = std::io::Write::flush(&mut out);
    let broken_pipe = |e: &std::io::Error| e.kind() == std::io::ErrorKind::BrokenPipe;
    match (result, flushed) {
        (Ok(_), Ok(())) => ExitCode::from(HEALTHY),
        // `timewheel dump DIR | head`: the reader has seen enough.
        (Err(Error::Io(e)), _) | (Ok(_), Err(e)) if broken_pipe(&e) => ExitCode::from(HEALTHY),
        (Err(e), _) => {
            let code = match e {
                Error::Corrupted { .. } => DAMAGED,
                _ => UNCHECKED,
            };
            eprintln!("timewheel dump: {}: {}", args.dir.display(), why(&e));
            ExitCode::from(code)
        }
        (Ok(_), Err(e)) => {
            eprintln!("timewheel dump: writing: {e}");
            ExitCode::from(UNCHECKED)
        }
    }
}

/// What went wrong, for an operator.
pub fn why(e: &Error) -> String {
    match e {
        Error::Locked => "in use by a running engine (it holds the directory's lock); \
                          check it once that engine is stopped"
            .to_string(),
        other => other.to_string(),
    }
}
