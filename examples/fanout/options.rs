//! The demo's command line: flags, defaults and the bounds that keep every
//! run short. `cargo xtask demo` passes its own defaults in front.

use testkit::ServerKind;

/// Where the subscribe connections go and what the servers are.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A cluster, one subscribe connection per primary per instance.
    NodeGrouped,
    /// Node-grouped with partitions off: channels keep their names
    /// (`--partitions 0`), resubscribed per slot.
    NamesKept,
    /// A cluster, one subscribe connection per partition per instance.
    PerPartition,
    /// A cluster, classic `SUBSCRIBE`/`PUBLISH`.
    Classic,
    /// `--masters` standalone servers, sharded by the client.
    Shards,
    /// One standalone server.
    Single,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::NodeGrouped => "node-grouped",
            Mode::NamesKept => "names-kept",
            Mode::PerPartition => "per-partition",
            Mode::Classic => "classic",
            Mode::Shards => "shards",
            Mode::Single => "single",
        }
    }

    pub fn is_cluster(self) -> bool {
        matches!(
            self,
            Mode::NodeGrouped | Mode::NamesKept | Mode::PerPartition | Mode::Classic
        )
    }

    fn parse(v: &str) -> Option<Mode> {
        [
            Mode::NodeGrouped,
            Mode::NamesKept,
            Mode::PerPartition,
            Mode::Classic,
            Mode::Shards,
            Mode::Single,
        ]
        .into_iter()
        .find(|m| m.name() == v)
    }
}

/// The partitions of `--partitions n`: 0 is partitions off (names kept,
/// a channel's partition is its slot).
pub fn partitions(n: u32) -> Result<shardcore::Partitions, shardcore::PartitionError> {
    match n {
        0 => shardcore::Partitions::raw(b""),
        n => shardcore::Partitions::new(n),
    }
}

/// A fault, and when (seconds after publishing starts).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    Failover,
    Kill,
    Storm,
    Reshard,
    ReshardAtomic,
    AddNode,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Failover => "failover",
            FaultKind::Kill => "kill",
            FaultKind::Storm => "storm",
            FaultKind::Reshard => "reshard",
            FaultKind::ReshardAtomic => "reshard-atomic",
            FaultKind::AddNode => "add-node",
        }
    }
}

/// `--ramp START:FACTOR:STEP_S`.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Ramp {
    pub start: u64,
    pub factor: f64,
    pub step_s: f64,
}

impl Ramp {
    /// The target rate `t` seconds in.
    pub fn rate_at(&self, t: f64) -> f64 {
        let step = (t / self.step_s).floor().max(0.0);
        self.start as f64 * self.factor.powf(step)
    }
}

/// The command line.
#[derive(Clone, Debug)]
pub struct Options {
    pub kind: ServerKind,
    pub mode: Mode,
    pub masters: usize,
    pub replicas: usize,
    pub engines: usize,
    pub publishers: usize,
    pub channels: usize,
    pub partitions: u32,
    pub seconds: u64,
    /// Target publishes per second, 0 = flat out.
    pub rate: u64,
    pub ramp: Option<Ramp>,
    /// `--knee-lag-ms`: the ramp stops once lag p99 passes this.
    pub knee_lag_ms: u64,
    pub payload: usize,
    /// `--url`: existing servers (`?cluster=true`: seeds).
    pub urls: Vec<String>,
    pub faults: Vec<(FaultKind, f64)>,
    pub history: bool,
    pub report: Option<String>,
    pub no_live: bool,
    /// `--target`: the msg/s the sizing answer plans for (None: none).
    pub target: Option<u64>,
    /// `--workers`: the shared runtime's worker threads, running every
    /// instance's handler (default 2).
    pub workers: usize,
    /// `--resubscribe-split channels` (default partitions): how a cluster
    /// instance divides a resubscribe into commands.
    pub split_channels: bool,
    /// `--io-threads`: the shared runtime's I/O threads.
    pub io_threads: usize,
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            kind: ServerKind::Valkey,
            mode: Mode::NodeGrouped,
            masters: 3,
            replicas: 1,
            engines: 4,
            publishers: 1,
            channels: 20_000,
            partitions: 128,
            seconds: 8,
            rate: 50_000,
            ramp: None,
            knee_lag_ms: 100,
            payload: 256,
            urls: Vec::new(),
            faults: Vec::new(),
            history: false,
            report: None,
            no_live: false,
            target: None,
            workers: 2,
            split_channels: false,
            io_threads: 2,
            seed: 1,
        }
    }
}

impl Options {
    /// Whether the demo starts the servers itself.
    pub fn local(&self) -> bool {
        self.urls.is_empty()
    }

    /// Whether the faults are given at all.
    pub fn has(&self, kind: FaultKind) -> bool {
        self.faults.iter().any(|f| f.0 == kind)
    }
}

fn parse_ramp(v: &str) -> Option<Ramp> {
    let mut it = v.split(':');
    let start = it.next()?.replace('_', "").parse().ok()?;
    let factor: f64 = it.next()?.parse().ok()?;
    let step_s: f64 = it.next()?.parse().ok()?;
    let ok = it.next().is_none() && start > 0 && factor >= 1.0 && step_s >= 0.5;
    ok.then_some(Ramp {
        start,
        factor,
        step_s,
    })
}

/// Reads the flags.
///
/// # Errors
///
/// An unknown flag, a bad value or a value out of bounds, in words.
pub fn parse_options() -> Result<Options, String> {
    parse(std::env::args().skip(1))
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut o = Options::default();
    // Flags apply in order, so `--quick --rate 1000` overrides the rate.
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| {
            v.replace('_', "")
                .parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        let secs = |v: String| {
            v.parse::<f64>()
                .ok()
                .filter(|s| (0.0..=600.0).contains(s))
                .ok_or_else(|| format!("{flag}: seconds from 0 to 600, not {v}"))
        };
        let fault = match flag.as_str() {
            "--failover" => Some(FaultKind::Failover),
            "--kill" => Some(FaultKind::Kill),
            "--storm" => Some(FaultKind::Storm),
            "--reshard" => Some(FaultKind::Reshard),
            "--reshard-atomic" => Some(FaultKind::ReshardAtomic),
            "--add-node" => Some(FaultKind::AddNode),
            _ => None,
        };
        if let Some(kind) = fault {
            let at = secs(value()?)?;
            o.faults.push((kind, at));
            continue;
        }
        match flag.as_str() {
            "--server" => {
                let v = value()?;
                o.kind = ServerKind::from_name(&v)
                    .ok_or_else(|| format!("--server: valkey or redis, not {v}"))?;
            }
            "--mode" => {
                let v = value()?;
                o.mode = Mode::parse(&v).ok_or_else(|| {
                    format!(
                        "--mode: node-grouped, names-kept, per-partition, classic, shards or \
                         single, not {v}"
                    )
                })?;
            }
            "--masters" => o.masters = num(value()?)? as usize,
            "--replicas" => o.replicas = num(value()?)? as usize,
            "--engines" => o.engines = num(value()?)? as usize,
            "--publishers" => o.publishers = num(value()?)? as usize,
            "--channels" => o.channels = num(value()?)? as usize,
            "--partitions" => o.partitions = num(value()?)? as u32,
            "--seconds" => o.seconds = num(value()?)?,
            "--rate" => o.rate = num(value()?)?,
            "--ramp" => {
                let v = value()?;
                o.ramp = Some(parse_ramp(&v).ok_or_else(|| {
                    format!("--ramp: START:FACTOR:STEP_S (e.g. 10000:1.5:3), not {v}")
                })?);
            }
            "--knee-lag-ms" => o.knee_lag_ms = num(value()?)?,
            "--payload" => o.payload = num(value()?)? as usize,
            "--url" => o.urls.push(value()?),
            "--history" => o.history = true,
            "--report" => o.report = Some(value()?),
            "--no-live" => o.no_live = true,
            "--io-threads" => o.io_threads = num(value()?)? as usize,
            "--workers" => o.workers = num(value()?)? as usize,
            "--resubscribe-split" => {
                o.split_channels = match value()?.as_str() {
                    "partitions" => false,
                    "channels" => true,
                    v => {
                        return Err(format!(
                            "--resubscribe-split: partitions or channels, not {v}"
                        ))
                    }
                }
            }
            "--target" => o.target = Some(num(value()?)?).filter(|&t| t > 0),
            "--seed" => o.seed = num(value()?)?,
            "--no-failover" => o.faults.retain(|f| f.0 != FaultKind::Failover),
            "--quick" => {
                o.engines = 3;
                o.channels = 2_000;
                o.seconds = 3;
                o.rate = 5_000;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown flag {other}\n{USAGE}")),
        }
    }
    if o.mode == Mode::NamesKept {
        o.partitions = 0;
    }
    check(&o)?;
    Ok(o)
}

/// Keeps every run bounded and meaningful.
fn check(o: &Options) -> Result<(), String> {
    let check = |ok: bool, what: &str| if ok { Ok(()) } else { Err(what.to_string()) };
    check((1..=16).contains(&o.masters), "--masters: 1 to 16")?;
    check(o.replicas <= 2, "--replicas: 0 to 2")?;
    check((1..=1000).contains(&o.engines), "--engines: 1 to 1000")?;
    check((1..=16).contains(&o.publishers), "--publishers: 1 to 16")?;
    check((1..=16).contains(&o.io_threads), "--io-threads: 1 to 16")?;
    check((1..=64).contains(&o.workers), "--workers: 1 to 64")?;
    check(
        !o.split_channels || o.mode.is_cluster(),
        "--resubscribe-split: a cluster mode",
    )?;
    check(
        (o.engines.max(o.publishers)..=2_000_000).contains(&o.channels),
        "--channels: at least --engines and --publishers, at most 2,000,000",
    )?;
    check(
        o.partitions <= 16384,
        "--partitions: 1 to 16384, or 0 (partitions off: --mode names-kept)",
    )?;
    check(
        o.partitions > 0 || matches!(o.mode, Mode::NodeGrouped | Mode::NamesKept),
        "--partitions 0 (names kept): node-grouped only",
    )?;
    check((1..=600).contains(&o.seconds), "--seconds: 1 to 600")?;
    check(o.rate <= 5_000_000, "--rate: 0 (flat out) to 5,000,000")?;
    check(o.payload <= 1 << 20, "--payload: at most 1 MiB")?;
    check(o.knee_lag_ms > 0, "--knee-lag-ms: above zero")?;
    let faults = !o.faults.is_empty();
    check(
        !faults || o.mode.is_cluster() || !o.local(),
        "faults need a cluster mode (node-grouped, per-partition or classic)",
    )?;
    let needs_replica = o.has(FaultKind::Failover) || o.has(FaultKind::Kill);
    check(
        !needs_replica || o.replicas > 0,
        "--failover and --kill need --replicas 1 or more",
    )?;
    check(
        !o.has(FaultKind::ReshardAtomic) || o.kind == ServerKind::Valkey,
        "--reshard-atomic needs Valkey (CLUSTER MIGRATESLOTS)",
    )?;
    Ok(())
}

const USAGE: &str = "usage: fanout [--mode node-grouped|per-partition|classic|shards|single] \
[--server valkey|redis] [--masters N] [--replicas N] [--engines N] [--publishers N] \
[--channels N] [--partitions N] [--seconds N] [--rate N (0 = flat out)] \
[--ramp START:FACTOR:STEP_S] [--knee-lag-ms MS] [--payload BYTES] [--url URL]... \
[--failover AT] [--kill AT] [--storm AT] [--reshard AT] [--reshard-atomic AT] [--add-node AT] \
[--history] [--report DIR] [--target MSG/S] [--no-live] [--io-threads N] [--workers N] \
[--resubscribe-split partitions|channels] [--seed N] [--quick]";

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Options, String> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn flags_parse_and_bad_ones_say_why() {
        let o = p(&["--mode", "shards", "--masters", "3", "--ramp", "1000:2:3"]).unwrap();
        assert_eq!(o.mode, Mode::Shards);
        assert_eq!(o.ramp.unwrap().rate_at(7.0), 4000.0);
        let o = p(&["--storm", "2", "--failover", "1.5"]).unwrap();
        assert_eq!(
            o.faults,
            vec![(FaultKind::Storm, 2.0), (FaultKind::Failover, 1.5)]
        );
        assert!(p(&["--mode", "x"]).unwrap_err().contains("--mode"));
        assert!(p(&["--ramp", "1:0.5:1"]).unwrap_err().contains("--ramp"));
        assert!(p(&["--mode", "shards", "--storm", "1"])
            .unwrap_err()
            .contains("cluster mode"));
        assert!(p(&["--replicas", "0", "--kill", "1"])
            .unwrap_err()
            .contains("--replicas"));
    }
}
