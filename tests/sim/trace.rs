//! The trace of a run: a hash of every observable outcome, to prove replays identical, and
//! (when verbose) a readable line per step on stderr.

/// FNV-1a over the events of a run.
pub struct Trace {
    hash: u64,
    verbose: bool,
}

impl Trace {
    pub fn new(verbose: bool) -> Trace {
        Trace {
            hash: 0xCBF2_9CE4_8422_2325,
            verbose,
        }
    }

    /// Adds one event (a code and its numbers) to the hash.
    pub fn event(&mut self, words: &[u64]) {
        for w in words {
            for b in w.to_le_bytes() {
                self.hash ^= u64::from(b);
                self.hash = self.hash.wrapping_mul(0x0000_0100_0000_01B3);
            }
        }
    }

    /// Prints a line when verbose; the closure runs only then.
    pub fn line(&self, f: impl FnOnce() -> String) {
        if self.verbose {
            eprintln!("{}", f());
        }
    }

    pub fn hash(&self) -> u64 {
        self.hash
    }
}
