//! Redis as a sorted set of jobs (`ZADD jobs due id`), durable through its append-only file,
//! with `appendfsync always` (every write synced before the reply, like the engine) or
//! `everysec` (up to a second of acknowledged writes lost in a crash).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::PeerResult;

/// When Redis syncs its append-only file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    /// Before every reply.
    Always,
    /// Once a second, in the background.
    EverySec,
}

impl Fsync {
    fn arg(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::EverySec => "everysec",
        }
    }
}

/// `redis-server --version`'s first line, or `None` when it is not on PATH.
pub fn version() -> Option<String> {
    let out = Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A `redis-server` child on 127.0.0.1, killed when dropped.
pub struct Server {
    child: Child,
    /// Its port.
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// A port nobody listens on now (the OS picks it; the server binds it right after).
fn free_port() -> PeerResult<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

impl Server {
    /// Starts a server with its files in `dir` (fresh), AOF on with `fsync`, no RDB saves.
    pub fn start(dir: &Path, fsync: Fsync) -> PeerResult<Server> {
        std::fs::create_dir_all(dir)?;
        let port = free_port()?;
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "yes", "--appendfsync", fsync.arg()])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server not available ({e})"))?;
        let server = Server { child, port };
        for _ in 0..200 {
            if let Ok(mut c) = server.connect() {
                // Up, and done loading.
                if command(&mut c, &["PING"]).is_ok_and(|r| r == "+PONG") {
                    return Ok(server);
                }
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Err("redis-server did not start".into())
    }

    fn connect(&self) -> PeerResult<(TcpStream, BufReader<TcpStream>)> {
        let conn = TcpStream::connect(("127.0.0.1", self.port))?;
        conn.set_nodelay(true)?;
        let reader = BufReader::new(conn.try_clone()?);
        Ok((conn, reader))
    }

    /// `INFO memory`'s `used_memory`, in bytes.
    pub fn used_memory(&self) -> PeerResult<u64> {
        let mut c = self.connect()?;
        let mut buf = Vec::new();
        resp(&mut buf, &["INFO", "memory"]);
        c.0.write_all(&buf)?;
        let mut line = String::new();
        c.1.read_line(&mut line)?;
        let len: usize = line
            .trim()
            .strip_prefix('$')
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| format!("unexpected reply {line:?}"))?;
        let mut body = vec![0u8; len + 2];
        std::io::Read::read_exact(&mut c.1, &mut body)?;
        let body = String::from_utf8_lossy(&body);
        body.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| "no used_memory in INFO".into())
    }
}

/// Sends one command and returns its one-line reply.
fn command(c: &mut (TcpStream, BufReader<TcpStream>), args: &[&str]) -> PeerResult<String> {
    let mut buf = Vec::new();
    resp(&mut buf, args);
    c.0.write_all(&buf)?;
    let mut line = String::new();
    c.1.read_line(&mut line)?;
    Ok(line.trim_end().to_owned())
}

fn resp(out: &mut Vec<u8>, args: &[&str]) {
    write!(out, "*{}\r\n", args.len()).expect("vec write");
    for a in args {
        write!(out, "${}\r\n{a}\r\n", a.len()).expect("vec write");
    }
}

fn resp_zadd(out: &mut Vec<u8>, score: u64, member: u64) {
    resp(
        out,
        &["ZADD", "jobs", &score.to_string(), &member.to_string()],
    );
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

/// ZADDs `jobs` members (member `first + k`), pipelined `batch` at a time over one connection.
pub fn zadd_pipelined(server: &Server, first: u64, jobs: u64, batch: u64) -> PeerResult<()> {
    let (mut conn, mut reader) = server.connect()?;
    let mut i = 0;
    let mut buf = Vec::new();
    while i < jobs {
        buf.clear();
        let n = batch.min(jobs - i);
        for k in i..i + n {
            resp_zadd(&mut buf, first + k, first + k);
        }
        conn.write_all(&buf)?;
        read_replies(&mut reader, n)?;
        i += n;
    }
    Ok(())
}

/// ZREMs the members `k` below `jobs` with `k % 10 != 0` (nine in ten of what
/// [`zadd_pipelined`] added from 0), pipelined `batch` at a time over one connection.
pub fn zrem_nine_in_ten(server: &Server, jobs: u64, batch: u64) -> PeerResult<()> {
    let (mut conn, mut reader) = server.connect()?;
    let members: Vec<u64> = (0..jobs).filter(|k| k % 10 != 0).collect();
    let mut buf = Vec::new();
    for chunk in members.chunks(batch as usize) {
        buf.clear();
        for k in chunk {
            resp(&mut buf, &["ZREM", "jobs", &k.to_string()]);
        }
        conn.write_all(&buf)?;
        read_replies(&mut reader, chunk.len() as u64)?;
    }
    Ok(())
}

/// Durable ZADDs per second, pipelined `batch` at a time over one connection.
pub fn batch(server: &Server, jobs: u64, batch: u64) -> PeerResult<f64> {
    let t = Instant::now();
    zadd_pipelined(server, 0, jobs, batch)?;
    Ok(jobs as f64 / t.elapsed().as_secs_f64())
}

/// Durable ZADDs per second, one at a time from each of `clients` connections.
pub fn single(server: &Server, clients: usize, secs: f64) -> PeerResult<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..clients as u64)
        .map(|c| {
            let (stop, count) = (stop.clone(), count.clone());
            let conn = server.connect().map_err(|e| e.to_string());
            std::thread::spawn(move || -> Result<(), String> {
                let (mut conn, mut reader) = conn?;
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
