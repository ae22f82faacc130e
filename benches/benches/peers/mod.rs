// Peers for the engine benchmark, included into `engine.rs`. SQLite through rusqlite (bundled,
// so the version is pinned by the lock file) and Redis through a minimal RESP client over TCP
// to a `redis-server` this code starts on a loopback port, with AOF fsync on every write.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

type PeerResult<T> = Result<T, Box<dyn std::error::Error>>;

fn sqlite_open(dir: &Path) -> PeerResult<rusqlite::Connection> {
    std::fs::create_dir_all(dir)?;
    let c = rusqlite::Connection::open(dir.join("jobs.db"))?;
    c.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
         CREATE TABLE jobs(id INTEGER PRIMARY KEY, due_ms INTEGER NOT NULL, state INTEGER NOT NULL, payload BLOB);
         CREATE INDEX jobs_due ON jobs(state, due_ms);",
    )?;
    Ok(c)
}

/// Durable inserts per second, one transaction per batch.
pub fn sqlite_batch(dir: &Path, jobs: u64, batch: u64) -> PeerResult<f64> {
    let mut c = sqlite_open(dir)?;
    let t = Instant::now();
    let mut i = 0;
    while i < jobs {
        let tx = c.transaction()?;
        {
            let mut st =
                tx.prepare_cached("INSERT INTO jobs(due_ms, state, payload) VALUES (?1, 0, ?2)")?;
            for k in i..(i + batch).min(jobs) {
                st.execute(rusqlite::params![k as i64, &[7u8; 16][..]])?;
            }
        }
        tx.commit()?;
        i += batch;
    }
    Ok(jobs as f64 / t.elapsed().as_secs_f64())
}

/// Durable inserts per second, one row per transaction, one connection.
pub fn sqlite_single(dir: &Path, secs: f64) -> PeerResult<f64> {
    let c = sqlite_open(dir)?;
    let t = Instant::now();
    let mut n = 0u64;
    let mut st = c.prepare("INSERT INTO jobs(due_ms, state, payload) VALUES (?1, 0, ?2)")?;
    while t.elapsed().as_secs_f64() < secs {
        st.execute(rusqlite::params![n as i64, &[7u8; 16][..]])?;
        n += 1;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

struct RedisServer {
    child: Child,
    port: u16,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn redis_start(dir: &Path) -> PeerResult<RedisServer> {
    std::fs::create_dir_all(dir)?;
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "yes", "--appendfsync", "always"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("redis-server not available ({e})"))?;
    let server = RedisServer { child, port };
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(server);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err("redis-server did not start".into())
}

fn resp_zadd(out: &mut Vec<u8>, score: u64, member: u64) {
    let (s, m) = (score.to_string(), member.to_string());
    write!(
        out,
        "*4\r\n$4\r\nZADD\r\n$4\r\njobs\r\n${}\r\n{s}\r\n${}\r\n{m}\r\n",
        s.len(),
        m.len()
    )
    .expect("vec write");
}

fn read_replies(r: &mut BufReader<TcpStream>, n: u64) -> PeerResult<()> {
    let mut line = String::new();
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line)?;
        if !line.starts_with(':') {
            return Err(format!("unexpected reply {line:?}").into());
        }
    }
    Ok(())
}

/// Durable ZADDs per second, pipelined `batch` at a time over one connection.
pub fn redis_batch(dir: &Path, jobs: u64, batch: u64) -> PeerResult<f64> {
    let server = redis_start(dir)?;
    let mut conn = TcpStream::connect(("127.0.0.1", server.port))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let t = Instant::now();
    let mut i = 0;
    let mut buf = Vec::new();
    while i < jobs {
        buf.clear();
        let n = batch.min(jobs - i);
        for k in i..i + n {
            resp_zadd(&mut buf, k, k);
        }
        conn.write_all(&buf)?;
        read_replies(&mut reader, n)?;
        i += n;
    }
    Ok(jobs as f64 / t.elapsed().as_secs_f64())
}

/// Durable ZADDs per second, one at a time from each of `clients` connections.
pub fn redis_single(dir: &Path, clients: usize, secs: f64) -> PeerResult<f64> {
    let server = redis_start(dir)?;
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..clients as u64)
        .map(|c| {
            let (stop, count, port) = (stop.clone(), count.clone(), server.port);
            std::thread::spawn(move || -> Result<(), String> {
                let mut conn =
                    TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
                let mut reader = BufReader::new(conn.try_clone().map_err(|e| e.to_string())?);
                let mut buf = Vec::new();
                let mut k = c << 40;
                while !stop.load(Ordering::Relaxed) {
                    buf.clear();
                    resp_zadd(&mut buf, k, k);
                    conn.write_all(&buf).map_err(|e| e.to_string())?;
                    read_replies(&mut reader, 1).map_err(|e| e.to_string())?;
                    count.fetch_add(1, Ordering::Relaxed);
                    k += 1;
                }
                Ok(())
            })
        })
        .collect();
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().map_err(|_| "client thread panicked")??;
    }
    Ok(count.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64())
}
