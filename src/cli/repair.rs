//! `timewheel repair DIR --truncate-at SEGMENT:OFFSET`: cut the journal at a record boundary
//! after a verify, with a backup of what is cut ([`timewheel::repair`]; docs/recovery.md,
//! "Repair").
//!
//! Without `--yes` it is a dry run: the verify, the plan (what would be cut: records, LSNs,
//! bytes that can not be read, segments, jobs), and nothing changed.
//!
//! Exit codes, for scripts (as `verify`'s):
//! - 0: repaired (the cut made and the directory verified healthy after it), nothing to cut
//!   (the cut is at the end of the log), or a dry run whose plan is not refused.
//! - 1: refused because of what it found: not a record boundary, past the damage or the end of
//!   the log, below the buckets' covered LSN, a record replay refuses kept, damage in the job
//!   store; or the cut was made but the verify after it still finds damage.
//! - 2: could not run: the directory is in use by a running engine, is missing, changed while
//!   it was checked, the backup directory exists, or an I/O error (nothing was changed, unless
//!   the message says the cut failed part way: then the same repair, run again, finishes it).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use timewheel::Error;
use timewheel::inspect::Inspection;
use timewheel::repair::{
    Applied, CutPlan, CutPoint, LogRefusal, Plan, Progress, Refusal, RepairError,
};

use super::check::{damage_json, why};

/// Exit code: repaired, nothing to do, or a dry run.
const DONE: u8 = 0;
/// Exit code: refused because of what was found, or damage left after the cut.
const REFUSED: u8 = 1;
/// Exit code: could not run.
const FAILED: u8 = 2;

/// Job ids printed in the text output (all of them are in the backup's `jobs.txt`).
const JOBS_SHOWN: usize = 10;
/// Job ids in the JSON output.
const JOBS_IN_JSON: usize = 1000;

/// Options of `timewheel repair`.
#[derive(clap::Args, Debug)]
pub struct RepairArgs {
    /// The data directory. Locked while repairing, as an engine locks it: refused while an
    /// engine holds it.
    pub dir: PathBuf,
    /// Where to cut, as `verify` names damage: the record that starts at byte OFFSET of
    /// segment SEGMENT (its id, or its file name) and every record after it are removed.
    /// OFFSET must be where a record starts (or where the segment's valid records end); 0
    /// removes the segment whole.
    #[arg(long, value_name = "SEGMENT:OFFSET", value_parser = parse_cut_point)]
    pub truncate_at: CutPoint,
    /// Make the cut. Without it, the plan is printed and nothing is changed (a dry run).
    #[arg(long)]
    pub yes: bool,
    /// The directory (it must not exist) that receives a copy of every file the cut changes
    /// or removes, before anything is changed. Default: DIR/repair-<UTC time>.
    #[arg(long, value_name = "PATH")]
    pub backup: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `SEGMENT:OFFSET`, the segment as its id (`3`) or its file name (`0000000000000003.wal`).
fn parse_cut_point(s: &str) -> Result<CutPoint, String> {
    let (segment, offset) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} is not SEGMENT:OFFSET"))?;
    let segment = timewheel_wal::parse_segment_file_name(segment)
        .map_or_else(|| segment.parse::<u64>(), Ok)
        .map_err(|e| format!("segment {segment:?}: {e}"))?;
    let offset = offset
        .parse::<u64>()
        .map_err(|e| format!("offset {offset:?}: {e}"))?;
    Ok(CutPoint { segment, offset })
}

/// One progress indicator for the whole command, its shape following the step.
struct Bar(Option<ProgressBar>);

impl Bar {
    fn new(hidden: bool) -> Self {
        Bar((!hidden).then(|| {
            let bar = ProgressBar::new_spinner();
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        }))
    }

    fn show(&mut self, p: Progress) {
        let Some(bar) = &self.0 else {
            return;
        };
        let spinner = |msg: &'static str| {
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("valid"),
            );
            bar.set_message(msg);
        };
        match p {
            Progress::Verify => spinner("verifying"),
            Progress::Scan { done, total } => {
                if done == 0 {
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{spinner} scanning the journal {bar:30} {pos}/{len} segments [{elapsed}]",
                        )
                        .expect("valid"),
                    );
                }
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            }
            Progress::Backup { done, total } => {
                if done == 0 {
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{spinner} backing up {bar:30} {bytes}/{total_bytes} [{elapsed}]",
                        )
                        .expect("valid"),
                    );
                }
                bar.set_length(total);
                bar.set_position(done);
            }
            Progress::Cut => spinner("cutting"),
            Progress::VerifyAfter => spinner("verifying the result"),
            _ => {}
        }
    }

    fn clear(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

pub fn run(args: &RepairArgs) -> ExitCode {
    let mut bar = Bar::new(args.json);
    let prepared = timewheel::repair::prepare(&args.dir, args.truncate_at, &mut |p| bar.show(p));
    let prepared = match prepared {
        Ok(p) => p,
        Err(e) => {
            bar.clear();
            return failed(args, &e);
        }
    };
    let plan = prepared.plan();
    let verdict = match &plan.verdict {
        Ok(cut) => cut.clone(),
        Err(refusal) => {
            bar.clear();
            report(args, plan, None, Some(refusal), None);
            return ExitCode::from(REFUSED);
        }
    };
    if verdict.nothing_to_do || !args.yes {
        bar.clear();
        let plan = prepared.into_plan();
        report(args, &plan, Some(&verdict), None, None);
        return ExitCode::from(DONE);
    }
    let applied = prepared.apply(args.backup.as_deref(), &mut |p| bar.show(p));
    bar.clear();
    match applied {
        Ok(applied) => {
            report(args, &applied.plan, Some(&verdict), None, Some(&applied));
            let clean = matches!(&applied.after, Ok(found) if found.recovery.repaired.is_empty());
            ExitCode::from(if clean {
                DONE
            } else if matches!(&applied.after, Err(Error::Locked | Error::Io(_))) {
                FAILED
            } else {
                REFUSED
            })
        }
        Err(e) => failed(args, &e),
    }
}

fn failed(args: &RepairArgs, e: &RepairError) -> ExitCode {
    let message = match e {
        RepairError::Engine(e) => why(e),
        other => other.to_string(),
    };
    if args.json {
        emit(&format!(
            "{}\n",
            serde_json::json!({"dir": args.dir, "done": false, "error": message})
        ));
    } else {
        eprintln!("timewheel repair: {}: {message}", args.dir.display());
    }
    ExitCode::from(FAILED)
}

/// What verify found, in a line.
fn verified_text(verified: &Result<Inspection, Error>) -> String {
    match verified {
        Ok(found) => {
            let r = &found.recovery;
            if !r.repaired.is_empty() {
                format!(
                    "DAMAGED (repairable): {} damaged copies of group commits, which the next \
                     open repairs from the other copy",
                    r.repaired.len()
                )
            } else if let Some((segment, offset)) = r.torn_tail {
                format!(
                    "healthy, with a torn tail at {segment}:{offset} (never acknowledged; the \
                     next open cuts it)"
                )
            } else {
                "healthy: the engine opens this directory as it is".to_string()
            }
        }
        Err(e) => format!(
            "DAMAGE: {}; the engine refuses to open this directory",
            why(e)
        ),
    }
}

fn verified_json(verified: &Result<Inspection, Error>) -> serde_json::Value {
    match verified {
        Ok(found) => serde_json::json!({
            "healthy": found.is_healthy(),
            "opens": true,
            "torn_tail": found.recovery.torn_tail.map(|(s, o)| serde_json::json!({"segment": s, "offset": o})),
            "repaired": found.recovery.repaired.len(),
        }),
        Err(e) => {
            let mut v = serde_json::json!({"healthy": false, "opens": false, "error": why(e)});
            if let Some(damage) = damage_json(e) {
                v["damage"] = damage;
            }
            v
        }
    }
}

fn point(p: CutPoint) -> serde_json::Value {
    serde_json::json!({"segment": p.segment, "offset": p.offset})
}

fn report(
    args: &RepairArgs,
    plan: &Plan,
    cut: Option<&CutPlan>,
    refusal: Option<&Refusal>,
    applied: Option<&Applied>,
) {
    if args.json {
        report_json(args, plan, cut, refusal, applied);
    } else {
        report_text(args, plan, cut, refusal, applied);
    }
}

fn report_json(
    args: &RepairArgs,
    plan: &Plan,
    cut: Option<&CutPlan>,
    refusal: Option<&Refusal>,
    applied: Option<&Applied>,
) {
    let s = &plan.survey;
    let mut out = serde_json::json!({
        "dir": args.dir,
        "at": point(plan.at),
        "verify": verified_json(&plan.verified),
        "journal": {
            "segments": s.segments.len(),
            "first_lsn": s.first_lsn,
            "last_lsn": s.last_lsn,
            "damage": s.damage.map(|d| serde_json::json!({"segment": d.segment, "offset": d.offset, "reason": d.reason.to_string()})),
            "end": s.end.map(point),
        },
        "covered_lsn": plan.covered_lsn,
        "done": false,
        "dry_run": !args.yes,
    });
    if let Some(r) = refusal {
        out["refused"] = serde_json::json!(r.to_string());
        out["refusal"] = serde_json::json!(refusal_kind(r));
        if let Refusal::Log(LogRefusal::NotABoundary { before, after }) = r {
            out["boundary_before"] = serde_json::json!(before);
            out["boundary_after"] = serde_json::json!(after);
        }
        if let Refusal::BelowCovered {
            earliest: Some(p), ..
        } = r
        {
            out["earliest"] = point(*p);
        }
    }
    if let Some(c) = cut {
        let rec = &plan.records;
        out["cut"] = serde_json::json!({
            "first_lsn_cut": c.first_lsn_cut,
            "last_lsn_cut": c.last_lsn_cut,
            "records": c.records,
            "unreadable": c.unreadable.iter().map(|u| serde_json::json!({"segment": u.segment, "offset": u.offset, "bytes": u.bytes, "reason": u.reason.to_string()})).collect::<Vec<_>>(),
            "rewritten": c.rewritten,
            "removed": c.removed,
            "nothing_to_do": c.nothing_to_do,
            "by_type": rec.by_type,
            "jobs": rec.jobs.len(),
            "job_ids": rec.jobs.iter().take(JOBS_IN_JSON).map(|id| id.0.to_string()).collect::<Vec<_>>(),
            "scheduled_jobs": rec.scheduled.len(),
            "undecodable": rec.undecodable,
        });
        out["backup"] = serde_json::json!({
            "files": plan.files.iter().map(|(n, b)| serde_json::json!({"name": n, "bytes": b})).collect::<Vec<_>>(),
            "bytes": plan.backup_bytes(),
        });
        if c.nothing_to_do {
            out["done"] = serde_json::json!(true);
        }
    }
    if let Some(a) = applied {
        out["done"] = serde_json::json!(true);
        out["backup"]["dir"] = serde_json::json!(a.backup);
        out["ids_reserved_up_to"] = serde_json::json!(a.ids_reserved_up_to);
        out["verify_after"] = verified_json(&a.after);
    }
    emit(&format!("{out}\n"));
}

fn refusal_kind(r: &Refusal) -> &'static str {
    match r {
        Refusal::Log(LogRefusal::NoSuchSegment { .. }) => "no_such_segment",
        Refusal::Log(LogRefusal::WholeLog { .. }) => "whole_log",
        Refusal::Log(LogRefusal::BeyondDamage(_)) => "beyond_damage",
        Refusal::Log(LogRefusal::BeyondEnd { .. }) => "beyond_end",
        Refusal::Log(LogRefusal::NotABoundary { .. }) => "not_a_boundary",
        Refusal::Log(LogRefusal::Unscannable(_)) => "unscannable",
        Refusal::BelowCovered { .. } => "below_covered_lsn",
        Refusal::KeepsRefusedRecord { .. } => "keeps_refused_record",
        Refusal::StoreDamaged { .. } => "store_damaged",
        _ => "refused",
    }
}

/// Appends a line to the output.
macro_rules! say {
    ($o:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        writeln!($o, $($arg)*).expect("writing to a String does not fail");
    }};
}

/// Writes the output. A reader that went away (`| head`) is not an error: the repair is done
/// or refused by then, and the exit code says which.
fn emit(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// A range of LSNs, or "no record".
fn lsns(first: u64, last: u64) -> String {
    if last < first {
        "no record".to_string()
    } else {
        format!("LSN {first} to {last}")
    }
}

fn report_text(
    args: &RepairArgs,
    plan: &Plan,
    cut: Option<&CutPlan>,
    refusal: Option<&Refusal>,
    applied: Option<&Applied>,
) {
    let mut o = String::new();
    text_lines(&mut o, args, plan, cut, refusal, applied);
    emit(&o);
}

fn text_lines(
    o: &mut String,
    args: &RepairArgs,
    plan: &Plan,
    cut: Option<&CutPlan>,
    refusal: Option<&Refusal>,
    applied: Option<&Applied>,
) {
    let s = &plan.survey;
    say!(o, "{}", args.dir.display());
    say!(o, "  verify: {}", verified_text(&plan.verified));
    let mut journal = format!(
        "  journal: {} segments read, {}",
        s.segments.len(),
        lsns(s.first_lsn, s.last_lsn)
    );
    match (s.damage, s.end) {
        (Some(d), _) => journal.push_str(&format!(
            ", then damage at {} ({}): not readable past it",
            d.at(),
            d.reason
        )),
        (None, Some(end)) => journal.push_str(&format!(", ending at {end}")),
        (None, None) => {}
    }
    if plan.covered_lsn > 0 {
        journal.push_str(&format!(
            "; the hour-bucket files hold it up to LSN {}",
            plan.covered_lsn
        ));
    }
    say!(o, "{journal}");
    if let Some(r) = refusal {
        say!(o, "  REFUSED: cut at {}: {r}", plan.at);
        say!(o, "  nothing was changed");
        return;
    }
    let Some(c) = cut else {
        return;
    };
    if c.nothing_to_do {
        say!(
            o,
            "  nothing to cut: {} is the end of the log; nothing was changed",
            c.at
        );
        return;
    }
    say!(
        o,
        "  cut at {}: the record with LSN {} and every one after it",
        c.at,
        c.first_lsn_cut
    );
    say!(o, "    kept: {}", lsns(s.first_lsn, c.first_lsn_cut - 1));
    say!(
        o,
        "    cut: {} records that can be read{}",
        c.records,
        if c.records > 0 {
            format!(" (LSN {} to {})", c.first_lsn_cut, c.last_lsn_cut)
        } else {
            String::new()
        }
    );
    for u in &c.unreadable {
        say!(
            o,
            "    cut: {} bytes that can not be read, segment {} from offset {} ({})",
            u.bytes,
            u.segment,
            u.offset,
            u.reason
        );
    }
    let rec = &plan.records;
    if !rec.by_type.is_empty() {
        let types: Vec<String> = rec
            .by_type
            .iter()
            .map(|(t, n)| format!("{n} {t}"))
            .collect();
        let mut ids: Vec<String> = rec
            .jobs
            .iter()
            .take(JOBS_SHOWN)
            .map(|id| id.to_string())
            .collect();
        if rec.jobs.len() > JOBS_SHOWN {
            ids.push(format!("and {} more", rec.jobs.len() - JOBS_SHOWN));
        }
        say!(
            o,
            "    records cut: {}; they name {} jobs ({})",
            types.join(", "),
            rec.jobs.len(),
            ids.join(", ")
        );
        say!(
            o,
            "    {} of those jobs were scheduled in the records cut: the engine will not know \
             them",
            rec.scheduled.len()
        );
        let others = rec.jobs.len() - rec.jobs.intersection(&rec.scheduled).count();
        if others > 0 {
            say!(
                o,
                "    for the other {others}, what the records cut did to them is undone (a \
                 cancel, complete or fail cut: the job is live again and fires; a claim cut: \
                 it is delivered again, maybe with an attempt number a worker already had)"
            );
        }
    }
    if rec.undecodable > 0 {
        say!(o, "    {} records cut do not decode", rec.undecodable);
    }
    if let Some(name) = &c.rewritten {
        say!(
            o,
            "    {name} is written anew without its bytes from offset {}",
            c.at.offset
        );
    }
    if !c.removed.is_empty() {
        say!(o, "    removed whole: {}", c.removed.join(", "));
    }
    match applied {
        None => {
            say!(
                o,
                "  backup: {} files, {} bytes, to {}",
                plan.files.len(),
                plan.backup_bytes(),
                args.backup.as_ref().map_or_else(
                    || format!("{}/repair-<UTC time>", args.dir.display()),
                    |p| p.display().to_string()
                )
            );
            say!(
                o,
                "  dry run: nothing was changed; run again with --yes to cut"
            );
        }
        Some(a) => {
            if let Some(b) = &a.backup {
                say!(
                    o,
                    "  backed up {} files, {} bytes, to {} (REPAIR.txt says how to undo)",
                    plan.files.len(),
                    plan.backup_bytes(),
                    b.display()
                );
            }
            say!(o, "  cut made");
            if let Some(up_to) = a.ids_reserved_up_to {
                say!(
                    o,
                    "  job ids reserved up to sequence number {up_to}: ids the records cut \
                     handed out are never handed out again"
                );
            }
            say!(o, "  verify after the cut: {}", verified_text(&a.after));
        }
    }
}
