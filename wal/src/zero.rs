//! Proving a file's unread bytes zero before a write bound covers them.
//!
//! An open reads a segment only up to its write bound, and a file made ahead only over the
//! place of its first block (docs/wal-format.md, "Write bound"). Bytes past that were written
//! by something other than the log, if by anything; they must be proven zero (and zeros
//! written over any that are not) before a block names a bound over them, or a later open
//! finds them under a sealed segment's bound and refuses the log.
//!
//! The protocol, kept apart from the log so that a loom model can drive it with a fake file:
//! - the **checker**, a background thread, proves a step at a time with no lock held, up to
//!   `wanted`: one reach past the highest bound a seal asked for;
//! - a **seal** that would name a bound past what is proven waits for the checker, or, with
//!   no checker (a storage that asks for no background threads) or once the checker is
//!   joined, proves what it needs itself; never both at once, so the prover never races a
//!   writer (a writer only ever writes below a bound a seal named, hence below `to`);
//! - a **roll** into the file made ahead that the open found hands it over, proven from where
//!   recovery stopped.

use std::io;
use std::sync::Arc;

use crate::sync::{Condvar, Mutex, lock};

/// Proves bytes `from..to` of a file zero, returning how many non-zero bytes it found (and
/// wrote zeros over).
pub(crate) type Prover<'p, F> = &'p dyn Fn(&F, u64, u64) -> io::Result<u64>;

/// A file's length: all the protocol needs of a file (the prover does the reading).
pub(crate) trait Length {
    fn length(&self) -> u64;
}

impl<F: crate::storage::StorageFile> Length for F {
    fn length(&self) -> u64 {
        self.len_bytes()
    }
}

/// Why a seal may not name its bound.
#[derive(Debug)]
pub(crate) enum ProofError {
    /// This call's proof failed: the caller poisons the log.
    Failed(io::Error),
    /// An earlier proof failed: the log is poisoned already.
    Poisoned,
}

struct State<F> {
    /// The segment being proven; `file`: its file, `None` once all of it is proven (or when
    /// nothing was to be).
    segment: u64,
    file: Option<Arc<F>>,
    /// Proven up to here.
    to: u64,
    /// The checker proves up to here.
    wanted: u64,
    /// The file made ahead that the open found, by id: proven from `next_from` once a roll
    /// takes it.
    next: Option<u64>,
    next_from: u64,
    /// A checker runs (or has not been joined yet): seals wait for it.
    background: bool,
    /// The checker is to stop.
    stop: bool,
    /// A proof failed: the log is poisoned.
    failed: bool,
}

/// What an open found to prove, and who proves it.
pub(crate) struct Found<F> {
    /// The segment appended to, its file if anything of it is unproven, and from where.
    pub segment: u64,
    pub file: Option<Arc<F>>,
    pub from: u64,
    /// The bound its header or blocks name.
    pub bound: u64,
    /// The file made ahead, by id, and how far recovery proved it.
    pub next: Option<u64>,
    pub next_from: u64,
    /// A checker thread will run.
    pub background: bool,
}

/// The proof's shared state (see the module docs).
pub(crate) struct ZeroProof<F> {
    state: Mutex<State<F>>,
    changed: Condvar,
    /// How far the checker stays ahead of the highest bound asked for.
    reach: u64,
    /// How much the checker proves per step.
    step: u64,
}

impl<F: Length> ZeroProof<F> {
    pub(crate) fn new(found: Found<F>, reach: u64, step: u64) -> Self {
        Self {
            state: Mutex::new(State {
                segment: found.segment,
                file: found.file,
                to: found.from,
                wanted: found.bound.saturating_add(reach),
                next: found.next,
                next_from: found.next_from,
                background: found.background,
                stop: false,
                failed: false,
            }),
            changed: Condvar::new(),
            reach,
            step,
        }
    }

    /// Whether a checker thread is to run (there is something to prove, now or after a roll).
    pub(crate) fn wants_checker(&self) -> bool {
        let s = lock(&self.state);
        s.background && (s.file.is_some() || s.next.is_some())
    }

    /// Makes sure segment `id` is proven zero up to `bound` before a block names it: waits for
    /// the checker, or proves it here with `prove` when no checker runs. Returns at once when
    /// nothing is left to prove in `id`.
    pub(crate) fn prove_to(
        &self,
        id: u64,
        bound: u64,
        prove: Prover<'_, F>,
    ) -> Result<u64, ProofError> {
        let mut s = lock(&self.state);
        if s.segment != id {
            return Ok(0);
        }
        s.wanted = s.wanted.max(bound.saturating_add(self.reach));
        loop {
            if s.failed {
                return Err(ProofError::Poisoned);
            }
            let Some(file) = s.file.clone() else {
                return Ok(0);
            };
            let bound = bound.min(file.length());
            if s.to >= bound {
                return Ok(0);
            }
            if s.background {
                self.changed.notify_all();
                s = self.changed.wait(s).expect("a WAL thread panicked");
                continue;
            }
            let from = s.to;
            let proven = prove(&file, from, bound);
            return Self::take(&mut s, &self.changed, id, bound, proven);
        }
    }

    /// A roll starts segment `id` in `file`: if it is the file made ahead that the open found,
    /// it is proven from where recovery stopped, up to `header_bound` before this returns (the
    /// bound the new header names).
    pub(crate) fn roll_into(
        &self,
        id: u64,
        file: &Arc<F>,
        header_bound: u64,
        prove: Prover<'_, F>,
    ) -> Result<u64, ProofError> {
        {
            let mut s = lock(&self.state);
            s.segment = id;
            s.file = None;
            if s.next == Some(id) {
                s.next = None;
                s.file = Some(Arc::clone(file));
                s.to = s.next_from;
                s.wanted = header_bound.saturating_add(self.reach);
                self.changed.notify_all();
            }
        }
        self.prove_to(id, header_bound, prove)
    }

    /// The checker's next step: (segment, file, from, to), waiting for one; `None`: the
    /// checker ends (stopped, failed, or nothing left it could ever prove).
    pub(crate) fn next_step(&self) -> Option<(u64, Arc<F>, u64, u64)> {
        let mut s = lock(&self.state);
        loop {
            if s.stop || s.failed {
                return None;
            }
            match s.file.clone() {
                Some(file) => {
                    let end = s.wanted.min(file.length());
                    if s.to < end {
                        let to = end.min(s.to.saturating_add(self.step));
                        return Some((s.segment, file, s.to, to));
                    }
                }
                None if s.next.is_none() => return None,
                None => {}
            }
            s = self.changed.wait(s).expect("a WAL thread panicked");
        }
    }

    /// The outcome of the checker's step `(id, .., to)`; `Err` ends the checker.
    pub(crate) fn step_done(
        &self,
        id: u64,
        to: u64,
        proven: io::Result<u64>,
    ) -> Result<u64, ProofError> {
        let mut s = lock(&self.state);
        Self::take(&mut s, &self.changed, id, to, proven)
    }

    /// Tells the checker to stop (the log is closing).
    pub(crate) fn stop(&self) {
        lock(&self.state).stop = true;
        self.changed.notify_all();
    }

    /// The checker is joined (or never ran): from now on seals prove what they need.
    pub(crate) fn joined(&self) {
        lock(&self.state).background = false;
        self.changed.notify_all();
    }

    /// Takes the outcome of proving segment `id` up to `to`; wakes the waiters either way.
    fn take(
        s: &mut State<F>,
        changed: &Condvar,
        id: u64,
        to: u64,
        proven: io::Result<u64>,
    ) -> Result<u64, ProofError> {
        changed.notify_all();
        match proven {
            Ok(stray) => {
                if s.segment == id
                    && let Some(file) = &s.file
                {
                    s.to = s.to.max(to);
                    if s.to >= file.length() {
                        s.file = None;
                    }
                }
                Ok(stray)
            }
            Err(e) => {
                s.failed = true;
                Err(ProofError::Failed(e))
            }
        }
    }
}

/// The loom model of the checker, the seals, a roll and the close: the prover never meets what
/// the writer wrote, every byte under a named bound is proven, and nobody waits forever. Run
/// with `RUSTFLAGS="--cfg loom" cargo test -p timewheel-wal --lib --release loom_`. Checked:
/// with a seal's wait for the checker taken out, all three fail ("a named bound covered a byte
/// not proven zero"); with a seal proving beside a running checker, all three fail ("the
/// prover met bytes the writer wrote").
#[cfg(all(test, loom))]
mod loom_model {
    use super::*;
    use loom::sync::atomic::{AtomicU8, Ordering};
    use loom::thread;

    const ZERO: u8 = 0;
    const STRAY: u8 = 1;
    const WRITTEN: u8 = 2;

    /// A file of one byte a "page": zero, stray (something else wrote it), or written by the
    /// log's writer.
    struct Fake(Vec<AtomicU8>);

    impl Length for Fake {
        fn length(&self) -> u64 {
            self.0.len() as u64
        }
    }

    fn fake(len: usize, proven: usize) -> Arc<Fake> {
        Arc::new(Fake(
            (0..len)
                .map(|i| AtomicU8::new(if i < proven { ZERO } else { STRAY }))
                .collect(),
        ))
    }

    /// The prover: zeros over stray bytes; it must never meet a written one.
    fn prove(f: &Fake, from: u64, to: u64) -> io::Result<u64> {
        let mut stray = 0;
        for b in &f.0[from as usize..to as usize] {
            let v = b.load(Ordering::SeqCst);
            assert_ne!(v, WRITTEN, "the prover met bytes the writer wrote");
            if v == STRAY {
                b.store(ZERO, Ordering::SeqCst);
                stray += 1;
            }
        }
        Ok(stray)
    }

    /// The writer names each bound (a seal), then writes below it.
    fn write_below(f: &Fake, from: u64, to: u64) {
        for b in &f.0[from as usize..to as usize] {
            assert_eq!(
                b.swap(WRITTEN, Ordering::SeqCst),
                ZERO,
                "a named bound covered a byte not proven zero"
            );
        }
    }

    fn checker(proof: Arc<ZeroProof<Fake>>) -> thread::JoinHandle<()> {
        thread::spawn(move || {
            while let Some((id, file, from, to)) = proof.next_step() {
                // The step runs with no lock held: a seal may run meanwhile.
                thread::yield_now();
                if proof.step_done(id, to, prove(&file, from, to)).is_err() {
                    return;
                }
            }
        })
    }

    fn found(file: &Arc<Fake>, from: u64, next: Option<u64>) -> Found<Fake> {
        Found {
            segment: 1,
            file: Some(Arc::clone(file)),
            from,
            bound: from,
            next,
            next_from: 1,
            background: true,
        }
    }

    #[test]
    fn loom_the_checker_stays_ahead_of_the_seals_and_never_meets_the_writer() {
        loom::model(|| {
            let file = fake(4, 1);
            let proof = Arc::new(ZeroProof::new(found(&file, 1, None), 1, 1));
            let checker = checker(Arc::clone(&proof));
            for bound in 2..=3 {
                proof.prove_to(1, bound, &prove).unwrap();
                write_below(&file, bound - 1, bound);
            }
            // The close: the checker stops, is joined, and the last seal proves the rest.
            proof.stop();
            checker.join().unwrap();
            proof.joined();
            proof.prove_to(1, 4, &prove).unwrap();
            write_below(&file, 3, 4);
        });
    }

    #[test]
    fn loom_a_close_while_a_seal_waits_hands_the_proof_to_the_seal() {
        loom::model(|| {
            let file = fake(3, 1);
            let proof = Arc::new(ZeroProof::new(found(&file, 1, None), 1, 1));
            let checker = checker(Arc::clone(&proof));
            let writer = {
                let (proof, file) = (Arc::clone(&proof), Arc::clone(&file));
                thread::spawn(move || {
                    proof.prove_to(1, 3, &prove).unwrap();
                    write_below(&file, 1, 3);
                })
            };
            proof.stop();
            checker.join().unwrap();
            proof.joined();
            writer.join().unwrap();
        });
    }

    #[test]
    fn loom_a_roll_into_the_file_made_ahead_proves_it_before_its_header() {
        loom::model(|| {
            let first = fake(2, 2);
            let next = fake(3, 1);
            let proof = Arc::new(ZeroProof::new(found(&first, 2, Some(2)), 1, 1));
            let checker = checker(Arc::clone(&proof));
            proof.roll_into(2, &next, 2, &prove).unwrap();
            write_below(&next, 1, 2);
            proof.prove_to(2, 3, &prove).unwrap();
            write_below(&next, 2, 3);
            proof.stop();
            checker.join().unwrap();
            proof.joined();
        });
    }
}
