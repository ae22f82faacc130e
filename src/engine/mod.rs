//! The engine: durable schedule, cancel and reschedule over the log; the timer thread that
//! fires due jobs into a queue of ids; claims with leases; recovery on open.
//!
//! Data flows one way (BRIEF.md section 3). Every live operation is *check, append, apply*:
//! under the state lock a call checks its precondition, appends its records to the log, and
//! applies exactly those records through the one transition function
//! ([`state::State::apply`]) that replay uses too; then it waits, outside the lock, until its
//! records are durable (group commit shares each sync among concurrent callers). A schedule
//! is the exception that proves the rule "visible only when durable": it appends under the id
//! lock only, and applies (puts the jobs on the wheel) after its records are durable, so no
//! job fires or is claimed before it is on disk. Lock order and which threads may block on
//! I/O: docs/design.md.

#[cfg(feature = "async")]
mod asynch;
#[cfg(feature = "async")]
pub use asynch::ClaimedStream;
mod compactor;
mod dead;
mod erased;
mod fair;
pub use fair::TenantStats;
mod ids;
mod job_table;
mod keys;
mod recovery;
mod recurring;
pub use recurring::ScheduleInfo;
mod state;
mod table;
mod timer;
pub(crate) use job_table::CHUNK_SLOTS_DEFAULT;
#[cfg(feature = "sidecar")]
pub(crate) use timer::raise_priority;
mod worker;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use timewheel_wal::storage::mmap::MmapStorage;
use timewheel_wal::{Durability, Lsn, Wal};

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::{Due, JobId, JobInfo, JobSpec, JobState, Outcome};
use crate::record::{Event, FLAG_BINARY_PAYLOAD, ScheduleRecord, TYPE_SCHEDULE};
use crate::stats::{RecoveryStats, StateView, Stats};
use crate::store::home_bucket;
use erased::ErasedStorage;
use ids::IdLedger;
use state::{Mode, State, state_index};

/// The longest a long piece of work waits, between two of its chunks, for the callers and the
/// timer thread waiting for the state lock to have had it (see `Shared::step_aside`).
const STEP_ASIDE_MAX: Duration = Duration::from_millis(1);

/// Shards of the job table one step of a page's scan reads under the state lock (of 256): at
/// ten million jobs, about 1.4 ms of the pass's 90 (about 9 ms per million jobs, the
/// `listing` workload in docs/benchmarks.md).
const PAGE_SHARDS_PER_HOLD: usize = 4;

/// The durable timer and job engine. See the crate docs for an example.
///
/// All methods take `&self`; share the engine between threads in an `Arc`.
pub struct Engine {
    shared: Arc<Shared>,
    timer: Mutex<Option<JoinHandle<()>>>,
    compactor: Mutex<Option<JoinHandle<()>>>,
}

pub(crate) struct Shared {
    wal: Wal<ErasedStorage>,
    state: Mutex<State>,
    /// Orders schedules: ids are taken and their records appended under it, so ids grow in
    /// log order. Taken before `state` when both are needed (never, today).
    ids: Mutex<IdLedger>,
    /// Wakes the timer thread.
    wake: Condvar,
    /// Wakes a drain when a running job finishes.
    finished: Condvar,
    /// Wakes calls waiting for a busy job (one whose change another call is appending).
    settled: Condvar,
    clock: Arc<dyn Clock>,
    config: Config,
    ready_rx: Receiver<JobId>,
    stopping: AtomicBool,
    closed: AtomicBool,
    /// The timer thread got the real-time priority it asked for (`Config::timer_realtime`).
    timer_realtime: AtomicBool,
    /// Callers of `lock_state` waiting for the state lock, and how many times one that
    /// waited took it (see [`Shared::step_aside`]).
    state_waiting: AtomicUsize,
    state_waited_took: AtomicU64,
    /// Times the timer thread took the state lock (see [`Shared::step_aside`]).
    timer_turns: AtomicU64,
    recovery: RecoveryStats,
    /// The manifest and what compaction did. Taken by compaction passes only (never with
    /// `state` or `ids`).
    store: Mutex<compactor::StoreState>,
    /// Wakes the compactor thread to stop.
    compactor_wake: Condvar,
    /// The log could not grow: `(segment, refuse schedules until this clock reading, the next
    /// wait)`. See `Config::no_space_retry_ms`.
    no_space: Mutex<Option<(u64, u64, u64)>>,
    /// Whether `no_space` is set: the calls that find it unset take no lock.
    out_of_space: AtomicBool,
    /// Batches appended whose [`Pending`] was dropped before its commit (an async schedule
    /// whose future was dropped while it awaited the sync, a `schedule_batch_nowait` never
    /// committed), not yet durable: made visible once they are (`Shared::adopt_orphans`).
    orphans: Mutex<Vec<Pending>>,
    has_orphans: AtomicBool,
    /// What wakes the async API's futures.
    #[cfg(feature = "async")]
    wakers: asynch::Wakers,
}

/// An idempotency key with its hash ([`table::key_hash`]), computed once per call.
type HashedKey = (u64, Arc<[u8]>);

/// Schedules appended to the log but not yet durable, nor visible: pass it to
/// [`Engine::commit`], which waits for them to be durable and returns `Ok` once they are
/// visible. Dropped instead (an async schedule's future dropped while it waits for the sync,
/// in a `select!` or a timeout), the jobs still become visible once a sync makes them durable:
/// at once if one already has, else after the next commit or async wait that covers them. Only
/// a failed sync leaves them invisible (the engine is then poisoned; what of them is durable
/// comes back at the next open).
#[must_use = "the jobs fire only once committed"]
pub struct Pending {
    lsn: Lsn,
    /// Some spec named the key of a job already appended: commit waits for `lsn` even when
    /// nothing new was appended, so that the job the id names is durable when it returns.
    named_existing: bool,
    /// The schedule records, exactly as appended.
    body: Vec<u8>,
    ends: Vec<usize>,
    /// The key of each new job with its hash (one per record, or none at all when no record
    /// names a key), the allocation the key table holds.
    keys: Vec<Option<HashedKey>>,
    /// The end of the batch's range of sequence numbers the key table holds unseen
    /// ([`table::KeyIndex::note_unseen`]), when some new job has a key.
    unseen_end: Option<u64>,
    /// The engine, while no commit has taken the batch: a drop hands the batch back to it.
    owner: Option<std::sync::Weak<Shared>>,
}

impl Pending {
    /// Whether a commit waits for `lsn`: the batch appended jobs, or some spec's key named a
    /// job appended before it (which the returned id acknowledges) and nothing new was.
    fn must_wait(&self) -> bool {
        !self.ends.is_empty() || self.named_existing
    }

    /// The LSN that must be acknowledged before [`Engine::commit`] can make the batch
    /// visible: a commit of a batch whose LSN is acknowledged does not wait.
    #[cfg(feature = "sidecar")]
    pub(crate) fn lsn(&self) -> Lsn {
        self.lsn
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(sh) = self.owner.take().and_then(|w| w.upgrade()) {
            sh.adopt(Pending {
                lsn: self.lsn,
                named_existing: self.named_existing,
                body: std::mem::take(&mut self.body),
                ends: std::mem::take(&mut self.ends),
                keys: std::mem::take(&mut self.keys),
                unseen_end: self.unseen_end,
                owner: None,
            });
        }
    }
}

/// What [`Engine::drain`] left behind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Jobs still running when the timeout ran out: delivered again after the next open.
    pub running: u64,
    /// Jobs fired but not claimed: they fire again after the next open.
    pub ready: u64,
}

impl Engine {
    /// Opens (or creates) the engine in `config.dir` on the system clock: locks the directory,
    /// recovers, and starts the timer thread.
    pub fn open(config: Config) -> Result<Self> {
        Self::open_with_clock(config, Arc::new(SystemClock))
    }

    /// Like [`Engine::open`], with another clock.
    pub fn open_with_clock(config: Config, clock: Arc<dyn Clock>) -> Result<Self> {
        config.validate()?;
        let storage = MmapStorage::open_dir(&config.dir)?;
        Self::open_erased(ErasedStorage::new(storage), config, clock, true)
    }

    /// Opens the engine on any storage (the fault-injecting one in tests and the simulation).
    /// `config.dir` is not used.
    #[cfg(feature = "testing")]
    pub fn open_on(
        storage: impl timewheel_wal::Storage,
        config: Config,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        Self::open_erased(ErasedStorage::new(storage), config, clock, true)
    }

    /// Opens the directory read in place ([`timewheel_wal::storage::readonly`]): the whole
    /// recovery and replay run, every change stays in memory, and nothing fires (no timer
    /// thread). For [`crate::inspect`].
    pub(crate) fn open_read_only(mut config: Config) -> Result<Self> {
        config.timer_thread = false;
        let storage = timewheel_wal::storage::readonly::ReadOnlyStorage::open_dir(&config.dir)?;
        Self::open_erased(
            ErasedStorage::new(storage),
            config,
            Arc::new(SystemClock),
            false,
        )
    }

    fn open_erased(
        storage: ErasedStorage,
        config: Config,
        clock: Arc<dyn Clock>,
        writes: bool,
    ) -> Result<Self> {
        let span = tracing::info_span!("timewheel_open", dir = %config.dir.display());
        let _entered = span.enter();
        config.validate()?;
        let open_started_ms = clock.now_ms();
        let new_state = || {
            let (ready_tx, ready_rx) = crossbeam_channel::unbounded();
            let mut state = State::new(
                clock.now_ms(),
                config.job_table_chunk_slots,
                config.lease_ms,
                ready_tx,
            );
            if config.fair_tenants {
                state.fair = Some(fair::Fair::new(
                    config.ready_channel_depth,
                    config.tenant_running_max,
                    config.tenant_running_limits.clone(),
                ));
            }
            (state, ready_rx)
        };
        // The clock read once: the horizon's edge is the same for every try of the replay.
        let resident_below =
            crate::store::bucket_of(clock.now_ms().saturating_add(config.horizon_ms)) + 1;
        let recovery::Opened {
            wal,
            manifest,
            state,
            ready_rx,
            replayed,
        } = recovery::open(
            storage,
            config.wal_options(),
            (resident_below, config.verify_buckets_at_open),
            &new_state,
            open_started_ms,
        )?;
        if !crate::store::ensure_ballast(wal.storage(), config.disk_ballast_bytes)? {
            tracing::warn!("no room for the ballast file a full disk would give up to compaction");
        }
        let shared = Arc::new(Shared {
            wal,
            state: Mutex::new(state),
            ids: Mutex::new(replayed.ids),
            wake: Condvar::new(),
            finished: Condvar::new(),
            settled: Condvar::new(),
            clock,
            config,
            ready_rx,
            stopping: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            timer_realtime: AtomicBool::new(false),
            state_waiting: AtomicUsize::new(0),
            state_waited_took: AtomicU64::new(0),
            timer_turns: AtomicU64::new(0),
            recovery: replayed.recovery,
            store: Mutex::new(compactor::StoreState::new(manifest, resident_below)),
            compactor_wake: Condvar::new(),
            no_space: Mutex::new(None),
            out_of_space: AtomicBool::new(false),
            orphans: Mutex::new(Vec::new()),
            has_orphans: AtomicBool::new(false),

            #[cfg(feature = "async")]
            wakers: asynch::Wakers::default(),
        });
        if writes {
            shared.opened()?;
        }
        // The log's background work waited for replay (the open's `Opened` record started it
        // already, if the engine writes).
        shared.wal.release_background();
        let weak = Arc::downgrade(&shared);
        shared.clock.on_advance(Arc::new(move || {
            let Some(s) = weak.upgrade() else {
                return false;
            };
            let _guard = s.lock_state();
            s.wake.notify_all();
            true
        }));
        let timer = if shared.config.timer_thread {
            let s = shared.clone();
            let handle = std::thread::Builder::new()
                .name("timewheel-timer".into())
                .spawn(move || timer::run(s))?;
            Some(handle)
        } else {
            None
        };
        // Like the timer thread: an engine whose caller drives its timers drives compaction
        // too (`Engine::compact`), so that a simulation's seed alone decides what happens.
        let compactor = if shared.config.timer_thread {
            let s = shared.clone();
            let handle = std::thread::Builder::new()
                .name("timewheel-compactor".into())
                .spawn(move || compactor::run(s))?;
            Some(handle)
        } else {
            None
        };
        Ok(Engine {
            shared,
            timer: Mutex::new(timer),
            compactor: Mutex::new(compactor),
        })
    }

    /// Schedules one job. Returns once it is durable (under the configured durability); it
    /// can fire only from then on.
    pub fn schedule(&self, spec: JobSpec) -> Result<JobId> {
        let ids = self.schedule_batch(std::iter::once(spec))?;
        Ok(ids[0])
    }

    /// Schedules many jobs with one log append and one durability wait. Either every job is
    /// accepted or, on bad input, none is and nothing is written.
    pub fn schedule_batch(&self, specs: impl IntoIterator<Item = JobSpec>) -> Result<Vec<JobId>> {
        let (ids, pending) = self.schedule_batch_nowait(specs)?;
        self.commit(pending)?;
        Ok(ids)
    }

    /// Like [`Engine::schedule_batch`], but returns as soon as the jobs are in the log, with
    /// the ids they will have. The jobs are neither durable nor visible (they do not fire, and
    /// `get` does not show them) until [`Engine::commit`] returns `Ok`; a caller must not
    /// report them accepted before that. Many pending batches share one sync: append them
    /// all, then commit them in order.
    pub fn schedule_batch_nowait(
        &self,
        specs: impl IntoIterator<Item = JobSpec>,
    ) -> Result<(Vec<JobId>, Pending)> {
        let sh = &*self.shared;
        sh.check_open()?;
        // One pass: each spec checked, then encoded (with id 0; the ids are written in under
        // the id lock) and dropped, all outside every lock. Nothing is written before every
        // spec passed, so bad input writes nothing.
        let mut specs = specs.into_iter();
        let max = sh.config.batch_jobs_max;
        let too_many = |jobs: usize| Error::invalid("batch", format!("{jobs} jobs; at most {max}"));
        if specs.size_hint().0 > max {
            return Err(too_many(specs.count()));
        }
        let now_ms = sh.clock.now_ms();
        let hint = specs.size_hint().0;
        let mut dues = Vec::with_capacity(hint);
        let mut body: Vec<u8> = Vec::new();
        let mut ends = Vec::with_capacity(hint);
        // Each key with its hash, computed here, outside every lock.
        let mut keys: Vec<Option<HashedKey>> = Vec::new();
        let mut recur_bytes = Vec::new();
        while let Some(spec) = specs.next() {
            if ends.len() == max {
                return Err(too_many(max + 1 + specs.count()));
            }
            let due_ms = sh.validate(&spec, now_ms)?;
            dues.push(due_ms);
            recur_bytes.clear();
            if let Some(r) = &spec.recurring {
                r.encode(&mut recur_bytes);
            }
            Event::Schedule(ScheduleRecord {
                id: JobId(0),
                due_ms,
                created_ms: now_ms,
                tenant: spec.tenant,
                shard: 0,
                flags: if spec.binary { FLAG_BINARY_PAYLOAD } else { 0 }
                    | if spec.backoff.is_some() {
                        crate::record::FLAG_BACKOFF
                    } else {
                        0
                    }
                    | if spec.key.is_some() {
                        crate::record::FLAG_KEY
                    } else {
                        0
                    }
                    | if spec.recurring.is_some() {
                        crate::record::FLAG_RECUR
                    } else {
                        0
                    },
                max_attempts: spec.max_attempts,
                backoff: spec.backoff.map(|b| (b.base_ms, b.cap_ms)),
                key: spec.key.as_deref(),
                recurring: spec.recurring.as_ref().map(|_| &recur_bytes[..]),
                payload: &spec.payload,
            })
            .encode(&mut body);
            ends.push(body.len());
            if ends.len() == 1 {
                // Room for the rest at the first one's size, so the buffer is not copied as it
                // grows.
                body.reserve(body.len() * hint.saturating_sub(1));
            }
            if spec.key.is_some() || !keys.is_empty() {
                keys.resize(ends.len() - 1, None);
                keys.push(
                    spec.key
                        .as_deref()
                        .map(|k| (table::key_hash(k), Arc::from(k))),
                );
            }
        }
        // Bad input is refused as such, full disk or not.
        sh.check_space(now_ms, ends.len())?;
        if ends.is_empty() {
            let lsn = sh.wal.last_lsn();
            return Ok((
                Vec::new(),
                Pending {
                    lsn,
                    named_existing: false,
                    body,
                    ends,
                    keys: Vec::new(),
                    unseen_end: None,
                    owner: None,
                },
            ));
        }
        keys.resize(if keys.is_empty() { 0 } else { ends.len() }, None);
        let mut reserve = Vec::with_capacity(8);
        let mut ledger = lock(&sh.ids);
        // Idempotency keys, under the id lock (which orders schedules): a key held by a job,
        // or by a schedule appended and not yet visible (earlier in this batch too), schedules
        // nothing and answers that job's id. A new job's id is known before it is allocated
        // (the id lock is held until the append), so one probe per key finds the holder or
        // notes the new job as the key's pending schedule.
        let mut named: Vec<Named> = Vec::new();
        let next_seq = ledger.last_id + 1;
        if !keys.is_empty() {
            let mut state = sh.lock_state();
            let mut fresh = 0u64;
            for (key, &due_ms) in keys.iter().zip(&dues) {
                let n = match key {
                    None => Named::New,
                    Some((h, k)) => {
                        let id = JobId::compose(next_seq + fresh, home_bucket(due_ms, now_ms));
                        match state.keys.take_or_holder(*h, k, id) {
                            None => Named::New,
                            Some(holder) => Named::Existing(holder),
                        }
                    }
                };
                fresh += u64::from(n == Named::New);
                named.push(n);
            }
            // The new jobs that took a key hold it unseen until their commit.
            state.keys.note_unseen(next_seq..next_seq + fresh);
            drop(state);
            if named.iter().any(|n| *n != Named::New) {
                let (b, e) = without(&body, &ends, &named);
                body = b;
                ends = e;
            }
        }
        let new_dues: Vec<u64> = if named.is_empty() {
            dues
        } else {
            dues.iter()
                .zip(&named)
                .filter(|(_, n)| **n == Named::New)
                .map(|(&d, _)| d)
                .collect()
        };
        let before = *ledger;
        // Every spec may have named an existing job: then no id is taken.
        let (first, reserve_up_to) = if ends.is_empty() {
            (0, None)
        } else {
            let alloc = ledger.allocate(ends.len() as u64, sh.config.id_block);
            (alloc.first, alloc.reserve_up_to)
        };
        assert!(
            ends.is_empty() || first == next_seq,
            "the ids the keys noted pending are the ids allocated"
        );
        let mut start = 0;
        for (i, (&end, &due_ms)) in ends.iter().zip(&new_dues).enumerate() {
            let id = JobId::compose(first + i as u64, home_bucket(due_ms, now_ms));
            body[start..start + 8].copy_from_slice(&id.0.to_le_bytes());
            start = end;
        }
        let new_ids: Vec<JobId> = schedule_records(&body, &ends)
            .map(|(_, b)| JobId(u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))))
            .collect();
        // The ids in the caller's order: new ones, and those of the jobs the keys named.
        let ids: Vec<JobId> = if named.is_empty() {
            new_ids.clone()
        } else {
            let mut fresh = new_ids.iter();
            let mut out: Vec<JobId> = Vec::with_capacity(named.len());
            for n in &named {
                let id = match *n {
                    Named::New => *fresh.next().expect("one new id per new spec"),
                    Named::Existing(id) => id,
                };
                out.push(id);
            }
            out
        };
        if let Some(up_to) = reserve_up_to {
            Event::ReserveIds { up_to }.encode(&mut reserve);
        }
        let reservation = reserve_up_to.map(|_| (crate::record::TYPE_RESERVE_IDS, &reserve[..]));
        let appended = if ends.is_empty() {
            Ok(sh.wal.last_lsn())
        } else {
            let records = reservation
                .into_iter()
                .chain(schedule_records(&body, &ends));
            sh.wal.append_batch_nowait(records)
        };
        let lsn = match appended {
            Ok(lsn) => {
                sh.space_ok();
                lsn
            }
            Err(e) => {
                // Nothing was written: the ids and keys are not taken. Only this batch's new
                // jobs let go of their keys: a spec that named a job already appended (another
                // batch's, pending until its commit) leaves that job its key.
                *ledger = before;
                if !keys.is_empty() {
                    let mut state = sh.lock_state();
                    for ((id, key), n) in ids.iter().zip(&keys).zip(&named) {
                        if let Some((h, k)) = key
                            && *n == Named::New
                        {
                            state.keys.release(*h, k, *id);
                        }
                    }
                    let end = next_seq + new_ids.len() as u64;
                    state.keys.seen_up_to(end, end);
                }
                let e = Error::from(e);
                sh.space_refused(&e, now_ms);
                return Err(e);
            }
        };
        drop(ledger);
        if new_ids.len() < ids.len() {
            let mut state = sh.lock_state();
            state.counters.deduplicated += (ids.len() - new_ids.len()) as u64;
        }
        let named_existing = new_ids.len() < ids.len();
        // Each new job's key and its hash, moved: the table holds its own count of the same
        // allocation. `named` has one entry per spec whenever some spec names a key.
        let (keys, unseen_end): (Vec<Option<HashedKey>>, _) = if keys.is_empty() {
            (Vec::new(), None)
        } else {
            let keys = keys
                .into_iter()
                .zip(&named)
                .filter(|(_, n)| **n == Named::New)
                .map(|(k, _)| k)
                .collect();
            (keys, Some(next_seq + new_ids.len() as u64))
        };
        Ok((
            ids,
            Pending {
                lsn,
                named_existing,
                body,
                ends,
                keys,
                unseen_end,
                owner: Some(Arc::downgrade(&self.shared)),
            },
        ))
    }

    /// Waits until a pending batch is durable (as the durability mode says an acknowledgement
    /// must), then makes its jobs visible: from now on they fire, `get` shows them, and they
    /// can be cancelled. On `Err` nothing was made visible; whether the jobs survive is
    /// unknown until the next open.
    pub fn commit(&self, mut pending: Pending) -> Result<()> {
        let sh = &*self.shared;
        // This call decides: visible once durable, or never (a failed sync).
        pending.owner = None;
        if !pending.must_wait() {
            return Ok(());
        }
        sh.wait_acknowledged(pending.lsn)?;
        if pending.ends.is_empty() {
            return Ok(());
        }
        sh.make_visible(pending);
        sh.adopt_orphans();
        Ok(())
    }
}

impl Shared {
    /// The second half of [`Engine::commit`], once the batch is acknowledged: applies its
    /// schedules.
    fn make_visible(&self, mut pending: Pending) {
        let sh = self;
        // In bounded chunks, so the timer thread and other callers get the lock in between.
        const CHUNK: usize = 1024;
        // The schedules are the batch's last records (after a reservation of ids, if any), in
        // order: the `i`-th has LSN `first_lsn + i`.
        let n = pending.ends.len();
        let first_lsn = pending.lsn + 1 - n as u64;
        let mut records = schedule_records(&pending.body, &pending.ends);
        let mut done = 0;
        while done < n {
            let mut state = sh.lock_state();
            let now_ms = sh.clock.now_ms();
            state.observe_time(now_ms);
            let mut earliest = u64::MAX;
            let take = CHUNK.min(n - done);
            for (i, (_, bytes)) in (done..done + take).zip(records.by_ref()) {
                let event = Event::decode(TYPE_SCHEDULE, bytes).expect("encoded above");
                let key = pending
                    .keys
                    .get_mut(i)
                    .and_then(Option::take)
                    .map(|(hash, key)| state::TakenKey { hash, key });
                // At its own record's LSN, not the batch's last: a pass that folded the
                // segment holding it (while the batch's tail went on into the next) lets it go
                // from memory. With the batch's last LSN, the part of a batch that straddles a
                // segment's end stayed in memory for good (a pass offers a far job for
                // eviction once, when it first writes it to its bucket): 12 % of the jobs
                // scheduled in batches of 100,000.
                //
                // Not applied when memory holds the job already: durable, folded into a bucket
                // beyond the horizon and read back from it (by a load or a call naming it)
                // before this commit got here.
                if !state.apply_visible(&event, key, first_lsn + i as u64) {
                    continue;
                }
                if let Event::Schedule(s) = &event {
                    earliest = earliest.min(s.due_ms);
                    // A pass folded this record into a bucket beyond the horizon before the
                    // commit got here, found the job nowhere in memory and took it for
                    // finished (a new id is in `far_gone` for no other reason): it has a far
                    // copy, and the next pass that catches up lets memory go of it. Left as a
                    // plain job, it stayed in memory until the horizon reached its bucket.
                    if state.far_gone.remove(&s.id) {
                        state.held_with_far_copy(s.id);
                    }
                }
            }
            done += take;
            if let Some(end) = pending.unseen_end {
                state.keys.seen_up_to(end, end - n as u64 + done as u64);
            }
            // The clock read again after a long hold: the timer thread may have come due
            // meanwhile, and waits for the lock if so.
            let now_ms = if take > 64 { sh.clock.now_ms() } else { now_ms };
            sh.step_aside_at(state, earliest, now_ms);
        }
    }

    /// Takes back a batch whose [`Pending`] was dropped uncommitted: visible now if it is
    /// durable already, else kept until a later commit or async wait finds it durable. After
    /// a failed sync nothing is made visible.
    fn adopt(&self, pending: Pending) {
        if pending.ends.is_empty() || self.wal.is_poisoned() {
            return;
        }
        if self.acknowledged_through(pending.lsn) {
            self.make_visible(pending);
            return;
        }
        lock(&self.orphans).push(pending);
        self.has_orphans.store(true, Ordering::Release);
    }

    /// Makes visible the dropped batches ([`Shared::adopt`]) that are durable by now. Called
    /// after each commit and each wake of the async API's durability thread.
    pub(crate) fn adopt_orphans(&self) {
        if !self.has_orphans.load(Ordering::Acquire) {
            return;
        }
        let durable: Vec<Pending> = {
            let mut orphans = lock(&self.orphans);
            if self.wal.is_poisoned() {
                orphans.clear();
            }
            let (durable, waiting) = std::mem::take(&mut *orphans)
                .into_iter()
                .partition(|p| self.acknowledged_through(p.lsn));
            *orphans = waiting;
            self.has_orphans
                .store(!orphans.is_empty(), Ordering::Release);
            durable
        };
        for pending in durable {
            self.make_visible(pending);
        }
    }

    /// Whether `lsn` is acknowledged as the durability mode says (durable, under `Sync`).
    fn acknowledged_through(&self, lsn: Lsn) -> bool {
        self.config.durability != Durability::Sync || self.wal.durable_lsn() >= lsn
    }
}

impl Engine {
    /// Cancels a job that has not started. A job already in the ready queue is cancelled too:
    /// its `claim` returns `None`. Durable when it returns `Outcome::Done`.
    pub fn cancel(&self, id: JobId) -> Result<Outcome> {
        Ok(self.cancel_batch(&[id])?[0])
    }

    /// Cancels many jobs with one log append and one durability wait; for each id, what
    /// [`Engine::cancel`] would return (an id named twice is `NotFound` the second time).
    pub fn cancel_batch(&self, ids: &[JobId]) -> Result<Vec<Outcome>> {
        let items: Vec<(JobId, ())> = ids.iter().map(|&id| (id, ())).collect();
        self.shared
            .change_batch(&items, |id, ()| Event::Cancel { id })
    }

    /// Moves a job that has not started to a new due time. Durable when it returns
    /// `Outcome::Done`.
    pub fn reschedule(&self, id: JobId, due_ms: u64) -> Result<Outcome> {
        Ok(self.reschedule_batch(&[(id, due_ms)])?[0])
    }

    /// Moves many jobs with one log append and one durability wait; for each, what
    /// [`Engine::reschedule`] would return. Every due time is checked first: one out of range
    /// refuses the whole batch and writes nothing.
    pub fn reschedule_batch(&self, moves: &[(JobId, u64)]) -> Result<Vec<Outcome>> {
        let sh = &*self.shared;
        sh.check_open()?;
        let now_ms = sh.clock.now_ms();
        for &(_, due_ms) in moves {
            sh.validate_due(due_ms, now_ms)?;
        }
        let out = sh.change_batch(moves, |id, due_ms| Event::Reschedule { id, due_ms })?;
        if let Some(earliest) = moves
            .iter()
            .zip(&out)
            .filter(|(_, o)| o.is_done())
            .map(|((_, due), _)| *due)
            .min()
        {
            let state = sh.lock_state();
            if earliest < state.sleeping_until_ms {
                sh.wake.notify_all();
            }
        }
        Ok(out)
    }

    /// A snapshot of a live job, with its payload; `None` for unknown or finished jobs, and
    /// for jobs whose schedule is not yet durable.
    pub fn get(&self, id: JobId) -> Option<JobInfo> {
        // A job kept on disk beyond the horizon is read back (and stays in memory); a read
        // error shows as `None` here, and as the error itself to a `cancel` or `reschedule`.
        if let Err(e) = self.shared.fault_in_ids(std::iter::once(id)) {
            tracing::warn!(%id, error = %e, "reading a job kept on disk failed");
        }
        self.shared.lock_state().info(id)
    }

    /// One page of the live jobs a query admits (a state, a due range), in `(due_ms, id)`
    /// order, with the query for the next page. See [`JobQuery`](crate::JobQuery) for an
    /// example.
    ///
    /// It lists the jobs in memory: every job within the resident horizon, and the far ones a
    /// call read back. Scheduled jobs kept on disk only, beyond the horizon, are not listed
    /// (`StoreStats::non_resident` counts them). A page is one pass over the job table (about 9
    /// ms per million jobs, see docs/benchmarks.md), which takes the state lock for a
    /// 64th of the table at a time, so the timer and the other calls go on meanwhile;
    /// page sparingly on a big engine all the same. The pass is not one snapshot: a job
    /// that stays as it is through the pass is listed where it belongs; one that changes
    /// during it (fires, finishes, is rescheduled) is listed as it is when its part of the
    /// table is read, or left out of this page.
    pub fn jobs(&self, query: &crate::JobQuery) -> Result<crate::JobPage> {
        let sh = &*self.shared;
        sh.check_page(query.limit)?;
        if query.due_from_ms > query.due_to_ms {
            return Err(Error::invalid("due", "due_from_ms after due_to_ms"));
        }
        // The table's shards a few at a time, the state lock let go in between: a pass over
        // ten million jobs takes tens of milliseconds, which the timer and the other calls
        // would otherwise wait out.
        let mut best = std::collections::BinaryHeap::with_capacity(query.limit + 1);
        for first in (0..table::SHARDS).step_by(PAGE_SHARDS_PER_HOLD) {
            let shards = first..(first + PAGE_SHARDS_PER_HOLD).min(table::SHARDS);
            let state = sh.lock_state();
            state.page_scan(query, shards, &mut best);
            sh.step_aside(state, u64::MAX);
        }
        let (jobs, more) = sh.lock_state().page_finish(query, best);
        let next = more.then(|| crate::JobQuery {
            after: jobs.last().map(|j| (j.due_ms, j.id)),
            ..query.clone()
        });
        Ok(crate::JobPage { jobs, next })
    }

    /// Each tenant's queued, in-channel and running jobs and its running limit, with
    /// `Config::fair_tenants` on (empty otherwise).
    pub fn tenant_stats(&self) -> Vec<TenantStats> {
        self.shared
            .lock_state()
            .fair
            .as_ref()
            .map_or_else(Vec::new, fair::Fair::stats)
    }

    /// Counts, queue depth, fire lateness and claim wait.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Records, bytes, syncs (with their durations) and rolls of the journal since open.
    pub fn log_stats(&self) -> crate::stats::LogStats {
        crate::stats::LogStats::from_wal(&self.shared.wal.stats())
    }

    /// Publishes [`stats`](Self::stats), [`store_stats`](Self::store_stats) and
    /// [`log_stats`](Self::log_stats) through the
    /// `metrics` facade now (the engine also does every
    /// [`Config::metrics_interval_ms`](crate::Config#structfield.metrics_interval_ms)); see
    /// [`crate::metrics`] for the names.
    pub fn publish_metrics(&self) {
        self.shared.publish_metrics();
    }

    /// Runs one compaction pass now, in the caller's thread: folds the sealed journal
    /// segments (at most `Config::compact_segments_max`) that the hour-bucket files do not
    /// cover yet into them, replaces the manifest, then deletes the folded segments and the
    /// runs it merged. First it seals the segment appended to if that has held records for
    /// `Config::seal_after_ms` (counted from the first pass that saw it hold one). Does nothing
    /// (an all-zero report) when no sealed segment is left to fold. The background compactor
    /// does the same every `Config::compact_interval_ms`.
    ///
    /// ```
    /// # fn main() -> timewheel::Result<()> {
    /// # let dir = std::env::temp_dir().join(format!("timewheel-doc-compact-{}", std::process::id()));
    /// use timewheel::{Config, Engine, JobSpec};
    /// // Small segments, so that a few thousand jobs fill several.
    /// let engine = Engine::open(Config::new(&dir).segment_bytes(1 << 20))?;
    /// let ids = engine.schedule_batch((0..20_000).map(|i| JobSpec::at(i).payload("x")))?;
    /// engine.cancel_batch(&ids)?;
    /// let before = engine.store_stats();
    /// while engine.compact()?.records > 0 {}
    /// let after = engine.store_stats();
    /// assert!(after.journal_segments < before.journal_segments);
    /// // The jobs whose cancels are in the segment still appended to wait in their bucket
    /// // files until it is sealed (full, or `Config::seal_after_ms`, 10 minutes, after a
    /// // pass first saw it hold records) and folded; all the others are gone from the disk.
    /// assert!(after.bucket_jobs < 20_000);
    /// # drop(engine);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(())
    /// # }
    /// ```
    pub fn compact(&self) -> Result<crate::stats::CompactionReport> {
        self.shared.check_open()?;
        let report = self.shared.compact_once()?.unwrap_or_default();
        self.shared.load_horizon()?;
        Ok(report)
    }

    /// What the data directory holds (journal segments, hour buckets, their bytes) and what
    /// compaction did since open.
    pub fn store_stats(&self) -> crate::stats::StoreStats {
        self.shared.store_stats()
    }

    /// What recovery found when this engine opened.
    pub fn recovery(&self) -> &RecoveryStats {
        &self.shared.recovery
    }

    /// Makes everything appended so far durable, whatever the durability mode.
    pub fn sync(&self) -> Result<()> {
        self.shared.wal.sync()?;
        Ok(())
    }

    /// Fires what is due now and expires leases, in the caller's thread. For engines opened
    /// with `Config::timer_thread` off (the simulation); harmless otherwise. Returns how many
    /// ids were queued.
    #[cfg(feature = "testing")]
    pub fn run_timers(&self) -> usize {
        let sh = &*self.shared;
        // What the compactor thread does every second: buckets the horizon reached come in.
        if let Err(e) = sh.load_horizon() {
            tracing::warn!(error = %e, "loading a bucket that the horizon reached failed");
        }
        let mut state = sh.lock_state();
        let mut total = 0;
        loop {
            let run = sh.run_timers_locked(&mut state);
            total += run.queued();
            if !run.hit_bound(sh.config.fires_per_advance_max) {
                return total;
            }
        }
    }

    /// Jobs that the job tables of every engine in this process moved to lower slots to give
    /// memory back once their number fell: the simulation checks that its seeds reach it.
    #[cfg(feature = "testing")]
    pub fn job_table_moves() -> u64 {
        job_table::MOVES.load(Ordering::Relaxed)
    }

    /// The next time something is due (a job, a claim deadline or a lease).
    #[cfg(feature = "testing")]
    pub fn next_deadline(&self) -> Option<u64> {
        self.shared.lock_state().next_deadline()
    }

    /// Graceful shutdown: stops firing, ends the ready stream (a `for id in engine.ready()`
    /// loop ends once the ids already queued are taken, and [`Engine::next`] returns `None`),
    /// lets workers finish what they hold for up to `timeout` (their `claim`, `complete` and
    /// `fail` keep working), then shuts down (see [`Engine::shutdown`]). Jobs still running or ready are durable: they are
    /// delivered again after the next open.
    pub fn drain(&self, timeout: Duration) -> Result<DrainReport> {
        let sh = &*self.shared;
        sh.check_open()?;
        let deadline = Instant::now() + timeout;
        let mut state = sh.lock_state();
        state.draining = true;
        state.ready_tx = None;
        #[cfg(feature = "async")]
        sh.wakers.wake_ready();
        sh.wake.notify_all();
        loop {
            let running = state.in_state[state_index(JobState::Running)];
            let now = Instant::now();
            if (running == 0 && sh.ready_rx.is_empty()) || now >= deadline {
                let report = DrainReport {
                    running,
                    ready: state.in_state[state_index(JobState::Ready)],
                };
                drop(state);
                self.shutdown()?;
                return Ok(report);
            }
            // Woken by each finish; the short bound also catches ids taken off the queue.
            let wait = (deadline - now).min(Duration::from_millis(5));
            state = sh
                .finished
                .wait_timeout(state, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Stops the timer thread and makes everything durable; later calls fail with `Closed`.
    /// Idempotent. For an engine shared in an `Arc`; the directory stays locked until the
    /// engine is dropped. To let workers finish first, use [`Engine::drain`].
    pub fn shutdown(&self) -> Result<()> {
        let sh = &*self.shared;
        let first = !sh.closed.swap(true, Ordering::AcqRel);
        self.stop_timer();
        self.stop_compactor();
        #[cfg(feature = "async")]
        sh.wakers.stop();
        if sh.wal.is_poisoned() {
            return Err(Error::Poisoned);
        }
        if first {
            // The run's last record: the next open finds that it closed cleanly (the sync
            // below makes it durable with every claim before it). A call still in flight may
            // append after it; the next open then counts this run as crashed, which only
            // skips attempt numbers.
            let crashes = sh.lock_state().crashes;
            match sh.append_marker(&Event::Closed { crashes }) {
                // A full disk: the next open counts this run as crashed, which only skips
                // attempt numbers of the jobs that waited through it.
                Err(Error::NoSpace { .. }) => {
                    tracing::warn!("no room for the close's record: the next open counts a crash");
                }
                other => {
                    other?;
                }
            }
        }
        // Syncs, and closes the log: whatever it writes on close is covered by this result.
        sh.wal.shutdown()?;
        Ok(())
    }

    /// [`Engine::shutdown`], then releases the directory lock. Dropping the engine does the
    /// same, ignoring errors.
    pub fn close(self) -> Result<()> {
        self.shutdown()
    }

    /// Stops the engine the way a crash would: the timer thread stops and the lock is
    /// released, but nothing is synced. Acknowledged jobs are durable already.
    #[cfg(feature = "testing")]
    pub fn abandon(self) {
        self.abandon_inner();
    }

    /// Ends an engine opened by [`Engine::open_read_only`]: a close would write a close marker
    /// (into memory only, but for nothing).
    pub(crate) fn abandon_read_only(self) {
        self.abandon_inner();
    }

    fn abandon_inner(self) {
        self.shared.closed.store(true, Ordering::Release);
        self.stop_timer();
        self.stop_compactor();
        #[cfg(feature = "async")]
        self.shared.wakers.stop();
        self.shared.wal.abandon();
    }

    /// The earliest and the latest due time of the live jobs.
    pub(crate) fn due_range(&self) -> Option<(u64, u64)> {
        let state = self.shared.lock_state();
        state.jobs.values().fold(None, |range, job| {
            let (lo, hi) = range.unwrap_or((job.due_ms, job.due_ms));
            Some((lo.min(job.due_ms), hi.max(job.due_ms)))
        })
    }

    fn stop_compactor(&self) {
        let sh = &*self.shared;
        lock(&sh.store).stop = true;
        sh.compactor_wake.notify_all();
        let handle = lock(&self.compactor).take();
        if let Some(h) = handle
            && let Err(panic) = h.join()
        {
            std::panic::resume_unwind(panic);
        }
    }

    fn stop_timer(&self) {
        let sh = &*self.shared;
        {
            let _state = sh.lock_state();
            sh.stopping.store(true, Ordering::Release);
            sh.wake.notify_all();
        }
        let handle = self.timer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle {
            // A timer thread that panicked broke an invariant; surface it.
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if !self.shared.stopping.load(Ordering::Acquire)
            && let Err(e) = self.shutdown()
        {
            tracing::warn!(error = %e, "closing the engine on drop failed");
        }
    }
}

/// The `(type, body)` pairs of schedule records laid end to end in `body`.
fn schedule_records<'a>(body: &'a [u8], ends: &'a [usize]) -> impl Iterator<Item = (u8, &'a [u8])> {
    ends.iter().scan(0, move |start, &end| {
        let r = (TYPE_SCHEDULE, &body[*start..end]);
        *start = end;
        Some(r)
    })
}

/// What an idempotency key made of one spec of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Named {
    /// A new job.
    New,
    /// The key is held by this job (visible, or appended earlier, in this batch or another
    /// one): nothing is scheduled.
    Existing(JobId),
}

/// The schedule records of `body` that are new jobs, end to end.
fn without(body: &[u8], ends: &[usize], named: &[Named]) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::with_capacity(body.len());
    let mut out_ends = Vec::with_capacity(ends.len());
    for ((_, bytes), n) in schedule_records(body, ends).zip(named) {
        if *n == Named::New {
            out.extend_from_slice(bytes);
            out_ends.push(out.len());
        }
    }
    (out, out_ends)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic under an engine lock broke an invariant; the state can not be trusted.
    m.lock().expect("an engine lock poisoned by a panic")
}

impl Shared {
    /// What `Engine::stats` returns.
    pub(crate) fn stats(&self) -> Stats {
        let sh = self;
        let state = sh.lock_state();
        let now_ms = state.now_ms.max(sh.clock.now_ms());
        let view = StateView {
            scheduled: state.in_state[state_index(JobState::Scheduled)] + state.non_resident,
            ready: state.in_state[state_index(JobState::Ready)],
            running: state.in_state[state_index(JobState::Running)],
            completed: state.counters.completed,
            cancelled: state.counters.cancelled,
            failed: state.counters.failed,
            dead: state.dead.len() as u64,
            retried: state.counters.retried,
            deduplicated: state.counters.deduplicated,
            fired: state.counters.fired,
            claimed: state.counters.claimed,
            redelivered: state.counters.redelivered,
            requeued: state.counters.requeued,
            crashed_runs: u64::from(state.crashes),
            scheduled_overdue: u64::from(state.due.next_due().is_some_and(|d| d < now_ms)),
            lateness_us: &state.lateness_us,
            claim_wait_us: &state.claim_wait_us,
        };
        let mut stats = Stats::collect(&view, sh.ready_rx.len(), &sh.recovery);
        stats.timer_realtime = sh.timer_realtime.load(Ordering::Relaxed);
        stats
    }

    /// Publishes `stats` and `store_stats` through the `metrics` facade.
    pub(crate) fn publish_metrics(&self) {
        let log = crate::stats::LogStats::from_wal(&self.wal.stats());
        crate::metrics::publish(&self.stats(), &self.store_stats(), &log);
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        match self.state.try_lock() {
            Ok(state) => state,
            Err(std::sync::TryLockError::Poisoned(_)) => {
                panic!("an engine lock poisoned by a panic")
            }
            Err(std::sync::TryLockError::WouldBlock) => {
                self.state_waiting.fetch_add(1, Ordering::SeqCst);
                let state = lock(&self.state);
                self.state_waiting.fetch_sub(1, Ordering::SeqCst);
                self.state_waited_took.fetch_add(1, Ordering::SeqCst);
                state
            }
        }
    }

    /// Ends a chunk of a long piece of work (a batch's apply, a listing's pass, a bucket's
    /// load): wakes the timer thread if it sleeps past `earliest_due_ms`, the earliest due time
    /// the chunk armed (`u64::MAX`: none), lets go of the state lock, and lets a waiter take it
    /// first: the timer thread when its deadline has passed (or it was just woken), else one of
    /// the callers of `lock_state` waiting for it.
    ///
    /// Why: `std`'s mutex is not fair. A thread that lets go of it and takes it again at once
    /// takes it before a waiter woken by the release has even run, so chunks taken back to
    /// back held off the others as one long hold would: a call waited 190-270 ms beside a
    /// listing of three million jobs (`table_growth_probe`, docs/benchmarks.md), and the
    /// timer thread waits the same way. Stepping aside costs nothing when nobody waits; when
    /// someone does, a few µs of yields until one of them had the lock (at most
    /// [`STEP_ASIDE_MAX`]). It waits for one waiter, not all of them: with many callers at
    /// the lock there is always another, and waiting them all out held the work up (and, on
    /// two CPUs, the timer with it).
    fn step_aside(&self, state: MutexGuard<'_, State>, earliest_due_ms: u64) {
        let now_ms = self.clock.now_ms();
        self.step_aside_at(state, earliest_due_ms, now_ms);
    }

    /// [`Shared::step_aside`] with the clock as read since the lock was taken.
    fn step_aside_at(&self, state: MutexGuard<'_, State>, earliest_due_ms: u64, now_ms: u64) {
        let notified_timer = earliest_due_ms < state.sleeping_until_ms;
        if notified_timer {
            self.wake.notify_all();
        }
        let timer_waits = self.config.timer_thread
            && !self.stopping.load(Ordering::Relaxed)
            && (notified_timer || state.sleeping_until_ms <= now_ms);
        let (turns, took) = (
            self.timer_turns.load(Ordering::SeqCst),
            self.state_waited_took.load(Ordering::SeqCst),
        );
        drop(state);
        if !timer_waits && self.state_waiting.load(Ordering::SeqCst) == 0 {
            return;
        }
        let start = Instant::now();
        while start.elapsed() < STEP_ASIDE_MAX {
            let had_it = if timer_waits {
                self.timer_turns.load(Ordering::SeqCst) != turns
            } else {
                self.state_waited_took.load(Ordering::SeqCst) != took
            };
            if had_it {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// A page size within `Config::page_jobs_max`.
    pub(crate) fn check_page(&self, limit: usize) -> Result<()> {
        if limit == 0 || limit > self.config.page_jobs_max {
            return Err(Error::invalid(
                "limit",
                format!(
                    "{limit} jobs a page; 1 to Config::page_jobs_max ({})",
                    self.config.page_jobs_max
                ),
            ));
        }
        Ok(())
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if self.wal.is_poisoned() {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    /// Refuses a schedule at once while the back-off after a failed allocation lasts; and,
    /// when the next segment is not made and the current one is down to the reserve kept for
    /// finishing jobs, makes the next one first (refusing the schedule if it can not).
    fn check_space(&self, now_ms: u64, jobs: usize) -> Result<()> {
        self.refused_for_now(now_ms)?;
        let reserve = self
            .config
            .no_space_reserve_bytes
            .min(self.config.segment_bytes / 4);
        if reserve == 0 {
            return Ok(());
        }
        // A rough size of the batch: its records are rarely smaller than this.
        let needed = reserve.saturating_add(jobs as u64 * 64);
        // Plenty of room by the log's hint: no need to take its append lock to ask.
        if self.wal.room_hint() >= needed {
            return Ok(());
        }
        let (left, next_ready) = self.wal.room();
        if next_ready || left >= needed {
            return Ok(());
        }
        match self.wal.prepare_next_now() {
            Ok(()) => {
                self.space_ok();
                Ok(())
            }
            Err(e) => {
                let e = Error::from(e);
                self.space_refused(&e, now_ms);
                if let Error::NoSpace { segment, .. } = &e {
                    tracing::warn!(
                        segment,
                        "the log is down to its reserve for finishing jobs; \
                                   schedules are refused until space is freed"
                    );
                }
                Err(e)
            }
        }
    }

    /// Whether schedules are refused for now, a failed allocation's back-off running.
    #[cfg(feature = "async")]
    pub(crate) fn refusing_schedules(&self) -> bool {
        self.out_of_space.load(Ordering::Acquire)
            && self.refused_for_now(self.clock.now_ms()).is_err()
    }

    /// `NoSpace` while the back-off after a failed allocation lasts.
    fn refused_for_now(&self, now_ms: u64) -> Result<()> {
        if !self.out_of_space.load(Ordering::Acquire) {
            return Ok(());
        }
        match *lock(&self.no_space) {
            Some((segment, until_ms, _)) if now_ms < until_ms => Err(Error::NoSpace {
                segment,
                source: std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    format!(
                        "the log could not grow at the last attempt; schedules are refused \
                         for {} ms more before it is tried again (cancel, claim, complete and \
                         fail still try; compaction frees space)",
                        until_ms - now_ms
                    ),
                ),
            }),
            _ => Ok(()),
        }
    }

    /// After an error: if the log could not grow (`NoSpace`), schedules are refused for the
    /// next back-off (`Config::no_space_retry_ms`, doubling with each failure); any other
    /// error changes nothing.
    fn space_refused(&self, e: &Error, now_ms: u64) {
        let Error::NoSpace { segment, .. } = *e else {
            return;
        };
        let base = self.config.no_space_retry_ms;
        if base == 0 {
            return;
        }
        let mut no_space = lock(&self.no_space);
        let wait = no_space.map_or(base, |(_, _, next)| next);
        *no_space = Some((
            segment,
            now_ms.saturating_add(wait),
            (wait * 2).min(base * 100),
        ));
        self.out_of_space.store(true, Ordering::Release);
    }

    fn space_ok(&self) {
        if !self.out_of_space.load(Ordering::Acquire) {
            return;
        }
        let mut no_space = lock(&self.no_space);
        *no_space = None;
        self.out_of_space.store(false, Ordering::Release);
    }

    /// Waits as long as the durability mode says an acknowledgement must.
    fn wait_acknowledged(&self, lsn: Lsn) -> Result<()> {
        match self.config.durability {
            Durability::Sync => Ok(self.wal.wait_durable(lsn)?),
            _ => Ok(()),
        }
    }

    /// Checks a spec against the limits; returns its due time.
    fn validate(&self, spec: &JobSpec, now_ms: u64) -> Result<u64> {
        if let Some(key) = &spec.key
            && (key.is_empty() || key.len() > self.config.key_bytes_max)
        {
            return Err(Error::invalid(
                "key",
                format!(
                    "{} bytes; 1 to Config::key_bytes_max ({})",
                    key.len(),
                    self.config.key_bytes_max
                ),
            ));
        }
        if spec.max_attempts > self.config.max_attempts_max {
            return Err(Error::invalid(
                "max_attempts",
                format!(
                    "{}; at most Config::max_attempts_max ({})",
                    spec.max_attempts, self.config.max_attempts_max
                ),
            ));
        }
        if let Some(b) = spec.backoff
            && (b.base_ms > b.cap_ms || b.cap_ms == 0)
        {
            return Err(Error::invalid(
                "backoff",
                "base_ms must be at most cap_ms, and cap_ms positive",
            ));
        }
        if spec.payload.len() > self.config.payload_bytes_max {
            return Err(Error::invalid(
                "payload",
                format!(
                    "{} bytes; at most {}",
                    spec.payload.len(),
                    self.config.payload_bytes_max
                ),
            ));
        }
        if let Some(r) = &spec.recurring {
            return r
                .recurrence
                .next_after(now_ms)
                .ok_or_else(|| Error::invalid("recurrence", "it has no occurrence after now"));
        }
        let due_ms = match spec.due {
            Due::At(ms) => ms,
            Due::After(d) => {
                let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                if ms > self.config.due_ahead_ms_max {
                    return Err(Error::invalid("delay", "beyond Config::due_ahead_ms_max"));
                }
                now_ms.saturating_add(ms)
            }
        };
        self.validate_due(due_ms, now_ms)?;
        Ok(due_ms)
    }

    fn validate_due(&self, due_ms: u64, now_ms: u64) -> Result<()> {
        if due_ms > now_ms.saturating_add(self.config.due_ahead_ms_max) {
            return Err(Error::invalid(
                "due_ms",
                format!(
                    "{due_ms} is more than Config::due_ahead_ms_max ({} ms) ahead",
                    self.config.due_ahead_ms_max
                ),
            ));
        }
        Ok(())
    }

    /// Fires due jobs and expires leases, a bounded amount of each.
    fn run_timers_locked(&self, state: &mut State) -> state::TimerRun {
        state.observe_time(self.clock.now_ms());
        let run = state.run_timers(self.clock.now_us(), self.config.fires_per_advance_max);
        if run.expired > 0 && state.draining {
            self.finished.notify_all();
        }
        #[cfg(feature = "async")]
        if run.queued() > 0 {
            self.wakers.wake_ready();
        }
        run
    }

    /// Cancel or reschedule many jobs: check, append, apply under the state lock, then wait.
    fn change_batch<T: Copy>(
        &self,
        items: &[(JobId, T)],
        event: impl Fn(JobId, T) -> Event<'static>,
    ) -> Result<Vec<Outcome>> {
        let (out, lsn) = self.change_batch_nowait(items, event)?;
        if let Some(lsn) = lsn {
            self.wait_acknowledged(lsn)?;
        }
        Ok(out)
    }

    /// Changes like `change_batch`, without waiting: also returns the LSN to acknowledge.
    fn change_batch_nowait<T: Copy>(
        &self,
        items: &[(JobId, T)],
        event: impl Fn(JobId, T) -> Event<'static>,
    ) -> Result<(Vec<Outcome>, Option<Lsn>)> {
        self.check_open()?;
        self.fault_in_ids(items.iter().map(|&(id, _)| id))?;
        let mut seen = table::CallIdSet::with_capacity_and_hasher(items.len(), Default::default());
        let mut out = Vec::with_capacity(items.len());
        let mut last_lsn = None;
        for chunk in items.chunks(worker::LOCK_HOLD_ITEMS_MAX) {
            let mut plan = worker::Plan::default();
            let mut marked = Vec::with_capacity(chunk.len());
            let state = self.settle(self.lock_state(), chunk.iter().map(|&(id, _)| id));
            for &(id, value) in chunk {
                let outcome = match state.can_change(id) {
                    _ if !seen.insert(id) => Outcome::NotFound,
                    Some(job) => {
                        if job.lease_open {
                            plan.push(&Event::Expire {
                                id,
                                attempt: job.attempt,
                            });
                        }
                        plan.push(&event(id, value));
                        marked.push(id);
                        Outcome::Done
                    }
                    None if state.jobs.contains_key(&id) => Outcome::Running,
                    None => Outcome::NotFound,
                };
                out.push(outcome);
            }
            if !plan.is_empty() {
                let (appended, mut state) = self.append_apply(state, &plan, &marked);
                last_lsn = Some(appended?);
                // A ready job cancelled or moved no longer counts against its tenant's limit.
                state.refill();
                // Cancels and moves may have started a sweep of the due wheel, whose steps
                // run in the timer thread's idle polls: wake it if it sleeps past the first.
                if state
                    .due
                    .look_ahead_due()
                    .is_some_and(|at| at < state.sleeping_until_ms)
                {
                    self.wake.notify_all();
                }
            }
        }
        Ok((out, last_lsn))
    }

    /// Waits until none of `ids` is busy, releasing the lock meanwhile.
    fn settle<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        ids: impl Iterator<Item = JobId> + Clone,
    ) -> MutexGuard<'a, State> {
        while state.any_busy(ids.clone()) {
            state = self
                .settled
                .wait(state)
                .expect("an engine lock poisoned by a panic");
        }
        state
    }

    /// Appends the planned records with the state lock released (so the timer thread never
    /// waits for the disk behind it), then applies exactly what was appended (decoded back, as
    /// replay will read it) under the lock again. The jobs the plan changes are marked busy
    /// meanwhile, so no other call plans a change of them. Nothing is applied when the append
    /// fails.
    /// Appends the `Opened` record of this run and makes it durable, before any claim: from
    /// it the log tells whether this run closed cleanly (see [`crate::record`]).
    fn opened(&self) -> Result<()> {
        let crashes = {
            let state = self.lock_state();
            state.crashes + u32::from(!state.clean)
        };
        let opened = Event::Opened { crashes };
        let lsn = match self.append_marker(&opened) {
            // A full disk: the ballast file is there to be given up for what must be written.
            Err(Error::NoSpace { .. }) if crate::store::release_ballast(self.wal.storage())? => {
                lock(&self.store).totals.ballast_released += 1;
                tracing::warn!("the disk is full: gave up the ballast for the open's record");
                self.append_marker(&opened)?
            }
            appended => appended?,
        };
        self.wait_acknowledged(lsn)?;
        if crashes > 0 {
            tracing::info!(
                crashes,
                "runs of this engine that ended without a clean close"
            );
        }
        Ok(())
    }

    /// Appends a record about no job (`Opened`, `Closed`) and applies it.
    fn append_marker(&self, event: &Event<'_>) -> Result<Lsn> {
        let mut plan = worker::Plan::default();
        plan.push(event);
        let (appended, _state) = self.append_apply(self.lock_state(), &plan, &[]);
        appended
    }

    fn append_apply<'a>(
        &'a self,
        mut state: MutexGuard<'a, State>,
        plan: &worker::Plan,
        busy: &[JobId],
    ) -> (Result<Lsn>, MutexGuard<'a, State>) {
        state.set_busy(busy, true);
        drop(state);
        let appended = self.wal.append_batch_nowait(plan.records());
        let mut state = self.lock_state();
        state.set_busy(busy, false);
        self.settled.notify_all();
        let lsn = match appended {
            Ok(lsn) => lsn,
            Err(e) => return (Err(e.into()), state),
        };
        // The batch's records have consecutive LSNs, the last one `lsn`.
        let first_lsn = lsn + 1 - plan.records().count() as u64;
        for (i, (record_type, body)) in plan.records().enumerate() {
            let event = Event::decode(record_type, body).expect("encoded by the plan");
            if let Err(why) = state.apply(&event, Mode::Live, first_lsn + i as u64) {
                panic!("live precondition held but the log's rule refused {event:?}: {why}");
            }
        }
        (Ok(lsn), state)
    }
}
