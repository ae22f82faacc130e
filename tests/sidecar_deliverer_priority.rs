//! The sidecar's deliverer (the thread that claims fired jobs and writes their events) asks
//! for the timer thread's real-time priority under the same setting, `Config::timer_realtime`:
//! a fired job's way to the client must not wait for a CPU behind normal threads either.
//!
//! A file of its own: the test tells the deliverer by its thread name, which no other test in
//! this process may share meanwhile.
#![cfg(target_os = "linux")]

mod common;

use std::time::{Duration, Instant};

use common::TempDir;
use timewheel::sidecar::{ServeEnd, ServeOptions, serve};
use timewheel::{Config, Engine};

/// The name the deliverer's thread carries (at most 15 bytes: the kernel's limit).
const DELIVERER: &str = "timewheel-out";

/// The scheduling policy of each thread of this process named `name` (`/proc`'s `stat`, field
/// 41: 0 normal, 1 `SCHED_FIFO`).
fn policies_of(name: &str) -> Vec<u64> {
    let mut found = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let path = task.expect("a task").path();
        let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
            continue; // the thread ended meanwhile
        };
        if comm.trim_end() != name {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // Fields after the command name, which may hold spaces: the 3rd field is the first.
        let rest = &stat[stat.rfind(')').expect("a command name") + 2..];
        let policy = rest
            .split(' ')
            .nth(41 - 3)
            .and_then(|f| f.parse().ok())
            .expect("a policy field");
        found.push(policy);
    }
    found
}

#[test]
fn the_deliverer_runs_at_the_timer_threads_priority_when_the_timer_does() {
    for realtime in [true, false] {
        let dir = TempDir::new(&format!("deliverer-{realtime}"));
        let config = Config::new(&dir.0).timer_realtime(realtime);
        let engine = Engine::open(config.clone()).expect("open");
        // The timer thread asks when it starts, which may be after the open returns.
        let asked = Instant::now() + Duration::from_secs(2);
        while realtime && !engine.stats().timer_realtime && Instant::now() < asked {
            std::thread::sleep(Duration::from_millis(5));
        }
        if realtime && !engine.stats().timer_realtime {
            eprintln!(
                "skipped: this process may not take a real-time priority (no CAP_SYS_NICE, \
                 RLIMIT_RTPRIO 0), so neither thread can"
            );
            return;
        }
        let (reader, writer) = std::io::pipe().expect("pipe");
        let reader = std::io::BufReader::new(reader);
        std::thread::scope(|scope| {
            let server = scope.spawn(|| {
                serve(
                    &engine,
                    &config,
                    reader,
                    std::io::sink(),
                    ServeOptions::default(),
                )
            });
            // The thread starts, then asks: look until it has asked (or a guard runs out).
            let want = u64::from(realtime);
            let guard = Instant::now() + Duration::from_secs(10);
            let seen = loop {
                let seen = policies_of(DELIVERER);
                if seen == [want] || Instant::now() > guard {
                    break seen;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            assert_eq!(
                seen,
                [want],
                "timer_realtime = {realtime}: the deliverer's policy (1 = SCHED_FIFO)"
            );
            drop(writer);
            let end = server.join().expect("serve returns");
            assert_eq!(end.expect("serves"), ServeEnd::Eof);
        });
        // Serving is over: its deliverer is gone.
        assert!(policies_of(DELIVERER).is_empty(), "the deliverer ended");
    }
}
