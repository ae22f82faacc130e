//! Tenant fairness (`Config::fair_tenants`): one tenant's burst does not starve another's
//! jobs, and a tenant's running limit holds for what the ready channel hands out. Orders and
//! counts only; no test here looks at a clock.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use timewheel::{Claimed, Config, Engine, JobId, JobSpec, ManualClock};
use timewheel_wal::testing::FaultDisk;

use common::T0;

fn engine(disk: &FaultDisk, clock: &ManualClock, fair: bool, a_limit: u32) -> Engine {
    let mut c = common::config();
    c.fair_tenants = fair;
    c.ready_channel_depth = 64;
    if a_limit > 0 {
        c.tenant_running_limits.insert(1, a_limit);
    }
    Engine::open_on(disk.storage(), c, Arc::new(clock.clone())).expect("opens")
}

/// Tenant 1 schedules `a` jobs due at T0, tenant 2 `b` jobs due 1 ms later; a worker claims
/// and completes in batches of 16. Returns the claim positions of tenant 2's jobs.
fn b_positions(fair: bool, a: u64, b: u64) -> Vec<usize> {
    let disk = FaultDisk::new(1);
    let clock = ManualClock::new(T0);
    let engine = engine(&disk, &clock, fair, 0);
    engine
        .schedule_batch((0..a).map(|_| JobSpec::at(T0).tenant(1)))
        .expect("schedule a");
    let bs: HashSet<JobId> = engine
        .schedule_batch((0..b).map(|_| JobSpec::at(T0 + 1).tenant(2)))
        .expect("schedule b")
        .into_iter()
        .collect();
    clock.advance(1);
    engine.run_timers();
    let mut order = Vec::new();
    loop {
        let got = engine
            .claim_next(16, Duration::from_millis(1))
            .expect("claim");
        if got.is_empty() {
            break;
        }
        for c in &got {
            order.push(c.id);
        }
        engine.complete_batch(&got).expect("complete");
    }
    assert_eq!(order.len() as u64, a + b, "every job was delivered once");
    order
        .iter()
        .enumerate()
        .filter(|(_, id)| bs.contains(id))
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn a_burst_of_one_tenant_does_not_starve_another() {
    let (a, b) = (5_000, 50);
    let unfair = b_positions(false, a, b);
    let fair = b_positions(true, a, b);
    // Without fairness tenant 2 waits for all of tenant 1's burst.
    assert!(unfair[0] >= a as usize, "first of B at {}", unfair[0]);
    // With it, the two are served in turn: B's last job is among the first 2 * b + depth.
    let last = *fair.last().expect("b ran");
    assert!(last < 2 * b as usize + 64, "last of B at {last}: {fair:?}");
}

#[test]
fn a_tenant_at_its_running_limit_gets_no_more_until_one_finishes() {
    let disk = FaultDisk::new(2);
    let clock = ManualClock::new(T0);
    let engine = engine(&disk, &clock, true, 3);
    engine
        .schedule_batch((0..20).map(|_| JobSpec::at(T0).tenant(1)))
        .expect("a");
    engine
        .schedule_batch((0..5).map(|_| JobSpec::at(T0).tenant(2)))
        .expect("b");
    engine.run_timers();
    let mut held: Vec<Claimed> = Vec::new();
    loop {
        let got = engine
            .claim_next(8, Duration::from_millis(1))
            .expect("claim");
        if got.is_empty() {
            break;
        }
        held.extend(got);
    }
    let of = |held: &[Claimed], t: u32| {
        held.iter()
            .filter(|c| engine.get(c.id).expect("live").tenant == t)
            .count()
    };
    assert_eq!(of(&held, 1), 3, "tenant 1 is held to its limit");
    assert_eq!(of(&held, 2), 5, "tenant 2 has no limit");
    let stats = engine.tenant_stats();
    let t1 = stats.iter().find(|s| s.tenant == 1).expect("tenant 1");
    assert_eq!((t1.running, t1.queued, t1.running_max), (3, 17, 3));
    // One of tenant 1's finishes: exactly one more of its jobs comes out.
    let done = held
        .iter()
        .position(|c| engine.get(c.id).expect("live").tenant == 1)
        .expect("one of tenant 1");
    assert!(engine.complete(&held.remove(done)).expect("complete"));
    let more = engine
        .claim_next(8, Duration::from_millis(1))
        .expect("claim");
    assert_eq!(more.len(), 1);
    assert_eq!(engine.get(more[0].id).expect("live").tenant, 1);
    // A lease that runs out frees the slot too.
    clock.advance(common::config().lease_ms + 1);
    engine.run_timers();
    let again = engine
        .claim_next(64, Duration::from_millis(1))
        .expect("claim");
    let of_1 = again
        .iter()
        .filter(|c| engine.get(c.id).expect("live").tenant == 1)
        .count();
    assert_eq!(of_1, 3, "the limit again, with the expired leases' slots");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever the tenants, limits, due times and cancels: every job is delivered, no tenant
    /// ever runs more than its limit through the channel, and each is completed once.
    #[test]
    fn every_job_is_delivered_once_within_the_limits(
        jobs in prop::collection::vec((0u32..4, 0u64..50), 1..300),
        limits in prop::collection::vec(0u32..4, 4),
        cancels in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
    ) {
        let disk = FaultDisk::new(3);
        let clock = ManualClock::new(T0);
        let mut c = common::config();
        c.fair_tenants = true;
        c.ready_channel_depth = 8;
        for (t, &l) in limits.iter().enumerate() {
            c.tenant_running_limits.insert(t as u32, l);
        }
        let engine = Engine::open_on(disk.storage(), c, Arc::new(clock.clone())).expect("opens");
        let ids = engine
            .schedule_batch(jobs.iter().map(|&(t, d)| JobSpec::at(T0 + d).tenant(t)))
            .expect("schedule");
        let tenant: BTreeMap<JobId, u32> =
            ids.iter().zip(&jobs).map(|(&id, &(t, _))| (id, t)).collect();
        let mut cancelled = HashSet::new();
        for i in &cancels {
            let id = ids[i.index(ids.len())];
            if engine.cancel(id).expect("cancel").is_done() {
                cancelled.insert(id);
            }
        }
        let mut done = HashSet::new();
        let mut running: BTreeMap<u32, Vec<Claimed>> = BTreeMap::new();
        for _ in 0..500 {
            clock.advance(5);
            engine.run_timers();
            let got = engine.claim_next(4, Duration::from_millis(0)).expect("claim");
            for c in got {
                let t = tenant[&c.id];
                running.entry(t).or_default().push(c);
                let limit = limits[t as usize];
                prop_assert!(limit == 0 || running[&t].len() <= limit as usize,
                    "tenant {} runs {} over its limit {}", t, running[&t].len(), limit);
            }
            // Finish the oldest running job of each tenant.
            for list in running.values_mut() {
                if !list.is_empty() {
                    let c = list.remove(0);
                    prop_assert!(engine.complete(&c).expect("complete"));
                    prop_assert!(done.insert(c.id), "job {} delivered twice", c.id);
                }
            }
            if done.len() + cancelled.len() == ids.len() {
                break;
            }
        }
        prop_assert_eq!(done.len() + cancelled.len(), ids.len(), "every job was delivered");
    }
}

#[test]
fn fairness_off_keeps_the_firing_order() {
    let p = b_positions(false, 100, 10);
    assert_eq!(p, (100..110).collect::<Vec<_>>());
    let _ = Config::new("/unused");
}
