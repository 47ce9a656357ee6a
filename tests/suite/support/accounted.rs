//! The accounting checker ([`testkit::accounting`]) wired to shardsub: a
//! [`Handler`] that passes everything it sees to a [`Tap`], and publishers
//! that stamp every message and record its outcome. Every delivery test
//! goes through these and ends with [`Ledger::report`] and
//! [`Report::assert_clean`](testkit::accounting::Report::assert_clean).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
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
    /// Unrecoverable events.
    pub unrecoverable_events: AtomicU64,
    /// Unrecoverable events by reason (its first words).
    pub unrecoverable_reasons: Mutex<std::collections::BTreeMap<String, u64>>,
    /// Active events.
    pub active_events: AtomicU64,
    /// Every channel a gap event named (including ones outside the ledger).
    pub gap_channels: Mutex<HashSet<Vec<u8>>>,
    /// The handler threads that got messages.
    pub threads: Mutex<HashSet<std::thread::ThreadId>>,
    /// Channels named by active events.
    pub active: Mutex<HashSet<Vec<u8>>>,
    /// Refused events: channel and the server's text.
    pub refused: Mutex<Vec<(Vec<u8>, String)>>,
    /// Per channel: gap and active events, in the order the handler saw
    /// them.
    pub per_channel: Mutex<HashMap<Vec<u8>, ChannelEvents>>,
    /// Connection and gap events in the order the handler saw them:
    /// `down SERVER: ERROR`, `up SERVER`, `gap SERVER`.
    pub timeline: Mutex<Vec<String>>,
}

/// One channel's gap and active events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChannelEvents {
    pub gaps: u64,
    pub actives: u64,
    /// Active events that came with no gap since the channel's last one
    /// (a channel already active cannot become active again without one).
    pub unprompted: u64,
    /// A gap came after the last active event (the channel is being
    /// resubscribed; an active event is still owed).
    pub awaiting: bool,
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
            unrecoverable_events: AtomicU64::new(0),
            unrecoverable_reasons: Mutex::default(),
            active_events: AtomicU64::new(0),
            gap_channels: Mutex::new(HashSet::new()),
            threads: Mutex::new(HashSet::new()),
            refused: Mutex::new(Vec::new()),
            active: Mutex::new(HashSet::new()),
            per_channel: Mutex::new(HashMap::new()),
            timeline: Mutex::new(Vec::new()),
        })
    }
}

impl Handler for Accounted {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        self.tap.message(channel, payload);
        self.threads.lock().insert(std::thread::current().id());
    }

    fn on_event(&self, event: Event<'_>) {
        match event {
            Event::Disconnected { server, error, .. } => {
                self.timeline.lock().push(format!("down {server}: {error}"));
            }
            Event::Connected { server, .. } => {
                self.timeline.lock().push(format!("up {server}"));
            }
            Event::Gap { channels, server } => {
                let at = server.map_or("none".to_string(), |a| a.to_string());
                self.timeline.lock().push(format!("gap {at}"));
                self.gap_events.fetch_add(1, Ordering::Relaxed);
                let mut named = self.gap_channels.lock();
                let mut per = self.per_channel.lock();
                for c in channels.iter() {
                    self.tap.signal(c, Signal::Gap);
                    named.insert(c.to_vec());
                    let e = per.entry(c.to_vec()).or_default();
                    e.gaps += 1;
                    e.awaiting = true;
                }
            }
            Event::Dropped { channels, .. } => {
                self.drop_events.fetch_add(1, Ordering::Relaxed);
                for c in channels.iter() {
                    self.tap.signal(c, Signal::Drop);
                }
            }
            Event::Unrecoverable {
                channel,
                reason,
                since,
                now,
            } => {
                self.unrecoverable_events.fetch_add(1, Ordering::Relaxed);
                let same = match (since, now) {
                    (Some(s), Some(n)) if s.epoch == n.epoch => "same epoch",
                    (_, Some(_)) => "another epoch",
                    _ => "no position",
                };
                let words: String = reason
                    .split_whitespace()
                    .take(4)
                    .collect::<Vec<_>>()
                    .join(" ");
                *self
                    .unrecoverable_reasons
                    .lock()
                    .entry(format!("{words} ({same})"))
                    .or_default() += 1;
                self.tap.signal(channel, Signal::Unrecoverable);
            }
            Event::Refused { channel, message } => {
                self.refused
                    .lock()
                    .push((channel.to_vec(), message.to_string()));
            }
            Event::Active { channel } => {
                self.active.lock().insert(channel.to_vec());
                self.active_events.fetch_add(1, Ordering::Relaxed);
                let mut per = self.per_channel.lock();
                let e = per.entry(channel.to_vec()).or_default();
                if e.actives > 0 && !e.awaiting {
                    e.unprompted += 1;
                }
                e.actives += 1;
                e.awaiting = false;
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

/// Fire-and-forget publishing with [`shardsub::PubSub::publish`].
pub fn via_pubsub(ps: Arc<shardsub::PubSub>) -> Arc<PublishFn> {
    Arc::new(move |ledger, stamp, channel, payload| {
        record(ledger, stamp, &ps.publish(channel, payload), false);
    })
}

/// Acknowledged publishing with [`shardsub::PubSub::publish_pending`] and a
/// callback.
pub fn via_cluster(ps: Arc<shardsub::PubSub>) -> Arc<PublishFn> {
    Arc::new(move |ledger, stamp, channel, payload| {
        let l = ledger.clone();
        ps.publish_pending(channel, payload)
            .then(move |r| record(&l, stamp, &r, true));
    })
}

/// Acknowledged publishing with [`shardsub::PubSub::publish_wait`], one
/// after another.
pub fn via_wait(ps: Arc<shardsub::PubSub>, timeout: Duration) -> Arc<PublishFn> {
    Arc::new(move |ledger, stamp, channel, payload| {
        record(
            ledger,
            stamp,
            &ps.publish_wait(channel, payload, timeout),
            true,
        );
    })
}

/// One round acknowledged with `publish_wait`, then every tap has it.
pub fn acked_round(ledger: &Arc<Ledger>, ps: &Arc<shardsub::PubSub>, bound: Duration) {
    round(ledger, &*via_wait(ps.clone(), bound));
    ledger
        .wait_caught_up(bound)
        .unwrap_or_else(|e| panic!("{e}\n{}", ledger.report()));
}

/// Publishes while `ps`'s replies are being lost: a round with a handle
/// each ([`via_cluster`]), a fire-and-forget round ([`via_pubsub`]), and
/// one `publish_wait` to the first channel on a thread of its own (its
/// result comes back from the thread); then waits until `handler` got
/// every one of them (the server ran them) and checks that no outcome but
/// the fire-and-forget ones came back. Returns the number published and
/// the thread.
pub fn publish_unanswered(
    ledger: &Arc<Ledger>,
    ps: &Arc<shardsub::PubSub>,
    handler: &Accounted,
    bound: Duration,
) -> (u64, std::thread::JoinHandle<Result<i64, Error>>) {
    let n = ledger.names().len() as u64;
    let before = handler.tap.messages();
    round(ledger, &*via_cluster(ps.clone()));
    round(ledger, &*via_pubsub(ps.clone()));
    let waiting = {
        let (ps, ledger) = (ps.clone(), ledger.clone());
        std::thread::spawn(move || {
            let mut payload = Vec::new();
            let stamp = ledger.stamp(0, &mut payload, PAYLOAD_LEN);
            let r = ps.publish_wait(ledger.name(0), &payload, bound * 2);
            record(&ledger, stamp, &r, true);
            r
        })
    };
    let published = 2 * n + 1;
    testkit::wait_for("the server to deliver what it ran", bound, || {
        Ok((handler.tap.messages() >= before + published).then_some(()))
    })
    .unwrap();
    assert_eq!(ledger.pending(), n + 1, "replies came back");
    (published, waiting)
}

/// The checks after [`publish_unanswered`]'s publishes lost their replies
/// with their connections: none delivered twice, the run clean, and each
/// that had a handle (the `publish_wait`, `waited`, among them) failed
/// with `ConnectionLost` and was delivered once.
pub fn assert_not_sent_again(
    what: &str,
    report: &testkit::accounting::Report,
    waited: &Result<i64, Error>,
) {
    assert_eq!(
        report.counts.duplicated, 0,
        "{what}: the subscriber got publishes twice:\n{report}"
    );
    assert!(report.is_clean(), "{what}: {report}");
    assert!(
        matches!(waited, Err(Error::ConnectionLost { .. })),
        "{what}: publish_wait of a publish that ran and lost its reply: {waited:?}"
    );
    let lost = report.failed.get("ConnectionLost").copied().unwrap_or(0);
    assert!(
        lost > 0 && lost == report.failed_total() && lost == report.counts.delivered_failed,
        "{what}: only ConnectionLost failures, each delivered once: {report}"
    );
}

/// One stamped message to every channel of the ledger, in index order.
pub fn round(ledger: &Arc<Ledger>, publish: &PublishFn) {
    round_where(ledger, publish, |_| true);
}

/// [`round`] to the channels `keep` selects only.
pub fn round_where(ledger: &Arc<Ledger>, publish: &PublishFn, keep: impl Fn(&[u8]) -> bool) {
    let mut payload = Vec::with_capacity(PAYLOAD_LEN);
    for c in (0..ledger.names().len()).filter(|&c| keep(ledger.name(c))) {
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

/// `wait_active`'s result for a channel the server refuses: the refusal,
/// naming the channel and the server's `NOPERM` text.
pub fn assert_refused(result: Result<(), Error>, channel: &[u8], what: &str) {
    match result {
        Err(Error::SubscribeRefused {
            channel: named,
            message,
        }) => {
            assert_eq!(&*named, channel, "{what}");
            assert!(message.starts_with("NOPERM"), "{what}: {message}");
        }
        other => panic!("{what}: wait_active on {channel:?} gave {other:?}"),
    }
}

/// Starts publishing with `publish` in the background, a round every
/// `pace`, and waits until three rounds' worth are delivered to `handler`.
pub fn publishing(
    ledger: &Arc<testkit::accounting::Ledger>,
    publish: Arc<PublishFn>,
    handler: &Accounted,
    pace: Duration,
    bound: Duration,
) -> Background {
    let publisher = Background::start(ledger.clone(), publish, pace, bound);
    let enough = 3 * ledger.names().len() as u64;
    testkit::wait_for("a few rounds delivered", bound, || {
        Ok((handler.tap.messages() >= enough).then_some(()))
    })
    .unwrap();
    publisher
}

/// Waits until `rounds` more rounds' worth of messages (one per channel of
/// `ledger`) reached `handler` than when called: delivery goes on.
pub fn delivered_more(
    ledger: &testkit::accounting::Ledger,
    handler: &Accounted,
    rounds: u64,
    bound: Duration,
    what: &str,
) {
    let target = handler.tap.messages() + rounds * ledger.names().len() as u64;
    testkit::wait_for(what, bound, || {
        Ok((handler.tap.messages() >= target).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// Publishes in the background (a round every 2 ms) until three rounds
/// are delivered, kills the server's Pub/Sub clients (`killed` of them,
/// asserted), waits for a gap event for every channel of `chans` and for
/// them to be active again, publishes one more round, and settles: the
/// clean report and the background rounds published.
#[allow(clippy::too_many_arguments)]
pub fn kill_pubsub_clients_under_load(
    ps: &Arc<shardsub::PubSub>,
    ledger: &Arc<testkit::accounting::Ledger>,
    handler: &Accounted,
    server: &testkit::Server,
    killed: i64,
    chans: &[Vec<u8>],
    bound: Duration,
    what: &str,
) -> (testkit::accounting::Report, u64) {
    let publisher = publishing(
        ledger,
        via_pubsub(ps.clone()),
        handler,
        Duration::from_millis(2),
        bound,
    );
    let n = server
        .cmd(&[b"CLIENT", b"KILL", b"TYPE", b"pubsub"])
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(n, testkit::Value::Integer(killed), "{what}: clients killed");
    testkit::wait_for("gap events for every channel", bound, || {
        Ok((handler.gap_channels.lock().len() >= chans.len()).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    ps.wait_active(chans, bound)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let rounds = publisher.stop();
    round(ledger, &*via_pubsub(ps.clone()));
    (settle_and_check(ledger, bound, what), rounds)
}
