//! What fire-and-forget publishing over TLS allocates: rustls allocates per
//! TLS record (up to 16 KiB of publishes each), never per message. Measured
//! with the counting allocator on every thread, against a real Redis with
//! TLS (the plain path's zero is `tests/suite/alloc/publish.rs`).

use std::time::{Duration, Instant};

use shardsub::engine::{Engine, PublishOptions};
use shardsub::TlsConfig;
use testkit::{kinds, ServerKind, TlsAuthClients};

use crate::support::tls::Pki;
use crate::GLOBAL;

fn publish_all(e: &Engine, n: u64, payload: &[u8]) {
    let target = e.stats().replies + n;
    for _ in 0..n {
        e.publish(b"alloc-test", payload).unwrap();
    }
    let marker = e.publish_pending(b"alloc-test", b"end", PublishOptions::classic());
    marker.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while e.stats().replies < target {
        assert!(Instant::now() < deadline, "replies missing");
        std::thread::yield_now();
    }
}

#[test]
fn tls_publishing_allocates_per_record_not_per_message() {
    if !testkit::alone() {
        return; // it ran, alone, in a child process
    }
    if !kinds().contains(&ServerKind::Redis) {
        return;
    }
    let pki = Pki::new("alloc");
    let server = pki.redis(TlsAuthClients::No);
    let e = Engine::builder()
        .address(Pki::addr(&server))
        .io_threads(1)
        .tls(TlsConfig::ca_pem(&pki.ca_pem))
        .build()
        .unwrap();
    let payload = [b'x'; 256];
    for _ in 0..3 {
        publish_all(&e, 200_000, &payload);
    }
    let before_stats = e.stats();
    let before = GLOBAL.allocations();
    const N: u64 = 200_000;
    for _ in 0..N {
        e.publish(b"alloc-test", &payload).unwrap();
    }
    publish_all(&e, 0, &payload);
    let settled = GLOBAL.allocations() - before;
    let s = e.stats();
    let bytes = s.bytes_written - before_stats.bytes_written;
    // One publish of 256 bytes is about 290 bytes on the wire: a 16 KiB
    // record carries about 56 of them.
    let records = bytes.div_ceil(16 * 1024);
    eprintln!(
        "TLS: {settled} allocations for {N} publishes ({:.4} per publish), \
         {bytes} bytes written (at least {records} records), {} writes",
        settled as f64 / N as f64,
        s.writes - before_stats.writes
    );
    assert!(
        settled <= 4 * records + 32,
        "{settled} allocations for {N} publishes in >= {records} records"
    );
}
