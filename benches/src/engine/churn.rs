//! Churn on disk: a steady stream of jobs, most cancelled before they are due, the rest fired,
//! claimed and completed, run for simulated hours on a real directory. What it checks is that
//! the disk stays flat: compaction folds the journal into hour buckets, deletes what it folded,
//! merges away what finished and drops finished hours whole, so the bytes on disk follow the
//! live jobs, not the history.
//!
//! Time is a `ManualClock` moved one simulated second per step, so a day takes minutes; the
//! disk, its syncs and every engine call are real. Compaction runs every simulated minute (the
//! compaction interval here), on the calling thread, as the background compactor would.

use std::collections::VecDeque;
use std::path::Path;
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

/// Runs `shape` on a fresh directory `dir`, calling `progress` with each sample as it is taken
/// and the bytes of one schedule record.
pub fn churn(dir: &Path, shape: Shape, mut progress: impl FnMut(&Sample, f64)) -> Churn {
    let clock = ManualClock::new(SIMULATED_START_MS);
    // Compaction by hand each simulated minute; the timer run by hand after each step.
    let mut config = Config::new(dir).compact_interval_ms(0);
    if let Some(percent) = shape.space_percent_max {
        config = config.bucket_space_percent_max(percent);
    }
    let engine =
        Engine::open_with_clock(config, Arc::new(clock.clone())).expect("open the churn directory");
    let record_bytes = schedule_record_bytes(&engine, &clock);

    let mut out = Churn {
        record_bytes,
        ..Churn::default()
    };
    let mut to_cancel: VecDeque<(u64, Vec<JobId>)> = VecDeque::new();
    let t = Instant::now();
    let mut k = 0u64;
    for s in 1..=shape.seconds {
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
            let taken = sample(&engine, dir, s);
            progress(&taken, record_bytes);
            out.samples.push(taken);
        }
    }
    out.real_s = t.elapsed().as_secs_f64();
    engine.close().expect("close");
    out
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
