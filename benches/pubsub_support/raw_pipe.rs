//! The server's own limit for subscribing many channels: a raw pipe of
//! `SUBSCRIBE` commands of 512 channels each over plain sockets, written as
//! fast as the server takes them while a reader per connection waits for the
//! last confirmation. No client library is involved, so its time is what
//! the server needs; a client's time over it is the client's overhead.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Channels per `SUBSCRIBE` command, as the engine batches them.
pub const BATCH: usize = 512;

/// Opens `connections` sockets (RESP3, as the engine speaks), splits
/// `channels` over them round-robin in blocks of [`BATCH`], pipes the
/// `SUBSCRIBE` commands and returns how long until every connection had
/// its last confirmation, or `None` after `bound`. The sockets stay open
/// (returned) so the caller can kill them or let them go.
pub fn subscribe_all(
    addr: SocketAddr,
    connections: usize,
    channels: &[Vec<u8>],
    bound: Duration,
) -> (Option<Duration>, Vec<TcpStream>) {
    let start = Instant::now();
    let blocks: Vec<&[Vec<u8>]> = channels.chunks(BATCH).collect();
    let mut handles = Vec::new();
    for c in 0..connections {
        let mine: Vec<Vec<u8>> = blocks
            .iter()
            .skip(c)
            .step_by(connections)
            .map(|b| encode(b))
            .collect();
        let total: usize = blocks
            .iter()
            .skip(c)
            .step_by(connections)
            .map(|b| b.len())
            .sum();
        handles.push(std::thread::spawn(move || pipe(addr, mine, total, bound)));
    }
    let mut socks = Vec::new();
    let mut ok = true;
    for h in handles {
        match h.join() {
            Ok(Some(s)) => socks.push(s),
            _ => ok = false,
        }
    }
    (ok.then(|| start.elapsed()), socks)
}

/// `SUBSCRIBE` of `names`, encoded.
fn encode(names: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n$9\r\nSUBSCRIBE\r\n", names.len() + 1).into_bytes();
    for n in names {
        out.extend_from_slice(format!("${}\r\n", n.len()).as_bytes());
        out.extend_from_slice(n);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One connection: `HELLO 3`, every command written by a writer thread
/// while this one reads until the confirmation that counts `total`
/// channels (each confirmation ends with `:<count>\r\n`, counting up).
fn pipe(
    addr: SocketAddr,
    commands: Vec<Vec<u8>>,
    total: usize,
    bound: Duration,
) -> Option<TcpStream> {
    let mut sock = TcpStream::connect(addr).ok()?;
    sock.set_nodelay(true).ok()?;
    sock.set_read_timeout(Some(bound)).ok()?;
    sock.write_all(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n").ok()?;
    let mut writer = sock.try_clone().ok()?;
    let w = std::thread::spawn(move || {
        for c in &commands {
            if writer.write_all(c).is_err() {
                return;
            }
        }
    });
    let want = format!(":{total}\r\n").into_bytes();
    let deadline = Instant::now() + bound;
    let mut buf = vec![0u8; 1 << 16];
    let mut tail: Vec<u8> = Vec::with_capacity(64);
    let done = loop {
        if Instant::now() > deadline {
            break false;
        }
        let n = match sock.read(&mut buf) {
            Ok(0) | Err(_) => break false,
            Ok(n) => n,
        };
        // Only the end of the stream matters: keep its last bytes.
        tail.extend_from_slice(&buf[n.saturating_sub(32)..n]);
        let cut = tail.len().saturating_sub(32);
        tail.drain(..cut);
        if tail.ends_with(&want)
            && tail.len() > want.len()
            && tail[tail.len() - want.len() - 1] == b'\n'
        {
            break true;
        }
    };
    let _ = w.join();
    done.then_some(sock)
}
