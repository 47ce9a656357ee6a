//! Configuration by URL on real servers (Redis 7 and Valkey 9): two
//! `redis://:password@` URLs are two password-protected shards that
//! deliver every message of an accounted round; `?cluster=true` with an ACL
//! user makes a cluster instance from one seed URL; a wrong password in a
//! URL fails `build` at once with the server's text; `?cluster=true` at a
//! plain server fails at once with a hint, and so does a plain URL at a
//! cluster node; an engine built from a URL authenticates too.

use std::sync::Arc;
use std::time::Duration;

use shardsub::engine::Engine;
use shardsub::{Error, PubSub, Value};
use testkit::accounting::Ledger;
use testkit::{Cluster, Servers};

use crate::support;
use crate::support::accounted;
use crate::support::accounted::Accounted;

const BOUND: Duration = Duration::from_secs(20);
/// Needs percent-encoding in a URL: '@', ':', '/' and '%'.
const PASSWORD: &str = "p@ss:w/rd%1";
const ENCODED: &str = "p%40ss%3Aw%2Frd%251";

#[test]
fn password_urls_make_shards_that_deliver_every_message() {
    for kind in testkit::kinds() {
        let servers = Servers::start(kind, 2).expect("servers");
        for s in servers.iter() {
            s.cmd_str(&["CONFIG", "SET", "requirepass", PASSWORD])
                .unwrap();
        }
        let urls: Vec<String> = servers
            .addrs()
            .iter()
            .enumerate()
            .map(|(i, a)| match i {
                // Both forms of a default-user URL, one with a database.
                0 => format!("redis://:{ENCODED}@{a}/0"),
                _ => format!("valkey://:{ENCODED}@{a}"),
            })
            .collect();
        let chans = support::channels("url", 200);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sub");
        let ps = PubSub::builder()
            .urls(&urls)
            .handler_arc(handler.clone())
            .workers(2)
            .build()
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let ps = Arc::new(ps);
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        // Two shards, each with subscriptions: the URLs are the servers.
        for (i, s) in servers.iter().enumerate() {
            let mine: Vec<Vec<u8>> = chans
                .iter()
                .filter(|c| ps.server_of(c) == Some(i))
                .cloned()
                .collect();
            assert!(!mine.is_empty(), "{kind:?}: no channel on shard {i}");
            let counts = support::pubsub::numsub(s, &mine);
            assert!(
                counts.iter().all(|&n| n == 1),
                "{kind:?} shard {i}: {counts:?}"
            );
        }
        accounted::round(&ledger, &*accounted::via_cluster(ps.clone()));
        let report = accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?}"));
        assert_eq!(report.counts.delivered, 200, "{kind:?}");
        assert_eq!(report.failed_total(), 0, "{kind:?}");
        ps.shutdown();
    }
}

#[test]
fn a_wrong_password_in_a_url_fails_build_with_the_servers_text() {
    for kind in testkit::kinds() {
        let servers = Servers::start(kind, 1).expect("server");
        let s = servers.iter().next().unwrap();
        s.cmd_str(&["CONFIG", "SET", "requirepass", PASSWORD])
            .unwrap();
        let url = format!("redis://:wrong@{}", s.addr());
        let asked = std::time::Instant::now();
        let denied = PubSub::builder()
            .url(&url)
            .handler(shardsub::handler_fn(|_, _| {}))
            .build();
        match denied {
            Err(Error::Auth { message, .. }) => {
                assert!(message.starts_with("WRONGPASS"), "{kind:?}: {message}")
            }
            Err(e) => panic!("{kind:?}: not the server's refusal: {e}"),
            Ok(_) => panic!("{kind:?}: a refused password started an instance"),
        }
        assert!(asked.elapsed() < Duration::from_secs(5), "{kind:?}");
        // No password at all: the server's NOAUTH, not a silent start.
        let none = PubSub::builder()
            .url(&format!("redis://{}", s.addr()))
            .handler(shardsub::handler_fn(|_, _| {}))
            .build();
        assert!(none.is_err(), "{kind:?}: started without a password");
        // The engine's URL: the right password works, the wrong one is
        // the server's refusal.
        let e = Engine::builder()
            .url(&format!("redis://:{ENCODED}@{}", s.addr()))
            .build()
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(
            e.command(["PING"]).unwrap(),
            Value::Simple(b"PONG".to_vec())
        );
        e.shutdown();
        let err = Engine::builder().url(&url).build().unwrap_err();
        assert!(
            matches!(&err, Error::Auth { message, .. } if message.starts_with("WRONGPASS")),
            "{kind:?}: {err:?}"
        );
    }
}

#[test]
fn a_cluster_url_with_an_acl_user_makes_a_cluster_instance() {
    for kind in testkit::kinds() {
        let cluster = Cluster::start(kind, 3, 0).expect("cluster");
        for &i in &cluster.masters() {
            cluster
                .node(i)
                .cmd_str(&[
                    "ACL",
                    "SETUSER",
                    "app",
                    "on",
                    &format!(">{PASSWORD}"),
                    "~*",
                    "&*",
                    "+@all",
                ])
                .unwrap();
        }
        let seed = cluster.seed_addrs()[0];
        let chans = support::channels("curl", 100);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sub");
        let ps = PubSub::builder()
            .url(&format!("redis://app:{ENCODED}@{seed}?cluster=true"))
            .handler_arc(handler.clone())
            .workers(2)
            .build()
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let m = ps.cluster_metrics().expect("a cluster instance");
        assert_eq!(m.nodes, 3, "{kind:?}: {m:?}");
        let ps = Arc::new(ps);
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND).unwrap();
        accounted::round(&ledger, &*accounted::via_cluster(ps.clone()));
        let report = accounted::settle_and_check(&ledger, BOUND, &format!("{kind:?}"));
        assert_eq!(report.counts.delivered, 100, "{kind:?}");
        ps.shutdown();
    }
}

/// `?cluster=true` (or a seed) pointed at a plain server fails `build` at
/// once with a settings error that names the server and the way to place
/// it, not after the discovery bound with a cluster error about slot 0 (as
/// it did: 10 s, "the cluster could not serve slot 0").
#[test]
fn a_cluster_url_at_a_plain_server_fails_at_once_with_a_hint() {
    for kind in testkit::kinds() {
        let servers = Servers::start(kind, 1).expect("server");
        let addr = servers.addrs()[0];
        let started = std::time::Instant::now();
        let r = PubSub::builder()
            .url(&format!("redis://{addr}?cluster=true"))
            .build();
        let e = r.expect_err("a cluster instance on a plain server");
        let text = e.to_string();
        assert!(
            matches!(&e, Error::Config(_))
                && text.contains(&addr.to_string())
                && text.contains("not a cluster node")
                && text.contains("PubSubBuilder::address"),
            "{kind:?}: {e:?}"
        );
        // Before the discovery bound (10 s): the seed's answer decided it.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{kind:?}: {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn a_plain_url_at_a_cluster_node_fails_at_once_with_a_hint() {
    for kind in testkit::kinds() {
        let node = testkit::Server::builder(kind)
            .cluster(true)
            .start()
            .expect("a cluster node");
        let addr = node.addr();
        let r = PubSub::builder().url(&format!("redis://{addr}")).build();
        let e = r.expect_err("a server instance on a cluster node");
        let text = e.to_string();
        assert!(
            matches!(&e, Error::Config(_))
                && text.contains(&format!("{addr} is a cluster node"))
                && text.contains("PubSubBuilder::seed")
                && text.contains("?cluster=true"),
            "{kind:?}: {e:?}"
        );
    }
}
