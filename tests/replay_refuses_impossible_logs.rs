//! Replay runs the live engine's one transition function: a log the live engine could not have
//! written (a cancel of a running job, a claim that skips an attempt or of a job never fired
//! in the log's terms, an id never reserved) refuses the open with the record's LSN, while
//! every sequence the live engine writes (claim, expire, claim again, cancel) replays.
//! The logs are written by hand, record by record, on the fault-injecting disk.

mod common;

use std::sync::Arc;

use common::{T0, config};
use timewheel::record::{Event, ScheduleRecord};
use timewheel::{Engine, Error, JobId, ManualClock};
use timewheel_wal::testing::FaultDisk;
use timewheel_wal::{Wal, WalOptions};

/// The `n`-th job's id: its sequence number, with its home hour bucket (T0's) in the low bits.
fn id(n: u64) -> JobId {
    JobId((n << JobId::BUCKET_BITS) | ((T0 / 3_600_000) % (1 << JobId::BUCKET_BITS)))
}

fn schedule(n: u64) -> Event<'static> {
    Event::Schedule(ScheduleRecord::plain(id(n), T0, T0, b""))
}

fn claim(n: u64, attempt: u32) -> Event<'static> {
    Event::Claim {
        id: id(n),
        attempt,
        lease_until_ms: T0 + 1_000,
    }
}

/// Writes `events` (and raw `(type, flags, body)` records after them) as a log, then opens an
/// engine on it, twice: reading the log on the replaying thread (the simulation's disk), and
/// reading it ahead on a second thread (real files); both must end alike.
fn open_log(events: &[Event<'_>], raw: &[(u8, u8, Vec<u8>)]) -> Result<Engine, Error> {
    let one = open_log_reading(events, raw, false);
    let ahead = open_log_reading(events, raw, true);
    match (&one, &ahead) {
        (Ok(a), Ok(b)) => {
            let counts = |s: timewheel::Stats| (s.scheduled, s.ready, s.running, s.dead);
            assert_eq!(counts(a.stats()), counts(b.stats()));
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!(
            "read ahead, the open ended otherwise: {:?} against {:?}",
            one.as_ref().err(),
            ahead.as_ref().err()
        ),
    }
    one
}

fn open_log_reading(
    events: &[Event<'_>],
    raw: &[(u8, u8, Vec<u8>)],
    read_ahead: bool,
) -> Result<Engine, Error> {
    let disk = FaultDisk::new(7);
    disk.allow_parallel_reads(read_ahead);
    let cfg = config();
    let opts = WalOptions {
        segment_bytes: cfg.segment_bytes,
        record_bytes_max: 64 << 10,
        ..WalOptions::default()
    };
    let (wal, _) = Wal::open(disk.storage(), opts).expect("log opens");
    for e in events {
        let mut body = Vec::new();
        e.encode(&mut body);
        wal.append(e.record_type(), &body).expect("append");
    }
    for (t, flags, body) in raw {
        wal.append_with_flags(*t, *flags, body).expect("append");
    }
    wal.close().expect("close");
    Engine::open_on(disk.storage(), cfg, Arc::new(ManualClock::new(T0)))
}

fn refused_at(events: &[Event<'_>]) -> u64 {
    match open_log(events, &[]) {
        Err(Error::UndecodableRecord { lsn, reason }) => {
            assert!(!reason.is_empty());
            lsn
        }
        Err(e) => panic!("refused with the wrong error: {e:?}"),
        Ok(_) => panic!("a log the live engine could not write was replayed: {events:?}"),
    }
}

const RESERVE: Event<'static> = Event::ReserveIds { up_to: 100 };

#[test]
fn what_the_live_engine_writes_replays() {
    let engine = open_log(
        &[
            RESERVE,
            schedule(1),
            claim(1, 1),
            Event::Expire {
                id: id(1),
                attempt: 1,
            },
            claim(1, 2),
            schedule(2),
            claim(2, 1),
            Event::Complete {
                id: id(2),
                attempt: 1,
            },
            schedule(3),
            Event::Cancel { id: id(3) },
        ],
        &[],
    )
    .expect("a live engine's log replays");
    let job = engine.get(id(1)).expect("job 1 is live");
    assert_eq!(job.attempt, 2, "interrupted at attempt 2");
    assert!(engine.get(id(2)).is_none() && engine.get(id(3)).is_none());
    assert_eq!(engine.recovery().interrupted, 1);
}

#[test]
fn a_cancel_or_reschedule_of_a_leased_job_is_refused() {
    assert_eq!(
        refused_at(&[
            RESERVE,
            schedule(1),
            claim(1, 1),
            Event::Cancel { id: id(1) }
        ]),
        4
    );
    let moved = Event::Reschedule {
        id: id(1),
        due_ms: T0 + 5,
    };
    assert_eq!(refused_at(&[RESERVE, schedule(1), claim(1, 1), moved]), 4);
}

#[test]
fn a_claim_must_be_the_previous_attempt_plus_one_of_a_waiting_job() {
    assert_eq!(refused_at(&[RESERVE, schedule(1), claim(1, 2)]), 3);
    assert_eq!(
        refused_at(&[RESERVE, schedule(1), claim(1, 1), claim(1, 2)]),
        4,
        "a second claim needs the expiry of the first"
    );
    assert_eq!(refused_at(&[RESERVE, claim(9, 1)]), 2, "unknown job");
    let stale_finish = Event::Complete {
        id: id(1),
        attempt: 1,
    };
    assert_eq!(
        refused_at(&[RESERVE, schedule(1), stale_finish]),
        3,
        "a finish without a claim"
    );
}

#[test]
fn ids_must_be_reserved_and_increasing() {
    assert_eq!(refused_at(&[schedule(1)]), 1, "never reserved");
    assert_eq!(refused_at(&[RESERVE, schedule(5), schedule(4)]), 3);
    assert_eq!(refused_at(&[RESERVE, schedule(101)]), 2);
    assert_eq!(refused_at(&[RESERVE, RESERVE]), 2);
    let Event::Schedule(mut elsewhere) = schedule(1) else {
        unreachable!()
    };
    elsewhere.id = JobId(elsewhere.id.0 + 1);
    assert_eq!(
        refused_at(&[RESERVE, Event::Schedule(elsewhere)]),
        2,
        "an id that does not name the job's home bucket"
    );
}

#[test]
fn unknown_records_are_skipped_only_when_marked_skippable() {
    let skippable = (0xE0, timewheel_wal::format::FLAG_SKIPPABLE, vec![1, 2, 3]);
    let engine = open_log(&[RESERVE, schedule(1)], &[skippable]).expect("skipped");
    assert_eq!(engine.recovery().skipped, 1);
    assert!(engine.get(id(1)).is_some());
    drop(engine);
    match open_log(&[RESERVE, schedule(1)], &[(0xE0, 0, vec![1, 2, 3])]) {
        Err(Error::UndecodableRecord { lsn: 3, .. }) => {}
        other => panic!(
            "an unknown record without the flag must refuse: {other:?}",
            other = other.err()
        ),
    }
}

fn retry(n: u64, attempt: u32, failed: bool) -> Event<'static> {
    Event::Retry {
        id: id(n),
        attempt,
        flags: if failed {
            timewheel::record::RETRY_FAILED
        } else {
            0
        },
        due_ms: T0 + 500,
        reason: "503",
    }
}

fn bury(n: u64, attempt: u32) -> Event<'static> {
    Event::Bury {
        id: id(n),
        attempt,
        flags: 0,
        at_ms: T0 + 7,
        reason: "gave up",
    }
}

#[test]
fn the_lifecycle_records_replay_into_the_same_jobs() {
    let engine = open_log(
        &[
            RESERVE,
            schedule(1),
            claim(1, 1),
            retry(1, 1, true),
            claim(1, 2),
            Event::Extend {
                id: id(1),
                attempt: 2,
                lease_until_ms: T0 + 9_000,
            },
            retry(1, 2, false),
            schedule(2),
            claim(2, 1),
            bury(2, 1),
            schedule(3),
            claim(3, 1),
            bury(3, 1),
            Event::Requeue {
                id: id(3),
                due_ms: T0 + 50,
            },
            schedule(4),
            claim(4, 1),
            bury(4, 1),
            Event::Purge { id: id(4) },
        ],
        &[],
    )
    .expect("a live engine's log replays");
    let one = engine.get(id(1)).expect("job 1 waits for its retry");
    assert_eq!(
        (one.attempt, one.failures, one.due_ms),
        (2, 1, T0 + 500),
        "retry_at counts no failure"
    );
    assert_eq!(one.last_error.as_deref(), Some("503"));
    let two = engine.dead_letter(id(2)).expect("job 2 is dead");
    assert_eq!((two.attempt, two.failures, two.died_at_ms), (1, 1, T0 + 7));
    assert_eq!(&*two.reason, "gave up");
    let three = engine.get(id(3)).expect("job 3 was requeued");
    assert_eq!((three.attempt, three.failures), (1, 0));
    assert!(engine.dead_letter(id(3)).is_none());
    assert!(engine.get(id(4)).is_none() && engine.dead_letter(id(4)).is_none());
    assert_eq!(engine.stats().dead, 1);
}

#[test]
fn lifecycle_records_the_live_engine_could_not_write_are_refused() {
    // A retry or burial needs the lease of that attempt.
    assert_eq!(refused_at(&[RESERVE, schedule(1), retry(1, 1, true)]), 3);
    assert_eq!(
        refused_at(&[RESERVE, schedule(1), claim(1, 1), retry(1, 2, true)]),
        4
    );
    assert_eq!(refused_at(&[RESERVE, schedule(1), bury(1, 0)]), 3);
    let expire = Event::Expire {
        id: id(1),
        attempt: 1,
    };
    assert_eq!(
        refused_at(&[RESERVE, schedule(1), claim(1, 1), expire, bury(1, 1)]),
        5,
        "the lease ran out: only a new claim can end an attempt"
    );
    let extend = Event::Extend {
        id: id(1),
        attempt: 1,
        lease_until_ms: T0 + 1,
    };
    assert_eq!(refused_at(&[RESERVE, schedule(1), extend]), 3);
    // Requeue and purge only of dead jobs.
    let requeue = Event::Requeue {
        id: id(1),
        due_ms: T0,
    };
    assert_eq!(refused_at(&[RESERVE, schedule(1), requeue]), 3);
    assert_eq!(
        refused_at(&[RESERVE, schedule(1), Event::Purge { id: id(1) }]),
        3
    );
    // A dead job is not waiting: it can not be cancelled, claimed or finished.
    let dead = [RESERVE, schedule(1), claim(1, 1), bury(1, 1)];
    for (event, what) in [
        (Event::Cancel { id: id(1) }, "cancel"),
        (claim(1, 2), "claim"),
        (
            Event::Complete {
                id: id(1),
                attempt: 1,
            },
            "complete",
        ),
    ] {
        let mut log = dead.to_vec();
        log.push(event);
        assert_eq!(refused_at(&log), 5, "{what} of a dead job");
    }
}

#[test]
fn a_second_live_job_with_one_idempotency_key_is_refused() {
    let keyed = |n: u64| {
        let Event::Schedule(mut s) = schedule(n) else {
            unreachable!()
        };
        s.flags |= timewheel::record::FLAG_KEY;
        s.key = Some(b"order-1");
        Event::Schedule(s)
    };
    assert_eq!(refused_at(&[RESERVE, keyed(1), keyed(2)]), 3);
    // Once the first is gone, the key is free.
    let engine = open_log(
        &[RESERVE, keyed(1), Event::Cancel { id: id(1) }, keyed(2)],
        &[],
    )
    .expect("replays");
    assert_eq!(engine.id_by_key(b"order-1"), Some(id(2)));
}

#[test]
fn a_next_occurrence_of_a_job_that_does_not_recur_is_refused() {
    let next = Event::Next {
        id: id(1),
        attempt: 1,
        flags: 0,
        due_ms: T0 + 60_000,
    };
    assert_eq!(refused_at(&[RESERVE, schedule(1), claim(1, 1), next]), 4);
}
