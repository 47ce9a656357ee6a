//! Golden transcripts: named scenarios driven by hand (inputs → the
//! commands they produce), compared with `tests/golden/<name>.txt`.
//! `UPDATE_GOLDEN=1 cargo test -p shardsub-control --test golden` rewrites
//! them; review the diff like code.

mod script;

use control::{FetchError, ProbeReply, SubscribeReply};
use script::{shard, Script};

/// Partition 0 (slot 2048, n0): c0 c4; 1 (6144, n2): news; 2 (10240, n2):
/// ping c3; 3 (14336, n4): chat.
const CHANNELS: [&str; 6] = ["news", "chat", "ping", "c0", "c4", "c3"];

/// Three primaries over the redis-cli split (n0, n2, n4 with replicas
/// n1, n3, n5).
fn three() -> Vec<script::ShardSpec> {
    vec![
        shard("id0", "n0", &["n1"], &[(0, 5460)]),
        shard("id2", "n2", &["n3"], &[(5461, 10922)]),
        shard("id4", "n4", &["n5"], &[(10923, 16383)]),
    ]
}

/// Startup: fetch, open one connection per primary, subscribe by partition.
fn started(s: &mut Script) {
    s.want(&CHANNELS);
    s.topology(Ok(three()));
    s.up_all();
    s.ok_all();
}

#[test]
fn startup_on_three_primaries() {
    let mut s = Script::new("startup on three primaries", 1, 512);
    started(&mut s);
    s.check("startup");
}

#[test]
fn failover_of_one_primary() {
    let mut s = Script::new("failover: n3 replaces n2", 1, 512);
    started(&mut s);
    let conns = s.conns_of("n2");
    for c in conns {
        s.conn_down(c);
    }
    let mut after = three();
    after[1] = shard("id3", "n3", &["n2"], &[(5461, 10922)]);
    s.topology(Ok(after));
    s.up_all();
    s.ok_all();
    s.timeout();
    s.check("failover");
}

#[test]
fn slot_migration_of_one_partition() {
    let mut s = Script::new("partition 0's slot 2048 moves n0 -> n2", 2, 512);
    started(&mut s);
    // The server pushes sunsubscribe for the moved slot's channels.
    for ch in s.channels_of_partition(0) {
        let c = s.conn_carrying(&ch);
        s.sunsubscribe(c, &ch);
    }
    let mut after = three();
    after[0] = shard("id0", "n0", &["n1"], &[(0, 2047), (2049, 5460)]);
    after[1] = shard("id2", "n2", &["n3"], &[(2048, 2048), (5461, 10922)]);
    s.topology(Ok(after));
    s.ok_all();
    s.check("migration");
}

#[test]
fn sunsubscribe_with_a_stale_map() {
    let mut s = Script::new("sunsubscribe, the map does not move it", 1, 512);
    started(&mut s);
    let ch = s.channels_of_partition(1).remove(0);
    let c = s.conn_carrying(&ch);
    s.sunsubscribe(c, &ch);
    // Four refreshes leave it lost; the fifth resubscribes it in place.
    for _ in 0..5 {
        s.topology(Ok(three()));
    }
    s.ok_all();
    s.check("stale_map");
}

#[test]
fn node_added() {
    let mut s = Script::new("n6 joins and takes slot 14336", 1, 512);
    started(&mut s);
    let mut after = three();
    after[2] = shard("id4", "n4", &["n5"], &[(10923, 14335), (14337, 16383)]);
    after.push(shard("id6", "n6", &[], &[(14336, 14336)]));
    for ch in s.channels_of_partition(3) {
        let c = s.conn_carrying(&ch);
        s.sunsubscribe(c, &ch);
    }
    s.topology(Ok(after));
    s.up_all();
    s.ok_all();
    s.check("node_added");
}

#[test]
fn node_removed() {
    let mut s = Script::new("n2 hands its slots to n4 and leaves", 1, 512);
    started(&mut s);
    let after = vec![
        shard("id0", "n0", &["n1"], &[(0, 5460)]),
        shard("id4", "n4", &["n5", "n3"], &[(5461, 16383)]),
    ];
    s.topology(Ok(after));
    s.ok_all();
    s.check("node_removed");
}

#[test]
fn subscribe_refused_by_acl() {
    let mut s = Script::new("ACL refuses one channel of a batch", 1, 512);
    s.topology(Ok(three()));
    s.up_all();
    let names: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    s.want(&names);
    // Partition 0's command carries c10; it is refused until c10 is alone.
    s.reply_all(|chs| {
        if chs.iter().any(|c| c == "c10") {
            SubscribeReply::Refused("NOPERM no permissions to access the 'c10' channel".into())
        } else {
            SubscribeReply::Ok
        }
    });
    s.check("acl");
}

#[test]
fn topology_fetch_failing_then_succeeding() {
    let mut s = Script::new("fetch fails 6 times (backoff to 2 s), then works", 1, 512);
    s.want(&CHANNELS[..2]);
    for _ in 0..6 {
        s.topology(Err(FetchError::Unreachable));
        s.timeout();
    }
    s.topology(Ok(three()));
    s.up_all();
    s.ok_all();
    s.check("fetch_backoff");
}

#[test]
fn unowned_slot_is_probed() {
    let mut s = Script::new("slot 2048 has no owner; the probe finds n2", 1, 512);
    s.want(&CHANNELS);
    s.topology(Ok(vec![
        shard("id0", "n0", &["n1"], &[(0, 2047), (2049, 5460)]),
        shard("id2", "n2", &["n3"], &[(5461, 10922)]),
        shard("id4", "n4", &["n5"], &[(10923, 16383)]),
    ]));
    s.up_all();
    s.ok_all();
    s.probe(ProbeReply::Moved(script::addr("n2")));
    s.ok_all();
    s.check("probe");
}

#[test]
fn per_partition_startup_and_migration() {
    let mut s = Script::with(
        "per-partition connections; partition 0's slot moves n0 -> n2",
        control::ConnLayout::PerPartition,
        1,
        512,
    );
    started(&mut s);
    for ch in s.channels_of_partition(0) {
        let c = s.conn_carrying(&ch);
        s.sunsubscribe(c, &ch);
    }
    let mut after = three();
    after[0] = shard("id0", "n0", &["n1"], &[(0, 2047), (2049, 5460)]);
    after[1] = shard("id2", "n2", &["n3"], &[(2048, 2048), (5461, 10922)]);
    s.topology(Ok(after));
    s.up_all();
    s.ok_all();
    s.check("per_partition");
}

#[test]
fn silent_connection_is_pinged_and_replaced() {
    let mut s = Script::new("silent for 30 s: pings; n2 and n4 never answer", 1, 512);
    started(&mut s);
    let c = s.conns_of("n0")[0];
    for _ in 0..4 {
        s.timeout(); // the poll, then a ping per connection
    }
    s.topology(Ok(three()));
    s.pong(c);
    s.timeout(); // n2's ping is overdue: closed; a refresh
    s.timeout(); // n4's too
    s.topology(Ok(three()));
    s.topology(Ok(three())); // the degraded-mode refresh
    s.timeout(); // both reopened after the backoff
    s.timeout();
    s.up_all();
    s.ok_all();
    s.check("ping");
}

#[test]
fn a_node_learnt_from_moved_gets_its_id() {
    let mut s = Script::new(
        "the probe finds n6 (no id); the next map names it id6",
        1,
        512,
    );
    s.want(&CHANNELS);
    s.topology(Ok(vec![
        shard("id0", "n0", &["n1"], &[(0, 5460)]),
        shard("id2", "n2", &["n3"], &[(5461, 10922)]),
        shard("id4", "n4", &["n5"], &[(10923, 14335), (14337, 16383)]),
    ]));
    s.up_all();
    s.ok_all();
    s.probe(ProbeReply::Moved(script::addr("n6")));
    s.up_all();
    s.ok_all();
    // The same connection stays: no close, no open, no gap.
    let mut after = three();
    after[2] = shard("id4", "n4", &["n5"], &[(10923, 14335), (14337, 16383)]);
    after.push(shard("id6", "n6", &[], &[(14336, 14336)]));
    s.topology(Ok(after));
    s.check("moved_node_id");
}

#[test]
fn refresh_redirect_and_activity() {
    let mut s = Script::new("refresh, redirects, a busy connection", 1, 512);
    started(&mut s);
    s.refresh();
    s.topology(Ok(three()));
    s.redirect(2048, "n0"); // the map says so already: nothing
    s.redirect(2048, "n2"); // news to the core: a fetch
    s.topology(Ok(three()));
    // Messages on n0's connection at 20 s: only n2 and n4 are pinged at 30 s.
    let c = s.conns_of("n0")[0];
    s.idle_until(20_000);
    s.activity(c);
    s.timeout(); // n2's and n4's connections are pinged, not n0's
    s.timeout();
    for host in ["n2", "n4"] {
        let c2 = s.conns_of(host)[0];
        s.pong(c2);
    }
    s.topology(Ok(three())); // the poll
    s.timeout(); // n0's connection: 30 s after its messages
    s.pong(c);
    s.check("refresh_redirect");
}

#[test]
fn classic_lanes_follow_their_primary() {
    let mut s = Script::with(
        "classic: 2 lanes on id0; n1 replaces n0",
        control::ConnLayout::Classic,
        2,
        512,
    );
    started(&mut s);
    for c in s.conns_of("n0") {
        s.conn_down(c);
    }
    let mut after = three();
    after[0] = shard("id1", "n1", &["n0"], &[(0, 5460)]);
    s.topology(Ok(after));
    s.up_all();
    s.ok_all();
    s.check("classic");
}
