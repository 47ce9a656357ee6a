//! Where a connection is in its life: connecting, open, waiting to
//! reconnect, or closed.

use std::time::Instant;

#[derive(Debug)]
pub(super) enum Phase {
    /// TCP connect in progress.
    Connecting { deadline: Instant },
    /// Connected; the core runs the handshake and then the requests.
    Open,
    /// Waiting to reconnect.
    Backoff { until: Instant },
    /// Done for good (initial connect failed, or shutdown).
    Closed,
}
