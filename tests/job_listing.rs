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
