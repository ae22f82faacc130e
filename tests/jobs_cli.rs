//! `timewheel jobs DIR`: the live jobs as JSON lines, in due order, filtered by state and due
//! range, read in place; exit 2 on a directory a running engine holds.

use std::process::Command;

use timewheel::{Config, Engine, JobSpec};

fn jobs(dir: &std::path::Path, args: &[&str]) -> (i32, Vec<serde_json::Value>) {
    let out = Command::new(env!("CARGO_BIN_EXE_timewheel"))
        .arg("jobs")
        .arg(dir)
        .args(args)
        .output()
        .expect("run timewheel jobs");
    let lines = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    (out.status.code().expect("exit code"), lines)
}

#[test]
fn lists_live_jobs_in_due_order_by_state_and_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(Config::new(dir.path())).expect("open");
    let base = 4_000_000_000_000u64;
    let ids = engine
        .schedule_batch([
            JobSpec::at(base + 30).payload("c"),
            JobSpec::at(base + 10).payload("a"),
            JobSpec::at(base + 20).payload(vec![0xff, 0x00]),
            JobSpec::at(base + 40).payload("d"),
        ])
        .expect("schedule");
    assert!(engine.cancel(ids[3]).expect("cancel").is_done());
    let (code, _) = jobs(dir.path(), &[]);
    assert_eq!(code, 2, "a running engine holds the directory");
    engine.close().expect("close");

    let (code, all) = jobs(dir.path(), &["--state", "scheduled"]);
    assert_eq!(code, 0);
    let dues: Vec<u64> = all
        .iter()
        .map(|j| j["due_ms"].as_u64().expect("due"))
        .collect();
    assert_eq!(
        dues,
        [base + 10, base + 20, base + 30],
        "in due order, cancelled gone"
    );
    assert_eq!(all[0]["payload"], "a");
    assert_eq!(all[1]["payload_hex"], "ff00");
    assert_eq!(all[0]["id"], ids[1].0.to_string());
    assert_eq!(all[0]["state"], "scheduled");

    let from = (base + 15).to_string();
    let (code, some) = jobs(dir.path(), &["--due-from", &from, "--limit", "1"]);
    assert_eq!(code, 0);
    assert_eq!(some.len(), 1);
    assert_eq!(some[0]["due_ms"].as_u64(), Some(base + 20));
    let (_, none) = jobs(dir.path(), &["--state", "running"]);
    assert!(none.is_empty());
}
