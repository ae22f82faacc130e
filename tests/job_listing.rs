//! `Engine::jobs` against a model the test keeps itself: jobs scheduled, fired, claimed,
//! cancelled and completed; random queries (state, due range, page size) paged to the end
//! must list exactly the model's jobs that match, in `(due, id)` order, each once.

mod common;

use std::collections::BTreeMap;

use common::{T0, fire, open_sim};
use timewheel::{Error, JobId, JobQuery, JobSpec, JobState, ManualClock};
use timewheel_wal::testing::FaultDisk;

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn pages_list_exactly_the_matching_jobs_in_order() {
    let disk = FaultDisk::new(81);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    let mut seed = 5;
    // id -> (state, due)
    let mut model: BTreeMap<JobId, (JobState, u64)> = BTreeMap::new();
    let specs: Vec<u64> = (0..3_000)
        .map(|_| T0 + splitmix(&mut seed) % 20_000)
        .collect();
    let ids = engine
        .schedule_batch(specs.iter().map(|&due| JobSpec::at(due)))
        .expect("schedule");
    for (&id, &due) in ids.iter().zip(&specs) {
        model.insert(id, (JobState::Scheduled, due));
    }
    // Some are cancelled; the first 5 s fire; of those some are claimed and some completed.
    for &id in ids.iter().step_by(7) {
        assert!(engine.cancel(id).expect("cancel").is_done());
        model.remove(&id);
    }
    clock.set(T0 + 5_000);
    for id in fire(&engine) {
        model.get_mut(&id).expect("a live job fired").0 = JobState::Ready;
        match splitmix(&mut seed) % 3 {
            0 => {}
            1 => {
                engine.claim(id).expect("claim").expect("ready");
                model.get_mut(&id).expect("live").0 = JobState::Running;
            }
            _ => {
                let job = engine.claim(id).expect("claim").expect("ready");
                assert!(engine.complete(&job).expect("complete"));
                model.remove(&id);
            }
        }
    }
    for round in 0..200 {
        let state = match splitmix(&mut seed) % 4 {
            0 => None,
            1 => Some(JobState::Scheduled),
            2 => Some(JobState::Ready),
            _ => Some(JobState::Running),
        };
        let a = T0 + splitmix(&mut seed) % 22_000;
        let b = T0 + splitmix(&mut seed) % 22_000;
        let (from, to) = (a.min(b), a.max(b));
        let limit = 1 + (splitmix(&mut seed) % 400) as usize;
        let mut query = JobQuery::due_between(from, to).limit(limit);
        if let Some(s) = state {
            query = query.state(s);
        }
        let mut want: Vec<(u64, JobId)> = model
            .iter()
            .filter(|(_, (s, due))| state.is_none_or(|w| w == *s) && (from..to).contains(due))
            .map(|(&id, &(_, due))| (due, id))
            .collect();
        want.sort_unstable();
        let mut got = Vec::new();
        let mut next = Some(query);
        let mut pages = 0;
        while let Some(q) = next {
            let page = engine.jobs(&q).expect("page");
            assert!(page.jobs.len() <= limit, "round {round}: page too long");
            for j in &page.jobs {
                let (state, due) = model[&j.id];
                assert_eq!((j.state, j.due_ms), (state, due), "round {round}: {j:?}");
            }
            got.extend(page.jobs.iter().map(|j| (j.due_ms, j.id)));
            next = page.next;
            pages += 1;
            assert!(pages <= want.len() + 1, "round {round}: pages never end");
        }
        assert_eq!(
            got, want,
            "round {round}: {state:?} {from}..{to} by {limit}"
        );
    }
}

#[test]
fn a_bad_page_size_or_range_is_refused() {
    let disk = FaultDisk::new(82);
    let clock = ManualClock::new(T0);
    let engine = open_sim(&disk, &clock);
    for query in [
        JobQuery::all().limit(0),
        JobQuery::all().limit(10_001),
        JobQuery::due_between(T0 + 1, T0),
    ] {
        assert!(
            matches!(engine.jobs(&query), Err(Error::InvalidInput { .. })),
            "{query:?}"
        );
    }
}

/// A page is read a part of the table at a time, the state lock let go in between, so other
/// calls go on during a listing. What a listing still promises then: every job that stays as
/// it is through the listing is listed exactly once, and the listing is in strictly increasing
/// `(due, id)` order; jobs that change meanwhile (cancelled, rescheduled, new) may or may not
/// be listed, each at most once a page.
#[test]
fn jobs_that_stay_put_are_listed_once_while_others_change() {
    let disk = FaultDisk::new(83);
    let clock = ManualClock::new(T0);
    let engine = std::sync::Arc::new(open_sim(&disk, &clock));
    let due_in = |x: u64| T0 + 100_000 + x % 100_000;
    let mut seed = 11;
    let stable: Vec<(u64, JobId)> = {
        let dues: Vec<u64> = (0..20_000).map(|_| due_in(splitmix(&mut seed))).collect();
        let ids = engine
            .schedule_batch(dues.iter().map(|&d| JobSpec::at(d)))
            .expect("schedule");
        dues.into_iter().zip(ids).collect()
    };
    let churn_dues: Vec<u64> = (0..20_000).map(|_| due_in(splitmix(&mut seed))).collect();
    let churn = engine
        .schedule_batch(churn_dues.iter().map(|&d| JobSpec::at(d)))
        .expect("schedule");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let changer = {
        let (engine, stop) = (engine.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seed = 12;
            let mut live = churn;
            let mut changes = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || changes < 1_000 {
                let r = splitmix(&mut seed);
                let i = (r % live.len() as u64) as usize;
                match r % 3 {
                    0 => {
                        assert!(engine.cancel(live[i]).expect("cancel").is_done());
                        live.swap_remove(i);
                        let id = engine
                            .schedule(JobSpec::at(due_in(r >> 8)))
                            .expect("schedule");
                        live.push(id);
                    }
                    1 => {
                        let moved = engine.reschedule(live[i], due_in(r >> 8)).expect("move");
                        assert!(moved.is_done());
                    }
                    _ => {
                        let id = engine
                            .schedule(JobSpec::at(due_in(r >> 8)))
                            .expect("schedule");
                        live.push(id);
                    }
                }
                changes += 1;
            }
            changes
        })
    };
    let stable_ids: std::collections::HashSet<JobId> = stable.iter().map(|&(_, id)| id).collect();
    for round in 0..3 {
        let mut seen_stable = std::collections::HashSet::new();
        let mut last: Option<(u64, JobId)> = None;
        let mut next = Some(JobQuery::due_between(T0, T0 + 300_000).limit(700));
        while let Some(q) = next {
            let page = engine.jobs(&q).expect("page");
            let mut in_page = std::collections::HashSet::new();
            for j in &page.jobs {
                let key = (j.due_ms, j.id);
                assert!(
                    last.is_none_or(|l| key > l),
                    "round {round}: {key:?} after {last:?}"
                );
                last = Some(key);
                assert!(
                    in_page.insert(j.id),
                    "round {round}: {} twice in a page",
                    j.id
                );
                if stable_ids.contains(&j.id) {
                    assert!(
                        seen_stable.insert(j.id),
                        "round {round}: {} listed twice",
                        j.id
                    );
                }
            }
            next = page.next;
        }
        assert_eq!(
            seen_stable.len(),
            stable_ids.len(),
            "round {round}: every job that stayed put is listed"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let changes = changer.join().expect("changer");
    assert!(
        changes >= 1_000,
        "the other thread changed jobs meanwhile: {changes}"
    );
    for (due, id) in stable {
        assert_eq!(engine.get(id).map(|j| j.due_ms), Some(due));
    }
}
