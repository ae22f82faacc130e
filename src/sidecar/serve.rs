//! The serving loop: requests in, replies and `fired` events out.
//!
//! Up to five threads:
//! - the *reader* reads request lines ahead into a small bounded queue of chunks, each chunk
//!   being the whole lines that had already arrived together;
//! - the *server* (the caller's thread) parses the requests of each chunk in order, handing
//!   each run of consecutive schedules, completes, cancels, reschedules or fails to the engine
//!   as one batch call. It appends a run of schedules or completes and goes on to the next
//!   run without waiting for its sync (a chunk's short last run, when the replier has
//!   nothing to answer, it answers itself after the sync, as a client that sends one request
//!   at a time needs);
//! - the *replier* answers those runs in request order, each once its records are durable
//!   (the sync it waits for carries every run appended meanwhile). The other requests wait
//!   until the replier has answered everything before them, and are then served as before:
//!   one batch call with one durability wait, answered at once;
//! - the *deliverer* takes the fired ids queued so far from `Engine::ready`, claims them with
//!   one durable `claim_batch` and prints their events in one write;
//! - with `--auto-complete`, the *completer* completes what the deliverer printed, with one
//!   `complete_batch` for everything delivered since its last one. The deliverer never waits
//!   on a complete's sync.
//!
//! The writers share the output behind one lock, one whole line (or run of lines) at a time,
//! so lines never interleave. A *gate* holds back the event of a job until its schedule reply
//! has been written: a client never sees an id in an event before the reply that gave it, and
//! never hears of a job firing that was not yet acknowledged as durable.

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded, never, select, unbounded};
use serde_json::Value;

use super::lines::{Line, LineReader};
use super::protocol::{
    Purge, Reply, Request, RetryWhen, ScheduleVerb, parse_line, render_fired, render_reply,
};
use crate::config::Config;
use crate::engine::{Engine, Pending};
use crate::error::{Error, Result};
use crate::job::{Claimed, JobId, JobSpec};

/// Largest number of request bytes in one chunk handed from the reader to the server.
const CHUNK_BYTES_MAX: usize = 256 << 10;
/// Largest number of lines in one chunk, and so in one schedule batch.
const CHUNK_LINES_MAX: usize = 4096;
/// Largest number of fired jobs claimed with one sync and printed with one write.
const DELIVER_BATCH_MAX: usize = 4096;
/// Largest number of jobs auto-completed with one sync.
const COMPLETE_BATCH_MAX: usize = 16384;
/// Chunks read ahead of the one being served. With `CHUNK_BYTES_MAX` plus one line of
/// `Config::line_bytes_max` per chunk, this bounds the memory held by read-ahead.
const CHUNKS_AHEAD_MAX: usize = 4;
/// Runs queued for the replier behind the one it is answering, at most: beyond this the server
/// waits, and the requests that arrive meanwhile make its next chunk larger.
const RUNS_QUEUED_MAX: usize = 16;
/// Longest run the server answers itself, as the last of its chunk when the replier is idle:
/// a client writing a request at a time, whose requests the wait batches; longer runs come
/// from pipelining clients, whose next requests are parsed and appended during the sync.
const INLINE_RUN_MAX: usize = 64;
/// Reply bytes gathered for one write, about: the runs queued behind a full buffer wait for
/// the next write.
const REPLY_BYTES_MAX: usize = 256 << 10;

/// How [`serve`] behaves, beyond the engine's [`Config`].
#[derive(Debug)]
pub struct ServeOptions {
    /// Longest request line accepted (`--max-line-bytes`); a longer one gets an error reply.
    pub line_bytes_max: usize,
    /// Complete each job right after printing its `fired` event (`--auto-complete`).
    pub auto_complete: bool,
    /// A message here, or the disconnection of its sender, stops serving like EOF does
    /// (SIGTERM in the binary). `None`: only EOF and the `shutdown` op stop.
    pub stop: Option<Receiver<()>>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            line_bytes_max: 1 << 20,
            auto_complete: false,
            stop: None,
        }
    }
}

/// Why [`serve`] returned. In each case the engine was shut down and everything flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeEnd {
    /// The input ended.
    Eof,
    /// A `{"op":"shutdown"}` request; its reply was written.
    Shutdown,
    /// [`ServeOptions::stop`] fired.
    Stopped,
}

/// Serves the sidecar protocol (BRIEF.md section 4) on `input` and `output` until EOF, a
/// `shutdown` request or [`ServeOptions::stop`], then shuts the engine down (flushing it).
///
/// `config` must be the configuration `engine` was opened with: it gives the batch limit.
///
/// A schedule is answered once its job is durable whatever `Config::durability` says, as the
/// protocol promises; the other changes are acknowledged as the durability mode says (durable
/// in the default `Sync`).
///
/// `input` is read on a thread of its own, which may outlive this call while it is blocked in
/// a read; it ends at the input's EOF, or with the process.
///
/// # Errors
/// Writing to `output` failed (the client is gone), or the final flush failed. Request errors
/// are replies, never `Err`s.
pub fn serve<W>(
    engine: &Engine,
    config: &Config,
    input: impl BufRead + Send + 'static,
    output: W,
    options: ServeOptions,
) -> Result<ServeEnd>
where
    W: Write + Send,
{
    let (chunk_tx, chunk_rx) = bounded(CHUNKS_AHEAD_MAX);
    let line_bytes_max = options.line_bytes_max;
    let realtime = config.timer_realtime;
    std::thread::Builder::new()
        .name("timewheel-sidecar-in".into())
        .spawn(move || read_chunks(LineReader::new(input, line_bytes_max), &chunk_tx))?;
    let server = Server {
        engine,
        out: Mutex::new(output),
        claims: Mutex::new(HashMap::new()),
        gate: Gate::default(),
        line_bytes_max,
        batch_jobs_max: config.batch_jobs_max.min(CHUNK_LINES_MAX),
        auto_complete: options.auto_complete,
        unanswered: AtomicUsize::new(0),
    };
    let stop = options.stop.unwrap_or_else(never);
    let outcome = std::thread::scope(|scope| {
        let (quit_tx, quit_rx) = bounded::<()>(0);
        // Each writer reports its failure with `try_send`: the first one stops the server.
        let (fatal_tx, fatal_rx) = bounded::<io::Error>(1);
        let server = &server;
        let (answer_tx, answer_rx) = bounded::<Unanswered>(RUNS_QUEUED_MAX);
        let replier = {
            let fatal_tx = fatal_tx.clone();
            std::thread::Builder::new()
                .name("timewheel-sidecar-reply".into())
                .spawn_scoped(scope, move || server.answer(&answer_rx, &fatal_tx))?
        };
        let (completer_tx, completer_rx) = if server.auto_complete {
            let (tx, rx) = unbounded::<Vec<Claimed>>();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let completer = completer_rx
            .map(|rx| {
                std::thread::Builder::new()
                    .name("timewheel-sidecar-complete".into())
                    .spawn_scoped(scope, move || server.auto_complete(&rx))
            })
            .transpose()?;
        let deliverer = std::thread::Builder::new()
            .name("timewheel-out".into())
            .spawn_scoped(scope, move || {
                // The fired job's path to the client goes on here after the timer thread: at
                // the same priority, so that it is not kept waiting for a CPU either (a
                // normal thread woken on this project's 2-vCPU machine waited up to a 4 ms
                // tick; docs/benchmarks.md). It waits whenever nothing has fired and whenever
                // the client is behind (a full pipe); the kernel's real-time throttling bounds
                // the rest.
                if realtime {
                    crate::engine::raise_priority("sidecar deliverer");
                }
                server.deliver(&quit_rx, &fatal_tx, completer_tx.as_ref());
            })?;
        let mut outcome = server.run(&chunk_rx, &stop, &fatal_rx, &answer_tx);
        // Every run appended is answered before anything else ends.
        drop(answer_tx);
        match replier.join() {
            Ok(Err(e)) if outcome.is_ok() => outcome = Err(e),
            Ok(_) => {}
            Err(panic) => std::panic::resume_unwind(panic),
        }
        drop(quit_tx);
        // The deliverer first: its end closes the completer's queue, and the completer then
        // finishes what it was handed before the engine shuts down.
        for handle in std::iter::once(deliverer).chain(completer) {
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
        outcome
    });
    // The reader thread sees the queue closed at its next send and ends.
    drop(chunk_rx);
    let flushed = engine.shutdown();
    match outcome? {
        Exit::Eof => flushed.map(|()| ServeEnd::Eof),
        Exit::Stopped => flushed.map(|()| ServeEnd::Stopped),
        Exit::Shutdown(req) => {
            // Answered after the flush, so that ok means everything is durable.
            let reply = match &flushed {
                Ok(()) => Reply::Done,
                Err(e) => Reply::engine_error(e),
            };
            server.write(&render_reply(&req, &reply))?;
            flushed.map(|()| ServeEnd::Shutdown)
        }
    }
}

/// Reads lines and sends them in chunks of those already buffered together.
fn read_chunks<R: BufRead>(mut reader: LineReader<R>, chunks: &Sender<Vec<Line>>) {
    loop {
        let mut chunk = Vec::new();
        let mut bytes = 0;
        let mut more = true;
        while more {
            match reader.next_line() {
                Ok(Some(line)) => {
                    bytes += match &line {
                        Line::Text(t) => t.len() + 1,
                        Line::TooLong => 1,
                    };
                    chunk.push(line);
                }
                Ok(None) => more = false,
                Err(e) => {
                    tracing::warn!(error = %e, "reading requests failed; treating it as EOF");
                    more = false;
                }
            }
            if !more || bytes >= CHUNK_BYTES_MAX || chunk.len() >= CHUNK_LINES_MAX {
                break;
            }
            if !reader.line_buffered() {
                break;
            }
        }
        if !chunk.is_empty() && chunks.send(chunk).is_err() {
            return; // Serving stopped.
        }
        if !more {
            return; // Dropping the sender tells the server: EOF.
        }
    }
}

/// How the request loop ended.
enum Exit {
    Eof,
    Stopped,
    /// The `req` of the shutdown request, to echo once flushed.
    Shutdown(Value),
}

struct Server<'e, W> {
    engine: &'e Engine,
    out: Mutex<W>,
    /// The jobs this sidecar delivered and the client has not finished yet, by id: the newest
    /// claim of each (a redelivery after a lease ran out replaces the older one).
    claims: Mutex<HashMap<JobId, Claimed>>,
    gate: Gate,
    line_bytes_max: usize,
    batch_jobs_max: usize,
    auto_complete: bool,
    /// Runs handed to the replier and not yet written (marks included). Only the server adds
    /// to it, so once it reads zero it stays zero until the server hands over again.
    unanswered: AtomicUsize,
}

/// Where the server's answer to a run goes: to the replier, or (`inline`, when nothing is
/// waiting for it there) written by the server itself once the run is durable.
struct Answers<'a> {
    replier: &'a Sender<Unanswered>,
    inline: bool,
}

impl<W: Write + Send> Server<'_, W> {
    /// Writes whole lines and flushes, under the output lock.
    fn write(&self, lines: &[u8]) -> io::Result<()> {
        let mut out = lock(&self.out);
        out.write_all(lines)?;
        out.flush()
    }

    fn run(
        &self,
        chunks: &Receiver<Vec<Line>>,
        stop: &Receiver<()>,
        fatal: &Receiver<io::Error>,
        answers: &Sender<Unanswered>,
    ) -> io::Result<Exit> {
        loop {
            select! {
                recv(chunks) -> chunk => match chunk {
                    Ok(lines) => {
                        if let Some(req) = self.serve_chunk(lines, answers)? {
                            return Ok(Exit::Shutdown(req));
                        }
                    }
                    Err(_) => return Ok(Exit::Eof),
                },
                recv(stop) -> _ => return Ok(Exit::Stopped),
                recv(fatal) -> e => {
                    return Err(e.unwrap_or_else(|_| io::Error::other("event delivery stopped")));
                }
            }
        }
    }

    /// Answers a chunk of requests in order. Returns the `req` of a shutdown request, after
    /// which the rest of the input is ignored.
    ///
    /// Consecutive requests of one batchable kind (schedules, completes, cancels) go to the
    /// engine as one batch call: one log append and one durability wait for the whole run,
    /// answered in order once it is durable. Runs of schedules and completes are handed to
    /// the replier once appended, unless it has nothing to answer and the run is the chunk's
    /// last and short (at most [`INLINE_RUN_MAX`] requests): then the server waits for the
    /// sync and answers itself, as before the replier existed, and the requests that arrive
    /// meanwhile make the next chunk larger (a client that writes one request at a time gets
    /// its requests batched as before, with no extra thread hop). Every other request first
    /// waits until the replier has answered all before it.
    fn serve_chunk(
        &self,
        lines: Vec<Line>,
        answers: &Sender<Unanswered>,
    ) -> io::Result<Option<Value>> {
        let mut requests = lines
            .into_iter()
            .map(|line| match line {
                Line::Text(bytes) => {
                    let p = parse_line(&bytes);
                    (p.req, p.request)
                }
                Line::TooLong => (
                    Value::Null,
                    Err(format!("line longer than {} bytes", self.line_bytes_max)),
                ),
            })
            .peekable();
        while let Some((req, request)) = requests.next() {
            let kind = RunKind::of(&request);
            let mut run = vec![(req, request)];
            if kind != RunKind::Single {
                while run.len() < self.batch_jobs_max
                    && requests.peek().is_some_and(|(_, r)| RunKind::of(r) == kind)
                {
                    run.push(requests.next().expect("peeked"));
                }
            }
            let idle = self.unanswered.load(Ordering::Acquire) == 0;
            if !idle && !matches!(kind, RunKind::Schedule | RunKind::Complete) {
                self.answered_so_far(answers)?;
            }
            let answers = Answers {
                replier: answers,
                inline: idle && requests.peek().is_none() && run.len() <= INLINE_RUN_MAX,
            };
            match kind {
                RunKind::Schedule => self.schedule_run(
                    run.into_iter()
                        .map(|(req, r)| match r {
                            Ok(Request::Schedule(spec)) => (req, spec),
                            _ => unreachable!("a run of schedules"),
                        })
                        .collect(),
                    &answers,
                )?,
                RunKind::Complete => self.complete_run(
                    run.into_iter()
                        .map(|(req, r)| match r {
                            Ok(Request::Complete(id, attempt)) => (req, id, attempt),
                            _ => unreachable!("a run of completes"),
                        })
                        .collect(),
                    &answers,
                )?,
                RunKind::Reschedule => self.reschedule_run(
                    run.into_iter()
                        .map(|(req, r)| match r {
                            Ok(Request::Reschedule(id, due_ms)) => (req, id, due_ms),
                            _ => unreachable!("a run of reschedules"),
                        })
                        .collect(),
                )?,
                RunKind::Fail => self.fail_run(
                    run.into_iter()
                        .map(|(req, r)| match r {
                            Ok(Request::Fail(id, reason, attempt, retryable)) => {
                                (req, id, reason, attempt, retryable)
                            }
                            _ => unreachable!("a run of fails"),
                        })
                        .collect(),
                )?,
                RunKind::Cancel => self.cancel_run(
                    run.into_iter()
                        .map(|(req, r)| match r {
                            Ok(Request::Cancel(id)) => (req, id),
                            _ => unreachable!("a run of cancels"),
                        })
                        .collect(),
                )?,
                RunKind::Single => {
                    let (req, request) = run.pop().expect("one request");
                    match request {
                        Ok(Request::Shutdown) => return Ok(Some(req)),
                        Ok(request) => self.write(&render_reply(&req, &self.execute(request)))?,
                        Err(message) => {
                            self.write(&render_reply(&req, &Reply::bad_request(message)))?;
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// Completes a run of consecutive `complete` requests with one append and hands it to
    /// the replier, which answers each in order once the completes are durable, as it would
    /// have been answered alone: ok, or `not_found` unless this sidecar holds the job's claim
    /// (the one `attempt` names).
    fn complete_run(
        &self,
        run: Vec<(Value, JobId, Option<u32>)>,
        answers: &Answers<'_>,
    ) -> io::Result<()> {
        // The claim each request finishes, looked up as `fail` does. A job named twice gets
        // the same claim twice; the engine finishes it once and answers false the second
        // time, so the second request is not_found, as it would be one by one.
        let held = self.held_claims(run.iter().map(|(_, id, attempt)| (*id, *attempt)));
        let finished: Vec<Claimed> = held.iter().flatten().cloned().collect();
        let appended = if finished.is_empty() {
            Ok((Vec::new(), None))
        } else {
            tracing::trace!(
                jobs = finished.len(),
                "completing a run of requests as one batch"
            );
            self.engine.complete_batch_nowait(&finished)
        };
        let keys: Vec<(Value, JobId)> = run.into_iter().map(|(req, id, _)| (req, id)).collect();
        let unanswered = match appended {
            Ok((done, lsn)) => Unanswered::Completes {
                keys,
                held,
                done,
                lsn,
            },
            // Nothing was appended: answered with the error, in order.
            Err(e) => Unanswered::Ready(finish_replies(
                keys.iter().map(|(req, id)| (req, *id)),
                &held,
                &Err(e),
            )),
        };
        self.settle(answers, unanswered)
    }

    /// The claims this sidecar holds for `(id, attempt)` requests: the newest delivery, or
    /// exactly the attempt a request names.
    fn held_claims(
        &self,
        keys: impl Iterator<Item = (JobId, Option<u32>)>,
    ) -> Vec<Option<Claimed>> {
        let claims = lock(&self.claims);
        keys.map(|(id, attempt)| {
            claims
                .get(&id)
                .filter(|c| attempt.is_none_or(|a| a == c.attempt))
                .cloned()
        })
        .collect()
    }

    /// Forgets finished claims, unless a redelivery replaced one meanwhile.
    fn forget_claims<'c>(&self, finished: impl IntoIterator<Item = &'c Claimed>) {
        let mut claims = lock(&self.claims);
        for c in finished {
            if claims.get(&c.id).is_some_and(|h| h.attempt == c.attempt) {
                claims.remove(&c.id);
            }
        }
    }

    /// Reschedules a run of consecutive `reschedule` requests with one `reschedule_batch` (one
    /// durability wait), then answers each in order. A due time out of range refuses the whole
    /// batch and writes nothing; then each is tried alone, so only the bad one is refused.
    fn reschedule_run(&self, run: Vec<(Value, JobId, u64)>) -> io::Result<()> {
        let moves: Vec<(JobId, u64)> = run.iter().map(|&(_, id, due)| (id, due)).collect();
        let result = match self.engine.reschedule_batch(&moves) {
            Err(Error::InvalidInput { .. }) if moves.len() > 1 => None,
            other => Some(other),
        };
        let mut lines = Vec::with_capacity(run.len() * 48);
        for (i, (req, id, due_ms)) in run.iter().enumerate() {
            let reply = match &result {
                Some(Ok(outcomes)) => Reply::Rescheduled(outcomes[i].is_done()),
                Some(Err(e)) => Reply::engine_error(e),
                None => match self.engine.reschedule(*id, *due_ms) {
                    Ok(o) => Reply::Rescheduled(o.is_done()),
                    Err(e) => Reply::engine_error(&e),
                },
            };
            lines.extend_from_slice(&render_reply(req, &reply));
        }
        self.write(&lines)
    }

    /// Fails a run of consecutive `fail` requests with one `fail_batch` (one durability wait),
    /// answering each as it would have been answered alone. A reason over the limit refuses the
    /// whole batch; then each is tried alone.
    fn fail_run(&self, run: Vec<FailRequest>) -> io::Result<()> {
        let alone = |(req, id, reason, attempt, retryable): &FailRequest| {
            render_reply(req, &self.fail(*id, *attempt, reason, *retryable))
        };
        if run.len() == 1 {
            return self.write(&alone(&run[0]));
        }
        let held = self.held_claims(run.iter().map(|(_, id, _, attempt, _)| (*id, *attempt)));
        let batch: Vec<(Claimed, &str, bool)> = run
            .iter()
            .zip(&held)
            .filter_map(|((_, _, reason, _, retryable), h)| {
                h.clone().map(|c| (c, reason.as_str(), *retryable))
            })
            .collect();
        let result = self.engine.fail_each(&batch);
        if let Err(Error::InvalidInput { .. }) = result {
            let mut lines = Vec::new();
            for request in &run {
                lines.extend_from_slice(&alone(request));
            }
            return self.write(&lines);
        }
        if result.is_ok() {
            let finished: Vec<Claimed> = batch.into_iter().map(|(c, _, _)| c).collect();
            self.forget_claims(&finished);
        }
        let keys = run.iter().map(|(req, id, _, _, _)| (req, *id));
        self.write(&finish_replies(keys, &held, &result))
    }

    /// Cancels a run of consecutive `cancel` requests with one `cancel_batch` (one durability
    /// wait), then answers each in order.
    fn cancel_run(&self, run: Vec<(Value, JobId)>) -> io::Result<()> {
        let ids: Vec<JobId> = run.iter().map(|(_, id)| *id).collect();
        if ids.len() > 1 {
            tracing::trace!(
                jobs = ids.len(),
                "cancelling a run of requests as one batch"
            );
        }
        let result = self.engine.cancel_batch(&ids);
        let mut lines = Vec::with_capacity(run.len() * 48);
        for (i, (req, _)) in run.iter().enumerate() {
            let reply = match &result {
                // An id named twice is NotFound the second time: false, as one by one.
                Ok(outcomes) => Reply::Cancelled(outcomes[i].is_done()),
                Err(e) => Reply::engine_error(e),
            };
            lines.extend_from_slice(&render_reply(req, &reply));
        }
        self.write(&lines)
    }

    /// Schedules consecutive requests as one batch when they are all valid, else one by one,
    /// and hands each batch to the replier, which answers each request in order once its job
    /// is durable.
    fn schedule_run(&self, run: Vec<(Value, JobSpec)>, answers: &Answers<'_>) -> io::Result<()> {
        if run.len() > 1 {
            let specs: Vec<JobSpec> = run.iter().map(|(_, spec)| spec.clone()).collect();
            tracing::trace!(
                jobs = run.len(),
                "scheduling a run of requests as one batch"
            );
            match self.engine.schedule_batch_nowait(specs) {
                Ok((ids, pending)) => {
                    let reqs = run.into_iter().map(|(req, _)| req).collect();
                    return self.settle(answers, Unanswered::Schedules { reqs, ids, pending });
                }
                // Nothing was written: find the bad ones and schedule the rest one by one.
                Err(Error::InvalidInput { .. }) => {}
                // Not a matter of input, and nothing was appended: one answer for all.
                Err(e) => {
                    let lines = replies_alike(run.iter().map(|(req, _)| req), &e);
                    return self.settle(answers, Unanswered::Ready(lines));
                }
            }
        }
        for (req, spec) in run {
            let unanswered = match self.engine.schedule_batch_nowait([spec]) {
                Ok((ids, pending)) => Unanswered::Schedules {
                    reqs: vec![req],
                    ids,
                    pending,
                },
                Err(e) => Unanswered::Ready(render_reply(&req, &Reply::engine_error(&e))),
            };
            self.settle(answers, unanswered)?;
        }
        Ok(())
    }

    /// Answers `run`: on this thread when `answers.inline` (the replier has nothing to
    /// answer, so the order holds), else through the replier.
    fn settle(&self, answers: &Answers<'_>, run: Unanswered) -> io::Result<()> {
        if !answers.inline {
            return self.hand_over(answers.replier, run);
        }
        let (mut lines, mut marks) = (Vec::new(), Vec::new());
        self.answer_run(run, &mut lines, &mut marks);
        let written = self.write(&lines);
        self.gate.open();
        written
    }

    /// Queues a run for the replier; fails only when the replier has stopped (its write
    /// failed).
    fn hand_over(&self, answers: &Sender<Unanswered>, run: Unanswered) -> io::Result<()> {
        self.unanswered.fetch_add(1, Ordering::AcqRel);
        answers.send(run).map_err(|_| replier_gone())
    }

    /// Waits until the replier has answered every run handed to it so far.
    fn answered_so_far(&self, answers: &Sender<Unanswered>) -> io::Result<()> {
        let (done_tx, done_rx) = bounded(1);
        self.hand_over(answers, Unanswered::Mark(done_tx))?;
        done_rx.recv().map_err(|_| replier_gone())
    }

    /// The replier: answers the runs the server appended, in order, each once its records
    /// are acknowledged (a schedule batch: committed, so its jobs are visible and may fire).
    /// The replies of the runs queued behind one that are acknowledged by then (the same sync
    /// covered them) go out in the same write: a client that pipelines single requests gets
    /// its replies in a few large writes, not one per request. Ends when the server drops its
    /// sender, or at the first failed write (also reported on `fatal`, which stops the
    /// server).
    fn answer(&self, runs: &Receiver<Unanswered>, fatal: &Sender<io::Error>) -> io::Result<()> {
        let mut lines = Vec::new();
        let mut marks = Vec::new();
        let mut next = None;
        loop {
            let Some(mut run) = next.take().or_else(|| runs.recv().ok()) else {
                return Ok(());
            };
            let mut answered = 0;
            loop {
                self.answer_run(run, &mut lines, &mut marks);
                answered += 1;
                if lines.len() >= REPLY_BYTES_MAX {
                    break;
                }
                match runs.try_recv() {
                    Ok(r) if self.answers_at_once(&r) => run = r,
                    Ok(r) => {
                        // Its sync is still to come: what is answered goes out first.
                        next = Some(r);
                        break;
                    }
                    Err(_) => break,
                }
            }
            let written = self.write(&lines);
            lines.clear();
            self.gate.open();
            self.unanswered.fetch_sub(answered, Ordering::AcqRel);
            for done in marks.drain(..) {
                let _ = done.send(());
            }
            if let Err(e) = written {
                let _ = fatal.try_send(io::Error::new(e.kind(), e.to_string()));
                return Err(e);
            }
        }
    }

    /// Whether `run` can be answered without waiting for a sync.
    fn answers_at_once(&self, run: &Unanswered) -> bool {
        match run {
            Unanswered::Ready(_) | Unanswered::Mark(_) => true,
            Unanswered::Schedules { pending, .. } => self.engine.is_acknowledged(pending.lsn()),
            Unanswered::Completes { lsn, .. } => lsn.is_none_or(|l| self.engine.is_acknowledged(l)),
        }
    }

    /// Appends the replies to `run` to `lines`, once its records are acknowledged. The events
    /// of the jobs it schedules are held back (the gate) until the caller has written
    /// `lines`; a mark is kept in `marks` for the caller to signal after that write.
    fn answer_run(&self, run: Unanswered, lines: &mut Vec<u8>, marks: &mut Vec<Sender<()>>) {
        match run {
            Unanswered::Ready(ready) => lines.extend_from_slice(&ready),
            Unanswered::Mark(done) => marks.push(done),
            Unanswered::Schedules { reqs, ids, pending } => {
                if let (Some(first), Some(last)) = (ids.first(), ids.last()) {
                    self.gate.hold(first.0..=last.0);
                }
                match self.engine.commit(pending) {
                    Ok(()) => {
                        for (req, id) in reqs.iter().zip(ids) {
                            lines.extend_from_slice(&render_reply(req, &Reply::Scheduled(id)));
                        }
                    }
                    Err(e) => lines.extend_from_slice(&replies_alike(&reqs, &e)),
                }
            }
            Unanswered::Completes {
                keys,
                held,
                done,
                lsn,
            } => {
                let result = match lsn {
                    Some(lsn) => self.engine.wait_acknowledged(lsn).map(|()| done),
                    None => Ok(done),
                };
                if result.is_ok() {
                    self.forget_claims(held.iter().flatten());
                }
                let keys = keys.iter().map(|(req, id)| (req, *id));
                lines.extend_from_slice(&finish_replies(keys, &held, &result));
            }
        }
    }

    /// Runs a request that is served alone: reschedule, fail, stats.
    fn execute(&self, request: Request) -> Reply {
        let e = self.engine;
        let result = match request {
            Request::Reschedule(id, due_ms) => e
                .reschedule(id, due_ms)
                .map(|o| Reply::Rescheduled(o.is_done())),
            Request::Fail(id, reason, attempt, retryable) => {
                return self.fail(id, attempt, &reason, retryable);
            }
            Request::Retry(id, when, attempt) => {
                let due_ms = match when {
                    RetryWhen::At(t) => t,
                    RetryWhen::After(d) => e.clock_now_ms().saturating_add(d),
                };
                return self.end_held(id, attempt, |c| e.retry_at(c, due_ms));
            }
            Request::Extend(id, lease_ms, attempt) => return self.extend(id, attempt, lease_ms),
            Request::DlqList(query) => e
                .dead_letters(&query)
                .map(|page| Reply::Dead(page.jobs, page.next.and_then(|q| q.after))),
            Request::DlqRequeue(ids) => e
                .requeue_dead(&ids)
                .map(|done| Reply::Requeued(done.iter().filter(|&&d| d).count() as u64)),
            Request::DlqPurge(what) => match what {
                Purge::Ids(ids) => e
                    .purge_dead(&ids)
                    .map(|done| done.iter().filter(|&&d| d).count() as u64),
                Purge::Tenant(t) => e.purge_dead_where(Some(t)),
                Purge::All => e.purge_dead_where(None),
            }
            .map(Reply::Purged),
            Request::SchedulesList(after, limit) => e.schedules(after, limit).map(Reply::Schedules),
            Request::ScheduleOp(verb, id) => match verb {
                ScheduleVerb::Pause => e.pause_schedule(id),
                ScheduleVerb::Resume => e.resume_schedule(id),
                ScheduleVerb::Delete => e.delete_schedule(id),
            }
            .map(|o| Reply::ScheduleDone(o.is_done())),
            Request::Stats => Ok(Reply::Stats(Box::new(e.stats()))),
            Request::Schedule(_) | Request::Complete(..) | Request::Cancel(_) => {
                unreachable!("batched requests are served in runs by serve_chunk")
            }
            Request::Shutdown => unreachable!("shutdown is served by serve_chunk"),
        };
        result.unwrap_or_else(|e| Reply::engine_error(&e))
    }

    /// Fails a job through the claim this sidecar holds: the newest delivery, or exactly
    /// `attempt` when the client names it. Retried under its policy when `retryable`, dead
    /// otherwise.
    fn fail(&self, id: JobId, attempt: Option<u32>, reason: &str, retryable: bool) -> Reply {
        self.end_held(id, attempt, |c| {
            if retryable {
                self.engine.fail(c, reason)
            } else {
                self.engine.fail_permanently(c, reason)
            }
        })
    }

    /// Extends the lease of the delivery this sidecar holds.
    fn extend(&self, id: JobId, attempt: Option<u32>, lease_ms: u64) -> Reply {
        let held = lock(&self.claims).get(&id).cloned();
        let Some(claimed) = held.filter(|c| attempt.is_none_or(|a| a == c.attempt)) else {
            return Reply::not_found(id);
        };
        match self
            .engine
            .extend_lease(&claimed, Duration::from_millis(lease_ms))
        {
            Ok(Some(until)) => {
                if let Some(c) = lock(&self.claims)
                    .get_mut(&id)
                    .filter(|c| c.attempt == claimed.attempt)
                {
                    c.lease_until_ms = until;
                }
                Reply::LeaseUntil(until)
            }
            Ok(None) => Reply::not_found(id),
            Err(e) => Reply::engine_error(&e),
        }
    }

    /// Ends the delivery this sidecar holds with `end` (a fail or a retry), and forgets it.
    fn end_held(
        &self,
        id: JobId,
        attempt: Option<u32>,
        end: impl FnOnce(&Claimed) -> Result<bool>,
    ) -> Reply {
        let held = lock(&self.claims).get(&id).cloned();
        let Some(claimed) = held.filter(|c| attempt.is_none_or(|a| a == c.attempt)) else {
            return Reply::not_found(id);
        };
        match end(&claimed) {
            Ok(done) => {
                // Forget the claim, unless a redelivery replaced it meanwhile.
                let mut claims = lock(&self.claims);
                if claims
                    .get(&id)
                    .is_some_and(|c| c.attempt == claimed.attempt)
                {
                    claims.remove(&id);
                }
                if done {
                    Reply::Done
                } else {
                    // The lease ran out and the job was delivered again (or is about to be).
                    Reply::not_found(id)
                }
            }
            // Kept: a refused reason wrote nothing, and the client may try again.
            Err(e) => Reply::engine_error(&e),
        }
    }

    /// The deliverer: takes fired ids in batches, claims each batch with one durable
    /// `claim_batch` (the claims are durable before any event is printed: the fencing
    /// guarantee), prints the batch's events in one write, and hands them to the completer
    /// with `--auto-complete`. It never waits for a complete, so a sync for completes never
    /// delays the next fired event. Runs until `quit` closes.
    fn deliver(
        &self,
        quit: &Receiver<()>,
        fatal: &Sender<io::Error>,
        completer: Option<&Sender<Vec<Claimed>>>,
    ) {
        let ready = self.engine.ready();
        let mut ids = Vec::with_capacity(DELIVER_BATCH_MAX);
        loop {
            ids.clear();
            select! {
                recv(quit) -> _ => return,
                recv(ready) -> id => match id {
                    Ok(id) => ids.push(id),
                    Err(_) => return,
                },
            }
            // Whatever else fired meanwhile shares this claim's append.
            ids.extend(ready.try_iter().take(DELIVER_BATCH_MAX - 1));
            let claimed: Vec<Claimed> = match self.engine.claim_batch(&ids) {
                // None: cancelled or rescheduled after it fired, nothing to deliver.
                Ok(claimed) => claimed.into_iter().flatten().collect(),
                Err(e) => {
                    // The ids come back by themselves once unclaimed for a lease.
                    tracing::warn!(jobs = ids.len(), error = %e, "claiming fired jobs failed");
                    continue;
                }
            };
            if claimed.is_empty() {
                continue;
            }
            let mut lines = Vec::with_capacity(claimed.len() * 96);
            for c in &claimed {
                self.gate.wait_open(c.id);
                lines.extend_from_slice(&render_fired(c, c.ready_at_ms));
            }
            if completer.is_none() {
                // Held before the events are out, so the client's complete always finds them.
                let mut claims = lock(&self.claims);
                for c in &claimed {
                    claims.insert(c.id, c.clone());
                }
            }
            if let Err(e) = self.write(&lines) {
                let _ = fatal.try_send(e);
                return;
            }
            if let Some(completer) = completer {
                // Unbounded: the completer never holds the deliverer up. It ends only after
                // this thread, so the send succeeds.
                let _ = completer.send(claimed);
            }
        }
    }

    /// The completer of `--auto-complete`: completes the delivered jobs with one
    /// `complete_batch` (one durability wait) for all that were delivered meanwhile. Ends once
    /// the deliverer ended and everything it handed over is completed.
    fn auto_complete(&self, delivered: &Receiver<Vec<Claimed>>) {
        while let Ok(mut batch) = delivered.recv() {
            while batch.len() < COMPLETE_BATCH_MAX {
                match delivered.try_recv() {
                    Ok(more) => batch.extend(more),
                    Err(_) => break,
                }
            }
            match self.engine.complete_batch(&batch) {
                Ok(done) => {
                    for (c, done) in batch.iter().zip(done) {
                        if !done {
                            tracing::debug!(id = %c.id, "auto-complete after the lease ran out");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(jobs = batch.len(), error = %e, "auto-complete failed");
                }
            }
        }
    }
}

/// The replies to a run of completes or fails, in order: ok when the engine finished the job,
/// `not_found` when this sidecar held no such claim or the engine no longer took it (its lease
/// ran out and it was delivered again, or the run named it twice), the error for all when the
/// batch failed (the client may try again).
fn finish_replies<'a>(
    keys: impl Iterator<Item = (&'a Value, JobId)>,
    held: &[Option<Claimed>],
    result: &Result<Vec<bool>>,
) -> Vec<u8> {
    let mut done = result.as_ref().map(|d| d.iter());
    let mut lines = Vec::with_capacity(held.len() * 32);
    for ((req, id), held) in keys.zip(held) {
        let reply = match (held, &mut done) {
            (None, _) => Reply::not_found(id),
            (Some(_), Ok(done)) => {
                if *done.next().expect("one answer per claim") {
                    Reply::Done
                } else {
                    Reply::not_found(id)
                }
            }
            (Some(_), Err(e)) => Reply::engine_error(e),
        };
        lines.extend_from_slice(&render_reply(req, &reply));
    }
    lines
}

/// A `fail` request of a run: `req`, id, reason, attempt, retryable.
type FailRequest = (Value, JobId, String, Option<u32>, bool);

/// A run the server appended (or answered already), waiting in order for the replier.
enum Unanswered {
    /// Replies written as they are: nothing to wait for.
    Ready(Vec<u8>),
    /// A batch of schedules in the log: committed, then answered with its ids.
    Schedules {
        reqs: Vec<Value>,
        ids: Vec<JobId>,
        pending: Pending,
    },
    /// A batch of completes in the log (`lsn`, when something was appended): answered once it
    /// is acknowledged, as `finish_replies` says; the claims in `held` are then let go.
    Completes {
        keys: Vec<(Value, JobId)>,
        held: Vec<Option<Claimed>>,
        done: Vec<bool>,
        lsn: Option<timewheel_wal::Lsn>,
    },
    /// Everything before it is answered: the replier says so.
    Mark(Sender<()>),
}

/// The same error reply to each of `reqs`, in order.
fn replies_alike<'a>(reqs: impl IntoIterator<Item = &'a Value>, e: &Error) -> Vec<u8> {
    let reply = Reply::engine_error(e);
    let mut lines = Vec::new();
    for req in reqs {
        lines.extend_from_slice(&render_reply(req, &reply));
    }
    lines
}

fn replier_gone() -> io::Error {
    io::Error::other("the reply writer stopped")
}

/// How a request is served: batched with its neighbours of the same kind, or alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunKind {
    Schedule,
    Complete,
    Cancel,
    Reschedule,
    Fail,
    /// Stats, shutdown and bad requests: one at a time.
    Single,
}

impl RunKind {
    fn of(request: &std::result::Result<Request, String>) -> Self {
        match request {
            Ok(Request::Schedule(_)) => RunKind::Schedule,
            Ok(Request::Complete(..)) => RunKind::Complete,
            Ok(Request::Cancel(_)) => RunKind::Cancel,
            Ok(Request::Reschedule(..)) => RunKind::Reschedule,
            Ok(Request::Fail(..)) => RunKind::Fail,
            _ => RunKind::Single,
        }
    }
}

/// Holds back the events of the jobs whose schedule reply is not written yet.
#[derive(Default)]
struct Gate {
    /// The ids of the batches being acknowledged (those of one write of replies).
    pending: Mutex<Option<RangeInclusive<u64>>>,
    opened: Condvar,
}

impl Gate {
    fn wait_open(&self, id: JobId) {
        let mut pending = lock(&self.pending);
        while pending.as_ref().is_some_and(|r| r.contains(&id.0)) {
            pending = self.opened.wait(pending).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Holds back the events of `ids` too, until [`Gate::open`].
    fn hold(&self, ids: RangeInclusive<u64>) {
        let mut pending = lock(&self.pending);
        *pending = Some(match pending.take() {
            Some(held) => *held.start().min(ids.start())..=*held.end().max(ids.end()),
            None => ids,
        });
    }

    /// Lets every held event go.
    fn open(&self) {
        *lock(&self.pending) = None;
        self.opened.notify_all();
    }
}

/// Locks a mutex of the sidecar. Its data stays consistent across a panic (a map of claims,
/// a writer between lines), so a poisoned lock is taken over rather than propagated.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
