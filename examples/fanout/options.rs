//! The demo's command line: flags, defaults (what `cargo xtask demo` runs)
//! and the bounds that keep every run short.

use testkit::ServerKind;

/// The command line; the defaults are what `cargo xtask demo` runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--server valkey|redis`.
    pub kind: ServerKind,
    /// `--masters`: primaries in the cluster.
    pub masters: usize,
    /// `--replicas`: replicas per primary (the failover needs one).
    pub replicas: usize,
    /// `--engines`: subscriber instances, one per simulated app node.
    pub engines: usize,
    /// `--multiplier`: subscribe connections per primary per engine.
    pub multiplier: usize,
    /// `--channels`: distinct channels, spread over the engines.
    pub channels: usize,
    /// `--partitions`: app-level partitions (the same on every node).
    pub partitions: u32,
    /// `--seconds`: how long to publish.
    pub seconds: u64,
    /// `--rate`: target publishes per second (paced).
    pub rate: u64,
    /// `--payload`: bytes per message, the 12-byte envelope included.
    pub payload: usize,
    /// `--failover` (default) / `--no-failover`: `CLUSTER FAILOVER` half-way.
    pub failover: bool,
    /// `--target`: the msg/s the sizing estimate plans for.
    pub target: u64,
    /// `--seed`: for the random channel sequence.
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            kind: ServerKind::Valkey,
            masters: 3,
            replicas: 1,
            engines: 4,
            multiplier: 1,
            channels: 20_000,
            partitions: 128,
            seconds: 8,
            rate: 50_000,
            payload: 256,
            failover: true,
            target: 1_000_000,
            seed: 1,
        }
    }
}

pub fn parse_options() -> Result<Options, String> {
    let mut o = Options::default();
    let mut args = std::env::args().skip(1);
    // Flags apply in order, so `--quick --rate 1000` overrides the rate.
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| {
            v.replace('_', "")
                .parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--server" => {
                let v = value()?;
                o.kind = ServerKind::from_name(&v)
                    .ok_or_else(|| format!("--server: valkey or redis, not {v}"))?;
            }
            "--masters" => o.masters = num(value()?)? as usize,
            "--replicas" => o.replicas = num(value()?)? as usize,
            "--engines" => o.engines = num(value()?)? as usize,
            "--multiplier" => o.multiplier = num(value()?)? as usize,
            "--channels" => o.channels = num(value()?)? as usize,
            "--partitions" => o.partitions = num(value()?)? as u32,
            "--seconds" => o.seconds = num(value()?)?,
            "--rate" => o.rate = num(value()?)?,
            "--payload" => o.payload = num(value()?)? as usize,
            "--target" => o.target = num(value()?)?,
            "--seed" => o.seed = num(value()?)?,
            "--failover" => o.failover = true,
            "--no-failover" => o.failover = false,
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
    // Keep every run bounded and meaningful.
    let check = |ok: bool, what: &str| if ok { Ok(()) } else { Err(what.to_string()) };
    check((1..=16).contains(&o.masters), "--masters: 1 to 16")?;
    check(o.replicas <= 2, "--replicas: 0 to 2")?;
    check((1..=64).contains(&o.engines), "--engines: 1 to 64")?;
    check((1..=8).contains(&o.multiplier), "--multiplier: 1 to 8")?;
    check(
        (o.engines..=2_000_000).contains(&o.channels),
        "--channels: at least --engines, at most 2,000,000",
    )?;
    check((1..=120).contains(&o.seconds), "--seconds: 1 to 120")?;
    check((1..=5_000_000).contains(&o.rate), "--rate: 1 to 5,000,000")?;
    check(o.payload <= 1 << 20, "--payload: at most 1 MiB")?;
    check(o.target > 0, "--target: above zero")?;
    check(
        !o.failover || o.replicas > 0,
        "the failover needs --replicas 1 or more (or --no-failover)",
    )?;
    Ok(o)
}

const USAGE: &str = "usage: fanout [--server valkey|redis] [--masters N] [--replicas N] \
[--engines N] [--multiplier N] [--channels N] [--partitions N] [--seconds N] [--rate N] \
[--payload BYTES] [--no-failover] [--target MSG/S] [--seed N] [--quick]";
