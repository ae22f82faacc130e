//! Job ids: handed out in increasing order, from blocks reserved in the log.
//!
//! The ledger counts *sequence numbers* ([`crate::JobId::seq`]); an id is its sequence number with
//! the job's home hour bucket in the low bits ([`crate::JobId::compose`]), so ids grow with their
//! sequence numbers and the rules below hold for both.
//!
//! An id is never handed out twice, also when a crash cut the tail of the log: a schedule that
//! needs an id beyond the reserved block appends a `ReserveIds` record in front of its own
//! records, in the same append, and the caller learns its ids only once both are durable. At
//! open the next id is the one after the highest reservation, so ids that were reserved but
//! whose schedules were cut with the tail are skipped, never reused.
//!
//! Live allocation and replay share the two rules below ([`IdLedger::admit_reserve`] and
//! [`IdLedger::admit_schedule`]): a log that breaks them was not written by this engine.

/// What the log says about ids so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct IdLedger {
    /// The sequence number of the newest job scheduled (0: none).
    pub last_id: u64,
    /// The highest sequence number reserved (0: none).
    pub reserved_up_to: u64,
}

/// The ids of one schedule call: `first ..= last`, and the reservation to write in front of
/// them, if their block is new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Allocation {
    pub first: u64,
    pub reserve_up_to: Option<u64>,
}

impl IdLedger {
    /// A reservation must reach beyond the last one.
    pub fn admit_reserve(&mut self, up_to: u64) -> Result<(), &'static str> {
        if up_to <= self.reserved_up_to || up_to <= self.last_id {
            return Err("id reservation does not move forward");
        }
        self.reserved_up_to = up_to;
        Ok(())
    }

    /// A scheduled id (its sequence number, [`crate::JobId::seq`]) must be newer than every earlier
    /// one and inside a reservation.
    pub fn admit_schedule(&mut self, id: u64) -> Result<(), &'static str> {
        if id <= self.last_id {
            return Err("job id is not newer than the last one scheduled");
        }
        if id > self.reserved_up_to {
            return Err("job id was never reserved");
        }
        self.last_id = id;
        Ok(())
    }

    /// The ledger after an open: ids reserved but never scheduled are given up, so the next
    /// block starts after every id a cut tail might have handed out.
    pub fn reopened(self) -> IdLedger {
        IdLedger {
            last_id: self.reserved_up_to,
            reserved_up_to: self.reserved_up_to,
        }
    }

    /// Takes `n >= 1` ids, reserving a new block of at least `block` ids when they do not fit
    /// the current one. Applies the same rules replay checks.
    pub fn allocate(&mut self, n: u64, block: u64) -> Allocation {
        assert!(n >= 1 && block >= 1);
        let first = self.last_id + 1;
        let last = self.last_id + n;
        let reserve_up_to = (last > self.reserved_up_to).then(|| {
            let up_to = last.max(self.reserved_up_to.saturating_add(block));
            self.admit_reserve(up_to)
                .expect("a new block moves forward");
            up_to
        });
        for id in first..=last {
            // Cheap: two compares per id, and replay runs the same check.
            self.admit_schedule(id)
                .expect("allocated inside the reservation");
        }
        Allocation {
            first,
            reserve_up_to,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_reserves_blocks_and_replay_accepts_what_it_wrote() {
        let mut live = IdLedger::default();
        let a = live.allocate(3, 10);
        assert_eq!(
            a,
            Allocation {
                first: 1,
                reserve_up_to: Some(10)
            }
        );
        let b = live.allocate(7, 10);
        assert_eq!(
            b,
            Allocation {
                first: 4,
                reserve_up_to: None
            }
        );
        let c = live.allocate(25, 10);
        assert_eq!(
            c,
            Allocation {
                first: 11,
                reserve_up_to: Some(35)
            }
        );

        let mut replay = IdLedger::default();
        replay.admit_reserve(10).unwrap();
        (1..=10).for_each(|id| replay.admit_schedule(id).unwrap());
        replay.admit_reserve(35).unwrap();
        (11..=35).for_each(|id| replay.admit_schedule(id).unwrap());
        assert_eq!(replay, live);
    }

    #[test]
    fn replay_refuses_ids_out_of_order_or_unreserved_and_reopen_skips_the_block() {
        let mut l = IdLedger::default();
        assert!(l.admit_schedule(1).is_err(), "nothing reserved");
        l.admit_reserve(100).unwrap();
        l.admit_schedule(5).unwrap();
        assert!(l.admit_schedule(5).is_err());
        assert!(l.admit_schedule(4).is_err());
        assert!(l.admit_schedule(101).is_err());
        assert!(l.admit_reserve(100).is_err());
        let mut reopened = l.reopened();
        assert_eq!(reopened.allocate(1, 100).first, 101);
    }
}
