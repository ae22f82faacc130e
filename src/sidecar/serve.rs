//! The serving loop: requests in, replies and `fired` events out.
//!
//! Three threads:
//! - the *reader* reads request lines ahead into a small bounded queue of chunks, each chunk
//!   being the whole lines that had already arrived together;
//! - the *server* (the caller's thread) answers the requests of each chunk in order, handing
//!   runs of consecutive schedules to the engine as one batch with one durability wait;
//! - the *deliverer* takes fired ids from `Engine::ready`, claims each and prints its event.
//!
//! Both writers share the output behind one lock, one whole line (or run of lines) at a time,
//! so lines never interleave. A *gate* holds back the event of a job until its schedule reply
//! has been written: a client never sees an id in an event before the reply that gave it, and
//! never hears of a job firing that was not yet acknowledged as durable.

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::ops::RangeInclusive;
use std::sync::{Condvar, Mutex, MutexGuard};

use crossbeam_channel::{Receiver, Sender, bounded, never, select};
use serde_json::Value;

use super::lines::{Line, LineReader};
use super::protocol::{Reply, Request, parse_line, render_fired, render_reply};
use crate::config::Config;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::job::{Claimed, JobId, JobSpec};

/// Largest number of request bytes in one chunk handed from the reader to the server.
const CHUNK_BYTES_MAX: usize = 256 << 10;
/// Largest number of lines in one chunk, and so in one schedule batch.
const CHUNK_LINES_MAX: usize = 4096;
/// Chunks read ahead of the one being served. With `CHUNK_BYTES_MAX` plus one line of
/// `Config::line_bytes_max` per chunk, this bounds the memory held by read-ahead.
const CHUNKS_AHEAD_MAX: usize = 4;

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
    };
    let stop = options.stop.unwrap_or_else(never);
    let outcome = std::thread::scope(|scope| {
        let (quit_tx, quit_rx) = bounded::<()>(0);
        let (fatal_tx, fatal_rx) = bounded::<io::Error>(1);
        let server = &server;
        let deliverer = std::thread::Builder::new()
            .name("timewheel-sidecar-out".into())
            .spawn_scoped(scope, move || server.deliver(&quit_rx, &fatal_tx))?;
        let outcome = server.run(&chunk_rx, &stop, &fatal_rx);
        drop(quit_tx);
        if let Err(panic) = deliverer.join() {
            std::panic::resume_unwind(panic);
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
    ) -> io::Result<Exit> {
        loop {
            select! {
                recv(chunks) -> chunk => match chunk {
                    Ok(lines) => {
                        if let Some(req) = self.serve_chunk(lines)? {
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
    fn serve_chunk(&self, lines: Vec<Line>) -> io::Result<Option<Value>> {
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
        let mut run = Vec::new();
        while let Some((req, request)) = requests.next() {
            match request {
                Ok(Request::Schedule(spec)) => {
                    run.push((req, spec));
                    let next_is_schedule =
                        matches!(requests.peek(), Some((_, Ok(Request::Schedule(_)))));
                    if !next_is_schedule || run.len() >= self.batch_jobs_max {
                        self.schedule_run(std::mem::take(&mut run))?;
                    }
                }
                Ok(Request::Shutdown) => return Ok(Some(req)),
                Ok(request) => self.write(&render_reply(&req, &self.execute(request)))?,
                Err(message) => self.write(&render_reply(&req, &Reply::bad_request(message)))?,
            }
        }
        Ok(None)
    }

    /// Schedules consecutive requests as one batch when they are all valid, else one by one,
    /// and answers each in order once its job is durable.
    fn schedule_run(&self, run: Vec<(Value, JobSpec)>) -> io::Result<()> {
        if run.len() > 1 {
            let specs: Vec<JobSpec> = run.iter().map(|(_, spec)| spec.clone()).collect();
            let reply_all = |replies: &mut dyn Iterator<Item = Reply>| {
                let mut lines = Vec::with_capacity(run.len() * 48);
                for ((req, _), reply) in run.iter().zip(replies) {
                    lines.extend_from_slice(&render_reply(req, &reply));
                }
                self.write(&lines)
            };
            tracing::trace!(
                jobs = run.len(),
                "scheduling a run of requests as one batch"
            );
            match self.schedule_durable(specs) {
                Ok((ids, _gate)) => return reply_all(&mut ids.into_iter().map(Reply::Scheduled)),
                // Nothing was written: find the bad ones and schedule the rest one by one.
                Err(Error::InvalidInput { .. }) => {}
                // Not a matter of input, and the batch may be in the log: one answer for all.
                Err(e) => return reply_all(&mut std::iter::repeat(Reply::engine_error(&e))),
            }
        }
        for (req, spec) in run {
            let reply = match self.schedule_durable(vec![spec]) {
                // The gate stays shut until this reply is out.
                Ok((ids, _gate)) => self.write(&render_reply(&req, &Reply::Scheduled(ids[0]))),
                Err(e) => self.write(&render_reply(&req, &Reply::engine_error(&e))),
            };
            reply?;
        }
        Ok(())
    }

    /// Schedules and waits until durable. The jobs' events are held back until
    /// the returned guard is dropped, which the caller does after writing the replies.
    fn schedule_durable(&self, specs: Vec<JobSpec>) -> Result<(Vec<JobId>, GateGuard<'_>)> {
        let mut pending = lock(&self.gate.pending);
        let (ids, committed) = self.engine.schedule_batch_nowait(specs)?;
        // Ids of one batch are consecutive; the range covers them all in any case.
        *pending = ids.first().zip(ids.last()).map(|(a, b)| a.0..=b.0);
        drop(pending);
        let guard = GateGuard(&self.gate);
        self.engine.commit(committed)?;
        Ok((ids, guard))
    }

    /// Runs a request other than schedule and shutdown.
    fn execute(&self, request: Request) -> Reply {
        let e = self.engine;
        let result = match request {
            Request::Cancel(id) => e.cancel(id).map(|o| Reply::Cancelled(o.is_done())),
            Request::Reschedule(id, due_ms) => e
                .reschedule(id, due_ms)
                .map(|o| Reply::Rescheduled(o.is_done())),
            Request::Complete(id, attempt) => return self.finish(id, attempt, None),
            Request::Fail(id, reason, attempt) => return self.finish(id, attempt, Some(&reason)),
            Request::Stats => Ok(Reply::Stats(Box::new(e.stats()))),
            Request::Schedule(_) | Request::Shutdown => {
                unreachable!("schedule and shutdown are served by serve_chunk")
            }
        };
        result.unwrap_or_else(|e| Reply::engine_error(&e))
    }

    /// Completes (`reason` None) or fails a job through the claim this sidecar holds: the
    /// newest delivery, or exactly `attempt` when the client names it.
    fn finish(&self, id: JobId, attempt: Option<u32>, reason: Option<&str>) -> Reply {
        let held = lock(&self.claims).get(&id).cloned();
        let Some(claimed) = held.filter(|c| attempt.is_none_or(|a| a == c.attempt)) else {
            return Reply::not_found(id);
        };
        let result = match reason {
            None => self.engine.complete(&claimed),
            Some(reason) => self.engine.fail(&claimed, reason),
        };
        match result {
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

    /// The deliverer: claims fired jobs and prints their events until `quit` closes.
    fn deliver(&self, quit: &Receiver<()>, fatal: &Sender<io::Error>) {
        let ready = self.engine.ready();
        loop {
            let id = select! {
                recv(quit) -> _ => return,
                recv(ready) -> id => match id {
                    Ok(id) => id,
                    Err(_) => return,
                },
            };
            self.gate.wait_open(id);
            let claimed = match self.engine.claim(id) {
                Ok(Some(claimed)) => claimed,
                // Cancelled or rescheduled after it fired: nothing to deliver.
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(%id, error = %e, "claiming a fired job failed");
                    continue;
                }
            };
            let line = render_fired(&claimed, claimed.ready_at_ms);
            if !self.auto_complete {
                // Held before the event is out, so the client's complete always finds it.
                lock(&self.claims).insert(id, claimed.clone());
            }
            if let Err(e) = self.write(&line) {
                let _ = fatal.send(e);
                return;
            }
            if self.auto_complete {
                match self.engine.complete(&claimed) {
                    Ok(true) => {}
                    Ok(false) => tracing::debug!(%id, "auto-complete after the lease ran out"),
                    Err(e) => tracing::warn!(%id, error = %e, "auto-complete failed"),
                }
            }
        }
    }
}

/// Holds back the events of the jobs whose schedule reply is not written yet.
#[derive(Default)]
struct Gate {
    /// The ids of the batch being acknowledged.
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
}

/// Opens the gate when dropped, on every path out of a schedule.
struct GateGuard<'a>(&'a Gate);

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        *lock(&self.0.pending) = None;
        self.0.opened.notify_all();
    }
}

/// Locks a mutex of the sidecar. Its data stays consistent across a panic (a map of claims,
/// a writer between lines), so a poisoned lock is taken over rather than propagated.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
