//! `examples/metrics_http.rs` against real servers (Redis 7 and Valkey 9),
//! once by address and once by password URL: run with `--once`, it
//! serves one scrape of `/metrics` whose body is the Prometheus text
//! format, with the messages it published delivered and timed in the lag
//! histogram, then exits cleanly.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support;

/// Runs the example on `server` with `--once`, scrapes it, and returns
/// the response (head and body), or what it printed when it stopped
/// before listening.
fn scrape(bin: &PathBuf, server: &str) -> Result<String, String> {
    let mut child = Command::new(bin)
        .args([server, "--listen", "127.0.0.1:0", "--once"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let Some(addr) = line
        .trim()
        .strip_prefix("listening on http://")
        .and_then(|l| l.strip_suffix("/metrics"))
    else {
        let out = child.wait_with_output().unwrap();
        assert!(
            !out.status.success(),
            "{server}: exited 0 without listening"
        );
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    };
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nAccept: */*\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).unwrap();
    // With --once it exits after the one request; wait_with_output blocks
    // until then (a hang would leave the test runner's timeout to act).
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{server}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(response)
}

/// The value of the unlabelled sample `name`.
fn value(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing:\n{body}"))
}

#[test]
fn the_metrics_example_serves_one_scrape_on_real_servers() {
    let bin = support::examples::example_binary("metrics_http");
    for kind in testkit::kinds() {
        let server = testkit::Server::start(kind).unwrap();
        let plain = server.addr().to_string();
        server
            .cmd_str(&["CONFIG", "SET", "requirepass", "sc r@pe"])
            .unwrap();
        let url = format!("redis://:sc%20r%40pe@{}", server.addr());
        // Without the password the example cannot start: it says why (the
        // server's NOAUTH) instead of serving an empty page.
        match scrape(&bin, &plain) {
            Err(stderr) => assert!(stderr.contains("NOAUTH"), "{kind:?}: {stderr}"),
            Ok(r) => panic!("{kind:?}: served without the password: {r}"),
        }
        {
            let target = &url;
            let what = format!("{kind:?} {target}");
            let response = scrape(&bin, target).unwrap_or_else(|e| panic!("{what}: {e}"));
            let (head, body) = response
                .split_once("\r\n\r\n")
                .unwrap_or_else(|| panic!("{what}: {response}"));
            assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{what}: {head}");
            assert!(
                head.contains("Content-Type: text/plain; version=0.0.4"),
                "{what}: {head}"
            );
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|l| l.parse().ok())
                .unwrap_or_else(|| panic!("{what}: {head}"));
            assert_eq!(len, body.len(), "{what}");
            // Every family once, with HELP and TYPE; the ten messages
            // published, delivered and timed.
            let types = body.lines().filter(|l| l.starts_with("# TYPE ")).count();
            let helps = body.lines().filter(|l| l.starts_with("# HELP ")).count();
            assert_eq!(types, 26, "{what}:\n{body}");
            assert_eq!(helps, types, "{what}");
            assert_eq!(value(body, "shardsub_published_total"), 10.0, "{what}");
            assert_eq!(
                value(body, "shardsub_delivered_messages_total"),
                10.0,
                "{what}"
            );
            assert_eq!(value(body, "shardsub_lag_seconds_count"), 10.0, "{what}");
            assert!(
                body.lines()
                    .any(|l| l == "shardsub_lag_seconds_bucket{le=\"+Inf\"} 10"),
                "{what}:\n{body}"
            );
            assert_eq!(value(body, "shardsub_channels"), 1.0, "{what}");
        }
    }
}
