//! The chaos rig: a cluster with replicas whose every node is reached by
//! clients through its own [`FaultProxy`] (the node announces the proxy's
//! port with `cluster-announce-port`; the bus stays direct), several
//! subscriber instances each feeding an accounting tap, and a publisher
//! instance that records every outcome.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardsub::PubSub;
use testkit::accounting::{Ledger, Stamp};
use testkit::{Cluster, Error, FaultProxy, ServerKind};

use crate::support::accounted::{kind, record, Accounted, Background, PublishFn};
use crate::support::chaos_kit::{Settings, HISTORY_CAPS, HISTORY_PREFIX};

/// How often an idle subscribe connection is probed (the engine then
/// restarts one that does not answer within its 5 s request timeout).
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// A subscriber instance and its handler.
pub struct Sub {
    pub ps: Arc<PubSub>,
    pub handler: Arc<Accounted>,
}

pub struct Rig {
    pub cluster: Cluster,
    /// Node index → the proxy clients reach it through.
    pub proxies: BTreeMap<usize, FaultProxy>,
    pub ledger: Arc<Ledger>,
    pub subs: Vec<Sub>,
    pub publisher: Arc<PubSub>,
    /// (ledger time, error kind) of every failed publish.
    pub failures: Arc<Mutex<Vec<(Duration, String)>>>,
    /// Masters added by faults and not removed yet.
    pub added: Vec<usize>,
    pub background: Option<Background>,
}

impl Rig {
    /// 3 masters with a replica each, every node behind a proxy, the
    /// subscribers subscribed to every channel, and steady publishing.
    pub fn start(kind: ServerKind, settings: &Settings) -> Result<Rig, Error> {
        let mut cluster = Cluster::start(kind, 3, 1)?;
        let mut proxies = BTreeMap::new();
        for i in cluster.live() {
            announce(&cluster, &mut proxies, i)?;
        }
        cluster.wait_ok()?;
        let ledger = Arc::new(Ledger::new(
            (0..settings.channels).map(|i| settings.channel(i)),
        ));
        let recoverable: Vec<usize> = (0..settings.history.min(settings.channels)).collect();
        ledger.mark_recoverable(&recoverable);
        let names = ledger.names().to_vec();
        let mut subs = Vec::new();
        for n in 0..settings.subscribers {
            let handler = Accounted::new(&ledger, &format!("sub{n}"));
            let ps = builder(&proxies, settings)
                .handler_arc(handler.clone())
                .workers(2)
                .build()
                .map_err(|e| Error::Cluster(format!("subscriber: {e}")))?;
            ps.subscribe(&names)
                .map_err(|e| Error::Cluster(format!("subscribe: {e}")))?;
            subs.push(Sub {
                ps: Arc::new(ps),
                handler,
            });
        }
        for sub in &subs {
            sub.ps
                .wait_active(&names, Duration::from_secs(30))
                .map_err(|e| Error::Cluster(format!("subscribers not active: {e}")))?;
        }
        let publisher = builder(&proxies, settings)
            .handler(|_: &[u8], _: &[u8]| {})
            .workers(1)
            .build()
            .map_err(|e| Error::Cluster(format!("publisher: {e}")))?;
        let mut rig = Rig {
            cluster,
            proxies,
            ledger,
            subs,
            publisher: Arc::new(publisher),
            failures: Arc::default(),
            added: Vec::new(),
            background: None,
        };
        rig.check_announced()?;
        let publish = rig.publish_fn();
        rig.background = Some(Background::start(
            rig.ledger.clone(),
            publish,
            settings.pace,
            settings.duration + Duration::from_secs(600),
        ));
        Ok(rig)
    }

    /// Puts node `i` behind its proxy (made on first use) and makes it
    /// announce the proxy's port to clients; the bus port stays direct.
    pub fn announce(&mut self, i: usize) -> Result<(), Error> {
        announce(&self.cluster, &mut self.proxies, i)
    }

    /// Waits until every live node's `CLUSTER NODES` gives node `i`'s
    /// proxy port: a node that owns no slot yet is not in `CLUSTER SLOTS`,
    /// so [`Rig::check_announced`] cannot see that gossip has not carried
    /// its announced port everywhere; slots moved to it before then hand
    /// out its real port (and clients would bypass its proxy for good).
    pub fn wait_announced(&self, i: usize) -> Result<(), Error> {
        let id = self
            .cluster
            .node_id(i)
            .ok_or_else(|| Error::Cluster(format!("node {i} has no id")))?
            .to_string();
        let port = self.proxies[&i].addr().port();
        let want = format!(":{port}@");
        testkit::wait_for(
            "the announced port known everywhere",
            Duration::from_secs(20),
            || {
                for n in self.cluster.live() {
                    let nodes = self.cluster.node(n).cmd(&[b"CLUSTER", b"NODES"])?;
                    let text = testkit::values::text(&nodes).unwrap_or_default();
                    let line = text.lines().find(|l| l.starts_with(id.as_str()));
                    if !line.is_some_and(|l| l.contains(&want)) {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            },
        )
    }

    /// Every address `CLUSTER SLOTS` hands out is a proxy's.
    pub fn check_announced(&self) -> Result<(), Error> {
        let proxied: Vec<u16> = self.proxies.values().map(|p| p.addr().port()).collect();
        for i in self.cluster.live() {
            let reply = self.cluster.node(i).cmd(&[b"CLUSTER", b"SLOTS"])?;
            for range in testkit::values::items(&reply).unwrap_or_default() {
                let fields = testkit::values::items(range).unwrap_or_default();
                for node in fields.iter().skip(2) {
                    let port = testkit::values::items(node)
                        .and_then(|n| n.get(1))
                        .and_then(testkit::values::int)
                        .unwrap_or(0);
                    if !proxied.contains(&(port as u16)) {
                        return Err(Error::Cluster(format!(
                            "node {i}: CLUSTER SLOTS hands out port {port}, not a proxy's"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// `publish_pending(..).then` on the publisher, recording every outcome (and the
    /// time and kind of every failure).
    fn publish_fn(&self) -> Arc<PublishFn> {
        let ps = self.publisher.clone();
        let failures = self.failures.clone();
        Arc::new(
            move |ledger: &Arc<Ledger>, stamp: Stamp, channel: &[u8], payload: &[u8]| {
                let (ledger, failures) = (ledger.clone(), failures.clone());
                ps.publish_pending(channel, payload).then(move |r| {
                    if let Err(e) = &r {
                        let at = ledger.elapsed();
                        failures
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((at, kind(e)));
                    }
                    record(&ledger, stamp, &r, true);
                });
            },
        )
    }

    /// Stops publishing (after a last full round); returns the rounds.
    pub fn stop_publishing(&mut self) -> u64 {
        self.background.take().map_or(0, Background::stop)
    }

    /// Probe restarts (unanswered probes) per subscriber instance.
    pub fn probe_restarts(&self) -> Vec<u64> {
        self.subs
            .iter()
            .map(|s| s.ps.metrics().probe_restarts)
            .collect()
    }

    /// The server's version, as `INFO server` gives it.
    pub fn version(&self) -> String {
        let live = self.cluster.live();
        let info = self
            .cluster
            .node(live[0])
            .cmd(&[b"INFO", b"server"])
            .ok()
            .and_then(|v| testkit::values::text(&v))
            .unwrap_or_default();
        let field = |f| testkit::values::info_field(&info, f);
        field("valkey_version")
            .or_else(|| field("redis_version"))
            .unwrap_or_default()
    }

    /// The ledger sequence numbers channel `c`'s history holds on the
    /// server now (its last 100,000 messages: more than a run publishes).
    pub fn history_seqs(&self, c: usize) -> Result<std::collections::HashSet<u32>, Error> {
        let h = self
            .publisher
            .history(self.ledger.name(c), None, 100_000)
            .map_err(|e| Error::Cluster(format!("history of channel {c}: {e}")))?;
        Ok(h.messages
            .iter()
            .filter_map(|m| Some(u64::from_le_bytes(m.payload.get(0..8)?.try_into().ok()?) as u32))
            .collect())
    }

    /// The subscribers' recovery counts: (recovered, duplicates,
    /// unrecoverable) added over every instance.
    pub fn recovery_counts(&self) -> (u64, u64, u64) {
        self.subs.iter().fold((0, 0, 0), |(r, d, u), s| {
            let m = s.ps.metrics();
            (r + m.recovered, d + m.duplicates, u + m.unrecoverable)
        })
    }

    /// The subscribers' metrics, for failure messages.
    pub fn metrics(&self) -> String {
        self.subs
            .iter()
            .map(|s| {
                format!(
                    "{}: {:?}",
                    s.handler.tap.name(),
                    s.ps.cluster_metrics().unwrap()
                )
            })
            .chain(std::iter::once(format!(
                "publisher: {:?}",
                self.publisher.cluster_metrics().unwrap()
            )))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop_publishing();
        for sub in &self.subs {
            sub.ps.shutdown();
        }
        self.publisher.shutdown();
    }
}

/// See [`Rig::announce`].
fn announce(
    cluster: &Cluster,
    proxies: &mut BTreeMap<usize, FaultProxy>,
    i: usize,
) -> Result<(), Error> {
    let node = cluster.node(i);
    let proxy = match proxies.entry(i) {
        std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::btree_map::Entry::Vacant(v) => v.insert(FaultProxy::start(node.addr())?),
    };
    let bus = (u32::from(node.port()) + 10_000).to_string();
    let port = proxy.addr().port().to_string();
    node.cmd_str(&["CONFIG", "SET", "cluster-announce-bus-port", &bus])?;
    node.cmd_str(&["CONFIG", "SET", "cluster-announce-port", &port])?;
    Ok(())
}

/// The builder every instance of the rig uses: seeds are the proxies,
/// probes and timeouts short enough that a black hole shows in seconds.
/// With history on, the recoverable channels' prefix.
fn builder(proxies: &BTreeMap<usize, FaultProxy>, settings: &Settings) -> shardsub::PubSubBuilder {
    let b = PubSub::builder()
        .seeds(proxies.values().map(|p| p.addr().to_string()))
        .probe_interval(PROBE_INTERVAL)
        .connect_timeout(Duration::from_millis(500))
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(500))
        .partitions(if settings.raw { 0 } else { 128 });
    if settings.history > 0 {
        b.history(HISTORY_PREFIX, HISTORY_CAPS)
    } else {
        b
    }
}
