//! A hand driver for golden transcripts: feeds inputs to a core, logs each
//! input (`@time input`) and the commands it gives (`  > command`), and
//! remembers what is outstanding so that a scenario can answer it.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use control::{
    Command, Config, ConnId, ConnLayout, Core, FetchError, ProbeReply, Stats, SubscribeReply, Time,
};
use shardcore::Partitions;
use topology::{Health, Node, NodeAddr, Role, Shard, SlotMap};

/// A shard of a scripted map: primary id, primary host, replica hosts,
/// slot ranges.
pub struct ShardSpec {
    id: &'static str,
    host: &'static str,
    replicas: Vec<&'static str>,
    ranges: Vec<(u16, u16)>,
}

/// A shard for [`Script::topology`].
pub fn shard(
    id: &'static str,
    host: &'static str,
    replicas: &[&'static str],
    ranges: &[(u16, u16)],
) -> ShardSpec {
    ShardSpec {
        id,
        host,
        replicas: replicas.to_vec(),
        ranges: ranges.to_vec(),
    }
}

/// `host:7000`.
pub fn addr(host: &str) -> NodeAddr {
    NodeAddr {
        host: host.into(),
        port: 7000,
    }
}

fn node(id: &str, host: &str, role: Role) -> Node {
    Node {
        id: id.into(),
        addr: Some(addr(host)),
        hostname: None,
        tls_port: None,
        role,
        health: Health::Online,
        replication_offset: None,
    }
}

fn build(specs: &[ShardSpec]) -> SlotMap {
    let mut map = SlotMap::new();
    for s in specs {
        let replicas = s
            .replicas
            .iter()
            .map(|h| node(&format!("r-{h}"), h, Role::Replica))
            .collect();
        let i = map.push_shard(Shard {
            primary: node(s.id, s.host, Role::Primary),
            replicas,
        });
        for &(a, b) in &s.ranges {
            map.assign(a..=b, i);
        }
    }
    map
}

/// A core under a scripted driver.
pub struct Script {
    core: Core,
    now: Time,
    log: String,
    opens: VecDeque<ConnId>,
    hosts: BTreeMap<ConnId, String>,
    subs: VecDeque<(ConnId, Vec<String>)>,
    fetch: Option<u64>,
    probes: VecDeque<u64>,
    wanted: Vec<String>,
}

impl Script {
    /// A core over 4 partitions, seeded with `n0`.
    pub fn new(title: &str, multiplier: u32, batch: usize) -> Script {
        Script::with(title, ConnLayout::NodeGrouped, multiplier, batch)
    }

    /// As [`Script::new`], in `mode`.
    pub fn with(title: &str, mode: ConnLayout, multiplier: u32, batch: usize) -> Script {
        let parts = Partitions::new(4).unwrap();
        let mut cfg = Config::new(parts, vec![addr("n0")]);
        cfg.mode = mode;
        cfg.multiplier = multiplier;
        cfg.batch = batch;
        let core = Core::new(cfg, Time::ZERO).unwrap();
        let mut s = Script {
            core,
            now: Time::ZERO,
            log: format!(
                "# {title} (4 partitions, {mode:?}, multiplier {multiplier}, batch {batch})\n@0ms start\n"
            ),
            opens: VecDeque::new(),
            hosts: BTreeMap::new(),
            subs: VecDeque::new(),
            fetch: None,
            probes: VecDeque::new(),
            wanted: Vec::new(),
        };
        s.drain();
        s
    }

    fn step(&mut self, what: &str, f: impl FnOnce(&mut Core, Time)) {
        self.now = self.now + Duration::from_millis(1);
        let _ = writeln!(self.log, "@{}ms {what}", self.now.as_millis());
        f(&mut self.core, self.now);
        self.drain();
    }

    fn drain(&mut self) {
        while let Some(cmd) = self.core.poll_command() {
            let line = cmd.to_string();
            // Classic mode: the driver sends SUBSCRIBE / UNSUBSCRIBE.
            let line = match self.core.config().mode {
                ConnLayout::Classic => line.replacen("ssubscribe ", "subscribe ", 1).replacen(
                    "sunsubscribe ",
                    "unsubscribe ",
                    1,
                ),
                _ => line,
            };
            let _ = writeln!(self.log, "  > {line}");
            match cmd {
                Command::Open { conn, node } => {
                    self.opens.push_back(conn);
                    self.hosts.insert(conn, node.addr.host.clone());
                }
                Command::Close { conn } => {
                    self.hosts.remove(&conn);
                    self.subs.retain(|s| s.0 != conn);
                }
                Command::Subscribe { conn, channels, .. } => {
                    let names = channels
                        .iter()
                        .map(|c| String::from_utf8_lossy(c).into_owned())
                        .collect();
                    self.subs.push_back((conn, names));
                }
                // The version is answered at once: a Redis 7 node.
                Command::AskVersion { id, .. } => {
                    let info = b"# Server\r\nredis_version:7.2.4\r\n";
                    self.core.handle_version(self.now, id, Ok(&info[..]));
                }
                Command::FetchTopology { id, .. } => self.fetch = Some(id),
                Command::ProbeSlot { id, .. } => self.probes.push_back(id),
                _ => {}
            }
        }
        if let Some(t) = self.core.poll_timeout() {
            assert!(t > self.now, "poll_timeout {t} not after {}", self.now);
        }
    }

    /// The application wants `names`.
    pub fn want(&mut self, names: &[&str]) {
        self.wanted.extend(names.iter().map(|n| n.to_string()));
        let text = format!("want {}", names.join(" "));
        self.step(&text, |c, now| {
            c.handle_want(now, names.iter().map(|n| n.as_bytes()))
        });
    }

    /// Answers the outstanding fetch (advancing through timeouts until
    /// there is one).
    pub fn topology(&mut self, map: Result<Vec<ShardSpec>, FetchError>) {
        for _ in 0..10 {
            if self.fetch.is_some() {
                break;
            }
            self.timeout();
        }
        let id = self.fetch.take().expect("no fetch outstanding");
        let text = match &map {
            Ok(specs) => {
                let parts: Vec<String> = specs
                    .iter()
                    .map(|s| {
                        let r: Vec<String> =
                            s.ranges.iter().map(|(a, b)| format!("{a}-{b}")).collect();
                        format!(
                            "{} {} [{}] +{}",
                            s.id,
                            s.host,
                            r.join(","),
                            s.replicas.join(",")
                        )
                    })
                    .collect();
                format!("topology #{id}: {}", parts.join(" | "))
            }
            Err(e) => format!("topology #{id}: {e:?}"),
        };
        let map = map.map(|s| build(&s));
        self.step(&text, |c, now| c.handle_topology(now, id, map));
    }

    /// Every outstanding open succeeds.
    pub fn up_all(&mut self) {
        while let Some(c) = self.opens.pop_front() {
            self.step(&format!("up {c}"), |core, now| core.handle_conn_up(now, c));
        }
    }

    /// Every outstanding subscribe (and those their replies cause) is
    /// answered by `f`.
    pub fn reply_all(&mut self, mut f: impl FnMut(&[String]) -> SubscribeReply) {
        while let Some((c, names)) = self.subs.pop_front() {
            let r = f(&names);
            let text = match &r {
                SubscribeReply::Ok => format!("ok {c}"),
                other => format!("reply {c} {other:?}"),
            };
            self.step(&text, |core, now| core.handle_subscribe_reply(now, c, r));
        }
    }

    /// Every outstanding subscribe succeeds.
    pub fn ok_all(&mut self) {
        self.reply_all(|_| SubscribeReply::Ok);
    }

    /// Connection `c` drops.
    pub fn conn_down(&mut self, c: ConnId) {
        self.subs.retain(|s| s.0 != c);
        self.opens.retain(|&o| o != c);
        self.step(&format!("down {c}"), |core, now| {
            core.handle_conn_down(now, c)
        });
    }

    /// The server pushes `sunsubscribe ch` on `c`.
    pub fn sunsubscribe(&mut self, c: ConnId, ch: &str) {
        let text = format!("push {c} sunsubscribe {ch}");
        self.step(&text, |core, now| {
            core.handle_sunsubscribe(now, c, ch.as_bytes())
        });
    }

    /// `conn` answers its ping.
    pub fn pong(&mut self, c: ConnId) {
        self.step(&format!("pong {c}"), |core, now| core.handle_pong(now, c));
    }

    /// The application asks for a topology reread.
    pub fn refresh(&mut self) {
        self.step("refresh", |core, now| core.handle_refresh(now));
    }

    /// A publish got `MOVED slot host:7000`.
    pub fn redirect(&mut self, slot: u16, host: &str) {
        let text = format!("redirect s{slot} {host}");
        self.step(&text, |core, now| {
            core.handle_redirect(now, slot, addr(host))
        });
    }

    /// Messages arrive on `c`.
    pub fn activity(&mut self, c: ConnId) {
        self.step(&format!("activity {c}"), |core, now| {
            core.handle_activity(now, c)
        });
    }

    /// Answers the oldest outstanding probe.
    pub fn probe(&mut self, reply: ProbeReply) {
        let id = self.probes.pop_front().expect("no probe outstanding");
        let text = format!("probe #{id}: {reply:?}");
        self.step(&text, |core, now| core.handle_probe(now, id, reply));
    }

    /// Moves the clock to `ms` (nothing due before then is skipped: it
    /// panics if a timeout falls earlier).
    pub fn idle_until(&mut self, ms: u64) {
        let t = Time::from_millis(ms);
        if let Some(due) = self.core.poll_timeout() {
            assert!(due > t, "a timeout at {due} comes first");
        }
        self.now = Time(t.0.saturating_sub(1_000_000));
    }

    /// Advances to the core's timeout and fires it.
    pub fn timeout(&mut self) {
        let t = self.core.poll_timeout().expect("no timeout");
        self.now = t;
        let _ = writeln!(self.log, "@{}ms timeout", t.as_millis());
        self.core.handle_timeout(t);
        self.drain();
    }

    /// Open connections to `host`.
    pub fn conns_of(&self, host: &str) -> Vec<ConnId> {
        self.hosts
            .iter()
            .filter(|(_, h)| *h == host)
            .map(|(c, _)| *c)
            .collect()
    }

    /// The connection `ch` is confirmed on.
    pub fn conn_carrying(&self, ch: &str) -> ConnId {
        self.core
            .subscribed_on(ch.as_bytes())
            .expect("not subscribed")
    }

    /// Wanted channels of partition `p`.
    pub fn channels_of_partition(&self, p: u32) -> Vec<String> {
        let parts = &self.core.config().partitions;
        self.wanted
            .iter()
            .filter(|c| parts.partition_of(c.as_bytes()) == p)
            .cloned()
            .collect()
    }

    /// Compares the transcript with `tests/golden/<name>.txt` (rewrites it
    /// under `UPDATE_GOLDEN=1`), and checks that the core settled.
    pub fn check(&mut self, name: &str) {
        let settled = self.core.is_settled();
        let _ = writeln!(self.log, "settled: {settled}");
        let _ = writeln!(self.log, "stats: {}", stats_line(&self.core.stats()));
        let path = format!("{}/tests/golden/{name}.txt", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &self.log).unwrap();
            return;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            self.log, want,
            "transcript {name} differs (UPDATE_GOLDEN=1 rewrites it)"
        );
    }
}

/// The nonzero counters of `s`, in one line.
fn stats_line(s: &Stats) -> String {
    let r = &s.rebuilds;
    let e = &s.topology_errors;
    let ms = |d: Option<Duration>| d.map_or(0, |d| d.as_millis() as u64);
    let fields = [
        ("fetch.startup", r.startup),
        ("fetch.poll", r.poll),
        ("fetch.sunsubscribe", r.sunsubscribe),
        ("fetch.moved", r.moved),
        ("fetch.disconnect", r.disconnect),
        ("fetch.subscribe_error", r.subscribe_error),
        ("fetch.retry", r.retry),
        ("fetch.manual", r.manual),
        ("err.fetch", e.fetch),
        ("err.parse", e.parse),
        ("err.probe", e.probe),
        ("err.connect", e.connect),
        ("unknown_owners", s.unknown_slot_owners),
        ("moved_partitions", s.moved_partitions),
        ("restores", s.restores),
        ("last_restore_ms", ms(s.last_restore)),
        ("max_restore_ms", ms(s.max_restore)),
        ("subscribe_errors", s.subscribe_errors),
        ("ssubscribes", s.subscribe_commands),
        ("sunsubscribes", s.unsubscribe_commands),
        ("gaps", s.gaps),
        ("gap_channels", s.gap_channels),
        ("pings", s.pings),
        ("ping_restarts", s.ping_restarts),
        ("reconnects", s.reconnects),
        ("nodes", s.nodes as u64),
        ("conns_up", s.subscribe_connections as u64),
    ];
    let parts: Vec<String> = fields
        .iter()
        .filter(|f| f.1 != 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    parts.join(" ")
}
