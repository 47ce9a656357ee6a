//! Fault schedules: what happens to the cluster and the application, when.

use core::time::Duration;

use control::Rng;
use control::Time;

/// One event of a schedule. Numbers pick among what exists when the event
/// runs (a node index is taken modulo the live primaries, and so on), so
/// any schedule is valid, whatever came before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The slot of partition `partition` migrates to primary `to` (pushes
    /// `sunsubscribe` for its channels on the old owner).
    Migrate {
        /// Partition pick.
        partition: u32,
        /// Primary pick.
        to: u32,
    },
    /// A replica of primary `node` takes over its slots.
    Failover {
        /// Primary pick.
        node: u32,
    },
    /// Node `node` dies (a primary's replica takes over; without one its
    /// slots move to another primary).
    Kill {
        /// Node pick.
        node: u32,
    },
    /// A new primary joins and takes the slot of partition `partition`.
    AddNode {
        /// Partition pick.
        partition: u32,
    },
    /// Primary `node` hands all its slots to the others and leaves.
    RemoveNode {
        /// Primary pick.
        node: u32,
    },
    /// The slot of partition `partition` migrates away and back: its
    /// channels are dropped, the map does not change.
    Bounce {
        /// Partition pick.
        partition: u32,
    },
    /// A `sunsubscribe` storm: primary `node` drops every shard channel of
    /// every connection (as on a demotion), and keeps its slots.
    Storm {
        /// Primary pick.
        node: u32,
    },
    /// The server closes connection `conn`.
    DropConn {
        /// Connection pick.
        conn: u32,
    },
    /// Nothing reaches or leaves node `node` for `ms` milliseconds (then
    /// everything arrives, in order).
    BlackHole {
        /// Node pick.
        node: u32,
        /// Duration.
        ms: u32,
    },
    /// Topology replies come from old maps for `ms` milliseconds.
    Stale {
        /// Duration.
        ms: u32,
    },
    /// The slot of partition `partition` has no owner for `ms`
    /// milliseconds (`CLUSTERDOWN`), then a random primary takes it.
    Orphan {
        /// Partition pick.
        partition: u32,
        /// Duration.
        ms: u32,
    },
    /// The application toggles channel `channel` (want / unwant).
    Toggle {
        /// Channel pick.
        channel: u32,
    },
    /// The application toggles up to 12 channels from `channel` on, the
    /// wanted ones unwanted in one call, the others wanted in one call.
    Burst {
        /// Channel pick.
        channel: u32,
    },
    /// Replica `node` follows primary `to` (`CLUSTER REPLICATE`): on Redis
    /// its subscribers of the old shard's channels silently stop
    /// receiving, on Valkey they get `sunsubscribe`
    /// ([`Schedule::valkey`]). Only in [`Schedule::random_replicas`]
    /// (which has no [`Fault::RemoveNode`]), each replica at most once a
    /// run: a replica back on its old primary between two map reads would
    /// be invisible on Redis.
    Replicate {
        /// Replica pick.
        node: u32,
        /// Primary pick.
        to: u32,
    },
    /// The publish connections to node `node` drop for `ms` milliseconds
    /// (what is on their wire is lost; the engine reconnects).
    DropLink {
        /// Node pick.
        node: u32,
        /// Duration.
        ms: u32,
    },
    /// Messages arrive on connection `conn` every 5 s for 40 s
    /// ([`handle_activity`](control::Core::handle_activity)): it must not be
    /// pinged meanwhile.
    Chatter {
        /// Connection pick.
        conn: u32,
    },
}

/// A simulated run: the cluster's shape, its faults, and the time allowed
/// to settle after the last one.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The seed of the simulator's own randomness (delays, stale picks).
    pub seed: u64,
    /// Primaries at start (each with one replica).
    pub primaries: u32,
    /// Application channels (`c0`, `c1`, …); half are wanted at start.
    pub channels: u32,
    /// Subscribe connections per primary (node-grouped mode).
    pub multiplier: u32,
    /// One connection per partition instead ([`ConnLayout::PerPartition`](control::ConnLayout)).
    pub per_partition: bool,
    /// Channels per `SSUBSCRIBE`.
    pub batch: usize,
    /// Whether channels `c7`, `c18`, … (index % 11 == 7) are refused (ACL).
    pub acl: bool,
    /// Resubscribe workers ([`Config::workers`](control::Config::workers)).
    pub workers: u32,
    /// Split resubscribes by channel
    /// ([`ResubscribeSplit::Channels`](control::ResubscribeSplit)) instead
    /// of by partition.
    pub split_channels: bool,
    /// Classic `SUBSCRIBE` mode ([`ConnLayout::Classic`](control::ConnLayout), over
    /// `multiplier` lanes) instead of a sharded one.
    pub classic: bool,
    /// Subscribe on replicas ([`Config::replicas`](control::Config::replicas),
    /// seeded with the schedule's seed).
    pub replicas: bool,
    /// Valkey's pushes: a promoted replica, and one re-pointed to another
    /// primary, push `sunsubscribe` for its shard channels (Redis keeps
    /// them on a promotion and drops them silently on a re-point).
    pub valkey: bool,
    /// Faults with their times.
    pub faults: Vec<(Time, Fault)>,
    /// Virtual time allowed after the last fault for everything to settle.
    pub settle: Duration,
}

impl Schedule {
    /// A random schedule from `seed`: 2 to 5 primaries, up to 12 faults in
    /// the first 3 s, 45 s to settle (past the 30 s poll). The settings
    /// added later (workers, the split, chatter) come from a second stream,
    /// so older seeds keep their faults.
    pub fn random(seed: u64) -> Schedule {
        let mut s = Schedule::random_v1(seed);
        let mut r = Rng::new(seed ^ 0x5eed_0002_c0de_0002);
        s.workers = 1 + r.below(4) as u32;
        s.split_channels = r.chance(50);
        s.classic = r.chance(20);
        for _ in 0..r.below(3) {
            let at = Time::from_millis(r.below(3000));
            let conn = r.next_u64() as u32;
            s.faults.push((at, Fault::Chatter { conn }));
        }
        // Publish connection drops come from a fourth stream.
        let mut r = Rng::new(seed ^ 0x5eed_0004_c0de_0004);
        for _ in 0..r.below(3) {
            let at = Time::from_millis(r.below(3000));
            let node = r.next_u64() as u32;
            let ms = r.below(600) as u32;
            s.faults.push((at, Fault::DropLink { node, ms }));
        }
        s.faults.sort_by_key(|f| f.0);
        s
    }

    /// A random schedule from `seed` that subscribes on replicas: as
    /// [`Schedule::random`] (sharded modes only), with Redis or Valkey
    /// pushes and up to 3 replica re-points, from a third stream.
    pub fn random_replicas(seed: u64) -> Schedule {
        let mut s = Schedule::random(seed);
        let mut r = Rng::new(seed ^ 0x5eed_0003_c0de_0003);
        s.classic = false;
        s.replicas = true;
        // A removed primary's replicas follow another primary, possibly
        // the one a re-pointed replica left: see `Fault::Replicate`.
        s.faults
            .retain(|f| !matches!(f.1, Fault::RemoveNode { .. }));
        s.valkey = r.chance(50);
        for _ in 0..r.below(4) {
            let at = Time::from_millis(r.below(3000));
            let node = r.next_u64() as u32;
            let to = r.next_u64() as u32;
            s.faults.push((at, Fault::Replicate { node, to }));
        }
        s.faults.sort_by_key(|f| f.0);
        s
    }

    fn random_v1(seed: u64) -> Schedule {
        let mut r = Rng::new(seed);
        let up_to = r.below(12) + 1;
        let n = 2 + r.below(up_to) as usize;
        let mut faults = Vec::with_capacity(n);
        let mut t = 0u64;
        for _ in 0..n {
            t += r.below(300);
            faults.push((Time::from_millis(t), random_fault(&mut r)));
        }
        Schedule {
            seed,
            primaries: 2 + r.below(4) as u32,
            channels: 4 + r.below(40) as u32,
            multiplier: 1 + r.below(3) as u32,
            per_partition: r.chance(25),
            batch: [1, 2, 3, 512][r.below(4) as usize],
            acl: r.chance(20),
            workers: 1,
            split_channels: false,
            classic: false,
            replicas: false,
            valkey: false,
            faults,
            settle: Duration::from_secs(45),
        }
    }
}

fn random_fault(r: &mut Rng) -> Fault {
    let a = r.next_u64() as u32;
    let b = r.next_u64() as u32;
    match r.below(15) {
        0 | 1 => Fault::Migrate {
            partition: a,
            to: b,
        },
        2 => Fault::Failover { node: a },
        3 => Fault::Kill { node: a },
        4 => Fault::AddNode { partition: a },
        5 => Fault::RemoveNode { node: a },
        6 => Fault::Bounce { partition: a },
        7 => Fault::DropConn { conn: a },
        8 => Fault::BlackHole {
            node: a,
            ms: b % 3000,
        },
        9 => Fault::Stale { ms: b % 2000 },
        11 => Fault::Burst { channel: a },
        12 => Fault::Storm { node: a },
        10 => Fault::Orphan {
            partition: a,
            ms: b % 1500,
        },
        _ => Fault::Toggle { channel: a },
    }
}
