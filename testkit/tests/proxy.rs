//! The fault proxy passes traffic, cuts, delays and black-holes it.

use std::time::{Duration, Instant};

use testkit::{Error, FaultProxy, Server, Value};

#[test]
fn passes_cuts_delays_and_blackholes() -> Result<(), Error> {
    for kind in testkit::kinds() {
        let server = Server::start(kind)?;
        let proxy = FaultProxy::start(server.addr())?;
        let mut client = testkit::Client::connect(proxy.addr())?;
        assert_eq!(client.cmd(&[b"PING"])?, Value::Simple(b"PONG".to_vec()));
        let stats = proxy.stats();
        assert_eq!((stats.accepted, stats.active), (1, 1));
        assert_eq!(stats.bytes_to_server, 14);
        assert_eq!(stats.bytes_to_client, 7);

        // Delay: a round trip takes at least the delay in each direction.
        proxy.delay(Duration::from_millis(30));
        let start = Instant::now();
        assert_eq!(client.cmd(&[b"PING"])?, Value::Simple(b"PONG".to_vec()));
        assert!(start.elapsed() >= Duration::from_millis(60), "{kind}");
        proxy.delay(Duration::ZERO);

        // Black hole: the command vanishes, the connection stays open.
        proxy.blackhole(true);
        client.set_timeout(Duration::from_millis(200))?;
        assert!(
            matches!(client.cmd(&[b"PING"]), Err(Error::Io { .. })),
            "{kind}"
        );
        assert!(proxy.stats().bytes_dropped >= 14);
        proxy.blackhole(false);

        // Cut: the client sees the connection close; new ones work.
        assert_eq!(proxy.cut_all(), 1);
        client.set_timeout(Duration::from_secs(5))?;
        assert!(
            client.cmd(&[b"PING"]).is_err(),
            "{kind}: cut connection answered"
        );
        let mut again = testkit::Client::connect(proxy.addr())?;
        assert_eq!(again.cmd(&[b"PING"])?, Value::Simple(b"PONG".to_vec()));
        testkit::wait_for(
            "the cut connection to be gone",
            Duration::from_secs(5),
            || Ok((proxy.stats().active == 1).then_some(())),
        )?;
        assert_eq!(proxy.stats().cut, 1);
    }
    Ok(())
}

/// Healing a black hole closes the connections whose bytes it swallowed
/// (their streams have a hole) and leaves the others open.
#[test]
fn heal_closes_only_connections_that_lost_bytes() -> Result<(), Error> {
    for kind in testkit::kinds() {
        let server = Server::start(kind)?;
        let proxy = FaultProxy::start(server.addr())?;
        let mut hit = testkit::Client::connect(proxy.addr())?;
        let mut idle = testkit::Client::connect(proxy.addr())?;
        assert_eq!(idle.cmd(&[b"PING"])?, Value::Simple(b"PONG".to_vec()));
        proxy.blackhole(true);
        hit.set_timeout(Duration::from_millis(200))?;
        assert!(hit.cmd(&[b"PING"]).is_err(), "{kind}: black hole answered");
        assert_eq!(proxy.heal(), 1, "{kind}");
        hit.set_timeout(Duration::from_secs(5))?;
        assert!(
            hit.cmd(&[b"PING"]).is_err(),
            "{kind}: a connection with a hole was resumed"
        );
        assert_eq!(idle.cmd(&[b"PING"])?, Value::Simple(b"PONG".to_vec()));
        assert_eq!(proxy.stats().cut, 1, "{kind}");
    }
    Ok(())
}
