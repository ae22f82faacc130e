//! `timewheel verify` and `timewheel inspect` as an operator runs them: the exit code a script
//! reads, the damage named with segment and offset, and the directory left exactly as it was
//! (after a clean close, after a crash, and with damage).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use common::TempDir;
use timewheel::{Config, Engine, JobSpec};

fn run(args: &[&str], dir: &Path) -> Output {
    // These tests start the binary side by side: a child forked by another test holds the
    // directory lock's descriptor until its exec. The binary's own lock tries ride that out
    // (`try_lock_file` in `wal/src/storage/mod.rs`); this once failed here without them.
    Command::new(env!("CARGO_BIN_EXE_timewheel"))
        .args(args)
        .arg(dir)
        .output()
        .expect("runs")
}

fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn small(dir: &Path) -> Config {
    let mut c = Config::new(dir);
    c.segment_bytes = 64 << 10;
    c.payload_bytes_max = 1024;
    c
}

/// 300 jobs due far ahead, 100 cancelled, in a log of several segments.
fn fill(engine: &Engine) {
    let far = 4_102_444_800_000; // 2100-01-01
    let ids = engine
        .schedule_batch((0..300).map(|i| JobSpec::at(far + i).payload(vec![7u8; 100])))
        .unwrap();
    for id in &ids[..100] {
        engine.cancel(*id).unwrap();
    }
}

#[test]
fn a_clean_directory_is_healthy_and_inspect_counts_its_jobs() {
    let dir = TempDir::new("verify-clean");
    let engine = Engine::open(small(&dir.0)).unwrap();
    fill(&engine);
    engine.close().unwrap();
    let before = snapshot(&dir.0);

    let out = run(&["verify"], &dir.0);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("healthy"));
    let out = run(&["inspect", "--json"], &dir.0);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["healthy"], true);
    assert_eq!(v["jobs"]["scheduled"], 200);
    assert_eq!(v["jobs"]["cancelled"], 100);
    assert_eq!(v["jobs"]["due_min_ms"], 4_102_444_800_100u64);
    assert!(v["segments"].as_u64().unwrap() >= 2, "{v}");
    assert_eq!(
        snapshot(&dir.0),
        before,
        "nothing written, created or removed"
    );
}

#[test]
fn after_a_crash_it_reads_what_the_next_open_will_without_doing_it() {
    let dir = TempDir::new("verify-crash");
    let engine = Engine::open(small(&dir.0)).unwrap();
    fill(&engine);
    engine.abandon();
    let before = snapshot(&dir.0);
    let out = run(&["inspect", "--json"], &dir.0);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["jobs"]["scheduled"], 200);
    assert_eq!(
        snapshot(&dir.0),
        before,
        "the open's copy and cut stayed in memory"
    );
    let engine = Engine::open(small(&dir.0)).unwrap();
    assert_eq!(engine.stats().scheduled, 200, "the real open agrees");
    engine.close().unwrap();
}

#[test]
fn damage_is_named_and_exits_1_and_a_running_engine_exits_2() {
    let dir = TempDir::new("verify-damage");
    let engine = Engine::open(small(&dir.0)).unwrap();
    fill(&engine);
    let out = run(&["verify"], &dir.0);
    assert_eq!(out.status.code(), Some(2), "locked: {out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use by a running engine"));
    engine.close().unwrap();

    // One flipped bit in the first record of the first segment (the open's `Opened`, 32
    // bytes with its framing): the mirror holds it.
    let first = dir.0.join(timewheel_wal::segment_file_name(1));
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[4096 + 26] ^= 0x10;
    std::fs::write(&first, &bytes).unwrap();
    let before = snapshot(&dir.0);
    let out = run(&["verify", "--json"], &dir.0);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["repaired"][0]["segment"], 1, "{v}");
    assert!(v["repaired"][0]["offset"].as_u64().unwrap() >= 4096, "{v}");
    assert_eq!(snapshot(&dir.0), before, "verify repairs nothing itself");

    // Both copies of that group damaged: acknowledged data lost, the open would refuse.
    bytes[4096..].fill(0xA5);
    std::fs::write(&first, &bytes).unwrap();
    let out = run(&["verify"], &dir.0);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("DAMAGE") && text.contains("segment 1"),
        "{text}"
    );
    assert!(
        Engine::open(small(&dir.0)).is_err(),
        "the engine refuses it too"
    );
    let _ = before;
}

#[test]
fn compacted_buckets_are_counted_and_a_damaged_bucket_file_is_named() {
    let dir = TempDir::new("verify-buckets");
    let mut config = small(&dir.0);
    config.compact_interval_ms = 0;
    let engine = Engine::open(config.clone()).unwrap();
    fill(&engine);
    fill(&engine);
    while engine.compact().unwrap().records > 0 {}
    let store = engine.store_stats();
    assert!(store.buckets > 0 && store.bucket_jobs > 0, "{store:?}");
    engine.close().unwrap();

    let out = run(&["inspect", "--json"], &dir.0);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["jobs"]["scheduled"], 400, "{v}");
    assert_eq!(v["store"]["buckets"], store.buckets, "{v}");
    assert_eq!(v["store"]["bucket_jobs"], store.bucket_jobs, "{v}");

    // One flipped byte in a run file's record: the open refuses, and verify names the file.
    let run_file = snapshot(&dir.0)
        .into_keys()
        .find(|n| n.ends_with(".run"))
        .expect("a bucket file");
    let path = dir.0.join(&run_file);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[80] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let before = snapshot(&dir.0);
    let out = run(&["verify", "--json"], &dir.0);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["damage"]["file"], run_file.as_str(), "{v}");
    assert_eq!(snapshot(&dir.0), before, "verify changes nothing");
    match Engine::open(config) {
        Err(timewheel::Error::CorruptedStore { file, .. }) => assert_eq!(file, run_file),
        other => panic!(
            "a damaged bucket file must refuse the open: {:?}",
            other.err()
        ),
    }
}

/// `timewheel verify DIR | head`: a closed stdout stops the output, not the check; the exit
/// code still says what it found (a `println!` would panic there: exit 101).
#[test]
fn a_closed_stdout_does_not_change_the_exit_code() {
    let dir = TempDir::new("verify-closed-stdout");
    let engine = Engine::open(small(&dir.0)).expect("open");
    engine.schedule(JobSpec::at(1)).expect("schedule");
    engine.close().expect("close");
    for command in ["verify", "inspect"] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader); // every write to it fails with EPIPE
        let status = Command::new(env!("CARGO_BIN_EXE_timewheel"))
            .arg(command)
            .arg(&dir.0)
            .stdout(writer)
            .status()
            .expect("runs");
        assert_eq!(status.code(), Some(0), "{command}: healthy, stdout closed");
    }
}

/// A record with valid checksums that the state machine could not have written (a completion
/// of a job the log never scheduled): `verify` checks the files' format and finds them whole;
/// `verify --deep` and `inspect` replay it as an open does, and refuse it with its LSN, as the
/// open does.
#[test]
fn verify_checks_the_format_and_deep_replays_as_the_open_does() {
    let dir = TempDir::new("verify-deep");
    let engine = Engine::open(small(&dir.0)).unwrap();
    fill(&engine);
    engine.close().unwrap();
    let opts = timewheel_wal::WalOptions {
        segment_bytes: small(&dir.0).segment_bytes,
        record_bytes_max: 4096,
        ..timewheel_wal::WalOptions::default()
    };
    let (wal, _) = timewheel_wal::Wal::open_dir(&dir.0, opts).unwrap();
    let never = timewheel::record::Event::Complete {
        id: timewheel::JobId(u64::MAX >> 8),
        attempt: 1,
    };
    let mut body = Vec::new();
    never.encode(&mut body);
    let lsn = wal.append(never.record_type(), &body).unwrap();
    wal.close().unwrap();
    let before = snapshot(&dir.0);

    let out = run(&["verify", "--json"], &dir.0);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["replayed"], false, "{v}");
    assert_eq!(v["healthy"], true, "{v}");
    assert!(v["records"].as_u64().unwrap() >= 401, "{v}");

    for args in [
        &["verify", "--deep", "--json"][..],
        &["inspect", "--json"][..],
    ] {
        let out = run(args, &dir.0);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["damage"]["lsn"], lsn, "{args:?}: {v}");
    }
    assert!(Engine::open(small(&dir.0)).is_err(), "the open refuses it");
    assert_eq!(snapshot(&dir.0), before, "nothing changed the directory");
}

#[test]
fn a_directory_without_timewheel_data_is_refused_not_found_healthy() {
    // A mistyped path (an empty directory, or one of other files) is not an empty log: every
    // reading command says so and exits 2, and leaves the directory as it was.
    let dir = TempDir::new("verify-no-data");
    std::fs::create_dir_all(&dir.0).unwrap();
    std::fs::write(dir.0.join("notes.txt"), b"not a journal").unwrap();
    let before = snapshot(&dir.0);
    for args in [
        &["verify"][..],
        &["verify", "--deep"],
        &["inspect"],
        &["dump"],
        &["jobs"],
    ] {
        let out = run(args, &dir.0);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("holds no timewheel data"),
            "{args:?}: {stderr}"
        );
        assert_eq!(snapshot(&dir.0), before, "{args:?} changed the directory");
    }
    // The library says the same, as an I/O error of kind NotFound.
    match timewheel::inspect::verify(&dir.0) {
        Err(timewheel::Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
        other => panic!("verify of a directory without data: {other:?}"),
    }
    // Once an engine has opened it, it is a (healthy, empty) data directory.
    Engine::open(small(&dir.0)).unwrap().close().unwrap();
    let out = run(&["verify"], &dir.0);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
