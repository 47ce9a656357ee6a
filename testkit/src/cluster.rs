//! A real Redis Cluster: M masters with R replicas each, on loopback.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::cluster_view::{
    bus_links, create_ranges, link_field, parse_cluster_nodes, slots_view, NodeTable, SlotsView,
};
use crate::process::{self, wait_for, TempDir};
use crate::values::{expect_text, info_field, int, items};
use crate::{redis_cli, Error, Server, ServerKind, TlsFiles};

/// An inclusive range of hash slots.
pub type SlotRange = RangeInclusive<u16>;

/// The bound on every cluster-wide wait (start, resharding, failover).
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(40);
pub(crate) const SLOT_COUNT: u32 = 16384;

/// The role of one node as the cluster sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// A master and the slot ranges it owns (possibly none).
    Master(Vec<(u16, u16)>),
    /// A replica of the node with this index.
    Replica(usize),
    /// Killed or removed by the test; not part of the live cluster.
    Down,
}

/// A Redis Cluster of real servers, all on `127.0.0.1`, stopped on drop.
///
/// Nodes are addressed by index (stable for the cluster's life, also across
/// failovers, kills and removals). Nodes run with
/// `--cluster-node-timeout` [`CLUSTER_NODE_TIMEOUT_MS`](crate::CLUSTER_NODE_TIMEOUT_MS),
/// so a failover after a kill takes a few seconds.
///
/// ```no_run
/// use testkit::{Cluster, ServerKind};
///
/// let mut cluster = Cluster::start(ServerKind::Valkey, 3, 1)?;
/// let [a, b, _] = cluster.masters()[..] else { unreachable!() };
/// cluster.migrate_slots(0..=99, a, b)?; // reshard
/// let replica = cluster.replicas_of(b)[0];
/// let promoted = cluster.kill_primary(b)?; // crash a primary
/// assert_eq!(promoted, replica);
/// # Ok::<(), testkit::Error>(())
/// ```
#[derive(Debug)]
pub struct Cluster {
    pub(crate) kind: ServerKind,
    pub(crate) nodes: Vec<Server>,
    pub(crate) ids: Vec<String>,
    pub(crate) roles: Vec<Role>,
}

impl Cluster {
    /// Starts `masters` masters with `replicas` replicas each, splits the
    /// 16384 slots evenly and contiguously over the masters (as
    /// `redis-cli --cluster create` does, which creates clusters of three or
    /// more masters), and waits until [`Cluster::wait_ok`] holds.
    ///
    /// # Errors
    ///
    /// Start errors of the nodes, [`Error::Cluster`] when creation fails
    /// (with redis-cli's output), [`Error::Timeout`] when it does not settle.
    pub fn start(kind: ServerKind, masters: usize, replicas: usize) -> Result<Cluster, Error> {
        Cluster::start_with(kind, masters, replicas, None)
    }

    /// [`Cluster::start`] with every node also listening for TLS with
    /// `tls` ([`ServerBuilder::tls`](crate::ServerBuilder::tls)), the
    /// cluster bus and replication over TLS (`tls-cluster yes`,
    /// `tls-replication yes`). Setup still goes through the plain ports;
    /// clients under test use [`Cluster::tls_seed_addrs`]. Redis only here.
    ///
    /// # Errors
    ///
    /// As [`Cluster::start`].
    pub fn start_tls(
        kind: ServerKind,
        masters: usize,
        replicas: usize,
        tls: TlsFiles,
    ) -> Result<Cluster, Error> {
        Cluster::start_with(kind, masters, replicas, Some(tls))
    }

    fn start_with(
        kind: ServerKind,
        masters: usize,
        replicas: usize,
        tls: Option<TlsFiles>,
    ) -> Result<Cluster, Error> {
        if masters == 0 || masters > SLOT_COUNT as usize {
            return Err(Error::Cluster(format!(
                "cannot split slots over {masters} masters"
            )));
        }
        let total = masters * (1 + replicas);
        let nodes = (0..total)
            .map(|_| {
                let b = Server::builder(kind).cluster(true);
                match &tls {
                    Some(files) => b.tls(files.clone()),
                    None => b,
                }
                .start()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ids = nodes.iter().map(my_id).collect::<Result<Vec<_>, _>>()?;
        let mut cluster = Cluster {
            kind,
            roles: vec![Role::Master(Vec::new()); total],
            nodes,
            ids,
        };
        if masters >= 3 {
            cluster.create_with_redis_cli(replicas)?;
        } else {
            cluster.create_by_hand(masters, replicas)?;
        }
        cluster.wait_ok()?;
        Ok(cluster)
    }

    /// Redis or Valkey.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// Every node ever started, by index — including ones killed or removed
    /// (see [`Cluster::is_live`]).
    pub fn nodes(&self) -> &[Server] {
        &self.nodes
    }

    /// Node `i`.
    ///
    /// # Panics
    ///
    /// When `i` is out of range.
    pub fn node(&self, i: usize) -> &Server {
        &self.nodes[i]
    }

    /// Node `i`, mutably (to kill or restart it by hand).
    pub fn node_mut(&mut self, i: usize) -> Option<&mut Server> {
        self.nodes.get_mut(i)
    }

    /// The cluster node id of node `i`.
    pub fn node_id(&self, i: usize) -> Option<&str> {
        self.ids.get(i).map(String::as_str)
    }

    /// The index of the node with this cluster node id.
    pub fn index_of_id(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|known| known == id)
    }

    /// The index of the node listening on this address.
    pub fn index_of_addr(&self, addr: SocketAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.addr() == addr)
    }

    /// Whether node `i` is part of the live cluster (not killed or removed).
    pub fn is_live(&self, i: usize) -> bool {
        !matches!(self.roles.get(i), Some(Role::Down) | None)
    }

    /// Live masters, ordered by their first slot; masters without slots last.
    /// As of the last settled state ([`Cluster::wait_ok`] and every helper
    /// refresh it).
    pub fn masters(&self) -> Vec<usize> {
        let mut masters: Vec<(u32, usize)> = self
            .roles
            .iter()
            .enumerate()
            .filter_map(|(i, role)| match role {
                Role::Master(slots) => {
                    Some((slots.first().map_or(SLOT_COUNT, |s| u32::from(s.0)), i))
                }
                _ => None,
            })
            .collect();
        masters.sort_unstable();
        masters.into_iter().map(|(_, i)| i).collect()
    }

    /// Live replicas, by index.
    pub fn replicas(&self) -> Vec<usize> {
        (0..self.roles.len())
            .filter(|&i| matches!(self.roles[i], Role::Replica(_)))
            .collect()
    }

    /// The live replicas of master `i`.
    pub fn replicas_of(&self, i: usize) -> Vec<usize> {
        (0..self.roles.len())
            .filter(|&r| self.roles[r] == Role::Replica(i))
            .collect()
    }

    /// The master that replica `i` follows.
    pub fn master_of(&self, i: usize) -> Option<usize> {
        match self.roles.get(i) {
            Some(Role::Replica(m)) => Some(*m),
            _ => None,
        }
    }

    /// The slot ranges master `i` owns (empty for replicas and down nodes).
    pub fn slots_of(&self, i: usize) -> Vec<SlotRange> {
        match self.roles.get(i) {
            Some(Role::Master(slots)) => slots.iter().map(|&(a, b)| a..=b).collect(),
            _ => Vec::new(),
        }
    }

    /// The master that owns `slot`.
    pub fn owner_of_slot(&self, slot: u16) -> Option<usize> {
        self.masters()
            .into_iter()
            .find(|&m| self.slots_of(m).iter().any(|r| r.contains(&slot)))
    }

    /// The addresses of all live nodes, masters first: seeds for a client.
    pub fn seed_addrs(&self) -> Vec<SocketAddr> {
        let masters = self.masters();
        let rest = self.replicas();
        masters
            .into_iter()
            .chain(rest)
            .map(|i| self.nodes[i].addr())
            .collect()
    }

    /// The TLS addresses of all live nodes, masters first (for a cluster
    /// from [`Cluster::start_tls`]; empty otherwise).
    pub fn tls_seed_addrs(&self) -> Vec<SocketAddr> {
        let masters = self.masters();
        let rest = self.replicas();
        masters
            .into_iter()
            .chain(rest)
            .filter_map(|i| self.nodes[i].tls_addr())
            .collect()
    }

    /// Indices of live nodes.
    pub fn live(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&i| self.is_live(i)).collect()
    }

    /// The creation time (Unix ms) of the newest cluster bus link over
    /// every live node (`CLUSTER LINKS`). It grows when a link is re-created:
    /// a node that missed pings for half the node timeout (a stalled
    /// process on a loaded machine) drops its links and dials again, and a
    /// classic `PUBLISH` broadcast meanwhile never reaches the other side,
    /// unseen by any client. A test of classic mode compares it before and
    /// after to tell such a server-side loss from a client bug.
    ///
    /// # Errors
    ///
    /// A node that does not answer, or a reply that is not a list of links.
    pub fn newest_bus_link_ms(&self) -> Result<i64, Error> {
        let mut newest = 0;
        for i in self.live() {
            let reply = self.nodes[i].cmd(&[b"CLUSTER", b"LINKS"])?;
            let links = items(&reply).ok_or_else(|| Error::unexpected("CLUSTER LINKS", &reply))?;
            for link in links {
                let created = link_field(link, "create-time").and_then(int);
                newest = newest.max(created.unwrap_or(0));
            }
        }
        Ok(newest)
    }

    /// Waits until every live node reports `cluster_state:ok`, all live nodes
    /// agree on the node table (roles, replication, slots) and on `CLUSTER
    /// SLOTS`, all 16384 slots are covered, nodes this harness killed or
    /// removed are failed or forgotten everywhere, every live node lists in
    /// `CLUSTER LINKS` a link to every other live node and one from it,
    /// bound to that node (a classic `PUBLISH` is broadcast over those
    /// links: a node with no link to a peer skips it, and Valkey 8 and 9
    /// close an inbound link that is not yet bound when a light-header
    /// `PUBLISH` arrives on it, dropping that message and the ones behind
    /// it; neither tells the publisher), every live replica's link to its
    /// master is up, and no replica follows a node that is itself a replica
    /// (after a failover the old primary's other replicas replicate it,
    /// now a replica, until each has heard of the new primary and moved to
    /// it). Then refreshes the view [`Cluster::masters`] and friends read.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] after [`CLUSTER_TIMEOUT`], naming the last
    /// disagreement.
    pub fn wait_ok(&mut self) -> Result<(), Error> {
        let live = self.live();
        let table = wait_for("the cluster to settle", CLUSTER_TIMEOUT, || {
            self.settled(&live)
        })?;
        for (i, role) in self.roles.iter_mut().enumerate() {
            if *role == Role::Down {
                continue;
            }
            *role = match table.get(&self.ids[i]) {
                Some(entry) => match &entry.master {
                    None => Role::Master(entry.slots.clone()),
                    Some(master) => match self.ids.iter().position(|id| id == master) {
                        Some(m) => Role::Replica(m),
                        None => return Err(Error::Cluster(format!("unknown master {master}"))),
                    },
                },
                None => return Err(Error::Cluster(format!("node {i} missing from the table"))),
            };
        }
        Ok(())
    }

    /// One probe of [`Cluster::wait_ok`]'s condition: the agreed table, or
    /// `Err` describing the first disagreement.
    fn settled(&self, live: &[usize]) -> Result<Option<NodeTable>, Error> {
        let mut agreed: Option<(NodeTable, SlotsView)> = None;
        for &i in live {
            let node = &self.nodes[i];
            let info = expect_text(&node.cmd(&[b"CLUSTER", b"INFO"])?, "CLUSTER INFO")?;
            let state = info_field(&info, "cluster_state");
            if state.as_deref() != Some("ok") {
                return Err(Error::Cluster(format!("node {i}: cluster_state {state:?}")));
            }
            let nodes_text = expect_text(&node.cmd(&[b"CLUSTER", b"NODES"])?, "CLUSTER NODES")?;
            let (table, failed) = parse_cluster_nodes(&nodes_text);
            let links = bus_links(&node.cmd(&[b"CLUSTER", b"LINKS"])?)?;
            for (d, id) in self.ids.iter().enumerate() {
                if self.is_live(d) && d != i {
                    // A classic PUBLISH is broadcast over these links (see
                    // the doc above): a missing `from` is the silent loss
                    // of pubsub::patterns on Valkey, the sender's `to` link
                    // counted as connected all along.
                    if !links.to.contains(id) {
                        return Err(Error::Cluster(format!(
                            "node {i} has no cluster bus link to live node {d}"
                        )));
                    }
                    if !links.from.contains(id) {
                        return Err(Error::Cluster(format!(
                            "node {i} has not bound the cluster bus link from live node {d}"
                        )));
                    }
                }
                let down = !self.is_live(d);
                if down && table.contains_key(id) {
                    return Err(Error::Cluster(format!("node {i} still sees down node {d}")));
                }
                if !down && !table.contains_key(id) {
                    let why = if failed.contains(id) {
                        "failed"
                    } else {
                        "unknown"
                    };
                    return Err(Error::Cluster(format!(
                        "node {i} sees live node {d} as {why}"
                    )));
                }
            }
            let covered: u32 = table
                .values()
                .flat_map(|e| e.slots.iter())
                .map(|&(a, b)| u32::from(b) - u32::from(a) + 1)
                .sum();
            if covered != SLOT_COUNT {
                return Err(Error::Cluster(format!("node {i}: {covered} slots covered")));
            }
            let slots = slots_view(&node.cmd(&[b"CLUSTER", b"SLOTS"])?)?;
            match &agreed {
                None => agreed = Some((table, slots)),
                Some((t, s)) if *t == table && *s == slots => {}
                Some(_) => return Err(Error::Cluster(format!("node {i} disagrees"))),
            }
            if let Some(entry) = agreed.as_ref().and_then(|(t, _)| t.get(&self.ids[i])) {
                if entry.master.is_some() {
                    let repl = expect_text(&node.cmd(&[b"INFO", b"replication"])?, "INFO")?;
                    let link = info_field(&repl, "master_link_status");
                    if link.as_deref() != Some("up") {
                        return Err(Error::Cluster(format!("replica {i}: link {link:?}")));
                    }
                }
            }
        }
        if let Some((table, _)) = &agreed {
            for (id, entry) in table {
                let chained = entry
                    .master
                    .as_ref()
                    .filter(|m| table.get(*m).is_some_and(|e| e.master.is_some()));
                if let Some(master) = chained {
                    let index = |id: &String| self.ids.iter().position(|x| x == id);
                    return Err(Error::Cluster(format!(
                        "replica {:?} follows {:?}, itself a replica",
                        index(id),
                        index(master)
                    )));
                }
            }
        }
        Ok(agreed.map(|(table, _)| table))
    }

    fn create_with_redis_cli(&self, replicas: usize) -> Result<(), Error> {
        let cli = redis_cli()?;
        let scratch = TempDir::new("redis-cli")?;
        let out_path = scratch.path().join("out.log");
        let out =
            std::fs::File::create(&out_path).map_err(|e| Error::io("create redis-cli log", e))?;
        let err = out.try_clone().map_err(|e| Error::io("clone log", e))?;
        let mut command = Command::new(&cli);
        command.args(["--cluster", "create"]);
        for node in &self.nodes {
            command.arg(node.addr().to_string());
        }
        let mut child = command
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::io(format!("spawn {}", cli.display()), e))?;
        let exited = process::wait_exit(&mut child, CLUSTER_TIMEOUT);
        if !exited {
            process::kill(&mut child);
        }
        let status = child
            .wait()
            .map_err(|e| Error::io("wait for redis-cli", e))?;
        if exited && status.success() {
            return Ok(());
        }
        Err(Error::Cluster(format!(
            "redis-cli --cluster create failed ({}):\n{}",
            if exited {
                status.to_string()
            } else {
                "timed out".into()
            },
            process::tail(&out_path, 40)
        )))
    }

    /// For one or two masters, which redis-cli refuses: the same split, by hand.
    fn create_by_hand(&self, masters: usize, replicas: usize) -> Result<(), Error> {
        for (m, range) in create_ranges(masters).into_iter().enumerate() {
            let (a, b) = (range.start().to_string(), range.end().to_string());
            self.nodes[m].cmd_str(&["CLUSTER", "ADDSLOTSRANGE", &a, &b])?;
            self.nodes[m].cmd_str(&["CLUSTER", "SET-CONFIG-EPOCH", &(m + 1).to_string()])?;
        }
        let first = &self.nodes[0];
        for node in &self.nodes[1..] {
            first.cmd_str(&["CLUSTER", "MEET", "127.0.0.1", &node.port().to_string()])?;
        }
        // Every node must know every other by its real id (a node still in
        // handshake shows up under a temporary one).
        wait_for("all nodes to meet", CLUSTER_TIMEOUT, || {
            for node in &self.nodes {
                let text = expect_text(&node.cmd(&[b"CLUSTER", b"NODES"])?, "CLUSTER NODES")?;
                let (table, _) = parse_cluster_nodes(&text);
                if !self.ids.iter().all(|id| table.contains_key(id)) {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        })?;
        for r in 0..masters * replicas {
            let (replica, master) = (&self.nodes[masters + r], &self.ids[r % masters]);
            replica.cmd_str(&["CLUSTER", "REPLICATE", master])?;
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SIGTERM to every node at once; each Server's drop then reaps it.
        let pids: Vec<u32> = self
            .nodes
            .iter_mut()
            .filter_map(Server::running_pid)
            .collect();
        process::terminate_all(&pids);
    }
}

pub(crate) fn my_id(node: &Server) -> Result<String, Error> {
    expect_text(&node.cmd(&[b"CLUSTER", b"MYID"])?, "CLUSTER MYID")
}
