//! `timewheel serve --metrics-addr`: the engine's metrics (see `timewheel::metrics`) in the
//! Prometheus text format at `http://ADDR/metrics`, served by a thread of its own.
//!
//! The exporter crate renders the text; the listener is a few lines of std rather than the
//! crate's own (which would bring hyper and tokio into the binary). It answers one request per
//! connection, `GET /metrics` with 200 and anything else with 404, and gives up on a client that
//! sends nothing within five seconds.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// How long a scrape may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head read; the rest of a longer one is not read.
const REQUEST_BYTES_MAX: usize = 8 << 10;

/// Installs the Prometheus recorder as the global one and serves it on `addr`; returns the
/// address bound (the port is the system's choice when `addr` names port 0).
pub fn serve(addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(std::io::Error::other)?;
    std::thread::Builder::new()
        .name("timewheel-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(stream) => {
                        if let Err(e) = answer(stream, &handle) {
                            tracing::debug!(error = %e, "a metrics scrape failed");
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "accepting a metrics scrape"),
                }
            }
        })?;
    Ok(bound)
}

fn answer(stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let mut reader = BufReader::new(&stream);
    let mut request_line = String::new();
    reader
        .by_ref()
        .take(REQUEST_BYTES_MAX as u64)
        .read_line(&mut request_line)?;
    // The rest of the head (headers) up to the empty line, within the same bound.
    let mut read = request_line.len();
    loop {
        let mut line = String::new();
        let n = reader
            .by_ref()
            .take(REQUEST_BYTES_MAX as u64)
            .read_line(&mut line)?;
        read += n;
        if n == 0 || line == "\r\n" || line == "\n" || read >= REQUEST_BYTES_MAX {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) = if method == "GET" && (path == "/metrics" || path == "/") {
        ("200 OK", "text/plain; version=0.0.4", handle.render())
    } else {
        (
            "404 Not Found",
            "text/plain",
            "not found: try GET /metrics\n".to_owned(),
        )
    };
    let mut out = &stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}
