//! Tenant fairness: fired jobs wait in one queue per tenant, and the ready channel is fed from
//! them round-robin (deficit round robin with a quantum of one job), a bounded number at a
//! time, skipping tenants at their limit of running jobs. So one tenant's burst of a million
//! jobs due in the same second delays another tenant's job by at most the channel's depth, not
//! by the burst.
//!
//! On only with `Config::fair_tenants`; otherwise fired ids go straight into the channel in
//! firing order, as they always did.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crossbeam_channel::Sender;

use super::table::{IdSet, JobMap};
use crate::job::{JobId, JobState};

/// A tenant's figures (see [`Engine::tenant_stats`](crate::Engine::tenant_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TenantStats {
    /// The tenant.
    pub tenant: u32,
    /// Fired jobs waiting in its queue (not yet in the ready channel).
    pub queued: u64,
    /// Its jobs in the ready channel, not yet claimed.
    pub in_channel: u64,
    /// Its running jobs.
    pub running: u64,
    /// Its limit of running jobs (0: none).
    pub running_max: u32,
}

#[derive(Debug, Default)]
struct Tenant {
    queue: VecDeque<JobId>,
    in_channel: u32,
    running: u32,
}

/// The per-tenant queues and the round-robin feeder of the ready channel.
#[derive(Debug)]
pub(crate) struct Fair {
    tenants: HashMap<u32, Tenant>,
    /// Tenants with jobs queued, in round-robin order.
    active: VecDeque<u32>,
    /// Ids in a tenant's queue or in the channel: a job is queued once.
    queued: IdSet,
    /// Ids fed into the channel, with their tenant and when, until a claim looks at them.
    in_channel: HashMap<JobId, (u32, u64)>,
    depth: usize,
    running_max: u32,
    limits: BTreeMap<u32, u32>,
}

impl Fair {
    pub fn new(depth: usize, running_max: u32, limits: BTreeMap<u32, u32>) -> Self {
        Fair {
            tenants: HashMap::new(),
            active: VecDeque::new(),
            queued: IdSet::default(),
            in_channel: HashMap::new(),
            depth,
            running_max,
            limits,
        }
    }

    fn limit(&self, tenant: u32) -> u32 {
        self.limits
            .get(&tenant)
            .copied()
            .unwrap_or(self.running_max)
    }

    /// A fired (or again ready) job of `tenant`: into its queue, unless queued already.
    pub fn enqueue(&mut self, id: JobId, tenant: u32) {
        if !self.queued.insert(id) {
            return;
        }
        let t = self.tenants.entry(tenant).or_default();
        if t.queue.is_empty() {
            self.active.push_back(tenant);
        }
        t.queue.push_back(id);
    }

    /// A job of `tenant` was claimed (its running count grows) or its id, taken from the
    /// channel, was stale.
    pub fn taken(&mut self, id: JobId, claimed_by: Option<u32>) {
        if let Some((tenant, _)) = self.in_channel.remove(&id) {
            self.queued.remove(&id);
            let t = self.tenants.entry(tenant).or_default();
            t.in_channel = t.in_channel.saturating_sub(1);
        }
        if let Some(tenant) = claimed_by {
            self.tenants.entry(tenant).or_default().running += 1;
        }
    }

    /// A running job of `tenant` stopped running (finished, retried, buried, lease ran out).
    pub fn stopped(&mut self, tenant: u32) {
        let t = self.tenants.entry(tenant).or_default();
        assert!(t.running > 0, "a tenant's running count matches its jobs");
        t.running -= 1;
    }

    /// A ready job whose claim deadline passed. Still waiting in its tenant's queue, or fed
    /// into the channel less than `lease_ms` ago: it stays where it is. Fed earlier: whoever
    /// took its id did not claim it (a worker died), and it is queued again.
    pub fn requeue(&mut self, id: JobId, tenant: u32, now_ms: u64, lease_ms: u64) {
        match self.in_channel.get(&id) {
            Some(&(t, at)) if now_ms.saturating_sub(at) >= lease_ms => {
                self.in_channel.remove(&id);
                let entry = self.tenants.entry(t).or_default();
                entry.in_channel = entry.in_channel.saturating_sub(1);
                self.queued.remove(&id);
            }
            _ => {}
        }
        self.enqueue(id, tenant);
    }

    /// Feeds the channel round-robin until it holds `depth` ids, every queue is empty, or
    /// every tenant with jobs queued is at its limit. Ids of jobs no longer ready are dropped.
    pub fn refill(&mut self, tx: &Sender<JobId>, jobs: &JobMap, now_ms: u64) {
        let mut blocked_in_a_row = 0;
        while tx.len() < self.depth && blocked_in_a_row < self.active.len() {
            let Some(tenant) = self.active.pop_front() else {
                break;
            };
            let limit = self.limit(tenant);
            let t = self.tenants.get_mut(&tenant).expect("an active tenant");
            if limit > 0 && t.running + t.in_channel >= limit {
                self.active.push_back(tenant);
                blocked_in_a_row += 1;
                continue;
            }
            blocked_in_a_row = 0;
            let Some(id) = t.queue.pop_front() else {
                continue;
            };
            if !t.queue.is_empty() {
                self.active.push_back(tenant);
            }
            if jobs.get(&id).is_none_or(|j| j.state != JobState::Ready) {
                // Cancelled, rescheduled or claimed since it fired.
                self.queued.remove(&id);
                continue;
            }
            t.in_channel += 1;
            self.in_channel.insert(id, (tenant, now_ms));
            // The engine holds a receiver as long as it holds the sender: a send can not fail.
            let _ = tx.send(id);
        }
    }

    /// Every tenant's figures, by tenant.
    pub fn stats(&self) -> Vec<TenantStats> {
        let mut out: Vec<TenantStats> = self
            .tenants
            .iter()
            .map(|(&tenant, t)| TenantStats {
                tenant,
                queued: t.queue.len() as u64,
                in_channel: u64::from(t.in_channel),
                running: u64::from(t.running),
                running_max: self.limit(tenant),
            })
            .collect();
        out.sort_by_key(|s| s.tenant);
        out
    }
}
