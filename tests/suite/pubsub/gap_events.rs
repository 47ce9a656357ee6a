//! What a gap event says: one incident (a server's subscribe connections
//! killed by it) gives one event per worker that handles their channels,
//! naming the server by address and exactly the channels that were on it,
//! in every placement; delivery after it is whole again. A connection's
//! channels are handled on one worker, so each server gets `WORKERS`
//! connections: the killed ones' channels are on every worker. A channel's
//! messages, its gap and its active events all reach the handler on one
//! thread (they travel in one queue, so in order).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use shardsub::{Event, Handler, PubSub, PubSubBuilder};
use testkit::{Cluster, Server, ServerKind, Servers};

const WORKERS: usize = 2;

/// One gap event: the server it named and its channels.
type Gap = (Option<shardsub::ServerAddr>, Vec<Vec<u8>>);

/// Gap events as they came, messages per channel, and the threads each
/// channel's messages and events came on.
#[derive(Default)]
struct Recorder {
    gaps: Mutex<Vec<Gap>>,
    messages: Mutex<BTreeMap<Vec<u8>, u64>>,
    total: AtomicU64,
    threads: Mutex<BTreeMap<Vec<u8>, HashSet<ThreadId>>>,
}

impl Recorder {
    fn seen_on_this_thread(&self, channel: &[u8]) {
        let me = std::thread::current().id();
        let mut t = self.threads.lock().unwrap();
        t.entry(channel.to_vec()).or_default().insert(me);
    }
}

impl Handler for Recorder {
    fn on_message(&self, channel: &[u8], _payload: &[u8]) {
        *self
            .messages
            .lock()
            .unwrap()
            .entry(channel.to_vec())
            .or_default() += 1;
        self.seen_on_this_thread(channel);
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    fn on_event(&self, event: Event<'_>) {
        match event {
            Event::Gap { server, channels } => {
                let names: Vec<Vec<u8>> = channels.iter().map(<[u8]>::to_vec).collect();
                for c in &names {
                    self.seen_on_this_thread(c);
                }
                self.gaps.lock().unwrap().push((server, names));
            }
            Event::Active { channel } => self.seen_on_this_thread(channel),
            _ => {}
        }
    }
}

fn names(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("gap:{i}").into_bytes()).collect()
}

/// Kills the pubsub connections of `victim` and checks the gap events
/// that follow: `WORKERS` of them (one per worker), each naming `victim`,
/// together exactly `expected`; then every channel delivers once more.
fn kill_and_check(
    kind: ServerKind,
    what: &str,
    ps: &PubSub,
    rec: &Recorder,
    victim: &Server,
    expected: &BTreeSet<Vec<u8>>,
    all: &[Vec<u8>],
) {
    ps.wait_active(all, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{kind:?} {what}: {e}"));
    assert!(rec.gaps.lock().unwrap().is_empty(), "{kind:?} {what}");
    let killed = victim
        .cmd_str(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .expect("client kill");
    eprintln!("{kind:?} {what}: killed {killed:?} on {}", victim.addr());
    let got = testkit::wait_for(
        "gap events for every channel of the killed connection",
        Duration::from_secs(20),
        || {
            let g = rec.gaps.lock().unwrap();
            let named: BTreeSet<Vec<u8>> = g.iter().flat_map(|(_, c)| c.clone()).collect();
            Ok((named.len() >= expected.len()).then(|| g.clone()))
        },
    )
    .unwrap_or_else(|e| panic!("{kind:?} {what}: {e}"));
    // Every channel resubscribed: nothing later can add a gap event.
    ps.wait_active(all, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{kind:?} {what}: {e}"));
    let got_after = rec.gaps.lock().unwrap().clone();
    assert_eq!(got_after.len(), got.len(), "{kind:?} {what}: late gaps");
    assert_eq!(
        got.len(),
        WORKERS,
        "{kind:?} {what}: one event per worker, got {} ({:?})",
        got.len(),
        got.iter().map(|(s, c)| (s, c.len())).collect::<Vec<_>>()
    );
    let mut named = BTreeSet::new();
    for (server, channels) in &got {
        assert_eq!(*server, Some(victim.addr().into()), "{kind:?} {what}");
        for c in channels {
            assert!(named.insert(c.clone()), "{kind:?} {what}: named twice");
        }
    }
    assert_eq!(&named, expected, "{kind:?} {what}: the killed channels");
    // Delivery is whole again: one message per channel, each once.
    rec.messages.lock().unwrap().clear();
    let before = rec.total.load(Ordering::Relaxed);
    for c in all {
        ps.publish_wait(c, b"after", Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{kind:?} {what}: {e}"));
    }
    let n = all.len() as u64;
    testkit::wait_for("every message", Duration::from_secs(20), || {
        Ok((rec.total.load(Ordering::Relaxed) - before >= n).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{kind:?} {what}: {e}"));
    let m = rec.messages.lock().unwrap();
    assert_eq!(m.len(), all.len(), "{kind:?} {what}");
    assert!(m.values().all(|&k| k == 1), "{kind:?} {what}: duplicates");
    // Messages, gap and active events of a channel: one thread.
    let threads = rec.threads.lock().unwrap();
    assert_eq!(threads.len(), all.len(), "{kind:?} {what}");
    let spread: Vec<_> = threads.iter().filter(|(_, t)| t.len() > 1).collect();
    assert!(
        spread.is_empty(),
        "{kind:?} {what}: {} channels handled on two threads, as {:?}",
        spread.len(),
        spread.first().map(|(c, _)| String::from_utf8_lossy(c))
    );
}

fn start(b: PubSubBuilder, rec: &Arc<Recorder>, all: &[Vec<u8>]) -> PubSub {
    let ps = b
        .handler_arc(rec.clone())
        .workers(WORKERS)
        .subscribe_connections(WORKERS)
        .active_events(true)
        .queue_capacity(1 << 16)
        .build()
        .expect("pubsub");
    ps.subscribe(all).expect("subscribe");
    ps
}

#[test]
fn a_killed_cluster_connection_gives_one_gap_per_worker_naming_its_node() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let rec = Arc::new(Recorder::default());
        let all = names(600);
        let b = PubSub::builder()
            .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
            .partitions(128);
        let ps = start(b, &rec, &all);
        let parts = ps.partitions().expect("a cluster").clone();
        let victim = cluster.masters()[1];
        let expected: BTreeSet<Vec<u8>> = all
            .iter()
            .filter(|c| cluster.owner_of_slot(parts.slot(parts.partition_of(c))) == Some(victim))
            .cloned()
            .collect();
        assert!(expected.len() > 100, "{kind:?}: {}", expected.len());
        let node = cluster.node(victim);
        kill_and_check(kind, "cluster", &ps, &rec, node, &expected, &all);
    }
}

#[test]
fn a_killed_server_connection_gives_one_gap_per_worker_naming_its_server() {
    for kind in testkit::kinds() {
        let servers = Servers::start(kind, 2).expect("servers");
        let rec = Arc::new(Recorder::default());
        let all = names(400);
        let b = PubSub::builder().addresses(servers.addrs().iter().map(|a| a.to_string()));
        let ps = start(b, &rec, &all);
        let expected: BTreeSet<Vec<u8>> = all
            .iter()
            .filter(|c| ps.server_of(c) == Some(1))
            .cloned()
            .collect();
        let victim = servers.iter().nth(1).expect("server 1");
        kill_and_check(kind, "servers", &ps, &rec, victim, &expected, &all);
    }
}
