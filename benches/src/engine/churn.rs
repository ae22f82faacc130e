//! Churn on disk: a steady stream of jobs, most cancelled before they are due, the rest fired,
//! claimed and completed, run for simulated hours on a real directory. What it checks is that
//! the disk stays flat: compaction folds the journal into hour buckets, deletes what it folded,
//! merges away what finished and drops finished hours whole, so the bytes on disk follow the
//! live jobs, not the history.
//!
//! Time is a `ManualClock` moved one simulated second per step, so a day takes minutes; the
//! disk, its syncs and every engine call are real. Compaction runs every simulated minute (the
//! compaction interval here), on the calling thread, as the background compactor would.
//!
//! A day at 10,000 jobs a second takes hours of real time, longer than a sitting; a run given
//! a place to keep (`Keep`) can stop at a sample and go on later: it closes the engine there
//! and writes where it was, and the next run reopens the same directory (the reopen of a
//! directory of millions of live jobs is timed too) and carries on from that simulated second.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use timewheel::{Clock, Config, Engine, JobId, JobSpec, ManualClock};

/// The shape of a churn run.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Jobs scheduled per simulated second (one durable batch).
    pub rate: u64,
    /// Simulated seconds to run.
    pub seconds: u64,
    /// Of every 10 jobs, how many are cancelled 5 simulated minutes after their schedule (the
    /// order was paid); the others fire, due 6 to 60 minutes after their schedule.
    pub cancelled_of_10: u64,
    /// `Config::bucket_space_percent_max`, if not the engine's default.
    pub space_percent_max: Option<u32>,
}

/// The disk at one moment, right after a compaction.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Simulated seconds since the start.
    pub at_s: u64,
    /// Live jobs (scheduled, ready or running).
    pub live_jobs: u64,
    /// Bytes of the journal's segment files (whole preallocated segments).
    pub journal_bytes: u64,
    /// Bytes of the bucket run files.
    pub bucket_bytes: u64,
    /// Bytes of every file in the directory (the manifest, the ballast, a spare segment).
    pub dir_bytes: u64,
}

impl Sample {
    /// Journal plus buckets, against the live jobs' schedule records.
    pub fn ratio(&self, record_bytes: f64) -> f64 {
        (self.journal_bytes + self.bucket_bytes) as f64
            / (self.live_jobs as f64 * record_bytes).max(1.0)
    }
}

/// What a churn run measured.
#[derive(Clone, Debug, Default)]
pub struct Churn {
    /// Jobs scheduled in all.
    pub jobs: u64,
    /// Jobs that fired and were completed.
    pub completed: u64,
    /// Real seconds the run took.
    pub real_s: f64,
    /// The journal's bytes for one schedule record of these jobs (16-byte payloads): what a
    /// live job needs on disk at least.
    pub record_bytes: f64,
    /// The disk after the compaction at the end of each simulated 10 minutes.
    pub samples: Vec<Sample>,
    /// Each reopen of a kept run: the simulated second it went on from and the open's
    /// milliseconds.
    pub reopens: Vec<(u64, f64)>,
    /// The simulated second a kept run stopped at, when asked to stop before its end.
    pub stopped_at: Option<u64>,
}

impl Churn {
    /// The samples once the stream is steady: after the first hour (every job of the first
    /// schedules has then been cancelled or fired), or all if the run is shorter.
    pub fn steady(&self) -> &[Sample] {
        let from = self
            .samples
            .iter()
            .position(|s| s.at_s >= 3_600)
            .unwrap_or(0);
        &self.samples[from..]
    }

    /// The most bytes on disk (journal plus buckets) seen once steady.
    pub fn peak_bytes(&self) -> u64 {
        self.steady()
            .iter()
            .map(|s| s.journal_bytes + s.bucket_bytes)
            .max()
            .unwrap_or(0)
    }

    /// The highest ratio of disk to live record bytes once steady.
    pub fn worst_ratio(&self) -> f64 {
        self.steady()
            .iter()
            .map(|s| s.ratio(self.record_bytes))
            .fold(0.0, f64::max)
    }

    /// The fewest bytes on disk (journal plus buckets) seen once steady: the peak and this
    /// bound the sawtooth of merges.
    pub fn trough_bytes(&self) -> u64 {
        self.steady()
            .iter()
            .map(|s| s.journal_bytes + s.bucket_bytes)
            .min()
            .unwrap_or(0)
    }

    /// The peak bytes on disk in the last third of the steady samples against the first
    /// third's: 1.0 is flat, above it the disk grows with the hours.
    pub fn drift(&self) -> f64 {
        let steady = self.steady();
        if steady.is_empty() {
            return 1.0;
        }
        let third = (steady.len() / 3).max(1);
        let peak = |s: &[Sample]| {
            s.iter()
                .map(|s| s.journal_bytes + s.bucket_bytes)
                .max()
                .unwrap_or(0)
        };
        peak(&steady[steady.len() - third..]) as f64 / peak(&steady[..third]).max(1) as f64
    }
}

const SIMULATED_START_MS: u64 = 1_800_000_000_000;
const CANCEL_AFTER_S: u64 = 300;
const COMPACT_EVERY_S: u64 = 60;
const SAMPLE_EVERY_S: u64 = 600;

/// Where a run that can stop and go on keeps its engine directory (`data`), its place
/// (`checkpoint`, written when it stops) and the file that asks it to stop (`stop`, looked for
/// at each sample).
#[derive(Clone, Debug)]
pub struct Keep {
    /// The directory holding all three.
    pub root: PathBuf,
}

impl Keep {
    fn data(&self) -> PathBuf {
        self.root.join("data")
    }
    fn checkpoint(&self) -> PathBuf {
        self.root.join("checkpoint")
    }
    fn stop(&self) -> PathBuf {
        self.root.join("stop")
    }
}

/// Where a kept run was when it stopped: everything the loop carries from one simulated second
/// to the next, besides the engine's directory.
struct Place {
    done_s: u64,
    k: u64,
    out: Churn,
    to_cancel: VecDeque<(u64, Vec<JobId>)>,
}

const CHECKPOINT_MAGIC: &str = "timewheel-churn-checkpoint 1";

impl Place {
    fn save(&self, shape: &Shape, path: &Path) -> std::io::Result<()> {
        let mut t = String::new();
        let o = &self.out;
        let _ = writeln!(t, "{CHECKPOINT_MAGIC}");
        let _ = writeln!(t, "{}", shape_key(shape));
        let _ = writeln!(
            t,
            "{} {} {} {} {} {}",
            self.done_s, self.k, o.jobs, o.completed, o.real_s, o.record_bytes
        );
        let _ = writeln!(t, "{}", o.samples.len());
        for x in &o.samples {
            let _ = writeln!(
                t,
                "{} {} {} {} {}",
                x.at_s, x.live_jobs, x.journal_bytes, x.bucket_bytes, x.dir_bytes
            );
        }
        let _ = writeln!(t, "{}", o.reopens.len());
        for (at, ms) in &o.reopens {
            let _ = writeln!(t, "{at} {ms}");
        }
        let _ = writeln!(t, "{}", self.to_cancel.len());
        for (at, ids) in &self.to_cancel {
            let _ = write!(t, "{at}");
            for id in ids {
                let _ = write!(t, " {}", id.0);
            }
            t.push('\n');
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, t)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, path)
    }

    fn load(shape: &Shape, path: &Path) -> Result<Place, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let bad = || {
            format!(
                "{}: not a churn checkpoint this build wrote",
                path.display()
            )
        };
        let mut lines = text.lines();
        let mut line = || lines.next().ok_or_else(bad);
        if line()? != CHECKPOINT_MAGIC {
            return Err(bad());
        }
        let key = line()?;
        if key != shape_key(shape) {
            return Err(format!(
                "{}: the run kept there has the shape `{key}`, this one `{}`",
                path.display(),
                shape_key(shape)
            ));
        }
        let nums = |l: &str| -> Result<Vec<f64>, String> {
            l.split(' ')
                .map(|w| w.parse::<f64>().map_err(|_| bad()))
                .collect()
        };
        let ints = |l: &str| -> Result<Vec<u64>, String> {
            l.split(' ')
                .map(|w| w.parse::<u64>().map_err(|_| bad()))
                .collect()
        };
        let count = |l: &str| l.parse::<usize>().map_err(|_| bad());
        let [done_s, k, jobs, completed, real_s, record_bytes] = nums(line()?)?[..] else {
            return Err(bad());
        };
        let mut out = Churn {
            jobs: jobs as u64,
            completed: completed as u64,
            real_s,
            record_bytes,
            ..Churn::default()
        };
        for _ in 0..count(line()?)? {
            let [at_s, live_jobs, journal_bytes, bucket_bytes, dir_bytes] = ints(line()?)?[..]
            else {
                return Err(bad());
            };
            out.samples.push(Sample {
                at_s,
                live_jobs,
                journal_bytes,
                bucket_bytes,
                dir_bytes,
            });
        }
        for _ in 0..count(line()?)? {
            let [at, ms] = nums(line()?)?[..] else {
                return Err(bad());
            };
            out.reopens.push((at as u64, ms));
        }
        let mut to_cancel = VecDeque::new();
        for _ in 0..count(line()?)? {
            let v = ints(line()?)?;
            let (at, ids) = v.split_first().ok_or_else(bad)?;
            to_cancel.push_back((*at, ids.iter().map(|&id| JobId(id)).collect()));
        }
        Ok(Place {
            done_s: done_s as u64,
            k: k as u64,
            out,
            to_cancel,
        })
    }
}

/// What a kept run's shape must agree on to go on (its length may change).
fn shape_key(shape: &Shape) -> String {
    format!(
        "rate {} cancelled {} space {:?}",
        shape.rate, shape.cancelled_of_10, shape.space_percent_max
    )
}

/// Runs `shape`, calling `progress` with each sample as it is taken and the bytes of one
/// schedule record. Without `keep`, on the fresh directory `dir`, start to end. With it, in
/// `keep`'s directory: from where the run kept there stopped, if it did, else from the start on
/// an empty directory; and it stops at the first sample after `keep`'s stop file appears.
pub fn churn(
    dir: &Path,
    shape: Shape,
    keep: Option<&Keep>,
    mut progress: impl FnMut(&Sample, f64),
) -> Result<Churn, String> {
    let (dir, resumed) = match keep {
        None => (dir.to_path_buf(), None),
        Some(keep) => {
            std::fs::create_dir_all(keep.data()).map_err(|e| e.to_string())?;
            let checkpoint = keep.checkpoint();
            let resumed = if checkpoint.exists() {
                let place = Place::load(&shape, &checkpoint)?;
                // Taken away while the run goes on: a run killed before it stops cleanly
                // leaves no checkpoint, and its directory is not gone on from by mistake.
                std::fs::rename(&checkpoint, checkpoint.with_extension("used"))
                    .map_err(|e| e.to_string())?;
                Some(place)
            } else if std::fs::read_dir(keep.data())
                .map_err(|e| e.to_string())?
                .next()
                .is_some()
            {
                return Err(format!(
                    "{} holds a churn run that did not stop cleanly (no checkpoint): remove it \
                     to start again",
                    keep.root.display()
                ));
            } else {
                None
            };
            (keep.data(), resumed)
        }
    };
    let done_s = resumed.as_ref().map_or(0, |p| p.done_s);
    let clock = ManualClock::new(SIMULATED_START_MS + done_s * 1_000);
    // Compaction by hand each simulated minute; the timer run by hand after each step.
    let mut config = Config::new(&dir).compact_interval_ms(0);
    if let Some(percent) = shape.space_percent_max {
        config = config.bucket_space_percent_max(percent);
    }
    let opening = Instant::now();
    let engine = Engine::open_with_clock(config, Arc::new(clock.clone()))
        .map_err(|e| format!("open the churn directory: {e}"))?;
    let open_ms = opening.elapsed().as_secs_f64() * 1e3;
    let Place {
        mut k,
        mut out,
        mut to_cancel,
        ..
    } = match resumed {
        Some(mut place) => {
            place.out.reopens.push((done_s, open_ms));
            place.out.stopped_at = None;
            place
        }
        None => Place {
            done_s: 0,
            k: 0,
            out: Churn {
                record_bytes: schedule_record_bytes(&engine, &clock),
                ..Churn::default()
            },
            to_cancel: VecDeque::new(),
        },
    };
    let record_bytes = out.record_bytes;
    let real_before = out.real_s;
    let t = Instant::now();
    for s in done_s + 1..=shape.seconds {
        let now = clock.now_ms();
        let specs = (0..shape.rate).map(|i| {
            let delay_s = 360 + (k + i).wrapping_mul(7_919) % 3_240;
            JobSpec::at(now + delay_s * 1_000 + i % 1_000).payload([5u8; 16])
        });
        let ids = engine.schedule_batch(specs).expect("schedule");
        k += shape.rate;
        out.jobs += shape.rate;
        let paid: Vec<JobId> = ids
            .iter()
            .enumerate()
            .filter(|(i, _)| (*i as u64) % 10 < shape.cancelled_of_10)
            .map(|(_, &id)| id)
            .collect();
        to_cancel.push_back((s + CANCEL_AFTER_S, paid));
        while let Some((_, ids)) = to_cancel.front().filter(|(at, _)| *at <= s) {
            engine.cancel_batch(ids).expect("cancel");
            to_cancel.pop_front();
        }

        clock.advance(1_000);
        engine.run_timers();
        let fired: Vec<JobId> = engine.ready().try_iter().collect();
        let claimed: Vec<_> = engine
            .claim_batch(&fired)
            .expect("claim")
            .into_iter()
            .flatten()
            .collect();
        out.completed += engine
            .complete_batch(&claimed)
            .expect("complete")
            .into_iter()
            .filter(|&done| done)
            .count() as u64;

        if s % COMPACT_EVERY_S == 0 {
            while engine.compact().expect("compact").records > 0 {}
        }
        if s % SAMPLE_EVERY_S == 0 {
            let taken = sample(&engine, &dir, s);
            progress(&taken, record_bytes);
            out.samples.push(taken);
            if let Some(keep) = keep.filter(|keep| s < shape.seconds && keep.stop().exists()) {
                out.real_s = real_before + t.elapsed().as_secs_f64();
                engine.close().map_err(|e| format!("close: {e}"))?;
                out.stopped_at = Some(s);
                let place = Place {
                    done_s: s,
                    k,
                    out,
                    to_cancel,
                };
                place
                    .save(&shape, &keep.checkpoint())
                    .map_err(|e| format!("write the checkpoint: {e}"))?;
                return Ok(place.out);
            }
        }
    }
    out.real_s = real_before + t.elapsed().as_secs_f64();
    engine.close().map_err(|e| format!("close: {e}"))?;
    Ok(out)
}

fn sample(engine: &Engine, dir: &Path, at_s: u64) -> Sample {
    let st = engine.stats();
    let store = engine.store_stats();
    let dir_bytes = std::fs::read_dir(dir)
        .expect("list the directory")
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    Sample {
        at_s,
        live_jobs: st.scheduled + st.ready + st.running,
        journal_bytes: store.journal_bytes,
        bucket_bytes: store.bucket_bytes,
        dir_bytes,
    }
}

/// The journal bytes one schedule record of the churn's jobs takes: 1000 of them scheduled at
/// once (and cancelled, so they are not live), divided.
fn schedule_record_bytes(engine: &Engine, clock: &ManualClock) -> f64 {
    let before = engine.log_stats().bytes;
    let ids = engine
        .schedule_batch(
            (0..1_000).map(|_| JobSpec::at(clock.now_ms() + 3_600_000).payload([5u8; 16])),
        )
        .expect("schedule");
    let bytes = engine.log_stats().bytes - before;
    engine.cancel_batch(&ids).expect("cancel");
    bytes as f64 / 1_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tw-churn-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// A kept run stopped at a sample and gone on from there ends where a run straight through
    /// ends: the same jobs, the same completions, the same live jobs at every sample; and a
    /// kept directory with no checkpoint (a run killed, not stopped) is refused.
    #[test]
    fn a_kept_run_stopped_and_gone_on_ends_as_a_run_straight_through() {
        let shape = Shape {
            rate: 10,
            seconds: 1_800,
            cancelled_of_10: 9,
            space_percent_max: None,
        };
        let straight_dir = scratch("straight");
        let straight = churn(&straight_dir, shape, None, |_, _| {}).expect("straight run");

        let keep = Keep {
            root: scratch("kept"),
        };
        std::fs::create_dir_all(&keep.root).unwrap();
        std::fs::write(keep.stop(), b"").unwrap();
        let first = churn(Path::new("unused"), shape, Some(&keep), |_, _| {}).expect("first part");
        assert_eq!(first.stopped_at, Some(600));
        let second = churn(Path::new("unused"), shape, Some(&keep), |_, _| {}).expect("second");
        assert_eq!(second.stopped_at, Some(1_200));
        std::fs::remove_file(keep.stop()).unwrap();
        let last = churn(Path::new("unused"), shape, Some(&keep), |_, _| {}).expect("last part");
        assert_eq!(last.stopped_at, None);
        assert_eq!(last.reopens.len(), 2);
        assert_eq!(
            (last.jobs, last.completed),
            (straight.jobs, straight.completed)
        );
        assert!(straight.completed > 0);
        let live = |c: &Churn| {
            c.samples
                .iter()
                .map(|s| (s.at_s, s.live_jobs))
                .collect::<Vec<_>>()
        };
        assert_eq!(live(&last), live(&straight));

        // The last part ran to the end and wrote no checkpoint: the directory is not gone on
        // from.
        let refused = churn(Path::new("unused"), shape, Some(&keep), |_, _| {});
        assert!(refused.unwrap_err().contains("did not stop cleanly"));
        let _ = std::fs::remove_dir_all(&straight_dir);
        let _ = std::fs::remove_dir_all(&keep.root);
    }
}
