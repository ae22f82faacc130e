//! The engine's configuration: where it keeps its data, how durable an acknowledgement is, and a
//! name and a default for every limit.

use std::path::PathBuf;

pub use timewheel_wal::{Durability, RecoveryMode};

/// Milliseconds in an hour: the width of a bucket.
pub const HOUR_MS: u64 = 3_600_000;

/// The engine's configuration. Build it with [`Config::new`], then the setters (or assign the
/// fields):
///
/// ```
/// use std::time::Duration;
/// use timewheel::{Config, Durability};
/// let config = Config::new("/var/lib/myapp/timers")
///     .durability(Durability::Periodic(Duration::from_millis(10)))
///     .lease_ms(60_000)
///     .payload_bytes_max(4 << 10);
/// assert_eq!(config.lease_ms, 60_000);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// The data directory (created if missing, locked while the engine is open).
    pub dir: PathBuf,
    /// When an acknowledgement may be given: after msync (`Sync`, the default), on a timer
    /// (`Periodic`), or never by itself (`Buffered`, for tests and benchmarks).
    pub durability: Durability,
    /// How recovery treats damage in the log.
    pub recovery_mode: RecoveryMode,
    /// Size of one log segment file.
    pub segment_bytes: u64,
    /// How many group-commit syncs may be in flight at once (1 to 8; default 1). With 2, a call
    /// whose record was written after a sync started has it synced at once, beside that sync,
    /// rather than after it: on this project's test machine, 16 % more single schedules/s from
    /// 8 callers, 9-25 % fewer from 64 (docs/design.md, "Two syncs in flight").
    /// Acknowledgements stay in log order either way.
    pub syncs_in_flight: usize,
    /// How far past its last commit block the log may write before a sync makes that block
    /// durable, in bytes (a multiple of 4096; see `WalOptions::write_reach_bytes`). Each
    /// open proves only this much of the last segment's unused part to be zero, instead of
    /// reading it to the end; a batch larger than this waits for a sync every this many bytes.
    pub write_reach_bytes: u64,
    /// Largest payload a job may carry.
    pub payload_bytes_max: usize,
    /// Largest failure reason `fail` records; longer ones are refused.
    pub fail_reason_bytes_max: usize,
    /// How far ahead of now a job may be due. Dues in the past are accepted and fire at once.
    pub due_ahead_ms_max: u64,
    /// Largest number of jobs in one `schedule_batch` call.
    pub batch_jobs_max: usize,
    /// Jobs one page of [`Engine::jobs`](crate::Engine::jobs) returns at most.
    pub page_jobs_max: usize,
    /// How long a claim holds a job before it is delivered again with attempt + 1.
    pub lease_ms: u64,
    /// The retry policy of jobs that do not have their own: failed attempts allowed, and the
    /// backoff between them.
    pub retry: crate::RetryPolicy,
    /// The seed of the backoff's jitter (see [`Backoff`](crate::Backoff)).
    pub retry_seed: u64,
    /// The most a job's `max_attempts` may be.
    pub max_attempts_max: u32,
    /// Longest idempotency key (`JobSpec::key`), in bytes.
    pub key_bytes_max: usize,
    /// How late a recurring job's occurrence may be found before it counts as a misfire
    /// (its policy `Misfire::Skip` then skips it).
    pub misfire_threshold_ms: u64,
    /// Serve tenants fairly: fired jobs wait in a queue per tenant, and the ready channel is
    /// fed from them round-robin, `ready_channel_depth` ids at most, skipping tenants at their
    /// running limit. Off: fired ids enter the channel in firing order, unbounded.
    pub fair_tenants: bool,
    /// With `fair_tenants`: ids in the ready channel at most (how far ahead of the workers
    /// the round-robin is decided).
    pub ready_channel_depth: usize,
    /// With `fair_tenants`: running jobs a tenant may have at once (0: no limit), unless
    /// `tenant_running_limits` names the tenant.
    pub tenant_running_max: u32,
    /// With `fair_tenants`: running limits of particular tenants (0: no limit).
    pub tenant_running_limits: std::collections::BTreeMap<u32, u32>,
    /// Largest number of jobs the timer thread moves to the ready queue before it lets
    /// schedule and cancel calls through again.
    pub fires_per_advance_max: usize,
    /// Ids reserved in the log at a time (a `ReserveIds` record per block): larger blocks
    /// mean fewer records, and more ids skipped (never reused) at each open.
    pub id_block: u64,
    /// Run the timer thread. The simulation turns it off and calls `Engine::run_timers`
    /// itself, so that a seed alone decides what happens.
    pub timer_thread: bool,
    /// Ask for the lowest real-time priority (`SCHED_FIFO` 1, Linux and other Unix) for the
    /// timer thread, so that a due job is not kept waiting for a CPU behind busy scheduling and
    /// worker threads. Granted only where the process may (`CAP_SYS_NICE`, or an
    /// `RLIMIT_RTPRIO` of at least 1); otherwise the thread stays a normal one, and
    /// [`Stats::timer_realtime`](crate::Stats::timer_realtime) says which it got. The thread
    /// sleeps between deadlines and fires in bounded batches, so it cannot hold a CPU for long.
    /// `timewheel serve` asks the same for its deliverer (the thread that claims fired jobs
    /// and writes their events): it waits whenever nothing has fired and whenever the client
    /// is behind (a full pipe), and otherwise does only what a fired job needs.
    pub timer_realtime: bool,
    /// How often the compactor looks for sealed journal segments to fold into hour-bucket
    /// files (and then delete), in milliseconds; 0 turns the background compactor off
    /// ([`Engine::compact`](crate::Engine::compact) still runs a pass when asked).
    pub compact_interval_ms: u64,
    /// How often the engine publishes its figures through the `metrics` facade, in
    /// milliseconds (see [`crate::metrics`]); 0 never (then
    /// [`Engine::publish_metrics`](crate::Engine::publish_metrics) publishes when asked).
    pub metrics_interval_ms: u64,
    /// Sealed journal segments one compaction pass folds at most (its memory is about that
    /// many segments' worth of live records).
    pub compact_segments_max: usize,
    /// A bucket with more run files than this is merged into one by the next pass that
    /// touches it (fewer files to read at a load; more bytes rewritten per pass). A bucket is
    /// merged sooner when the runs stacked on its oldest hold as many bytes as that one does,
    /// or when its runs hold more than [`Config::bucket_space_percent_max`] of what its live
    /// jobs need.
    pub bucket_runs_max: usize,
    /// A bucket whose runs would hold more than this percentage of the bytes its live jobs
    /// need (the finished ones' puts, and the deletes and patches stacked on them) is merged
    /// into one run of its live jobs. Lower keeps less on disk and rewrites live jobs more
    /// often: each such merge follows new records worth `percent - 100` of the live bytes it
    /// rewrites. At least 100; default 125 (docs/benchmarks.md, twenty-seventh session: churn at
    /// 10,000 jobs/s with 9 of 10 cancelled kept its disk within 1.39x of the live records over
    /// two simulated hours, where 150 reached 1.67x, for about 14 % more time).
    pub bucket_space_percent_max: u32,
    /// A journal segment still appended to is sealed by the next compaction pass once it has
    /// held records for this many milliseconds (as the engine's clock counts, from the first
    /// pass that saw it hold one), so that its records are folded into the buckets though it
    /// is far from full: the jobs they finish leave the disk, and the next open replays less.
    /// A quiet engine otherwise keeps them until the segment fills, which at low traffic may
    /// take days. Each seal starts the next segment's file (a
    /// [`Config::segment_bytes`](Config#structfield.segment_bytes) preallocation), so keep it
    /// to minutes. 0: only full segments are sealed. Default 10 minutes; otherwise at least a
    /// second.
    pub seal_after_ms: u64,
    /// How far ahead the engine keeps jobs in memory, in milliseconds. A job due later costs
    /// no memory once compaction has folded it into its hour bucket's files: the engine keeps
    /// it on disk (a `cancel`, `reschedule` or `get` reads it from there) and loads its bucket
    /// into the wheel, off the timer thread, once the bucket's hour comes within the horizon.
    /// At least an hour (the width of a bucket).
    pub horizon_ms: u64,
    /// Read and check every bucket file at open, also those beyond the horizon that the open
    /// does not load (their checksums, and that their runs stack as the manifest says). Off by
    /// default: an open then reads only the near-term buckets, whatever the far-future volume,
    /// and damage in a far bucket is found when it is read (its load as the horizon reaches
    /// it, or a call naming one of its jobs), reported then in
    /// [`StoreStats::damage`](crate::StoreStats::damage) and as `Error::CorruptedStore`.
    /// `timewheel verify` checks every file.
    pub verify_buckets_at_open: bool,
    /// After the log could not grow for lack of space, new schedules are refused at once
    /// (`Error::NoSpace`, nothing written, no allocation tried) for this many milliseconds, then
    /// tried again; the wait doubles with each failure in a row, up to 100 times this. Cancels,
    /// claims, completions and failures always try. 0: every schedule tries.
    pub no_space_retry_ms: u64,
    /// Bytes of the log kept for cancels, claims, completions and failures when the disk is
    /// full: once the next segment's file can not be allocated, schedules are refused while
    /// less than this is left in the current segment (at most a quarter of `segment_bytes`),
    /// so a full disk can still be drained. 0: no reserve.
    pub no_space_reserve_bytes: u64,
    /// Bytes of a file (`BALLAST`) the engine keeps in the data directory and gives up when the
    /// disk is full, so that compaction, which writes its new files before it deletes the ones
    /// they replace, can still run and free space; made again once there is room. 0: none.
    pub disk_ballast_bytes: u64,
    /// Slots per chunk of the job table's slab (a power of two, 16 to 65,536; default 1,024):
    /// the memory of the jobs in memory is allocated, and given back once they leave, a chunk
    /// at a time. The simulation sets 16, so that its few hundred jobs give chunks back.
    pub job_table_chunk_slots: usize,
}

impl Config {
    /// The log's options for this config (validated: the record limit fits a `u32`).
    pub(crate) fn wal_options(&self) -> timewheel_wal::WalOptions {
        timewheel_wal::WalOptions {
            segment_bytes: self.segment_bytes,
            record_bytes_max: u32::try_from(crate::record::record_bytes_max(self))
                .expect("a validated config's record limit fits a u32"),
            durability: self.durability,
            recovery_mode: self.recovery_mode,
            syncs_in_flight: self.syncs_in_flight,
            write_reach_bytes: self.write_reach_bytes,
        }
    }

    /// The defaults, with data kept in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Config {
            dir: dir.into(),
            durability: Durability::Sync,
            recovery_mode: RecoveryMode::TolerateTornTail,
            segment_bytes: 64 << 20,
            syncs_in_flight: timewheel_wal::WalOptions::SYNCS_IN_FLIGHT_DEFAULT,
            write_reach_bytes: timewheel_wal::WalOptions::WRITE_REACH_DEFAULT,
            payload_bytes_max: 64 << 10,
            fail_reason_bytes_max: 4 << 10,
            due_ahead_ms_max: 100 * 366 * 24 * HOUR_MS,
            batch_jobs_max: 1 << 20,
            page_jobs_max: 10_000,
            lease_ms: 30_000,
            retry: crate::RetryPolicy::default(),
            retry_seed: 0x7477_6865_656c,
            max_attempts_max: 10_000,
            key_bytes_max: 256,
            misfire_threshold_ms: 60_000,
            fair_tenants: false,
            ready_channel_depth: 1024,
            tenant_running_max: 0,
            tenant_running_limits: std::collections::BTreeMap::new(),
            fires_per_advance_max: 4096,
            id_block: 1 << 16,
            timer_thread: true,
            timer_realtime: true,
            compact_interval_ms: 10_000,
            metrics_interval_ms: 1_000,
            compact_segments_max: 4,
            bucket_runs_max: 16,
            bucket_space_percent_max: 125,
            seal_after_ms: 10 * 60_000,
            horizon_ms: 3 * HOUR_MS,
            verify_buckets_at_open: false,
            no_space_retry_ms: 100,
            no_space_reserve_bytes: 1 << 20,
            disk_ballast_bytes: 8 << 20,
            job_table_chunk_slots: crate::engine::CHUNK_SLOTS_DEFAULT,
        }
    }

    /// Checks the limits against each other.
    pub(crate) fn validate(&self) -> crate::Result<()> {
        let bad = |field, reason: &str| Err(crate::Error::invalid(field, reason));
        if self.write_reach_bytes == 0 || !self.write_reach_bytes.is_multiple_of(4096) {
            return bad("write_reach_bytes", "a positive multiple of 4096");
        }
        if self.payload_bytes_max > (16 << 20) {
            return bad("payload_bytes_max", "at most 16 MiB");
        }
        // A record carries a payload plus a fixed header; it must fit a segment comfortably.
        let schedule_max = crate::record::schedule_bytes_max(self) as u64;
        if schedule_max.saturating_mul(4) > self.segment_bytes {
            return bad(
                "segment_bytes",
                "must hold at least four schedules of the largest payload",
            );
        }
        let failure_max = crate::record::failure_bytes_max(self) as u64;
        if failure_max.saturating_mul(2) > self.segment_bytes {
            return bad(
                "segment_bytes",
                "must hold at least two failures of the longest reason",
            );
        }
        if self.syncs_in_flight == 0
            || self.syncs_in_flight > timewheel_wal::WalOptions::SYNCS_IN_FLIGHT_MAX
        {
            let max = timewheel_wal::WalOptions::SYNCS_IN_FLIGHT_MAX;
            return Err(crate::Error::invalid(
                "syncs_in_flight",
                format!("must be in 1..={max}"),
            ));
        }
        if self.lease_ms == 0 {
            return bad("lease_ms", "must be positive");
        }
        if !self.job_table_chunk_slots.is_power_of_two()
            || !(16..=1 << 16).contains(&self.job_table_chunk_slots)
        {
            return bad("job_table_chunk_slots", "a power of two from 16 to 65,536");
        }
        if self.id_block == 0 {
            return bad("id_block", "must be positive");
        }
        if self.horizon_ms < HOUR_MS {
            return bad("horizon_ms", "at least an hour");
        }
        if self.compact_segments_max == 0 || self.bucket_runs_max == 0 {
            return bad("compact_segments_max", "compaction limits must be positive");
        }
        if self.bucket_space_percent_max < 100 {
            return bad(
                "bucket_space_percent_max",
                "at least 100 (a bucket holds its live jobs' bytes at least)",
            );
        }
        if self.seal_after_ms != 0 && self.seal_after_ms < 1000 {
            return bad(
                "seal_after_ms",
                "0 (seal full segments only) or at least 1000 (each seal starts a segment file)",
            );
        }
        // Ids name their home bucket modulo 2^20 hours; keep a past window of 19 years in
        // which two live buckets can not share a residue.
        if self.due_ahead_ms_max > 100 * 366 * 24 * HOUR_MS {
            return bad("due_ahead_ms_max", "at most 100 years");
        }
        if self.fires_per_advance_max == 0 || self.batch_jobs_max == 0 || self.page_jobs_max == 0 {
            return bad("fires_per_advance_max", "limits must be positive");
        }
        if self.fair_tenants && self.ready_channel_depth == 0 {
            return bad("ready_channel_depth", "must be positive");
        }
        if self.retry.max_attempts == 0 || self.retry.max_attempts > self.max_attempts_max {
            return bad("retry", "max_attempts from 1 to Config::max_attempts_max");
        }
        if self.retry.backoff.base_ms > self.retry.backoff.cap_ms {
            return bad("retry", "backoff base_ms above cap_ms");
        }
        Ok(())
    }
}

/// Setters, one per field, for building a `Config` in one expression.
impl Config {
    /// Turns on [`Config::fair_tenants`](Config#structfield.fair_tenants), with a running
    /// limit per tenant (0: none).
    pub fn fair_tenants(mut self, tenant_running_max: u32) -> Self {
        self.fair_tenants = true;
        self.tenant_running_max = tenant_running_max;
        self
    }

    /// Sets [`Config::retry`](Config#structfield.retry).
    pub fn retry(mut self, retry: crate::RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets [`Config::durability`](Config#structfield.durability).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Sets [`Config::recovery_mode`](Config#structfield.recovery_mode).
    pub fn recovery_mode(mut self, recovery_mode: RecoveryMode) -> Self {
        self.recovery_mode = recovery_mode;
        self
    }

    /// Sets [`Config::segment_bytes`](Config#structfield.segment_bytes).
    pub fn segment_bytes(mut self, segment_bytes: u64) -> Self {
        self.segment_bytes = segment_bytes;
        self
    }

    /// Sets [`Config::syncs_in_flight`](Config#structfield.syncs_in_flight).
    pub fn syncs_in_flight(mut self, syncs_in_flight: usize) -> Self {
        self.syncs_in_flight = syncs_in_flight;
        self
    }

    /// Sets [`Config::write_reach_bytes`](Config#structfield.write_reach_bytes).
    pub fn write_reach_bytes(mut self, write_reach_bytes: u64) -> Self {
        self.write_reach_bytes = write_reach_bytes;
        self
    }

    /// Sets [`Config::payload_bytes_max`](Config#structfield.payload_bytes_max).
    pub fn payload_bytes_max(mut self, payload_bytes_max: usize) -> Self {
        self.payload_bytes_max = payload_bytes_max;
        self
    }

    /// Sets [`Config::fail_reason_bytes_max`](Config#structfield.fail_reason_bytes_max).
    pub fn fail_reason_bytes_max(mut self, fail_reason_bytes_max: usize) -> Self {
        self.fail_reason_bytes_max = fail_reason_bytes_max;
        self
    }

    /// Sets [`Config::due_ahead_ms_max`](Config#structfield.due_ahead_ms_max).
    pub fn due_ahead_ms_max(mut self, due_ahead_ms_max: u64) -> Self {
        self.due_ahead_ms_max = due_ahead_ms_max;
        self
    }

    /// Sets [`Config::page_jobs_max`](Config#structfield.page_jobs_max).
    pub fn page_jobs_max(mut self, page_jobs_max: usize) -> Self {
        self.page_jobs_max = page_jobs_max;
        self
    }

    /// Sets [`Config::batch_jobs_max`](Config#structfield.batch_jobs_max).
    pub fn batch_jobs_max(mut self, batch_jobs_max: usize) -> Self {
        self.batch_jobs_max = batch_jobs_max;
        self
    }

    /// Sets [`Config::lease_ms`](Config#structfield.lease_ms).
    pub fn lease_ms(mut self, lease_ms: u64) -> Self {
        self.lease_ms = lease_ms;
        self
    }

    /// Sets [`Config::fires_per_advance_max`](Config#structfield.fires_per_advance_max).
    pub fn fires_per_advance_max(mut self, fires_per_advance_max: usize) -> Self {
        self.fires_per_advance_max = fires_per_advance_max;
        self
    }

    /// Sets [`Config::id_block`](Config#structfield.id_block).
    pub fn id_block(mut self, id_block: u64) -> Self {
        self.id_block = id_block;
        self
    }

    /// Sets [`Config::timer_thread`](Config#structfield.timer_thread).
    pub fn timer_thread(mut self, timer_thread: bool) -> Self {
        self.timer_thread = timer_thread;
        self
    }

    /// Sets [`Config::timer_realtime`](Config#structfield.timer_realtime).
    pub fn timer_realtime(mut self, timer_realtime: bool) -> Self {
        self.timer_realtime = timer_realtime;
        self
    }

    /// Sets [`Config::compact_interval_ms`](Config#structfield.compact_interval_ms).
    pub fn compact_interval_ms(mut self, compact_interval_ms: u64) -> Self {
        self.compact_interval_ms = compact_interval_ms;
        self
    }

    /// Sets [`Config::metrics_interval_ms`](Config#structfield.metrics_interval_ms).
    pub fn metrics_interval_ms(mut self, metrics_interval_ms: u64) -> Self {
        self.metrics_interval_ms = metrics_interval_ms;
        self
    }

    /// Sets [`Config::compact_segments_max`](Config#structfield.compact_segments_max).
    pub fn compact_segments_max(mut self, compact_segments_max: usize) -> Self {
        self.compact_segments_max = compact_segments_max;
        self
    }

    /// Sets [`Config::horizon_ms`](Config#structfield.horizon_ms).
    pub fn horizon_ms(mut self, horizon_ms: u64) -> Self {
        self.horizon_ms = horizon_ms;
        self
    }

    /// Sets [`Config::verify_buckets_at_open`](Config#structfield.verify_buckets_at_open).
    pub fn verify_buckets_at_open(mut self, verify_buckets_at_open: bool) -> Self {
        self.verify_buckets_at_open = verify_buckets_at_open;
        self
    }

    /// Sets [`Config::no_space_retry_ms`](Config#structfield.no_space_retry_ms).
    pub fn no_space_retry_ms(mut self, no_space_retry_ms: u64) -> Self {
        self.no_space_retry_ms = no_space_retry_ms;
        self
    }

    /// Sets [`Config::no_space_reserve_bytes`](Config#structfield.no_space_reserve_bytes).
    pub fn no_space_reserve_bytes(mut self, no_space_reserve_bytes: u64) -> Self {
        self.no_space_reserve_bytes = no_space_reserve_bytes;
        self
    }

    /// Sets [`Config::disk_ballast_bytes`](Config#structfield.disk_ballast_bytes).
    pub fn disk_ballast_bytes(mut self, disk_ballast_bytes: u64) -> Self {
        self.disk_ballast_bytes = disk_ballast_bytes;
        self
    }

    /// Sets [`Config::job_table_chunk_slots`](Config#structfield.job_table_chunk_slots).
    pub fn job_table_chunk_slots(mut self, job_table_chunk_slots: usize) -> Self {
        self.job_table_chunk_slots = job_table_chunk_slots;
        self
    }

    /// Sets [`Config::bucket_runs_max`](Config#structfield.bucket_runs_max).
    pub fn bucket_runs_max(mut self, bucket_runs_max: usize) -> Self {
        self.bucket_runs_max = bucket_runs_max;
        self
    }

    /// Sets [`Config::seal_after_ms`](Config#structfield.seal_after_ms).
    pub fn seal_after_ms(mut self, seal_after_ms: u64) -> Self {
        self.seal_after_ms = seal_after_ms;
        self
    }

    /// Sets [`Config::bucket_space_percent_max`](Config#structfield.bucket_space_percent_max).
    pub fn bucket_space_percent_max(mut self, percent: u32) -> Self {
        self.bucket_space_percent_max = percent;
        self
    }
}
