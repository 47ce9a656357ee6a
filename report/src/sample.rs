//! A synthetic [`RunReport`] for rendering tests and the `sample` example.
//!
//! SYNTHETIC: made-up numbers shaped like a ramp run (server CPU per
//! message falling as the rate rises, lag p99 crossing 10 ms near the top,
//! a failover half-way). Never use it as a measurement.

use crate::model::{
    CompareReport, Fault, Machine, Meta, NodeStats, Ramp, RunReport, Sample, ScalingReport,
    ServerInfo, Totals,
};

/// A deterministic pseudo-random source (no clocks, no dependencies).
struct Noise(u64);

impl Noise {
    /// A value in [-1, 1).
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
}

/// How a synthetic run differs from the base one.
struct Shape {
    mode: &'static str,
    masters: usize,
    /// Publish rate at which lag takes off, msg/s.
    capacity: f64,
    server: f64,
    client: f64,
    sub_conns: u64,
    lag: f64,
}

const BASE: Shape = Shape {
    mode: "node-grouped",
    masters: 3,
    capacity: 60_000.0,
    server: 1.0,
    client: 1.0,
    sub_conns: 4,
    lag: 1.0,
};

/// The synthetic ramp run (see the module docs), labelled as such in its
/// `result` and `commit` fields.
pub fn synthetic() -> RunReport {
    build(&BASE)
}

/// SYNTHETIC: the five modes side by side, with made-up differences.
pub fn synthetic_compare() -> CompareReport {
    let modes = [
        ("node-grouped", 1.0, 1.0, 4, 1.0),
        ("per-partition", 1.1, 1.35, 172, 1.1),
        ("classic", 1.7, 1.0, 4, 1.2),
        ("shards", 1.05, 1.1, 4, 1.0),
        ("single", 1.2, 0.9, 1, 1.6),
    ];
    CompareReport {
        runs: modes
            .iter()
            .map(|&(mode, server, client, sub_conns, lag)| {
                build(&Shape {
                    mode,
                    server,
                    client,
                    sub_conns,
                    lag,
                    ..BASE
                })
            })
            .collect(),
    }
}

/// SYNTHETIC: two modes over 1, 2 and 3 primaries.
pub fn synthetic_scaling() -> Vec<ScalingReport> {
    [("node-grouped", 1.0_f64), ("classic", 1.7)]
        .iter()
        .map(|&(mode, server)| ScalingReport {
            mode: mode.into(),
            runs: (1..=3)
                .map(|masters| {
                    build(&Shape {
                        mode,
                        masters,
                        capacity: 25_000.0 * masters as f64 / server.sqrt(),
                        server,
                        ..BASE
                    })
                })
                .collect(),
        })
        .collect()
}

fn build(shape: &Shape) -> RunReport {
    let mut noise = Noise(7);
    let engines = 4.0;
    let mut samples = Vec::new();
    let mut rate = 5_000.0_f64;
    let mut t = 0.0;
    for _step in 0..8 {
        for _ in 0..4 {
            t += 1.0;
            // Lag grows sharply past ~60k msg/s; the failover at 14 s spikes it.
            let load = rate / shape.capacity;
            let mut p99 = (900.0 + 1_500.0 * load.powi(6) + 150.0 * noise.next()) * shape.lag;
            if (14.0..15.0).contains(&t) {
                p99 += 45_000.0;
            }
            let published = rate * (1.0 + 0.01 * noise.next());
            let delivered = published * engines * if rate > 90_000.0 { 0.93 } else { 1.0 };
            // Server µs per delivered message falls from ~5.7 to ~2 as load rises.
            let server_us = (2.0 + 3.8 * (5_000.0 / rate).sqrt()) * shape.server;
            samples.push(Sample {
                t_s: t,
                published_per_s: published,
                delivered_per_s: delivered,
                lag_p50_us: (p99 / 5.0) as u64,
                lag_p99_us: p99.max(100.0) as u64,
                drops: if rate > 90_000.0 { 1_200 } else { 0 },
                gaps: u64::from((14.0..15.0).contains(&t)) * 44,
                connections: 12,
                rebuilds: u64::from((14.0..15.0).contains(&t)) * 4,
                rate_target: rate,
                server_cpu_cores: Some(delivered * server_us / 1e6),
                client_cpu_cores: Some((delivered * 1.1 / 1e6 + 0.02) * shape.client),
            });
        }
        rate *= 1.5;
    }
    let lag_cdf = [
        (150u64, 0.01),
        (300, 0.10),
        (500, 0.35),
        (800, 0.70),
        (1_200, 0.90),
        (2_500, 0.97),
        (8_000, 0.99),
        (25_000, 0.997),
        (48_000, 0.9995),
        (120_000, 1.0),
    ]
    .iter()
    .map(|&(us, f)| ((us as f64 * shape.lag) as u64, f))
    .collect();
    let node = |i: usize, role: &str, parts: u64, cpu: f64, storm: Option<u64>| NodeStats {
        addr: format!("127.0.0.1:{}", 7000 + i),
        role: role.into(),
        partitions_owned: parts,
        connections: if role == "primary" { 5 } else { 1 },
        subscribe_connections: if role == "primary" { 4 } else { 0 },
        engine_subscribe_connections: if role == "primary" { 3 } else { 0 },
        ssubscribe_calls: if role == "primary" {
            170 + 3 * i as u64
        } else {
            0
        },
        subscribe_calls: 0,
        publish_calls: if role == "primary" { 310_000 } else { 0 },
        server_cpu_s: cpu,
        resubscribe_calls: storm,
    };
    let mut nodes = Vec::new();
    let parts = 128 / shape.masters as u64;
    for m in 0..shape.masters {
        let cpu = (7.5 + m as f64 * 0.4) * shape.server * 3.0 / shape.masters as f64;
        let mut primary = node(2 * m, "primary", parts, cpu, Some(44 - m as u64));
        primary.subscribe_connections = shape.sub_conns;
        primary.engine_subscribe_connections = shape.sub_conns.saturating_sub(1);
        primary.connections = shape.sub_conns + 1;
        nodes.push(primary);
        nodes.push(node(2 * m + 1, "replica", 0, cpu / 4.0, Some(0)));
    }
    let published: f64 = samples.iter().map(|s| s.published_per_s).sum();
    let delivered: f64 = samples.iter().map(|s| s.delivered_per_s).sum();
    let drops: u64 = samples.iter().map(|s| s.drops).sum();
    let client_cpu: f64 = samples.iter().filter_map(|s| s.client_cpu_cores).sum();
    let server_cpu: f64 = nodes.iter().map(|n| n.server_cpu_s).sum();
    // As if run with --knee-lag-ms 10.
    let knee = crate::knee(&samples, 10_000);
    RunReport {
        meta: Meta {
            date_utc: "2026-12-01T20:00:00Z".into(),
            commit: "SYNTHETIC".into(),
            machine: Machine {
                cpus: 2,
                cpu_model: "synthetic CPU (not a measurement)".into(),
                ram_gib: 7.8,
            },
            server: ServerInfo {
                kind: "valkey".into(),
                version: "9.0.0".into(),
            },
            local: true,
            mode: shape.mode.into(),
            masters: shape.masters,
            replicas: 1,
            engines: 4,
            publishers: 1,
            channels: 20_000,
            partitions: 128,
            payload: 256,
            seconds: 32,
            rate: 5_000,
            ramp: Some(Ramp {
                start: 5_000,
                factor: 1.5,
                step_s: 4.0,
            }),
            history: false,
        },
        samples,
        faults: vec![Fault {
            kind: "failover".into(),
            at_s: 14.0,
            took_ms: 212.0,
            detail: "127.0.0.1:7001 -> 127.0.0.1:7002 (43 partitions)".into(),
            partitions_moved: 43,
            gap_events: 44,
            back_after_ms: Some(380.0),
            lost_signalled: 1_830,
            lost_silent: 0,
            recovered: 0,
        }],
        lag_cdf,
        nodes,
        totals: Totals {
            published: published as u64,
            delivered: delivered as u64,
            expected: (published * engines) as u64,
            lost_signalled: 1_830,
            lost_silent: 0,
            duplicated: 0,
            reordered: 0,
            recovered: 0,
            unrecoverable: 0,
            client_cpu_s: client_cpu,
            demo_cpu_s: client_cpu / 4.0,
            library_threads: 5,
            server_cpu_s: server_cpu,
            client_cpu_s_per_million: client_cpu / (delivered / 1e6),
            server_cpu_s_per_million: server_cpu / (delivered / 1e6),
            gap_events: 44,
            drops,
        },
        knee: Some(knee),
        sizing: None,
        result: "ok (SYNTHETIC data, for rendering only)".into(),
    }
}
