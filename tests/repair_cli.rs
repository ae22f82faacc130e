//! `timewheel repair DIR --truncate-at SEGMENT:OFFSET` as an operator runs it, after a
//! `verify` named the damage: a dry run changes nothing; the cut backs up what it removes
//! (byte for byte), leaves a directory that verifies healthy and that the engine opens with
//! exactly the jobs before the cut, and never lets an id the cut records handed out be handed
//! out again; and it refuses, changing nothing, while an engine runs, at an offset where no
//! record starts, past the damage, at offset 0 of the first segment, below the buckets'
//! covered LSN, and into an existing backup directory.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use common::TempDir;
use serde_json::Value;
use timewheel::{Config, Engine, JobId, JobSpec, JobState};

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

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// `timewheel repair --json --truncate-at AT [extra] DIR`.
fn repair(dir: &Path, at: &str, extra: &[&str]) -> (Option<i32>, Value, Output) {
    let mut args = vec!["repair", "--json", "--truncate-at", at];
    args.extend_from_slice(extra);
    let out = run(&args, dir);
    let v = if out.stdout.is_empty() {
        Value::Null
    } else {
        json(&out)
    };
    (out.status.code(), v, out)
}

/// Every file of the directory (not its subdirectories), by name.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// No backup directory was made in `dir`.
fn no_backup(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().all(|e| {
        !e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("repair-")
    })
}

fn small(dir: &Path) -> Config {
    let mut c = Config::new(dir);
    c.segment_bytes = 64 << 10;
    c.payload_bytes_max = 1024;
    c.disk_ballast_bytes = 0;
    c
}

const FAR: u64 = 4_102_444_800_000; // 2100-01-01

/// 300 jobs due far ahead in one batch, then 100 of them cancelled one by one (a commit block
/// each): a log of several segments.
fn fill(engine: &Engine) -> Vec<JobId> {
    let ids = engine
        .schedule_batch((0..300).map(|i| JobSpec::at(FAR + i).payload(vec![7u8; 100])))
        .unwrap();
    for id in &ids[..100] {
        engine.cancel(*id).unwrap();
    }
    ids
}

/// The log's records as `timewheel dump` shows them: (lsn, type, job id).
fn dump(dir: &Path) -> Vec<(u64, String, Option<u64>)> {
    let out = run(&["dump"], dir);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["lsn"].as_u64().unwrap(),
                v["type"].as_str().unwrap().to_string(),
                v["id"].as_u64(),
            )
        })
        .collect()
}

fn segments(dir: &Path) -> Vec<String> {
    snapshot(dir)
        .into_iter()
        .filter(|(n, bytes)| n.ends_with(".wal") && bytes.iter().any(|&b| b != 0))
        .map(|(n, _)| n)
        .collect()
}

/// The engine reopened on `dir` holds exactly what the records before LSN `cut` say.
fn check_jobs_before(dir: &Path, records: &[(u64, String, Option<u64>)], cut: u64) {
    let engine = Engine::open(small(dir)).unwrap();
    let kept = |kind: &str| {
        records
            .iter()
            .filter(|(lsn, t, _)| *lsn < cut && t == kind)
            .map(|(_, _, id)| JobId(id.unwrap()))
            .collect::<Vec<_>>()
    };
    let (scheduled, cancelled) = (kept("schedule"), kept("cancel"));
    let stats = engine.stats();
    assert_eq!(stats.scheduled, (scheduled.len() - cancelled.len()) as u64);
    assert_eq!(stats.cancelled, cancelled.len() as u64);
    for id in &scheduled {
        let state = engine.get(*id).map(|j| j.state);
        if cancelled.contains(id) {
            assert_eq!(state, None, "{id}: cancelled");
        } else {
            assert_eq!(state, Some(JobState::Scheduled), "{id}");
        }
    }
    // Ids go on past every id the log ever showed, the cut ones included.
    let newest = records.iter().filter_map(|r| r.2).max().unwrap();
    let id = engine.schedule(JobSpec::at(FAR)).unwrap();
    assert!(id.0 > newest, "new id {id} after {newest}");
    engine.close().unwrap();
}

#[test]
fn damage_in_the_middle_is_cut_with_a_backup_and_the_engine_reopens_with_the_jobs_before_it() {
    let dir = TempDir::new("repair-damage");
    let engine = Engine::open(small(&dir.0)).unwrap();
    fill(&engine);
    engine.close().unwrap();
    let records = dump(&dir.0);
    let segs = segments(&dir.0);
    assert!(segs.len() >= 4, "{segs:?}");

    // A whole commit block of a sealed segment in the middle (group and mirror) overwritten:
    // acknowledged data lost, the open refuses.
    let middle = &segs[segs.len() / 2];
    let id: u64 = middle.trim_end_matches(".wal").parse().unwrap();
    let path = dir.0.join(middle);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8192..12288].fill(0xA5);
    std::fs::write(&path, &bytes).unwrap();
    assert!(Engine::open(small(&dir.0)).is_err());
    let out = run(&["verify", "--json"], &dir.0);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v = json(&out);
    assert_eq!(
        (
            v["damage"]["segment"].as_u64(),
            v["damage"]["offset"].as_u64()
        ),
        (Some(id), Some(8192)),
        "{v}"
    );
    let at = format!("{id}:8192");
    let before = snapshot(&dir.0);

    // Past the damage: refused.
    let (code, v, _) = repair(&dir.0, &format!("{}:4096", id + 1), &["--yes"]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["refusal"], "beyond_damage", "{v}");
    assert_eq!(snapshot(&dir.0), before);

    // The dry run says what would go and changes nothing.
    let (code, plan, _) = repair(&dir.0, &at, &[]);
    assert_eq!(code, Some(0), "{plan}");
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["done"], false);
    assert_eq!(plan["verify"]["opens"], false, "{plan}");
    let cut = plan["cut"]["first_lsn_cut"].as_u64().unwrap();
    assert!(cut > 1 && cut < records.len() as u64, "{plan}");
    let removed: Vec<String> = serde_json::from_value(plan["cut"]["removed"].clone()).unwrap();
    assert_eq!(removed, segs[segs.len() / 2 + 1..], "every later segment");
    assert_eq!(plan["cut"]["rewritten"], middle.as_str());
    assert_eq!(plan["cut"]["unreadable"][0]["offset"], 8192, "{plan}");
    // The damaged block held one cancel; the records after it are all read, and named: the
    // cancels and the close's `Closed`.
    let after_damage = records.iter().filter(|r| r.0 > cut).count() as u64;
    let cancels = after_damage - 1;
    assert_eq!(records.last().map(|r| r.1.as_str()), Some("closed"));
    assert_eq!(plan["cut"]["records"], after_damage, "{plan}");
    assert_eq!(plan["cut"]["by_type"]["cancel"], cancels, "{plan}");
    assert_eq!(plan["cut"]["by_type"]["closed"], 1, "{plan}");
    assert_eq!(plan["cut"]["jobs"], cancels, "{plan}");
    assert_eq!(snapshot(&dir.0), before, "a dry run changes nothing");

    let backup = dir.0.join("saved");
    let backup_arg = backup.to_str().unwrap();
    let (code, done, out) = repair(&dir.0, &at, &["--yes", "--backup", backup_arg]);
    assert_eq!(
        code,
        Some(0),
        "{done} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(done["done"], true);
    assert_eq!(done["verify_after"]["healthy"], true, "{done}");
    assert!(
        done["ids_reserved_up_to"].as_u64().is_some(),
        "bytes that could not be read were cut: ids are skipped past them: {done}"
    );

    // The backup holds the files as they were, whole: the cut bytes are there.
    let saved = snapshot(&backup);
    for name in removed.iter().chain(std::iter::once(middle)) {
        assert_eq!(
            saved.get(name),
            before.get(name),
            "{name} backed up byte for byte"
        );
    }
    assert!(saved.contains_key("REPAIR.txt") && saved.contains_key("jobs.txt"));
    let jobs = String::from_utf8(saved["jobs.txt"].clone()).unwrap();
    assert_eq!(jobs.lines().count() as u64, cancels);
    // The cut segment keeps its bytes before the cut; the later segments are gone.
    let now = snapshot(&dir.0);
    assert_eq!(now[middle][..8192], before[middle][..8192]);
    for name in &removed {
        assert!(
            now.get(name).is_none_or(|b| b.iter().all(|&x| x == 0)),
            "{name} removed"
        );
    }

    let out = run(&["verify", "--json"], &dir.0);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(json(&out)["healthy"], true);
    check_jobs_before(&dir.0, &records, cut);
}

#[test]
fn a_cut_between_two_records_of_one_commit_keeps_the_records_before_it() {
    let dir = TempDir::new("repair-inside");
    let engine = Engine::open(small(&dir.0)).unwrap();
    fill(&engine);
    engine.close().unwrap();
    let records = dump(&dir.0);
    let before = snapshot(&dir.0);

    // The first block (at 4096) holds the open's `Opened` alone (32 bytes, synced at the
    // open); the first batch starts on the next page.
    let (code, v, _) = repair(&dir.0, "1:4100", &["--yes"]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["refusal"], "not_a_boundary", "{v}");
    assert_eq!(
        (v["boundary_before"].as_u64(), v["boundary_after"].as_u64()),
        (Some(4096), Some(4128)),
        "{v}"
    );
    let (code, v, _) = repair(&dir.0, "1:8196", &["--yes"]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["boundary_before"], 8192);
    let next = v["boundary_after"].as_u64().unwrap();
    assert!(next > 8196, "{v}");
    assert_eq!(snapshot(&dir.0), before, "refused: nothing changed");

    // The second record after that (a schedule in the middle of the batch's first block).
    let (code, v, _) = repair(&dir.0, &format!("1:{next}"), &[]);
    assert_eq!(code, Some(0), "{v}");
    let cut = v["cut"]["first_lsn_cut"].as_u64().unwrap();
    assert_eq!(cut, 3, "{v}");
    let (code, v, _) = repair(&dir.0, &format!("1:{}", next + 168), &["--yes"]);
    assert_eq!(code, Some(0), "{v}");
    let cut = v["cut"]["first_lsn_cut"].as_u64().unwrap();
    assert_eq!(cut, 4, "{v}");
    assert_eq!(v["cut"]["unreadable"], serde_json::json!([]));
    assert_eq!(
        v["verify_after"]["healthy"], true,
        "no torn tail: the block got a new mirror: {v}"
    );
    assert_eq!(
        v["ids_reserved_up_to"],
        Value::Null,
        "the schedules cut were inside the block the log keeps reserved"
    );
    let out = run(&["verify"], &dir.0);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    check_jobs_before(&dir.0, &records, cut);
}

#[test]
fn cutting_every_record_reserves_the_ids_they_handed_out() {
    let dir = TempDir::new("repair-all");
    let engine = Engine::open(small(&dir.0)).unwrap();
    let ids = fill(&engine);
    engine.close().unwrap();
    let records = dump(&dir.0);
    assert_eq!(
        (records[0].1.as_str(), records[1].1.as_str()),
        ("opened", "reserve_ids")
    );

    let (code, v, _) = repair(&dir.0, "1:0", &["--yes"]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["refusal"], "whole_log");
    let (code, v, _) = repair(&dir.0, "0000000000000001.wal:4096", &["--yes"]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["cut"]["first_lsn_cut"], 1);
    assert_eq!(v["cut"]["records"], records.len());
    assert_eq!(v["cut"]["scheduled_jobs"], 300);
    assert!(v["ids_reserved_up_to"].as_u64().is_some(), "{v}");
    let backup = v["backup"]["dir"].as_str().unwrap();
    assert!(
        Path::new(backup).starts_with(&dir.0) && Path::new(backup).join("REPAIR.txt").is_file(),
        "the default backup is in the directory: {backup}"
    );

    let engine = Engine::open(small(&dir.0)).unwrap();
    assert_eq!(engine.stats().scheduled, 0);
    assert!(engine.get(ids[200]).is_none(), "the cut jobs are gone");
    let new = engine.schedule(JobSpec::at(FAR)).unwrap();
    assert!(
        new.0 > *ids.iter().map(|i| &i.0).max().unwrap(),
        "an id handed out before the cut is never handed out again: {new}"
    );
    engine.close().unwrap();
    let out = run(&["verify"], &dir.0);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn refused_while_an_engine_runs_and_into_an_existing_backup_and_for_a_missing_directory() {
    let dir = TempDir::new("repair-locked");
    let engine = Engine::open(small(&dir.0)).unwrap();
    fill(&engine);
    let before = snapshot(&dir.0);
    let (code, _, out) = repair(&dir.0, "1:4096", &["--yes"]);
    assert_eq!(code, Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("in use by a running engine"),
        "{out:?}"
    );
    let out = run(&["repair", "--truncate-at", "1:4096", "--yes"], &dir.0);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in use by a running engine"),
        "{out:?}"
    );
    engine.close().unwrap();
    // (The close wrote its marker.) The log may have prepared its next segment in the
    // background since the first snapshot: one more segment file, after the last one.
    let last = before.keys().filter(|k| k.ends_with(".wal")).max().cloned();
    let after = snapshot(&dir.0);
    let mut after: Vec<&String> = after.keys().collect();
    let prepared: Vec<&String> = after
        .iter()
        .copied()
        .filter(|k| k.ends_with(".wal") && Some(*k) > last.as_ref())
        .collect();
    assert!(prepared.len() <= 1, "{prepared:?}");
    after.retain(|k| !prepared.contains(k));
    assert_eq!(after, before.keys().collect::<Vec<_>>());
    assert!(no_backup(&dir.0));

    let before = snapshot(&dir.0);
    let existing = dir.0.join("taken");
    std::fs::create_dir(&existing).unwrap();
    let (code, v, _) = repair(
        &dir.0,
        "1:4096",
        &["--yes", "--backup", existing.to_str().unwrap()],
    );
    assert_eq!(code, Some(2), "{v}");
    assert!(v["error"].as_str().unwrap().contains("exists"), "{v}");
    assert_eq!(snapshot(&dir.0), before, "nothing changed");
    assert!(no_backup(&dir.0));

    let (code, _, _) = repair(&dir.0.join("missing"), "1:4096", &["--yes"]);
    assert_eq!(code, Some(2));
    let empty = dir.0.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (code, v, _) = repair(&empty, "1:4096", &["--yes"]);
    assert_eq!(code, Some(2), "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("not a data directory"),
        "{v}"
    );
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "not even a lock file made"
    );
}

#[test]
fn a_cut_below_the_buckets_covered_lsn_is_refused() {
    let dir = TempDir::new("repair-covered");
    let mut config = small(&dir.0);
    config.compact_interval_ms = 0;
    let engine = Engine::open(config.clone()).unwrap();
    fill(&engine);
    fill(&engine);
    // The sealed segments, as a pass will fold and delete them.
    let sealed = snapshot(&dir.0);
    while engine.compact().unwrap().records > 0 {}
    let covered = engine.store_stats().covered_lsn;
    assert!(covered > 0);
    engine.close().unwrap();
    // Put the folded segments back, as a crash between the manifest's replacement and their
    // removal leaves them: the journal holds records the buckets already cover.
    let now = snapshot(&dir.0);
    let mut restored = 0;
    for (name, bytes) in &sealed {
        if name.ends_with(".wal") && !now.contains_key(name) {
            std::fs::write(dir.0.join(name), bytes).unwrap();
            restored += 1;
        }
    }
    assert!(restored > 0 && now.contains_key("MANIFEST"));
    let out = run(&["verify"], &dir.0);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let before = snapshot(&dir.0);

    let (code, v, _) = repair(&dir.0, "1:4096", &["--yes"]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["refusal"], "below_covered_lsn", "{v}");
    assert_eq!(v["covered_lsn"], covered);
    assert_eq!(snapshot(&dir.0), before, "refused: nothing changed");
    let earliest = format!("{}:{}", v["earliest"]["segment"], v["earliest"]["offset"]);
    let (code, v, _) = repair(&dir.0, &earliest, &[]);
    assert_eq!(code, Some(0), "the earliest cut allowed is allowed: {v}");
    assert_eq!(v["cut"]["first_lsn_cut"], covered + 1, "{v}");
    assert_eq!(snapshot(&dir.0), before, "a dry run");
}

#[test]
fn the_text_output_and_help_say_what_it_does() {
    let out = Command::new(env!("CARGO_BIN_EXE_timewheel"))
        .args(["repair", "--help"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for word in ["--truncate-at", "--yes", "--backup", "SEGMENT:OFFSET"] {
        assert!(help.contains(word), "{help}");
    }
    let dir = TempDir::new("repair-text");
    let engine = Engine::open(small(&dir.0)).unwrap();
    fill(&engine);
    engine.close().unwrap();
    let out = run(&["repair", "--truncate-at", "2:4096"], &dir.0);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for part in [
        "verify: healthy",
        "cut at 2:4096",
        "kept: LSN 1 to",
        "dry run",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
    let end = run(&["repair", "--json", "--truncate-at", "1:4096"], &dir.0);
    let v = json(&end);
    let last = v["journal"]["end"].clone();
    let out = run(
        &[
            "repair",
            "--truncate-at",
            &format!("{}:{}", last["segment"], last["offset"]),
            "--yes",
        ],
        &dir.0,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("nothing to cut"),
        "{out:?}"
    );
}
