//! Every message accounted for, with testkit's checker
//! (`testkit::accounting`): the publisher stamps each message of a channel
//! with its sequence number (behind the lag envelope) and records whether
//! the server took it; each subscriber engine's handler hands what it gets,
//! and every gap or drop event, to its own tap; at the end every expected
//! (engine, channel) message is classified as delivered in order, lost in
//! a signalled window, lost silently, duplicated or reordered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shardsub::pubsub::envelope;
use shardsub::PubSub;
use testkit::accounting::{Ledger, Outcome, Report, Tap, STAMP_LEN};

use crate::node::{now_us, subscribers_of};

/// The ledger, and what the publisher itself counted.
pub struct Books {
    pub ledger: Arc<Ledger>,
    /// Deliveries the acknowledged publishes owe: each one's subscriber
    /// count (the checker's own expectation must come out the same).
    pub expected: Arc<AtomicU64>,
    /// Subscriber engines per channel.
    fanout: Vec<u8>,
    /// Bytes after the envelope: the stamp, then filler.
    body: usize,
}

impl Books {
    /// Books over `names` for `engines` subscriber engines; payloads of
    /// `payload` bytes (at least the envelope and the stamp).
    pub fn new(names: &[Vec<u8>], engines: usize, payload: usize) -> Books {
        Books {
            ledger: Arc::new(Ledger::new(names)),
            expected: Arc::new(AtomicU64::new(0)),
            fanout: (0..names.len())
                .map(|i| subscribers_of(i, engines).len() as u8)
                .collect(),
            body: payload.saturating_sub(envelope::HEADER_LEN).max(STAMP_LEN),
        }
    }

    /// Bytes per message on the wire.
    pub fn payload_len(&self) -> usize {
        envelope::HEADER_LEN + self.body
    }

    /// Engine `e`'s tap: it expects the messages of `channels` (indexes)
    /// published from now on, and nothing else.
    pub fn tap(&self, e: usize, channels: &[usize]) -> Arc<Tap> {
        self.ledger.tap_for(&format!("engine {e}"), channels)
    }

    /// Stamps and publishes the next message of channel `i`; its outcome is
    /// recorded when the server answers. `body` and `buf` are scratch.
    pub fn publish(
        &self,
        publisher: &PubSub,
        names: &[Vec<u8>],
        i: usize,
        body: &mut Vec<u8>,
        buf: &mut Vec<u8>,
    ) {
        let stamp = self.ledger.stamp(i, body, self.body);
        buf.clear();
        envelope::encode_into(buf, body, now_us());
        let (ledger, expected, fan) = (
            self.ledger.clone(),
            self.expected.clone(),
            u64::from(self.fanout[i]),
        );
        publisher
            .publish_pending(&names[i], buf)
            .then(move |r| match r {
                Ok(_) => {
                    ledger.outcome(stamp, Outcome::Acked);
                    expected.fetch_add(fan, Ordering::Relaxed);
                }
                Err(e) => ledger.outcome(stamp, Outcome::Failed(&failure_kind(&e))),
            });
    }

    /// One more message on every channel (from the publisher `i % P`
    /// that published its others), at `rate` messages a second (the
    /// run's target; `None`: flat out), then waits (bounded) until every
    /// publish has its outcome and every engine has got the last message
    /// of each of its channels: whatever is still missing then is lost, not
    /// late. Paced like the run, the round checks what the run promises; a
    /// round of every channel at once is a burst the run never had, which
    /// a worker's queue may drop (signalled) when one worker handles most
    /// of the channels.
    ///
    /// # Errors
    ///
    /// What did not settle within `bound`.
    pub fn last_round_and_settle(
        &self,
        publishers: &[PubSub],
        names: &[Vec<u8>],
        rate: Option<f64>,
        bound: Duration,
    ) -> Result<(), String> {
        let (mut body, mut buf) = (Vec::new(), Vec::new());
        let begin = std::time::Instant::now();
        // Each channel from its own publisher, behind its earlier messages.
        for i in 0..names.len() {
            if let Some(r) = rate {
                let due = begin + Duration::from_secs_f64(i as f64 / r);
                let ahead = due.saturating_duration_since(std::time::Instant::now());
                if ahead >= Duration::from_millis(1) {
                    std::thread::sleep(ahead);
                }
            }
            let publisher = &publishers[i % publishers.len()];
            self.publish(publisher, names, i, &mut body, &mut buf);
        }
        self.ledger
            .wait_outcomes(bound)
            .map_err(|e| e.to_string())?;
        self.ledger.wait_caught_up(bound).map_err(|e| e.to_string())
    }

    /// The classification of everything recorded.
    pub fn report(&self) -> Report {
        self.ledger.report()
    }
}

/// A failed publish's kind for the report: the error's variant name.
fn failure_kind(e: &shardsub::Error) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("")
        .to_string()
}
