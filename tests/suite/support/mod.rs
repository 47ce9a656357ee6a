//! Helpers shared by the suite's areas.

pub mod accounted;
pub mod browser;
pub mod chaos_kit;
pub mod cluster;
pub mod examples;
pub mod pubsub;
#[cfg(feature = "tls")]
pub mod tls;

/// `n` channel names: `{prefix}:0`, `{prefix}:1`, ….
pub fn channels(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}:{i}").into_bytes())
        .collect()
}
