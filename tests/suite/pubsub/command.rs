//! `PubSub::command`: any command, routed by key, in every placement:
//! the one server, the channel's shard, the owner of the key's slot (after
//! a migration too), checked against the servers' own contents.

use std::time::Duration;

use shardsub::{handler_fn, Error, PubSub, PubSubBuilder, Value};
use testkit::{Cluster, Server, Servers};

fn build(b: PubSubBuilder) -> PubSub {
    b.handler(handler_fn(|_, _| {}))
        .workers(1)
        .build()
        .expect("pubsub")
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("presence:room:{i}")).collect()
}

/// What `server` holds under `key` (as a string), asked directly.
fn stored(server: &Server, key: &str) -> Option<String> {
    match server.cmd_str(&["GET", key]).expect("get") {
        Value::Null => None,
        v => testkit::values::text(&v),
    }
}

#[test]
fn commands_reach_the_server_and_errors_come_back() {
    for kind in testkit::kinds() {
        let server = Server::start(kind).expect("server");
        let ps = build(PubSub::builder().address(server.addr().to_string()));
        let r = ps.command("k", ["SET", "k", "v"]).expect("set");
        assert_eq!(r, Value::Simple(b"OK".to_vec()), "{kind:?}");
        assert_eq!(stored(&server, "k").as_deref(), Some("v"), "{kind:?}");
        let r = ps.command("k", ["INCR", "k"]);
        assert!(matches!(r, Err(Error::Reply { .. })), "{kind:?}: {r:?}");
        let r = ps.command("k", Vec::<&str>::new());
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "{kind:?}: {r:?}"
        );
        ps.shutdown();
        let r = ps.command("k", ["GET", "k"]);
        assert!(matches!(r, Err(Error::Shutdown)), "{kind:?}: {r:?}");
    }
}

#[test]
fn on_shards_a_key_lives_with_the_channel_of_its_name() {
    for kind in testkit::kinds() {
        let servers = Servers::start(kind, 3).expect("servers");
        let addrs = servers
            .addrs()
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>();
        let ps = build(PubSub::builder().addresses(addrs));
        let keys = keys(60);
        for k in &keys {
            ps.command(k, ["SET", k.as_str(), k.as_str()]).expect("set");
        }
        let mut per_server = [0usize; 3];
        for k in &keys {
            let home = ps.server_of(k.as_bytes()).expect("servers");
            per_server[home] += 1;
            for (i, s) in servers.iter().enumerate() {
                let want = (i == home).then(|| k.clone());
                assert_eq!(stored(s, k), want, "{kind:?}: {k} on server {i}");
            }
            let got = ps.command(k, ["GET", k.as_str()]).expect("get");
            assert_eq!(got, Value::Bulk(k.clone().into_bytes()), "{kind:?}");
        }
        assert!(
            per_server.iter().all(|&n| n > 0),
            "{kind:?}: {per_server:?}"
        );
    }
}

#[test]
fn on_a_cluster_a_key_goes_to_its_slot_owner_and_follows_a_migration() {
    for kind in testkit::kinds() {
        let mut cluster = Cluster::start(kind, 3, 0).expect("cluster");
        let seeds = cluster
            .seed_addrs()
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>();
        let ps = build(
            PubSub::builder()
                .seeds(seeds)
                .retry_window(Duration::from_secs(5)),
        );
        let keys = keys(60);
        for k in &keys {
            ps.command(k, ["SET", k.as_str(), k.as_str()]).expect("set");
            let owner = cluster
                .owner_of_slot(shardcore::key_slot(k.as_bytes()))
                .expect("owner");
            assert_eq!(stored(cluster.node(owner), k).as_deref(), Some(k.as_str()));
        }
        // A key tagged like a channel's wire name shares its slot.
        let wire = ps.server_channel(b"room:1");
        let tag_end = wire.iter().position(|&b| b == b'}').expect("a tag") + 1;
        let history = [&wire[..tag_end], b".history:room:1"].concat();
        assert_eq!(
            shardcore::key_slot(&history),
            shardcore::key_slot(&wire),
            "{kind:?}"
        );
        // Move one key's slot away: the instance still has the old route
        // and is told `MOVED` (or `ASK` mid-way); the command follows it.
        let k = &keys[0];
        let slot = shardcore::key_slot(k.as_bytes());
        let from = cluster.owner_of_slot(slot).expect("owner");
        let to = *cluster
            .masters()
            .iter()
            .find(|&&m| m != from)
            .expect("another");
        cluster
            .migrate_slots(slot..=slot, from, to)
            .expect("migrate");
        let got = ps
            .command(k, ["GET", k.as_str()])
            .expect("get after migration");
        assert_eq!(got, Value::Bulk(k.clone().into_bytes()), "{kind:?}");
        let m = ps.cluster_metrics().expect("cluster");
        eprintln!("{kind:?}: after the migration, {:?}", m.redirects);
    }
}
