//! Panic reporting of the I/O threads, on real servers.

use std::time::Duration;

use testkit::{kinds, Server};

use crate::{Engine, PubSub};

const BOUND: Duration = Duration::from_secs(10);

#[test]
fn a_panicked_io_thread_is_counted_and_shutdown_still_returns() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let engine = Engine::builder()
            .address(server.addr().to_string())
            .io_threads(1)
            .build()
            .unwrap();
        assert_eq!(engine.stats().thread_panics, 0);
        engine.panic_io_thread(0);
        testkit::wait_for("the panic counted", BOUND, || {
            Ok((engine.stats().thread_panics == 1).then_some(()))
        })
        .unwrap();
        engine.shutdown();
        assert_eq!(engine.stats().thread_panics, 1, "{kind:?}: counted once");
    }
}

#[test]
fn pubsub_metrics_count_its_engines_thread_panics() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let ps = PubSub::builder()
            .address(server.addr().to_string())
            .workers(1)
            .io_threads(1)
            .handler(|_: &[u8], _: &[u8]| {})
            .build()
            .unwrap();
        assert_eq!(ps.metrics().thread_panics, 0);
        ps.subscribe_engine().panic_io_thread(0);
        testkit::wait_for("the panic counted", BOUND, || {
            Ok((ps.metrics().thread_panics == 1).then_some(()))
        })
        .unwrap();
        ps.shutdown();
        assert_eq!(ps.metrics().thread_panics, 1, "{kind:?}: counted once");
    }
}
