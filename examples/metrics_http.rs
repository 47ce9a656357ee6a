//! Serves a `PubSub`'s metrics on `/metrics` in the Prometheus text format,
//! with nothing but `std::net::TcpListener`.
//!
//! ```text
//! cargo run --example metrics_http -- 127.0.0.1:6379
//! cargo run --example metrics_http -- redis://:secret@127.0.0.1:6379 --listen 127.0.0.1:9898
//! curl http://127.0.0.1:9898/metrics
//! ```
//!
//! The server (or URL) is one the user started. The example subscribes to
//! one channel and publishes to it ten times a second, with the envelope
//! on so the lag histogram fills. `--once` publishes a few messages, waits
//! for them, serves a single request and exits (the smoke test,
//! `tests/suite/examples/metrics_http.rs`, runs it so).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::{handler_fn, PubSub};

/// Longest request head read (a scrape's is a few hundred bytes).
const MAX_HEAD: usize = 8 << 10;
const CHANNEL: &str = "metrics-demo";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Arguments: the server, then `--listen ADDR` and `--once` in any order.
    let mut args = std::env::args().skip(1);
    let mut server = None;
    let mut listen = "127.0.0.1:9898".to_string();
    let mut once = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--once" => once = true,
            "--listen" => listen = args.next().ok_or("--listen needs an address")?,
            _ if server.is_none() => server = Some(a),
            _ => return Err(format!("unexpected argument {a:?}").into()),
        }
    }
    let server =
        server.ok_or("usage: metrics_http <host:port | redis://…> [--listen ADDR] [--once]")?;

    // A URL or a plain address: both are one server.
    let builder = if server.contains("://") {
        PubSub::builder().url(&server)
    } else {
        PubSub::builder().address(server)
    };
    // The envelope stamps each payload with its publish time, so the lag
    // histogram has values to show.
    let ps = Arc::new(
        builder
            .envelope(true)
            .workers(1)
            .handler(handler_fn(|_, _| {}))
            .build()?,
    );
    ps.subscribe([CHANNEL])?;
    ps.wait_active(&[CHANNEL], Duration::from_secs(5))?;

    if once {
        // A few messages, and a bounded wait until the handler got them.
        for i in 0..10u32 {
            ps.publish(CHANNEL, i.to_le_bytes())?;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while ps.metrics().delivered < 10 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    } else {
        // A publisher in the background, ten messages a second.
        let p = ps.clone();
        std::thread::spawn(move || loop {
            let _ = p.publish(CHANNEL, b"tick");
            std::thread::sleep(Duration::from_millis(100));
        });
    }

    let listener = TcpListener::bind(&listen)?;
    // The bound address (with `--listen 127.0.0.1:0`, the port the OS
    // chose), on its own line, for whoever started us.
    println!("listening on http://{}/metrics", listener.local_addr()?);
    std::io::stdout().flush()?;

    let mut body = String::new();
    for stream in listener.incoming() {
        // A failed accept (the client gave up) is that client's problem.
        let Ok(stream) = stream else { continue };
        if let Err(e) = serve(stream, &ps, &mut body) {
            eprintln!("request failed: {e}");
        }
        if once {
            break;
        }
    }
    ps.shutdown();
    Ok(())
}

/// Reads one request head and answers it: the metrics on `GET /metrics`,
/// 404 elsewhere. `body` is reused between requests.
fn serve(stream: TcpStream, ps: &PubSub, body: &mut String) -> std::io::Result<()> {
    // A client that sends nothing must not hold the only thread forever.
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.take(MAX_HEAD as u64));
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Read the rest of the head (up to the blank line) so closing the
    // socket does not reset a connection with unread bytes.
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next(), parts.next());
    let mut stream = reader.into_inner().into_inner();
    if method == Some("GET") && path == Some("/metrics") {
        body.clear();
        ps.render_prometheus(body);
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )?;
        stream.write_all(body.as_bytes())?;
    } else {
        let msg = "only GET /metrics is served\n";
        write!(
            stream,
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{msg}",
            msg.len()
        )?;
    }
    stream.flush()
}
