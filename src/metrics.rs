//! The engine's figures as metrics, through the [`metrics`] facade: whatever recorder the
//! application installs (Prometheus, StatsD, a test recorder) receives them; with none
//! installed, publishing costs next to nothing.
//!
//! The engine publishes every [`Config::metrics_interval_ms`](crate::Config#structfield.metrics_interval_ms)
//! (1 s by default, on its background thread), and [`Engine::publish_metrics`](crate::Engine::publish_metrics)
//! publishes at once. Nothing is counted on the hot paths: the figures are the ones
//! [`Engine::stats`](crate::Engine::stats), [`Engine::store_stats`](crate::Engine::store_stats)
//! and [`Engine::log_stats`](crate::Engine::log_stats) return, set as gauges and as counters at their absolute values (a counter starts again from
//! the data directory's figure at each open, or from zero for the figures counted since open).
//! `timewheel serve --metrics-addr` serves them in the Prometheus text format;
//! docs/operations.md lists them with the alert rules worth setting.
//!
//! | name | type | what |
//! |---|---|---|
//! | `timewheel_jobs{state}` | gauge | live jobs by state: `scheduled` (resident or on disk), `ready`, `running` |
//! | `timewheel_jobs_finished_total{how}` | counter | jobs `completed`, `cancelled`, `failed`, over the life of the data directory |
//! | `timewheel_jobs_fired_total` | counter | jobs fired since open |
//! | `timewheel_jobs_claimed_total` | counter | deliveries claimed by workers since open |
//! | `timewheel_jobs_redelivered_total` | counter | deliveries repeated since open (leases run out, crash recovery) |
//! | `timewheel_jobs_requeued_total` | counter | ready jobs nobody claimed in time, queued again, since open |
//! | `timewheel_jobs_missed_at_open` | gauge | jobs whose due time passed while the engine was down |
//! | `timewheel_crashed_runs` | gauge | runs of the engine on this directory that ended without a clean close |
//! | `timewheel_jobs_overdue` | gauge | jobs past due and not running |
//! | `timewheel_ready_queue_depth` | gauge | ids in the ready channel |
//! | `timewheel_fire_lateness_seconds{quantile}` | gauge | due time to the ready queue, since open: `0.5`, `0.99`, `0.999`, `1` |
//! | `timewheel_claim_wait_seconds{quantile}` | gauge | ready queue to claim, since open: `0.5`, `0.99`, `1` |
//! | `timewheel_timer_realtime` | gauge | 1 when the timer thread runs at real-time priority |
//! | `timewheel_wal_records_total`, `timewheel_wal_bytes_total` | counter | records and bytes appended to the journal since open |
//! | `timewheel_wal_syncs_total` | counter | group-commit syncs since open |
//! | `timewheel_wal_sync_seconds_bucket{le}`, `_sum`, `_count` | counter | sync durations since open, as a Prometheus histogram (`histogram_quantile` works on it) |
//! | `timewheel_wal_rolls_total` | counter | journal segment rolls since open |
//! | `timewheel_journal_sealed_early_total` | counter | of them, segments sealed before they were full because they had held records for `Config::seal_after_ms` |
//! | `timewheel_store_bytes{part}` | gauge | bytes on disk: `journal`, `buckets` |
//! | `timewheel_journal_segments` | gauge | journal segment files |
//! | `timewheel_buckets`, `timewheel_bucket_files` | gauge | hour buckets on disk, and their run files |
//! | `timewheel_bucket_jobs` | gauge | job records in bucket files |
//! | `timewheel_jobs_non_resident` | gauge | scheduled jobs kept on disk only, beyond the resident horizon |
//! | `timewheel_compactions_total` | counter | compaction passes since open |
//! | `timewheel_compaction_records_total` | counter | journal records folded since open |
//! | `timewheel_compaction_reclaimed_bytes_total` | counter | bytes of journal and runs deleted since open |
//! | `timewheel_compaction_written_bytes_total` | counter | bytes of run files written since open |
//! | `timewheel_compaction_last_seconds` | gauge | how long the last pass took |
//! | `timewheel_jobs_evicted_total`, `timewheel_jobs_loaded_total` | counter | jobs taken out of memory beyond the horizon, and loaded back as it reached them, since open |
//! | `timewheel_store_damaged` | gauge | 1 when a bucket file was found damaged (see `Engine::store_stats`) |
//! | `timewheel_compaction_failing` | gauge | 1 when the last compaction pass failed |
//!
//! ```
//! # fn main() -> timewheel::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("timewheel-doc-metrics-{}", std::process::id()));
//! use metrics_util::debugging::{DebugValue, DebuggingRecorder};
//! use timewheel::{Config, Engine, JobSpec};
//!
//! let engine = Engine::open(Config::new(&dir))?;
//! engine.schedule(JobSpec::after(std::time::Duration::from_secs(3_600)))?;
//! let recorder = DebuggingRecorder::new();
//! let snapshotter = recorder.snapshotter();
//! metrics::with_local_recorder(&recorder, || engine.publish_metrics());
//! let scheduled = snapshotter.snapshot().into_vec().into_iter().find(|(key, ..)| {
//!     let key = key.key();
//!     key.name() == "timewheel_jobs" && key.labels().any(|l| l.value() == "scheduled")
//! });
//! assert_eq!(scheduled.map(|m| m.3), Some(DebugValue::Gauge(1.0.into())));
//! # drop(engine);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(())
//! # }
//! ```

use std::sync::Once;

use metrics::{Unit, counter, describe_counter, describe_gauge, gauge};

use crate::stats::{LogStats, Stats, StoreStats};

/// Sets every metric in the table of the [module documentation](self) from a snapshot.
pub fn publish(stats: &Stats, store: &StoreStats, log: &LogStats) {
    static DESCRIBED: Once = Once::new();
    DESCRIBED.call_once(describe);
    for (state, n) in [
        ("scheduled", stats.scheduled),
        ("ready", stats.ready),
        ("running", stats.running),
    ] {
        gauge!("timewheel_jobs", "state" => state).set(n as f64);
    }
    for (how, n) in [
        ("completed", stats.completed),
        ("cancelled", stats.cancelled),
        ("failed", stats.failed),
    ] {
        counter!("timewheel_jobs_finished_total", "how" => how).absolute(n);
    }
    counter!("timewheel_jobs_fired_total").absolute(stats.fired);
    counter!("timewheel_jobs_claimed_total").absolute(stats.claimed);
    counter!("timewheel_jobs_redelivered_total").absolute(stats.redelivered);
    counter!("timewheel_jobs_requeued_total").absolute(stats.requeued);
    gauge!("timewheel_jobs_missed_at_open").set(stats.missed_at_open as f64);
    gauge!("timewheel_crashed_runs").set(stats.crashed_runs as f64);
    gauge!("timewheel_jobs_overdue").set(stats.overdue as f64);
    gauge!("timewheel_ready_queue_depth").set(stats.ready_queue_depth as f64);
    for (quantile, us) in [
        ("0.5", stats.lateness_us_p50),
        ("0.99", stats.lateness_us_p99),
        ("0.999", stats.lateness_us_p999),
        ("1", stats.lateness_us_max),
    ] {
        gauge!("timewheel_fire_lateness_seconds", "quantile" => quantile).set(us as f64 / 1e6);
    }
    for (quantile, us) in [
        ("0.5", stats.claim_wait_us_p50),
        ("0.99", stats.claim_wait_us_p99),
        ("1", stats.claim_wait_us_max),
    ] {
        gauge!("timewheel_claim_wait_seconds", "quantile" => quantile).set(us as f64 / 1e6);
    }
    gauge!("timewheel_timer_realtime").set(f64::from(u8::from(stats.timer_realtime)));
    counter!("timewheel_wal_records_total").absolute(log.records);
    counter!("timewheel_wal_bytes_total").absolute(log.bytes);
    counter!("timewheel_wal_syncs_total").absolute(log.syncs);
    counter!("timewheel_wal_rolls_total").absolute(log.rolls);
    for &(bound, n) in &log.sync_seconds_buckets {
        let le = if bound.is_finite() {
            bound.to_string()
        } else {
            "+Inf".to_owned()
        };
        counter!("timewheel_wal_sync_seconds_bucket", "le" => le).absolute(n);
    }
    // A counter holds integers, so the sum of seconds is a gauge (it only grows too).
    gauge!("timewheel_wal_sync_seconds_sum").set(log.sync_seconds_total);
    counter!("timewheel_wal_sync_seconds_count").absolute(log.syncs);
    gauge!("timewheel_store_bytes", "part" => "journal").set(store.journal_bytes as f64);
    gauge!("timewheel_store_bytes", "part" => "buckets").set(store.bucket_bytes as f64);
    gauge!("timewheel_journal_segments").set(store.journal_segments as f64);
    gauge!("timewheel_buckets").set(store.buckets as f64);
    gauge!("timewheel_bucket_files").set(store.bucket_files as f64);
    gauge!("timewheel_bucket_jobs").set(store.bucket_jobs as f64);
    gauge!("timewheel_jobs_non_resident").set(store.non_resident as f64);
    counter!("timewheel_journal_sealed_early_total").absolute(store.segments_sealed_early);
    counter!("timewheel_compactions_total").absolute(store.compactions);
    counter!("timewheel_compaction_records_total").absolute(store.records_folded);
    counter!("timewheel_compaction_reclaimed_bytes_total").absolute(store.bytes_reclaimed);
    counter!("timewheel_compaction_written_bytes_total").absolute(store.bytes_written);
    gauge!("timewheel_compaction_last_seconds").set(store.last_compaction.as_secs_f64());
    counter!("timewheel_jobs_evicted_total").absolute(store.evicted);
    counter!("timewheel_jobs_loaded_total").absolute(store.loaded);
    gauge!("timewheel_store_damaged").set(f64::from(u8::from(store.damage.is_some())));
    gauge!("timewheel_compaction_failing")
        .set(f64::from(u8::from(store.compaction_error.is_some())));
}

fn describe() {
    describe_gauge!("timewheel_jobs", Unit::Count, "Live jobs by state.");
    describe_counter!(
        "timewheel_jobs_finished_total",
        Unit::Count,
        "Jobs completed, cancelled or failed, over the life of the data directory."
    );
    describe_counter!(
        "timewheel_jobs_fired_total",
        Unit::Count,
        "Jobs fired since open."
    );
    describe_counter!(
        "timewheel_jobs_redelivered_total",
        Unit::Count,
        "Deliveries repeated since open: leases that ran out, jobs interrupted by a crash."
    );
    describe_counter!(
        "timewheel_jobs_requeued_total",
        Unit::Count,
        "Ready jobs nobody claimed within the lease, queued again, since open."
    );
    describe_gauge!(
        "timewheel_jobs_missed_at_open",
        Unit::Count,
        "Jobs whose due time passed while the engine was down."
    );
    describe_gauge!(
        "timewheel_crashed_runs",
        Unit::Count,
        "Runs of the engine on this directory that ended without a clean close."
    );
    describe_gauge!(
        "timewheel_jobs_overdue",
        Unit::Count,
        "Jobs past due and not yet running."
    );
    describe_gauge!(
        "timewheel_ready_queue_depth",
        Unit::Count,
        "Ids in the ready channel."
    );
    describe_gauge!(
        "timewheel_fire_lateness_seconds",
        Unit::Seconds,
        "Due time to the ready queue since open, by quantile."
    );
    describe_gauge!(
        "timewheel_claim_wait_seconds",
        Unit::Seconds,
        "Ready queue to claim since open, by quantile."
    );
    describe_gauge!(
        "timewheel_timer_realtime",
        "1 when the timer thread runs at real-time priority."
    );
    describe_gauge!(
        "timewheel_store_bytes",
        Unit::Bytes,
        "Bytes on disk, by part."
    );
    describe_gauge!(
        "timewheel_journal_segments",
        Unit::Count,
        "Journal segment files."
    );
    describe_gauge!("timewheel_buckets", Unit::Count, "Hour buckets on disk.");
    describe_gauge!(
        "timewheel_bucket_files",
        Unit::Count,
        "Run files of the hour buckets."
    );
    describe_gauge!(
        "timewheel_bucket_jobs",
        Unit::Count,
        "Job records in bucket files."
    );
    describe_gauge!(
        "timewheel_jobs_non_resident",
        Unit::Count,
        "Scheduled jobs kept on disk only, beyond the resident horizon."
    );
    describe_counter!(
        "timewheel_journal_sealed_early_total",
        Unit::Count,
        "Journal segments sealed before they were full (Config::seal_after_ms) since open."
    );
    describe_counter!(
        "timewheel_compactions_total",
        Unit::Count,
        "Compaction passes since open."
    );
    describe_counter!(
        "timewheel_compaction_records_total",
        Unit::Count,
        "Journal records folded into bucket files since open."
    );
    describe_counter!(
        "timewheel_compaction_reclaimed_bytes_total",
        Unit::Bytes,
        "Bytes of journal segments and run files deleted since open."
    );
    describe_counter!(
        "timewheel_compaction_written_bytes_total",
        Unit::Bytes,
        "Bytes of run files written since open."
    );
    describe_gauge!(
        "timewheel_compaction_last_seconds",
        Unit::Seconds,
        "How long the last compaction pass took."
    );
    describe_counter!(
        "timewheel_jobs_evicted_total",
        Unit::Count,
        "Jobs taken out of memory beyond the resident horizon since open."
    );
    describe_counter!(
        "timewheel_jobs_loaded_total",
        Unit::Count,
        "Jobs loaded back into memory as the horizon reached their bucket, since open."
    );
    describe_gauge!(
        "timewheel_store_damaged",
        "1 when a bucket file was found damaged."
    );
    describe_gauge!(
        "timewheel_compaction_failing",
        "1 when the last compaction pass failed."
    );
}
