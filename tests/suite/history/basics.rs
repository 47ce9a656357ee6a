//! Recoverable channels against real servers (Redis 7 and Valkey 9), in
//! every placement: a publish to a recoverable channel lands in its capped
//! history stream (on the channel's server, or in its slot) and reaches
//! subscribers with the header stripped; `PubSub::history` and
//! `PubSub::position` read it back; a lost meta key starts a new epoch,
//! trimming and epochs make a read from an old position not continuous,
//! and a server that lost the script (`SCRIPT FLUSH`) still publishes.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use shardsub::cluster::Mode;
use shardsub::history::{script, HistoryOptions, Position};
use shardsub::{handler_fn, PubSub, PubSubBuilder, Value};
use testkit::{Cluster, Server, Servers};

const BOUND: Duration = Duration::from_secs(10);

type Got = Arc<Mutex<Vec<(Vec<u8>, Vec<u8>)>>>;

fn caps(max_len: u64) -> HistoryOptions {
    HistoryOptions {
        max_len,
        max_age: Duration::from_secs(60),
    }
}

/// `b` with history on `room:`, a handler that records every message.
fn build(b: PubSubBuilder, max_len: u64) -> (PubSub, Got) {
    let got: Got = Arc::default();
    let g = got.clone();
    let ps = b
        .history("room:", caps(max_len))
        .handler(handler_fn(move |c, p| {
            g.lock().push((c.to_vec(), p.to_vec()))
        }))
        .workers(2)
        .build()
        .expect("pubsub");
    (ps, got)
}

/// Waits until `got` holds `n` messages.
fn wait_count(got: &Got, n: usize, what: &str) {
    if let Err(e) = try_wait_count(got, n, what) {
        panic!("{e}");
    }
}

/// [`wait_count`], with what was missing as the error.
fn try_wait_count(got: &Got, n: usize, what: &str) -> Result<(), String> {
    let r = testkit::wait_for(what, BOUND, || Ok((got.lock().len() >= n).then_some(())));
    if let Err(e) = r {
        let mut count = std::collections::BTreeMap::<String, usize>::new();
        for (c, _) in got.lock().iter() {
            *count
                .entry(String::from_utf8_lossy(c).into_owned())
                .or_default() += 1;
        }
        return Err(format!("{what}: {e}; got {}: {count:?}", got.lock().len()));
    }
    assert_eq!(got.lock().len(), n, "{what}: no more than {n}");
    Ok(())
}

/// Each channel's payloads, in order of receipt.
fn per_channel(got: &Got, channel: &[u8]) -> Vec<Vec<u8>> {
    got.lock()
        .iter()
        .filter(|(c, _)| c == channel)
        .map(|(_, p)| p.clone())
        .collect()
}

fn payloads(n: u64) -> Vec<Vec<u8>> {
    (1..=n).map(|i| format!("m{i}").into_bytes()).collect()
}

fn int(v: Value) -> i64 {
    match v {
        Value::Integer(n) => n,
        v => panic!("not an integer: {v:?}"),
    }
}

/// Publishes `n` messages to each channel, waits for them, and checks
/// delivery (stripped, in order) and what `history`/`position` read.
fn publish_and_read(ps: &PubSub, got: &Got, channels: &[&[u8]], n: u64, what: &str) {
    let r = try_publish_and_read(ps, got, channels, n, what);
    if let Err(e) = r {
        panic!("{e}");
    }
}

/// [`publish_and_read`], with a delivery shortfall as the error (history is
/// checked either way).
fn try_publish_and_read(
    ps: &PubSub,
    got: &Got,
    channels: &[&[u8]],
    n: u64,
    what: &str,
) -> Result<(), String> {
    let before = got.lock().len();
    for i in 1..=n {
        for ch in channels {
            ps.publish_wait(ch, format!("m{i}"), BOUND)
                .unwrap_or_else(|e| panic!("{what}: publish: {e}"));
        }
    }
    let delivered = try_wait_count(got, before + channels.len() * n as usize, what);
    for &ch in channels {
        if delivered.is_ok() {
            assert_eq!(per_channel(got, ch), payloads(n), "{what}: {ch:?}");
        }
        let at = ps.position(ch).unwrap().expect("a position");
        assert_eq!(at.offset, n, "{what}");
        let all = ps.history(ch, None, 1000).unwrap();
        assert!(all.continuous, "{what}: {all:?}");
        assert_eq!(all.position, Some(at));
        let offsets: Vec<u64> = all.messages.iter().map(|m| m.offset).collect();
        assert_eq!(offsets, (1..=n).collect::<Vec<_>>(), "{what}");
        let last = ps.history(ch, None, 2).unwrap();
        assert_eq!(last.messages.len(), 2);
        assert_eq!(last.messages[1].payload, format!("m{n}").into_bytes());
        assert!(!last.continuous || n <= 2, "{what}: the last two only");
        let since = Position {
            epoch: at.epoch,
            offset: n - 3,
        };
        let tail = ps.history(ch, Some(since), 10).unwrap();
        assert!(tail.continuous, "{what}: {tail:?}");
        let payloads: Vec<Vec<u8>> = tail.messages.into_iter().map(|m| m.payload).collect();
        assert_eq!(payloads, payloads_from(n - 2, n), "{what}");
    }
    delivered
}

fn payloads_from(a: u64, b: u64) -> Vec<Vec<u8>> {
    (a..=b).map(|i| format!("m{i}").into_bytes()).collect()
}

#[test]
fn the_scripts_hashes_are_what_the_servers_compute() {
    for kind in testkit::kinds() {
        let s = Server::start(kind).expect("server");
        for (text, sha) in [
            (script::PUBLISH, script::PUBLISH_SHA),
            (script::READ, script::READ_SHA),
        ] {
            let r = s.cmd_str(&["SCRIPT", "LOAD", text]).expect("script load");
            assert_eq!(testkit::values::text(&r).as_deref(), Some(sha), "{kind:?}");
        }
    }
}

#[test]
fn one_server_publishes_with_history_and_reads_it_back() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).expect("server");
        let (ps, got) = build(PubSub::builder().address(server.addr().to_string()), 1000);
        let chans: [&[u8]; 3] = [b"room:a", b"room:b", b"plain"];
        ps.subscribe(chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        let what = format!("{kind:?} one server");
        publish_and_read(&ps, &got, &chans[..2], 6, &what);
        // The stream and meta hash are on the server, as documented.
        let xlen = server.cmd_str(&["XLEN", "room:a:history"]).unwrap();
        assert_eq!(int(xlen), 6, "{what}");
        let o = server
            .cmd_str(&["HGET", "room:a:history-meta", "o"])
            .unwrap();
        assert_eq!(testkit::values::text(&o).as_deref(), Some("6"), "{what}");
        let ttl = int(server.cmd_str(&["TTL", "room:a:history"]).unwrap());
        assert!((1..=60).contains(&ttl), "{what}: ttl {ttl}");
        // A plain channel is published as it was: no header, no history.
        ps.publish_wait("plain", "raw", BOUND).unwrap();
        wait_count(&got, 13, &what);
        assert_eq!(per_channel(&got, b"plain"), [b"raw".to_vec()]);
        assert_eq!(ps.position("plain").unwrap(), None, "{what}");
        let exists = int(server.cmd_str(&["EXISTS", "plain:history"]).unwrap());
        assert_eq!(exists, 0, "{what}");

        // A lost meta key starts a new epoch; the old position is stale.
        let old = ps.position("room:a").unwrap().unwrap();
        server.cmd_str(&["DEL", "room:a:history-meta"]).unwrap();
        ps.publish_wait("room:a", "fresh", BOUND).unwrap();
        wait_count(&got, 14, &what);
        let now = ps.position("room:a").unwrap().unwrap();
        assert_ne!(now.epoch, old.epoch, "{what}");
        assert_eq!(now.offset, 1, "{what}");
        let h = ps.history("room:a", Some(old), 10).unwrap();
        assert!(!h.continuous, "{what}: {h:?}");
        assert_eq!(
            h.messages.len(),
            0,
            "{what}: the old epoch's stream was dropped"
        );
        let h = ps.history("room:a", None, 10).unwrap();
        assert_eq!(h.messages.len(), 1, "{what}: {h:?}");
        assert!(h.continuous);

        // A server without the script (flushed) still takes publishes.
        server.cmd_str(&["SCRIPT", "FLUSH"]).unwrap();
        ps.publish_wait("room:a", "after flush", BOUND).unwrap();
        ps.publish("room:a", "fire and forget").unwrap();
        wait_count(&got, 16, &what);
        let h = ps.history("room:a", None, 10).unwrap();
        assert_eq!(h.messages.len(), 3, "{what}: {h:?}");
        assert_eq!(h.messages[2].payload, b"fire and forget");
        ps.shutdown();
    }
}

#[test]
fn trimmed_history_is_not_continuous() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).expect("server");
        let (ps, got) = build(PubSub::builder().address(server.addr().to_string()), 5);
        ps.subscribe(["room:t"]).unwrap();
        ps.wait_active(&["room:t"], BOUND).unwrap();
        for i in 0..400 {
            ps.publish("room:t", format!("{i}")).unwrap();
        }
        wait_count(&got, 400, &format!("{kind:?}"));
        let order: Vec<Vec<u8>> = (0..400).map(|i| format!("{i}").into_bytes()).collect();
        assert_eq!(per_channel(&got, b"room:t"), order, "{kind:?}: in order");
        let at = ps.position("room:t").unwrap().unwrap();
        assert_eq!(at.offset, 400);
        let xlen = int(server.cmd_str(&["XLEN", "room:t:history"]).unwrap());
        assert!(xlen < 400, "{kind:?}: MAXLEN ~ trimmed ({xlen} left)");
        let since = Position {
            epoch: at.epoch,
            offset: 1,
        };
        let h = ps.history("room:t", Some(since), 1000).unwrap();
        assert!(!h.continuous, "{kind:?}: {} messages", h.messages.len());
        assert_eq!(h.messages.len() as i64, xlen);
        // What is left is the newest, in order.
        assert_eq!(h.messages.last().unwrap().offset, 400);
        let later = Position {
            epoch: at.epoch,
            offset: 399,
        };
        assert!(ps.history("room:t", Some(later), 10).unwrap().continuous);
        let bad = ps.history("room:t", None, 0);
        assert!(matches!(bad, Err(shardsub::Error::InvalidArgument(_))));
        ps.shutdown();
    }
}

#[test]
fn the_envelope_and_the_header_together() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).expect("server");
        let b = PubSub::builder()
            .address(server.addr().to_string())
            .envelope(true);
        let (ps, got) = build(b, 100);
        ps.subscribe(["room:e"]).unwrap();
        ps.wait_active(&["room:e"], BOUND).unwrap();
        publish_and_read(&ps, &got, &[b"room:e"], 4, &format!("{kind:?} envelope"));
        assert!(ps.metrics().lag.is_some(), "{kind:?}: lag measured");
        assert_eq!(ps.metrics().unenveloped, 0, "{kind:?}");
        ps.shutdown();
    }
}

#[test]
fn shards_keep_history_on_the_channels_server() {
    for kind in testkit::kinds() {
        let servers = Servers::start(kind, 3).expect("servers");
        let b = PubSub::builder().addresses(servers.addrs().iter().map(|a| a.to_string()));
        let (ps, got) = build(b, 1000);
        let names: Vec<Vec<u8>> = (0..12).map(|i| format!("room:{i}").into_bytes()).collect();
        let chans: Vec<&[u8]> = names.iter().map(|c| &c[..]).collect();
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        publish_and_read(&ps, &got, &chans, 4, &format!("{kind:?} shards"));
        let mut used = std::collections::HashSet::new();
        for ch in &names {
            let i = ps.server_of(ch).unwrap();
            used.insert(i);
            let key = [&ch[..], b":history"].concat();
            for (j, s) in servers.iter().enumerate() {
                let n = int(s.cmd(&[b"XLEN", &key]).unwrap());
                assert_eq!(n, if i == j { 4 } else { 0 }, "{kind:?} {ch:?} on {j}");
            }
        }
        assert!(used.len() > 1, "the channels span servers");
        ps.shutdown();
    }
}

fn cluster_case(cluster: &Cluster, mode: Mode, what: &str) {
    let b = PubSub::builder()
        .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
        .mode(mode);
    let (ps, got) = build(b, 1000);
    let names: Vec<Vec<u8>> = (0..12)
        .map(|i| format!("room:{what}:{i}").into_bytes())
        .collect();
    let chans: Vec<&[u8]> = names.iter().map(|c| &c[..]).collect();
    ps.subscribe(&chans).unwrap();
    ps.wait_active(&chans, BOUND).unwrap();
    let links = cluster.newest_bus_link_ms().expect("CLUSTER LINKS");
    if let Err(e) = try_publish_and_read(&ps, &got, &chans, 4, what) {
        // Classic messages cross the cluster bus, and a bus link that was
        // re-created meanwhile drops them on the servers, unseen by any
        // client (see `Cluster::newest_bus_link_ms`): only that excuses a
        // shortfall, and only in classic mode. History still has them all.
        let relinked = cluster.newest_bus_link_ms().expect("CLUSTER LINKS") > links;
        assert!(
            matches!(mode, Mode::Classic) && relinked,
            "{e} (no bus link re-created)"
        );
        eprintln!("{what}: a cluster bus link was re-created; {e}");
        ps.shutdown();
        return;
    }
    // The stream lives in the channel's partition slot, on its owner.
    let parts = ps.partitions().unwrap();
    let mut owners = std::collections::HashSet::new();
    for ch in &names {
        let mut base = Vec::new();
        parts.redis_channel_at(parts.partition_of(ch), ch, &mut base);
        let key = [&base[..], b":history"].concat();
        let owner = cluster
            .owner_of_slot(shardcore::key_slot(&key))
            .expect("owner");
        owners.insert(owner);
        let n = int(cluster.node(owner).cmd(&[b"XLEN", &key]).unwrap());
        assert_eq!(n, 4, "{what}: {ch:?}");
        if !matches!(mode, Mode::Classic) {
            assert_eq!(
                shardcore::key_slot(&key),
                shardcore::key_slot(&ps.server_channel(ch)),
                "{what}: the stream shares the channel's slot"
            );
        }
    }
    assert!(owners.len() > 1, "{what}: the channels span masters");
    // Every master lost the script: the publishes still go through.
    for &m in &cluster.masters() {
        cluster.node(m).cmd_str(&["SCRIPT", "FLUSH"]).unwrap();
    }
    let before = got.lock().len();
    for ch in &chans {
        ps.publish(ch, "after flush").unwrap();
    }
    wait_count(&got, before + chans.len(), what);
    for ch in &chans {
        assert_eq!(ps.position(ch).unwrap().unwrap().offset, 5, "{what}");
    }
    ps.shutdown();
}

#[test]
fn a_cluster_keeps_history_in_the_channels_slot() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        cluster_case(&cluster, Mode::Sharded, &format!("{kind:?} sharded"));
        cluster_case(&cluster, Mode::Classic, &format!("{kind:?} classic"));
    }
}

#[test]
fn a_history_publish_that_fails_later_is_counted_once() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).expect("server");
        let (ps, _got) = build(PubSub::builder().address(server.addr().to_string()), 10);
        // The meta key holds a string: the script fails on the server.
        server
            .cmd_str(&["SET", "room:w:history-meta", "x"])
            .unwrap();
        ps.publish("room:w", "taken")
            .expect("taken: the failure comes later");
        let r = ps.publish_wait("room:w", "waited", BOUND);
        assert!(
            matches!(r, Err(shardsub::Error::Reply { .. })),
            "{kind:?}: {r:?}"
        );
        testkit::wait_for("the errors counted", BOUND, || {
            Ok((ps.metrics().publish_errors >= 2).then_some(()))
        })
        .unwrap_or_else(|e| panic!("{kind:?}: {e}: {:?}", ps.metrics()));
        assert_eq!(ps.metrics().publish_errors, 2, "{kind:?}");
        // Reading it says what is wrong, as an error.
        let h = ps.history("room:w", None, 5);
        assert!(
            matches!(h, Err(shardsub::Error::Reply { .. })),
            "{kind:?}: {h:?}"
        );
        ps.shutdown();
    }
}
