//! A full socket is not written to again until it is writable: after a
//! `WouldBlock` the I/O thread waits for the WRITABLE event instead of
//! retrying on every loop turn (each reply read is a loop turn).

use std::time::{Duration, Instant};

use shardsub::engine::{Engine, PublishOptions};
use testkit::{kinds, Server};

#[test]
fn a_full_socket_waits_for_writable() {
    // Large payloads: the client fills the socket faster than the server
    // drains it, even in a debug build, while replies keep arriving.
    let payload = vec![b'x'; 8 << 10];
    const N: u64 = 30_000;
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let e = Engine::builder()
            .address(server.addr().to_string())
            .io_threads(1)
            .build()
            .unwrap();
        let before = e.stats();
        for _ in 0..N {
            e.publish(b"writes-test", &payload).unwrap();
        }
        let marker = e.publish_pending(b"writes-test", b"end", PublishOptions::classic());
        marker.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while e.stats().replies < before.replies + N + 1 {
            assert!(Instant::now() < deadline, "{kind:?}: replies missing");
            std::thread::yield_now();
        }
        let s = e.stats();
        let writes = s.writes - before.writes;
        let would_block = s.write_would_block - before.write_would_block;
        eprintln!("{kind:?}: {N} publishes of 8 KiB in {writes} writes; {would_block} writes found the socket full");
        assert_eq!(s.error_replies, before.error_replies, "{kind:?}");
        // At most about one full-socket write per successful one, not one
        // per loop turn.
        assert!(
            would_block <= writes + 16,
            "{kind:?}: {would_block} writes found the socket full, {writes} wrote"
        );
    }
}
