//! A small async service on timewheel: "cancel unpaid orders". Orders come in on tasks; each
//! schedules a durable cancellation 2 s ahead; payments cancel it (by the job id the order
//! kept); workers take the cancellations that fire from a stream and complete them.
//!
//! `cargo run --release --example async_service --features async`
//!
//! It prints what happened and the engine's figures, then drains and closes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use timewheel::{Config, Engine, JobId, JobSpec};

/// Next item of a stream without a helper crate.
async fn next<S: futures_core::Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *stream).poll_next(cx)).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> timewheel::Result<()> {
    let dir = std::env::temp_dir().join(format!("timewheel-async-service-{}", std::process::id()));
    let engine = Arc::new(Engine::open(Config::new(&dir))?);
    // order number -> the job that cancels it if it stays unpaid
    let unpaid: Arc<Mutex<HashMap<u64, JobId>>> = Arc::default();
    let started = Instant::now();

    // 64 order tasks, 200 orders each.
    let orders: Vec<_> = (0..64u64)
        .map(|task| {
            let (engine, unpaid) = (engine.clone(), unpaid.clone());
            tokio::spawn(async move {
                for i in 0..200u64 {
                    let order = task * 1_000 + i;
                    let spec = JobSpec::after(Duration::from_secs(2)).payload(order.to_le_bytes());
                    let id = engine.schedule_async(spec).await?;
                    unpaid.lock().expect("orders").insert(order, id);
                }
                Ok::<_, timewheel::Error>(())
            })
        })
        .collect();
    for o in orders {
        o.await.expect("order task")?;
    }
    let scheduled_in = started.elapsed();
    let syncs = engine.log_stats().syncs;

    // Two of three orders get paid: their cancellation is cancelled.
    let paid: Vec<JobId> = unpaid
        .lock()
        .expect("orders")
        .iter()
        .filter(|(order, _)| *order % 3 != 0)
        .map(|(_, &id)| id)
        .collect();
    let outcomes = engine.cancel_batch_async(&paid).await?;
    let paid_in_time = outcomes.iter().filter(|o| o.is_done()).count();

    // Workers: take the cancellations as they fire, "cancel the order", complete the job.
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let mut cancelled = 0u64;
                let mut stream = engine.claimed_stream(64);
                while let Some(job) = next(&mut stream).await {
                    let job = job?;
                    let order = u64::from_le_bytes(job.payload[..8].try_into().expect("8 bytes"));
                    debug_assert_eq!(order % 3, 0, "only unpaid orders are cancelled");
                    engine.complete_async(&job).await?;
                    cancelled += 1;
                }
                Ok::<_, timewheel::Error>(cancelled)
            })
        })
        .collect();

    // Wait until every unpaid order's cancellation has run, then drain: the stream ends.
    let unpaid_orders = 64 * 200 - paid_in_time as u64;
    while engine.stats().completed < unpaid_orders {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    engine.drain(Duration::from_secs(5))?;
    let mut cancelled = 0;
    for w in workers {
        cancelled += w.await.expect("worker")?;
    }
    let stats = engine.stats();
    println!(
        "{} orders scheduled from 64 tasks in {:.0} ms ({} syncs: {:.0} schedules each)",
        64 * 200,
        scheduled_in.as_secs_f64() * 1e3,
        syncs,
        (64 * 200) as f64 / syncs.max(1) as f64
    );
    println!("{paid_in_time} paid in time; {cancelled} unpaid orders cancelled when due");
    println!(
        "fire lateness p50 {} us, p99 {} us; claim wait p99 {} us",
        stats.lateness_us_p50, stats.lateness_us_p99, stats.claim_wait_us_p99
    );
    Arc::into_inner(engine).expect("tasks done").close()?;
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
