//! The servers the fleet runs against: a cluster or servers the demo starts
//! itself on loopback (testkit), or existing ones given by `--url`, which
//! the demo only reads (`INFO`, `CLIENT LIST`, `CLUSTER NODES`).

use std::net::{SocketAddr, ToSocketAddrs};

use shardsub::PubSubBuilder;
use testkit::values::text;
use testkit::{Client, Cluster, Servers};

use crate::options::{Mode, Options};

/// What the demo started, if anything (dropping it stops the servers).
pub enum Local {
    Cluster(Cluster),
    /// Held only to stop them on drop.
    #[allow(dead_code)]
    Servers(Servers),
    None,
}

/// The servers of a run.
pub struct Target {
    pub local: Local,
    pub probe: Probe,
}

/// How to reach the servers, to build instances and to read them.
#[derive(Clone, Debug)]
pub struct Probe {
    /// A cluster (seeds) or standalone servers (addresses in shard order).
    pub cluster: bool,
    /// Seeds or servers, `host:port` (on a cluster the demo started: every
    /// node it started with).
    pub addrs: Vec<String>,
}

/// One server node as `CLUSTER NODES` (or the server list) shows it.
#[derive(Clone, Debug)]
pub struct NodeView {
    pub addr: SocketAddr,
    /// "primary", "replica" or "server".
    pub role: &'static str,
    /// Slot ranges it owns (a primary).
    pub slots: Vec<(u16, u16)>,
}

impl Target {
    /// Starts the servers `o` asks for, or takes `--url`'s.
    ///
    /// # Errors
    ///
    /// A server that did not start, or a URL that is not `scheme://host:port`.
    pub fn open(o: &Options) -> Result<Target, String> {
        if !o.urls.is_empty() {
            let mut cluster = false;
            let mut addrs = Vec::new();
            for u in &o.urls {
                let (addr, is_cluster) = parse_url(u)?;
                cluster |= is_cluster;
                addrs.push(addr);
            }
            if cluster != o.mode.is_cluster() {
                return Err(format!(
                    "--mode {} needs {} URLs",
                    o.mode.name(),
                    if o.mode.is_cluster() {
                        "cluster (?cluster=true)"
                    } else {
                        "standalone (no ?cluster=true)"
                    }
                ));
            }
            return Ok(Target {
                local: Local::None,
                probe: Probe { cluster, addrs },
            });
        }
        if o.mode.is_cluster() {
            let c = Cluster::start(o.kind, o.masters, o.replicas)
                .map_err(|e| format!("cluster: {e}"))?;
            let addrs = c.nodes().iter().map(|n| n.addr().to_string()).collect();
            return Ok(Target {
                local: Local::Cluster(c),
                probe: Probe {
                    cluster: true,
                    addrs,
                },
            });
        }
        let n = if o.mode == Mode::Single { 1 } else { o.masters };
        let s = Servers::start(o.kind, n).map_err(|e| format!("servers: {e}"))?;
        let addrs = s.addrs().iter().map(|a| a.to_string()).collect();
        Ok(Target {
            local: Local::Servers(s),
            probe: Probe {
                cluster: false,
                addrs,
            },
        })
    }
}

impl Probe {
    /// A builder pointed at these servers.
    pub fn builder(&self) -> PubSubBuilder {
        let b = shardsub::PubSub::builder();
        if self.cluster {
            b.seeds(self.addrs.iter().cloned())
        } else {
            self.addrs.iter().fold(b, |b, a| b.address(a.clone()))
        }
    }

    /// Every node now: from `CLUSTER NODES` of the first seed that answers,
    /// or the server list. Failed nodes are left out.
    pub fn nodes(&self) -> Vec<NodeView> {
        if !self.cluster {
            return self
                .addrs
                .iter()
                .filter_map(|a| resolve(a))
                .map(|addr| NodeView {
                    addr,
                    role: "server",
                    slots: Vec::new(),
                })
                .collect();
        }
        // Any node lists every node, those added since the start too.
        for seed in self.addrs.iter().filter_map(|a| resolve(a)) {
            if let Some(t) = cmd_text(seed, &[b"CLUSTER", b"NODES"]) {
                return parse_nodes(&t);
            }
        }
        Vec::new()
    }
}

fn resolve(a: &str) -> Option<SocketAddr> {
    a.to_socket_addrs().ok()?.next()
}

/// `scheme://[user:pass@]host:port[?cluster=true]` → (`host:port`, cluster).
fn parse_url(u: &str) -> Result<(String, bool), String> {
    let bad = || format!("--url: expected redis://host:port[?cluster=true], not {u}");
    let (_, rest) = u.split_once("://").ok_or_else(bad)?;
    let (hostport, query) = rest.split_once('?').unwrap_or((rest, ""));
    let hostport = hostport.rsplit('@').next().unwrap_or(hostport);
    let hostport = hostport.trim_end_matches('/');
    if hostport.rsplit_once(':').is_none() {
        return Err(bad());
    }
    let cluster = query.split('&').any(|kv| kv == "cluster=true");
    Ok((hostport.to_string(), cluster))
}

/// One command on a fresh connection, its reply as text.
pub fn cmd_text(addr: SocketAddr, args: &[&[u8]]) -> Option<String> {
    let mut c = Client::connect(addr).ok()?;
    c.cmd(args).ok().as_ref().and_then(text)
}

/// `CLUSTER NODES` lines → nodes (not the failed or handshaking ones).
fn parse_nodes(t: &str) -> Vec<NodeView> {
    let mut out = Vec::new();
    for line in t.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 8 || f[2].contains("fail") || f[2].contains("handshake") {
            continue;
        }
        let Some(addr) = f[1].split('@').next().and_then(|a| a.parse().ok()) else {
            continue;
        };
        let primary = f[2].contains("master");
        let slots = f[8..]
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| {
                let (a, b) = s.split_once('-').unwrap_or((s, s));
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .collect();
        out.push(NodeView {
            addr,
            role: if primary { "primary" } else { "replica" },
            slots,
        });
    }
    out.sort_by_key(|n| n.addr);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_cluster_nodes_parse() {
        assert_eq!(
            parse_url("redis://u:p@127.0.0.1:7000?cluster=true").unwrap(),
            ("127.0.0.1:7000".into(), true)
        );
        assert!(parse_url("127.0.0.1").is_err());
        let t = "a 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 [5461->-b]\n\
                 b 127.0.0.1:7002@17002 slave a 0 0 1 connected\n\
                 c 127.0.0.1:7003@17003 master,fail - 0 0 1 connected\n";
        let n = parse_nodes(t);
        assert_eq!(n.len(), 2);
        assert_eq!(n[0].slots, vec![(0, 5460)]);
        assert_eq!(n[1].role, "replica");
    }
}
