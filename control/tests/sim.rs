//! The simulator over many seeded fault schedules (see `control::sim`).
//! `CONTROL_SIM_SEED=<n>` reruns one seed; `CONTROL_SIM_RUNS=<n>` sets how
//! many schedules the sweep runs (10,000 by default).

use std::time::Instant;

use control::sim::{run_seed, Outcome};

fn runs() -> u64 {
    std::env::var("CONTROL_SIM_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

#[test]
fn ten_thousand_seeded_schedules_keep_every_promise() {
    if let Some(seed) = std::env::var("CONTROL_SIM_SEED")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        let o = run_seed(seed);
        eprintln!("seed {seed}: {o:?}");
        return;
    }
    let started = Instant::now();
    let mut total = Outcome::default();
    let n = runs();
    for seed in 0..n {
        let o = run_seed(seed);
        total.steps += o.steps;
        total.commands += o.commands;
        total.gaps += o.gaps;
        total.subscribes += o.subscribes;
        total.probes += o.probes;
        total.redirects += o.redirects;
    }
    eprintln!("{n} schedules in {:?}: {total:?}", started.elapsed());
    // The sweep exercised what it is for: resubscribes after losses,
    // redirects, probes.
    assert!(total.gaps > n, "{total:?}");
    assert!(total.redirects > n / 10, "{total:?}");
    assert!(total.probes > n / 100, "{total:?}");
}
