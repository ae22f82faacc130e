//! Idempotency keys: the calls that find a job by its key alone (a payment service knows the
//! order number, not the job id). Keys are taken by `schedule` (see `JobSpec::key`).

use super::Engine;
use crate::error::Result;
use crate::job::{JobId, JobInfo, Outcome};

impl Engine {
    /// The id of the job holding idempotency key `key` (live, or dead in the dead-letter set;
    /// a job kept on disk beyond the horizon too), if any.
    pub fn id_by_key(&self, key: &[u8]) -> Option<JobId> {
        let h = super::table::key_hash(key);
        self.shared.lock_state().keys.held(h, key)
    }

    /// A snapshot of the live job holding `key`, like [`Engine::get`].
    pub fn get_by_key(&self, key: &[u8]) -> Option<JobInfo> {
        self.id_by_key(key).and_then(|id| self.get(id))
    }

    /// Cancels the job holding `key`, like [`Engine::cancel`] (`NotFound` when no job holds
    /// it). Cancelling frees the key.
    pub fn cancel_by_key(&self, key: &[u8]) -> Result<Outcome> {
        match self.id_by_key(key) {
            Some(id) => self.cancel(id),
            None => Ok(Outcome::NotFound),
        }
    }

    /// Moves the job holding `key` to `due_ms`, like [`Engine::reschedule`].
    pub fn reschedule_by_key(&self, key: &[u8], due_ms: u64) -> Result<Outcome> {
        match self.id_by_key(key) {
            Some(id) => self.reschedule(id, due_ms),
            None => Ok(Outcome::NotFound),
        }
    }
}
