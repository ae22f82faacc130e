//! The sidecar measured from the outside: a client drives `timewheel serve` over pipes, as a
//! client in another language would, and times everything on its own clock.
//!
//! - **end to end** ([`end_to_end`]): schedules due at once, pipelined; the client completes
//!   each job as its `fired` event arrives (or, with `--auto-complete`, only schedules and
//!   reads events). Jobs/s from the first schedule written to the last complete acknowledged.
//! - **fire lateness** ([`lateness`]) with `--auto-complete`: jobs scheduled up front, due one
//!   after another over a span (or all at once); lateness is the client's clock when it reads
//!   the event line minus `due_ms` (so it includes the claim's sync, the pipe and the client's
//!   own scheduling).

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::engine::now_us;

/// Requests written per flush by the client's writer.
const WRITE_BATCH: usize = 1024;

/// The release `timewheel` binary beside the running executable (`target/release/`, or its
/// parent when run from `target/release/deps/` or `target/release/examples/`), built first
/// with cargo when cargo runs us (`CARGO` is set). An error says why there is none.
pub fn release_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut dir = exe.parent().ok_or("no parent of the executable")?;
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir = dir.parent().ok_or("no parent of deps/ or examples/")?;
    }
    let bin = dir.join("timewheel");
    if let Some(cargo) = std::env::var_os("CARGO") {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .ok_or("the benches crate is in the workspace")?;
        let status = Command::new(cargo)
            .current_dir(root)
            .args([
                "build",
                "--release",
                "-q",
                "-p",
                "timewheel",
                "--bin",
                "timewheel",
            ])
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("cargo build did not run: {e}"))?;
        if !status.success() {
            return Err(format!("cargo build --release --bin timewheel: {status}"));
        }
    }
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!(
            "{} is missing (cargo build --release --bin timewheel)",
            bin.display()
        ))
    }
}

/// A fresh data directory, removed when dropped.
struct DataDir(PathBuf);

impl DataDir {
    fn new(root: &Path, name: &str) -> Self {
        let d = root.join(format!("sidecar-{name}"));
        let _ = std::fs::remove_dir_all(&d);
        DataDir(d)
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running sidecar: its stdin, and its stdout lines with the client's clock (µs since the
/// epoch) at the moment each was read.
struct Sidecar {
    child: Child,
    stdin: Option<BufWriter<ChildStdin>>,
    lines: Receiver<(u64, String)>,
}

impl Sidecar {
    fn start(bin: &Path, dir: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(bin)
            .arg("serve")
            .arg("--dir")
            .arg(dir)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn timewheel serve");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::with_capacity(1 << 16, stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send((now_us(), line)).is_err() {
                    return;
                }
            }
        });
        let stdin = Some(BufWriter::with_capacity(
            1 << 16,
            child.stdin.take().expect("piped"),
        ));
        Sidecar {
            child,
            stdin,
            lines,
        }
    }

    fn recv(&self) -> (u64, String) {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("a line within 60 s")
    }

    /// Closes stdin and waits for exit 0.
    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "the sidecar exited with {status}");
    }
}

/// The string value of `"field":"..."` in a line, without a JSON parser (the client must not
/// be the bottleneck on two cores).
fn str_field<'a>(line: &'a str, field: &str) -> Option<&'a str> {
    let key = format!("\"{field}\":\"");
    let start = line.find(&key)? + key.len();
    let len = line[start..].find('"')?;
    Some(&line[start..start + len])
}

fn num_field(line: &str, field: &str) -> Option<u64> {
    let key = format!("\"{field}\":");
    let start = line.find(&key)? + key.len();
    let digits = line[start..].bytes().take_while(u8::is_ascii_digit).count();
    line[start..start + digits].parse().ok()
}

/// What an end-to-end run measured.
pub struct EndToEnd {
    /// Until the last fired event was read.
    pub fired: Duration,
    /// Until the last complete was acknowledged (client completes) or stats showed all jobs
    /// completed (auto-complete).
    pub done: Duration,
}

/// `jobs` schedules due now, pipelined by a writer thread; the reader completes each fired job
/// (unless `auto`) by handing a complete to the writer.
pub fn end_to_end(bin: &Path, root: &Path, jobs: usize, auto: bool) -> EndToEnd {
    let dir = DataDir::new(root, if auto { "e2e-auto" } else { "e2e" });
    let args: &[&str] = if auto { &["--auto-complete"] } else { &[] };
    let mut sc = Sidecar::start(bin, &dir.0, args);
    let stdin = sc.stdin.take().expect("stdin");
    let (complete_tx, complete_rx): (Sender<String>, Receiver<String>) = channel();
    let started = Instant::now();
    let writer = std::thread::spawn(move || {
        let mut stdin = stdin;
        let mut sent = 0;
        let mut buf = String::with_capacity(WRITE_BATCH * 64);
        let write_completes = |stdin: &mut BufWriter<ChildStdin>, block: bool| -> bool {
            let first = if block {
                match complete_rx.recv() {
                    Ok(id) => Some(id),
                    Err(_) => return false,
                }
            } else {
                None
            };
            for id in first.into_iter().chain(complete_rx.try_iter()) {
                writeln!(stdin, r#"{{"op":"complete","req":"c","id":"{id}"}}"#).expect("write");
            }
            stdin.flush().expect("flush");
            true
        };
        while sent < jobs {
            buf.clear();
            let n = WRITE_BATCH.min(jobs - sent);
            for i in sent..sent + n {
                use std::fmt::Write as _;
                writeln!(
                    buf,
                    r#"{{"op":"schedule","req":{i},"delay_ms":0,"payload":"j"}}"#
                )
                .expect("format");
            }
            sent += n;
            stdin.write_all(buf.as_bytes()).expect("write");
            stdin.flush().expect("flush");
            write_completes(&mut stdin, false);
        }
        while write_completes(&mut stdin, true) {}
        stdin
    });
    let (mut scheduled, mut fired, mut completed) = (0, 0, 0);
    let mut fired_at = None;
    while (auto && fired < jobs) || (!auto && completed < jobs) {
        let (_, line) = sc.recv();
        if line.starts_with(r#"{"event":"fired""#) {
            fired += 1;
            if !auto {
                let id = str_field(&line, "id").expect("event id").to_owned();
                complete_tx.send(id).expect("writer alive");
            }
        } else if line.starts_with(r#"{"req":"c","ok":true"#) {
            completed += 1;
        } else if line.contains(r#""ok":true,"id""#) {
            scheduled += 1;
        } else {
            panic!("unexpected line: {line}");
        }
        if fired == jobs && fired_at.is_none() {
            fired_at = Some(started.elapsed());
        }
    }
    drop(complete_tx);
    let mut stdin = writer.join().expect("writer");
    let done = if auto {
        // Poll stats until every auto-complete is in.
        loop {
            writeln!(stdin, r#"{{"op":"stats","req":"s"}}"#).expect("write");
            stdin.flush().expect("flush");
            let line = loop {
                let (_, line) = sc.recv();
                if line.starts_with(r#"{"req":"s""#) {
                    break line;
                }
                if line.contains(r#""ok":true,"id""#) {
                    scheduled += 1;
                }
            };
            if num_field(&line, "completed") == Some(jobs as u64) {
                break started.elapsed();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    } else {
        started.elapsed()
    };
    assert!(scheduled <= jobs);
    sc.stdin = Some(stdin);
    sc.finish();
    EndToEnd {
        fired: fired_at.expect("all fired"),
        done,
    }
}

/// What a lateness run measured.
pub struct Lateness {
    /// Lateness in µs of the events that were not early.
    pub hist: Histogram<u64>,
    /// Events read before their due time.
    pub early: u64,
    /// The engine's own figures from `stats`, in ms: due to ready queue (p50, p99, p99.9,
    /// max) and ready queue to claim (p50, p99, max).
    pub engine: [f64; 4],
    /// See `engine`.
    pub claim_wait: [f64; 3],
}

/// `jobs` due evenly over `span_ms` with `--auto-complete`: every job scheduled up front, the
/// first due 2 s ahead; lateness on the client's clock when it reads each event.
pub fn lateness(bin: &Path, root: &Path, jobs: u64, span_ms: u64) -> Lateness {
    let dir = DataDir::new(root, &format!("late-{jobs}-{span_ms}"));
    let mut sc = Sidecar::start(bin, &dir.0, &["--auto-complete"]);
    let first_due_ms = now_us() / 1000 + 2_000;
    let stdin = sc.stdin.as_mut().expect("stdin");
    for i in 0..jobs {
        let due = first_due_ms + i * span_ms / jobs;
        writeln!(
            stdin,
            r#"{{"op":"schedule","req":{i},"due_ms":{due},"payload":"l"}}"#
        )
        .expect("write");
    }
    stdin.flush().expect("flush");
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    let (mut early, mut fired, mut scheduled) = (0, 0, 0);
    while fired < jobs {
        let (read_us, line) = sc.recv();
        if line.starts_with(r#"{"event":"fired""#) {
            fired += 1;
            let due_us = num_field(&line, "due_ms").expect("due_ms") * 1000;
            match read_us.checked_sub(due_us) {
                Some(late) => hist.record(late).expect("in range"),
                None => early += 1,
            }
        } else if line.contains(r#""ok":true,"id""#) {
            scheduled += 1;
        } else {
            panic!("unexpected line: {line}");
        }
    }
    assert_eq!(
        scheduled, jobs,
        "every schedule answered before the last fire"
    );
    let stdin = sc.stdin.as_mut().expect("stdin");
    writeln!(stdin, r#"{{"op":"stats","req":"s"}}"#).expect("write");
    stdin.flush().expect("flush");
    let stats = loop {
        let (_, line) = sc.recv();
        if line.starts_with(r#"{"req":"s""#) {
            break line;
        }
    };
    let engine = [
        "lateness_us_p50",
        "lateness_us_p99",
        "lateness_us_p999",
        "lateness_us_max",
    ]
    .map(|f| ms(num_field(&stats, f).unwrap_or(0)));
    let claim_wait = [
        "claim_wait_us_p50",
        "claim_wait_us_p99",
        "claim_wait_us_max",
    ]
    .map(|f| ms(num_field(&stats, f).unwrap_or(0)));
    sc.finish();
    Lateness {
        hist,
        early,
        engine,
        claim_wait,
    }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}
