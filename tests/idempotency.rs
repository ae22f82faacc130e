//! Idempotency keys: one job per key while it exists, from concurrent callers, across
//! restarts, crashes and compaction (keys of jobs kept on disk beyond the horizon included),
//! and free again once the job ends.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use proptest::prelude::*;
use timewheel::{Claimed, Config, Engine, Error, JobId, JobSpec, ManualClock, Outcome, Pending};
use timewheel_wal::testing::{CrashOptions, FaultDisk};

use common::T0;

const HOUR_MS: u64 = 3_600_000;

fn config() -> Config {
    let mut c = common::config();
    // Small segments, so that compaction folds sealed ones (and keeps far jobs on disk).
    c.segment_bytes = 8 << 10;
    c.payload_bytes_max = 256;
    c.fail_reason_bytes_max = 64;
    // A full disk meets a schedule in its own append (no reserve refuses it first, no back-off
    // refuses it without trying).
    c.no_space_reserve_bytes = 0;
    c.no_space_retry_ms = 0;
    c
}

fn key(k: u8) -> Vec<u8> {
    format!("order-{k}").into_bytes()
}

#[derive(Debug, Clone)]
enum Op {
    /// Schedule key `k` (or no key), due `ahead_h` hours from now (5: beyond the horizon).
    Schedule(Option<u8>, u64),
    /// Schedule a batch naming keys, some twice.
    Batch(Vec<u8>),
    CancelByKey(u8),
    RescheduleByKey(u8),
    /// Fire what is due, claim it, and complete or bury it.
    Finish(bool),
    PurgeDead,
    Advance(u64),
    Compact,
    Reopen,
    Crash,
    /// `schedule_batch_nowait` of a batch naming keys: appended, visible only at its commit.
    NoWait(Vec<u8>),
    /// Commit every batch appended without a wait, in order.
    Commit,
    /// Fill the log until it can not grow, then schedule a batch naming keys (and one job
    /// without): its append fails, and it must leave every key as it was, those of the
    /// batches appended and not yet committed included.
    FailBatch(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (prop::option::weighted(0.9, 0u8..12), prop_oneof![Just(0u64), Just(1), Just(5)])
            .prop_map(|(k, h)| Op::Schedule(k, h)),
        1 => prop::collection::vec(0u8..12, 1..6).prop_map(Op::Batch),
        2 => (0u8..12).prop_map(Op::CancelByKey),
        1 => (0u8..12).prop_map(Op::RescheduleByKey),
        2 => any::<bool>().prop_map(Op::Finish),
        1 => Just(Op::PurgeDead),
        2 => (1u64..3).prop_map(Op::Advance),
        2 => Just(Op::Compact),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        2 => prop::collection::vec(0u8..12, 1..4).prop_map(Op::NoWait),
        1 => Just(Op::Commit),
        1 => prop::collection::vec(0u8..12, 1..4).prop_map(Op::FailBatch),
    ]
}

/// The keys a batch appended without a wait made pending, with their jobs.
type Made = Vec<(Vec<u8>, JobId)>;

struct World {
    disk: FaultDisk,
    clock: ManualClock,
    engine: Option<Engine>,
    /// Key -> the job holding it.
    held: BTreeMap<Vec<u8>, JobId>,
    /// Jobs whose key is held by a dead job (they can only be purged).
    dead: HashSet<JobId>,
    /// Every id ever handed out: a new job never gets an old one.
    seen: HashSet<JobId>,
    /// Batches appended without a wait, in order, with the keys each made pending.
    tickets: Vec<(Pending, Made)>,
    /// Key -> the appended, not yet visible job holding it.
    pending: BTreeMap<Vec<u8>, JobId>,
}

impl World {
    fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("open")
    }

    fn now(&self) -> u64 {
        timewheel::Clock::now_ms(&self.clock)
    }

    fn open(&mut self) {
        self.engine = Some(
            Engine::open_on(self.disk.storage(), config(), Arc::new(self.clock.clone()))
                .expect("opens"),
        );
    }

    fn scheduled(&mut self, k: Option<Vec<u8>>, id: JobId) {
        match k {
            Some(k) => match self.held.get(&k).or(self.pending.get(&k)) {
                Some(&holder) => assert_eq!(id, holder, "key {k:?} returned another job"),
                None => {
                    assert!(self.seen.insert(id), "id {id} handed out twice");
                    self.held.insert(k, id);
                }
            },
            None => assert!(self.seen.insert(id), "id {id} handed out twice"),
        }
    }

    /// `schedule_batch_nowait` naming `keys` returned `ids`: a key held or pending answers its
    /// job; the batch's first spec naming a free key makes it pending.
    fn appended(&mut self, keys: &[u8], ids: &[JobId]) -> Made {
        let mut made = Vec::new();
        for (&k, &id) in keys.iter().zip(ids) {
            let k = key(k);
            match self.held.get(&k).or(self.pending.get(&k)) {
                Some(&holder) => assert_eq!(id, holder, "key {k:?} returned another job"),
                None => {
                    assert!(self.seen.insert(id), "id {id} handed out twice");
                    self.pending.insert(k.clone(), id);
                    made.push((k, id));
                }
            }
        }
        made
    }

    fn commit_all(&mut self) {
        for (ticket, made) in std::mem::take(&mut self.tickets) {
            self.engine().commit(ticket).expect("commit");
            for (k, id) in made {
                assert_eq!(self.pending.remove(&k), Some(id));
                self.held.insert(k, id);
            }
        }
    }

    fn release(&mut self, id: JobId) {
        self.held.retain(|_, v| *v != id);
    }

    fn step(&mut self, op: &Op) {
        let now = self.now();
        match op {
            Op::Schedule(k, ahead_h) => {
                let mut spec = JobSpec::at(now + ahead_h * HOUR_MS);
                if let Some(k) = k {
                    spec = spec.key(key(*k));
                }
                let id = self.engine().schedule(spec).expect("schedule");
                self.scheduled(k.map(key), id);
            }
            Op::Batch(keys) => {
                let specs = keys.iter().map(|&k| JobSpec::at(now + HOUR_MS).key(key(k)));
                let ids = self.engine().schedule_batch(specs).expect("batch");
                for (&k, id) in keys.iter().zip(ids) {
                    self.scheduled(Some(key(k)), id);
                }
            }
            Op::CancelByKey(k) => {
                let k = key(*k);
                let out = self.engine().cancel_by_key(&k).expect("cancel");
                match self.held.get(&k).copied() {
                    Some(id) if !self.dead.contains(&id) => {
                        // Scheduled (or ready: the test claims right after firing).
                        assert_eq!(out, Outcome::Done, "cancel of {id}");
                        self.release(id);
                    }
                    _ => assert_eq!(out, Outcome::NotFound),
                }
            }
            Op::RescheduleByKey(k) => {
                let k = key(*k);
                let out = self
                    .engine()
                    .reschedule_by_key(&k, now + 2 * HOUR_MS)
                    .expect("reschedule");
                let live = self.held.get(&k).is_some_and(|id| !self.dead.contains(id));
                assert_eq!(out.is_done(), live);
            }
            Op::Finish(complete) => {
                self.engine().run_timers();
                let ready: Vec<JobId> = self.engine().ready().try_iter().collect();
                let claimed: Vec<Claimed> = self
                    .engine()
                    .claim_batch(&ready)
                    .expect("claim")
                    .into_iter()
                    .flatten()
                    .collect();
                for c in claimed {
                    if *complete {
                        assert!(self.engine().complete(&c).expect("complete"));
                        self.release(c.id);
                    } else {
                        assert!(self.engine().fail_permanently(&c, "no").expect("fail"));
                        // A dead job keeps its key until purged.
                        self.dead.insert(c.id);
                    }
                }
            }
            Op::PurgeDead => {
                self.engine().purge_dead_where(None).expect("purge");
                for id in std::mem::take(&mut self.dead) {
                    self.release(id);
                }
            }
            Op::Advance(h) => self.clock.advance(h * HOUR_MS),
            Op::Compact => {
                self.commit_all();
                self.engine().sync().expect("sync");
                self.engine().compact().expect("compact");
            }
            Op::Reopen => {
                self.commit_all();
                self.engine.take().expect("open").close().expect("close");
                self.open();
            }
            Op::Crash => {
                self.commit_all();
                self.engine.take().expect("open").abandon();
                self.disk = self.disk.crash(&CrashOptions::all_unsynced());
                self.open();
            }
            Op::NoWait(keys) => {
                let specs = keys.iter().map(|&k| JobSpec::at(now + HOUR_MS).key(key(k)));
                let (ids, ticket) = self.engine().schedule_batch_nowait(specs).expect("append");
                let made = self.appended(keys, &ids);
                self.tickets.push((ticket, made));
            }
            Op::Commit => self.commit_all(),
            Op::FailBatch(keys) => {
                self.disk.set_enospc(true);
                let filled = common::fill_until_no_space(self.engine(), 400, || {
                    JobSpec::at(now + HOUR_MS).payload([1u8; 200])
                });
                for id in filled {
                    self.scheduled(None, id);
                }
                let specs = keys
                    .iter()
                    .map(|&k| JobSpec::at(now + HOUR_MS).key(key(k)))
                    .chain([JobSpec::at(now + HOUR_MS)]);
                match self.engine().schedule_batch(specs) {
                    Err(Error::NoSpace { .. }) => {}
                    other => panic!("expected NoSpace, got {other:?}"),
                }
                self.disk.set_enospc(false);
            }
        }
    }

    fn check(&self) {
        for k in 0..12 {
            let k = key(k);
            assert_eq!(
                self.engine().id_by_key(&k),
                self.held.get(&k).copied(),
                "key {:?}",
                String::from_utf8_lossy(&k)
            );
        }
    }
}

fn keys_cases() -> u32 {
    std::env::var("KEYS_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128)
}

proptest! {
    // `KEYS_CASES=N` for a longer run than `cargo test`'s 128.
    #![proptest_config(ProptestConfig { cases: keys_cases(), ..ProptestConfig::default() })]

    #[test]
    fn one_job_per_key_while_it_lives(ops in prop::collection::vec(op(), 1..80), seed in any::<u64>()) {
        let mut w = World {
            disk: FaultDisk::new(seed),
            clock: ManualClock::new(T0),
            engine: None,
            held: BTreeMap::new(),
            dead: HashSet::new(),
            seen: HashSet::new(),
            tickets: Vec::new(),
            pending: BTreeMap::new(),
        };
        w.open();
        for op in &ops {
            w.step(op);
            w.check();
        }
        // Everything appended is committed, and the keys survive a reopen as they were.
        w.step(&Op::Reopen);
        w.check();
    }
}

#[test]
fn concurrent_schedules_of_one_key_make_one_job() {
    let dir = common::TempDir::new("keys-threads");
    let engine = Arc::new(Engine::open(Config::new(&dir.0)).expect("opens"));
    let now = timewheel::Clock::now_ms(&timewheel::SystemClock);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                (0..400)
                    .map(|i| {
                        let k = (i * 7 + t) % 50;
                        let spec = JobSpec::at(now + HOUR_MS).key(format!("k{k}"));
                        (k, engine.schedule(spec).expect("schedule"))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut by_key: BTreeMap<usize, HashSet<JobId>> = BTreeMap::new();
    for t in threads {
        for (k, id) in t.join().expect("thread") {
            by_key.entry(k).or_default().insert(id);
        }
    }
    assert_eq!(by_key.len(), 50);
    for (k, ids) in &by_key {
        assert_eq!(ids.len(), 1, "key k{k} made {} jobs", ids.len());
    }
    let stats = engine.stats();
    assert_eq!(stats.scheduled, 50);
    assert_eq!(stats.deduplicated, 8 * 400 - 50);
}

#[test]
fn a_bad_key_is_refused_and_writes_nothing() {
    let disk = FaultDisk::new(3);
    let clock = ManualClock::new(T0);
    let engine = common::open_sim(&disk, &clock);
    let before = engine.log_stats().records;
    for bad in [Vec::new(), vec![b'k'; config().key_bytes_max + 1]] {
        let spec = JobSpec::at(T0).key(bad);
        assert!(matches!(
            engine.schedule_batch([JobSpec::at(T0), spec]),
            Err(timewheel::Error::InvalidInput { .. })
        ));
    }
    assert_eq!(engine.log_stats().records, before);
}
