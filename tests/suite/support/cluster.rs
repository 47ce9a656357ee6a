//! Shared helpers for the cluster tests: the builder they start from,
//! `CLIENT LIST` counts and logging to stderr. Delivery goes through the
//! accounting checker ([`super::accounted`]).

use std::sync::Arc;

use shardsub::Handler;
use shardsub::PubSub;
use testkit::Cluster;

/// The builder every cluster test starts from: `cluster`'s seeds, 2
/// workers with deep queues, `handler`.
pub fn builder(cluster: &Cluster, handler: Arc<dyn Handler>) -> shardsub::PubSubBuilder {
    PubSub::builder()
        .seeds(cluster.seed_addrs().iter().map(|a| a.to_string()))
        .handler_arc(handler)
        .workers(2)
        // Room for bursts on a loaded machine: drops are signalled and
        // accounted, but the delivery tests expect none.
        .queue_capacity(1 << 16)
}

/// `CLIENT LIST` entries named `name` on node `i`.
pub fn named_clients(cluster: &Cluster, i: usize, name: &str) -> usize {
    let v = cluster
        .node(i)
        .cmd(&[b"CLIENT", b"LIST"])
        .expect("client list");
    let text = testkit::values::text(&v).unwrap_or_default();
    text.lines()
        .filter(|l| l.split(' ').any(|f| f == format!("name={name}")))
        .count()
}

/// With `SHARDSUB_TEST_LOG=LEVEL` (`trace` shows every control command),
/// the library's log lines go to stderr with the milliseconds since this
/// call, so a failing cluster test can say what the control core decided
/// (nextest prints a failing test's stderr). Unset: nothing is logged.
pub fn log_from_env() {
    static LOGGER: std::sync::OnceLock<StderrLog> = std::sync::OnceLock::new();
    let Some(level) = std::env::var("SHARDSUB_TEST_LOG")
        .ok()
        .and_then(|l| l.parse::<log::LevelFilter>().ok())
    else {
        return;
    };
    let logger = LOGGER.get_or_init(|| StderrLog(std::time::Instant::now()));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}

struct StderrLog(std::time::Instant);

impl log::Log for StderrLog {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        eprintln!(
            "+{:>8.1} ms {:<5} {}: {}",
            self.0.elapsed().as_secs_f64() * 1e3,
            record.level(),
            record.target(),
            record.args()
        );
    }

    fn flush(&self) {}
}
