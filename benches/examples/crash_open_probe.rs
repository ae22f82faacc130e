//! The demo's crash and reopen alone, for a profiler: `cargo run --release -p timewheel-benches
//! --example crash_open_probe -- [JOBS] [ROUNDS]` (default 100,000 jobs, 5 rounds). Each round
//! a child process (this example again) schedules JOBS durable jobs in batches of 10,000, as the
//! demo's crash child does, says so, and is killed with SIGKILL; then the parent opens the
//! directory and prints the open's wall time, the WAL recovery's part of it, and the records
//! replayed per second. `child DIR JOBS [DUE_IN_MS]` is the child alone (its jobs due in an
//! hour, or in DUE_IN_MS: the demo's are due in a second, so its reopen finds them all
//! missed); `open DIR` times one open of DIR; `inproc [JOBS] [ROUNDS]` schedules, abandons and opens in one process, as the harness's
//! recovery workload does (default 10M jobs, 3 rounds).

use std::io::BufRead;
use std::time::{Duration, Instant};

use timewheel::{Config, Engine, JobSpec};

fn child(dir: &str, jobs: u64, due_in_ms: u64) {
    let engine = Engine::open(Config::new(dir)).expect("open");
    let due = timewheel::Clock::now_ms(&timewheel::SystemClock) + due_in_ms;
    let mut k = 0;
    while k < jobs {
        let m = 10_000.min(jobs - k);
        engine
            .schedule_batch((k..k + m).map(|_| JobSpec::at(due)))
            .expect("schedule");
        k += m;
    }
    println!("scheduled");
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// As the harness's recovery workload does: the engine schedules `jobs` in batches of
/// 100,000, is abandoned, and the same process opens the directory at once (no `sync` between:
/// the write-back of what was written may still run).
fn inproc(jobs: u64, rounds: u32) {
    for round in 0..rounds {
        let dir = std::env::temp_dir().join(format!(
            "timewheel-crash-open-probe-inproc-{}-{round}",
            std::process::id()
        ));
        let engine = Engine::open(Config::new(&dir).compact_interval_ms(0)).expect("open");
        let due = timewheel::Clock::now_ms(&timewheel::SystemClock) + 3_600_000;
        let mut k = 0;
        while k < jobs {
            let m = 100_000.min(jobs - k);
            engine
                .schedule_batch(
                    (k..k + m).map(|i| JobSpec::at(due + i % 3_600_000).payload([3u8; 16])),
                )
                .expect("schedule");
            k += m;
        }
        engine.abandon();
        let t = Instant::now();
        let engine = Engine::open(Config::new(&dir).compact_interval_ms(0)).expect("reopen");
        let open = t.elapsed();
        let r = engine.recovery().clone();
        println!(
            "in process: open {:.1} ms: {} records, the log's part {:.1} ms",
            open.as_secs_f64() * 1e3,
            r.records,
            r.log_elapsed.as_secs_f64() * 1e3,
        );
        engine.close().expect("close");
        std::fs::remove_dir_all(&dir).ok();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("child") {
        let due_in_ms = args
            .get(3)
            .map_or(3_600_000, |a| a.parse().expect("DUE_IN_MS"));
        child(&args[1], args[2].parse().expect("JOBS"), due_in_ms);
        return;
    }
    if args.first().map(String::as_str) == Some("inproc") {
        inproc(
            args.get(1).map_or(10_000_000, |a| a.parse().expect("JOBS")),
            args.get(2).map_or(3, |a| a.parse().expect("ROUNDS")),
        );
        return;
    }
    if args.first().map(String::as_str) == Some("open") {
        let t = Instant::now();
        let engine = Engine::open(Config::new(&args[1])).expect("reopen");
        let open = t.elapsed();
        let r = engine.recovery().clone();
        println!(
            "open {:.1} ms: recovery's own {:.1} ms (the log's {:.1} ms), {} missed",
            open.as_secs_f64() * 1e3,
            r.elapsed.as_secs_f64() * 1e3,
            r.log_elapsed.as_secs_f64() * 1e3,
            r.missed
        );
        drop(engine);
        return;
    }
    let jobs: u64 = args.first().map_or(100_000, |a| a.parse().expect("JOBS"));
    let rounds: u32 = args.get(1).map_or(5, |a| a.parse().expect("ROUNDS"));
    for round in 0..rounds {
        let dir = std::env::temp_dir().join(format!(
            "timewheel-crash-open-probe-{}-{round}",
            std::process::id()
        ));
        let mut c = std::process::Command::new(std::env::current_exe().expect("exe"))
            .arg("child")
            .arg(&dir)
            .arg(jobs.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut said = String::new();
        std::io::BufReader::new(c.stdout.take().expect("piped"))
            .read_line(&mut said)
            .expect("read");
        c.kill().expect("kill");
        c.wait().expect("wait");
        assert_eq!(said.trim(), "scheduled");
        std::thread::sleep(Duration::from_millis(500));
        let t = Instant::now();
        let engine = Engine::open(Config::new(&dir)).expect("reopen");
        let open = t.elapsed();
        let r = engine.recovery().clone();
        println!(
            "open {:.1} ms: {} records in {} segments, recovery's own {:.1} ms (the log's {:.1} \
             ms), {:.2} M records/s over the whole open",
            open.as_secs_f64() * 1e3,
            r.records,
            r.segments,
            r.elapsed.as_secs_f64() * 1e3,
            r.log_elapsed.as_secs_f64() * 1e3,
            r.records as f64 / open.as_secs_f64() / 1e6
        );
        engine.close().expect("close");
        std::fs::remove_dir_all(&dir).ok();
    }
}
