//! `timewheel serve --metrics-addr`: the engine's metrics scraped over HTTP while it serves,
//! as Prometheus would; they follow what the client did (a schedule, then a cancel).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics listener");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    response
}

/// Scrapes until a line of the body is `want`, or gives up after 20 s (the engine publishes
/// every second).
fn wait_for_line(addr: &str, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = get(addr, "/metrics");
        if response.lines().any(|l| l == want) {
            return response;
        }
        assert!(Instant::now() < deadline, "no `{want}` in:\n{response}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn metrics_follow_the_jobs_over_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_timewheel"))
        .args(["serve", "--metrics-addr", "127.0.0.1:0", "--dir"])
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn timewheel serve");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("the metrics line");
    let addr = line
        .trim()
        .strip_prefix("timewheel serve: metrics at http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));

    let response = wait_for_line(&addr, "timewheel_jobs{state=\"scheduled\"} 0");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("# TYPE timewheel_jobs_finished_total counter"));

    writeln!(
        stdin,
        r#"{{"op":"schedule","req":1,"due_ms":4000000000000}}"#
    )
    .expect("send");
    let mut reply = String::new();
    stdout.read_line(&mut reply).expect("reply");
    assert!(reply.contains(r#""ok":true"#), "{reply}");
    let id: String = reply
        .split(r#""id":""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("an id")
        .to_owned();
    wait_for_line(&addr, "timewheel_jobs{state=\"scheduled\"} 1");

    writeln!(stdin, r#"{{"op":"cancel","req":2,"id":"{id}"}}"#).expect("send");
    reply.clear();
    stdout.read_line(&mut reply).expect("reply");
    assert!(reply.contains(r#""ok":true"#), "{reply}");
    let response = wait_for_line(&addr, "timewheel_jobs_finished_total{how=\"cancelled\"} 1");
    assert!(
        response
            .lines()
            .any(|l| l == "timewheel_jobs{state=\"scheduled\"} 0"),
        "{response}"
    );
    let journal = response
        .lines()
        .find_map(|l| l.strip_prefix("timewheel_store_bytes{part=\"journal\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .expect("journal bytes");
    assert!(journal > 0.0, "the journal holds the two records");
    let value = |name: &str| {
        response
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{response}"))
    };
    let syncs = value("timewheel_wal_syncs_total");
    assert!(
        syncs >= 2.0,
        "a durable schedule and a durable cancel: {syncs} syncs"
    );
    assert_eq!(
        value("timewheel_wal_sync_seconds_bucket{le=\"+Inf\"}"),
        syncs
    );
    assert_eq!(value("timewheel_wal_sync_seconds_count"), syncs);
    assert!(value("timewheel_wal_records_total") >= 2.0);

    assert!(get(&addr, "/nothing").starts_with("HTTP/1.1 404"));
    drop(stdin);
    assert!(child.wait().expect("wait").success());
}
