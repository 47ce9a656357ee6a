//! The README's "what blocks" table against real servers (Redis 7 and
//! Valkey 9): with the server frozen (SIGSTOP: connections are accepted and
//! never answered), each blocking call returns, failing, within its row's
//! bound. The bounds are upper limits against hangs, with a second of
//! slack for a busy machine; how fast the calls are is the benchmarks'
//! business.

use std::time::{Duration, Instant};

use shardsub::PubSub;
use testkit::Server;

const BOUND: Duration = Duration::from_secs(20);
const SLACK: Duration = Duration::from_secs(1);

/// Runs `f`, which must fail, and checks it returned within `bound`.
fn fails_within<T: std::fmt::Debug, E>(
    what: &str,
    bound: Duration,
    f: impl FnOnce() -> Result<T, E>,
) {
    let t = Instant::now();
    let r = f();
    let took = t.elapsed();
    assert!(r.is_err(), "{what}: {r:?}", r = r.as_ref().ok());
    assert!(took <= bound + SLACK, "{what}: {took:?} over {bound:?}");
}

#[test]
fn blocking_calls_return_within_their_documented_bounds() {
    for kind in testkit::kinds() {
        let mut server = Server::start(kind).unwrap();
        let addr = server.addr().to_string();
        let connect = Duration::from_millis(300);
        let request = Duration::from_millis(500);
        let ps = PubSub::builder()
            .address(addr.clone())
            .connect_timeout(connect)
            .request_timeout(request)
            .on_message(|_, _| {})
            .build()
            .unwrap();
        ps.subscribe("block:1").unwrap();
        ps.wait_active(&["block:1"], BOUND).unwrap();
        server.freeze();
        let what = |row: &str| format!("{kind:?}: {row}");
        // `command`: the request timeout per round trip.
        fails_within(&what("command"), request, || ps.command("k", ["GET", "k"]));
        // `publish_wait`, `wait_active`: the timeout given.
        let given = Duration::from_millis(200);
        fails_within(&what("publish_wait"), given, || {
            ps.publish_wait("block:1", "x", given)
        });
        ps.subscribe("block:2").unwrap();
        fails_within(&what("wait_active"), given, || {
            ps.wait_active(&["block:2"], given)
        });
        // `build` on servers: the connect timeout per step (the frozen
        // server accepts and never answers the handshake; the instance
        // starts degraded, so build must fail only with require_all).
        fails_within(&what("build"), connect * 2, || {
            PubSub::builder()
                .address(addr.clone())
                .connect_timeout(connect)
                .require_all_servers(true)
                .build()
        });
        // `shutdown`: the shutdown timeout (2 s) + 5 s.
        let t = Instant::now();
        ps.shutdown();
        let took = t.elapsed();
        assert!(
            took <= Duration::from_secs(7) + SLACK,
            "{kind:?}: shutdown took {took:?}"
        );
        server.thaw();
    }
}
