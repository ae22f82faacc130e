//! The sidecar: the engine for any language, as JSON lines on stdin/stdout
//! (`timewheel serve --dir DIR`).
//!
//! The protocol is a public contract (BRIEF.md section 4); in short:
//!
//! ```text
//! -> {"op":"schedule","req":1,"delay_ms":30000,"payload":"cancel order 42"}
//! <- {"req":1,"ok":true,"id":"7"}
//! <- {"event":"fired","id":"7","due_ms":1767225600000,"fired_ms":1767225600000,"attempt":1,"payload":"cancel order 42"}
//! -> {"op":"complete","req":2,"id":"7"}
//! <- {"req":2,"ok":true}
//! ```
//!
//! Requests: `schedule` (`due_ms` or `delay_ms`; optional `payload` text or `payload_b64`),
//! `cancel`, `reschedule`, `complete`, `fail`, `stats`, `shutdown`. Ids are strings of decimal
//! digits, times are numbers of ms since the Unix epoch. Errors are replies
//! `{"req":R,"ok":false,"error":{"kind":K,"message":M}}` and serving continues.
//!
//! Where the contract is silent, this implementation decides:
//! - Every reply carries `"req"`: `null` when the request had none or could not be read.
//! - Unknown fields are ignored (a newer client still works); `null` counts as absent for
//!   optional fields; a missing `error` in `fail` is an empty reason. An empty line is not
//!   JSON, and is answered like any other unreadable line.
//! - A `fired` event is never printed before the reply to its job's `schedule`.
//! - `complete`/`fail` are `not_found` unless this sidecar delivered the job and still holds its
//!   newest claim (so also after the lease ran out and the job was delivered again, until the
//!   client answers the new delivery). With `--auto-complete`, the sidecar holds no claims.
//! - `shutdown` is answered after the flush: its ok means everything is durable. Requests after
//!   it are ignored; no event follows its reply.
//! - `fired_ms` is when the job entered the ready queue (fired, or queued again after a lease
//!   ran out); an event is printed only once its claim is durable.
//! - Pipelined requests share syncs: each run of consecutive schedules, completes or cancels
//!   in what arrived together is one batch call with one durability wait; replies stay in
//!   order and each still means durable (docs/sidecar.md, "Batching").
//! - Additions: `complete` and `fail` take an optional `"attempt"` (the one from the event):
//!   then only that delivery is finished, else `not_found`; stats also report `redelivered`.
//! - A line's length is counted without its newline; a line over the limit is skipped up to
//!   its newline without being stored, and answered with `req` null.
//! - Through the library, a schedule is answered once durable in every durability mode.

mod lines;
pub mod protocol;
mod serve;

pub use protocol::{Parsed, Reply, Request, parse_line, render_fired, render_reply};
pub use serve::{ServeEnd, ServeOptions, serve};
