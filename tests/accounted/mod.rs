//! The accounting checker ([`testkit::accounting`]) wired to shardsub: a
//! [`Handler`] that passes everything it sees to a [`Tap`], and publishers
//! that stamp every message and record its outcome. Every delivery test
//! goes through these and ends with [`Ledger::report`] and
//! [`Report::assert_clean`](testkit::accounting::Report::assert_clean).
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::pubsub::Event;
use shardsub::{Error, Handler};
use testkit::accounting::{Ledger, Outcome, Signal, Stamp, Tap};

/// Bytes per test payload (the stamp plus padding).
pub const PAYLOAD_LEN: usize = 32;

/// A handler that records into a tap. Its other counters are for the
/// tests' own waits.
pub struct Accounted {
    pub tap: Arc<Tap>,
    /// Gap events (not channels).
    pub gap_events: AtomicU64,
    /// Drop events.
    pub drop_events: AtomicU64,
    /// Active events.
    pub active_events: AtomicU64,
}

impl Accounted {
    /// A handler for a new tap of `ledger` that expects every channel.
    pub fn new(ledger: &Ledger, name: &str) -> Arc<Accounted> {
        Self::with_tap(ledger.tap(name))
    }

    /// A handler for `tap`.
    pub fn with_tap(tap: Arc<Tap>) -> Arc<Accounted> {
        Arc::new(Accounted {
            tap,
            gap_events: AtomicU64::new(0),
            drop_events: AtomicU64::new(0),
            active_events: AtomicU64::new(0),
        })
    }
}

impl Handler for Accounted {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        self.tap.message(channel, payload);
    }

    fn on_event(&self, event: Event<'_>) {
        match event {
            Event::Gap { channels, .. } => {
                self.gap_events.fetch_add(1, Ordering::Relaxed);
                for c in channels.iter() {
                    self.tap.signal(c, Signal::Gap);
                }
            }
            Event::Dropped { channels, .. } => {
                self.drop_events.fetch_add(1, Ordering::Relaxed);
                for c in channels.iter() {
                    self.tap.signal(c, Signal::Drop);
                }
            }
            Event::Active { .. } => {
                self.active_events.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// The error's variant name, as the report's failure kind.
pub fn kind(e: &Error) -> String {
    let debug = format!("{e:?}");
    debug
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("")
        .to_string()
}

/// Records a publish's outcome from its result.
pub fn record<T>(ledger: &Ledger, stamp: Stamp, result: &Result<T, Error>, acked: bool) {
    match result {
        Ok(_) if acked => ledger.outcome(stamp, Outcome::Acked),
        Ok(_) => ledger.outcome(stamp, Outcome::Sent),
        Err(e) => ledger.outcome(stamp, Outcome::Failed(&kind(e))),
    }
}

/// How a publisher sends one stamped message: it must record the outcome
/// (now, or from a callback).
pub type PublishFn = dyn Fn(&Arc<Ledger>, Stamp, &[u8], &[u8]) + Send + Sync;

/// One stamped message to every channel of the ledger, in index order.
pub fn round(ledger: &Arc<Ledger>, publish: &PublishFn) {
    let mut payload = Vec::with_capacity(PAYLOAD_LEN);
    for c in 0..ledger.names().len() {
        let stamp = ledger.stamp(c, &mut payload, PAYLOAD_LEN);
        publish(ledger, stamp, ledger.name(c), &payload);
    }
}

/// Publishes round after round in the background until stopped (bounded:
/// at most `limit`), pausing `pace` between rounds.
pub struct Background {
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    pub fn start(
        ledger: Arc<Ledger>,
        publish: Arc<PublishFn>,
        pace: Duration,
        limit: Duration,
    ) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let (s2, r2) = (stop.clone(), rounds.clone());
        let handle = std::thread::spawn(move || {
            let start = Instant::now();
            while !s2.load(Ordering::Relaxed) && start.elapsed() < limit {
                round(&ledger, &*publish);
                r2.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(pace);
            }
        });
        Background {
            stop,
            rounds,
            handle: Some(handle),
        }
    }

    /// Rounds published so far.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    /// Stops and joins the thread; returns the rounds published.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().expect("publisher thread");
        }
        self.rounds()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Waits for every outcome and for every tap to catch up, then reports
/// and asserts the run clean. Returns the report for further checks.
pub fn settle_and_check(
    ledger: &Ledger,
    bound: Duration,
    what: &str,
) -> testkit::accounting::Report {
    ledger
        .wait_outcomes(bound)
        .unwrap_or_else(|e| panic!("{what}: {e}\n{}", ledger.report()));
    ledger
        .wait_caught_up(bound)
        .unwrap_or_else(|e| panic!("{what}: {e}\n{}", ledger.report()));
    let report = ledger.report();
    assert!(
        report.is_clean(),
        "{what}: delivery accounting failed:\n{report}"
    );
    report
}
