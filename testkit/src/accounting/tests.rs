//! The checker on made-up streams: each way a handler can go wrong is
//! classified as such, and each allowed outcome passes.

use super::*;

/// A ledger over `n` channels named c0, c1, … and one tap.
fn setup(n: usize) -> (Ledger, Arc<Tap>) {
    let ledger = Ledger::new((0..n).map(|i| format!("c{i}")));
    let tap = ledger.tap("t");
    (ledger, tap)
}

/// Publishes `rounds` acknowledged messages on every channel; returns the
/// payloads per channel.
fn publish(ledger: &Ledger, rounds: u32) -> Vec<Vec<Vec<u8>>> {
    let n = ledger.names().len();
    let mut out = vec![Vec::new(); n];
    for _ in 0..rounds {
        for (c, list) in out.iter_mut().enumerate() {
            let mut p = Vec::new();
            let s = ledger.stamp(c, &mut p, 24);
            ledger.outcome(s, Outcome::Acked);
            list.push(p);
        }
    }
    out
}

#[test]
fn in_order_delivery_is_clean() {
    let (ledger, tap) = setup(3);
    let payloads = publish(&ledger, 10);
    for (c, list) in payloads.iter().enumerate() {
        for p in list {
            tap.message(ledger.name(c), p);
        }
    }
    let r = ledger.report();
    r.assert_clean();
    assert_eq!(r.counts.delivered, 30);
    assert_eq!(r.acked, 30);
    assert!(ledger.caught_up());
    assert!(r.incidents.is_empty());
}

#[test]
fn dropping_one_in_ten_is_a_silent_loss() {
    let (ledger, tap) = setup(2);
    let payloads = publish(&ledger, 50);
    let mut n = 0;
    for (c, list) in payloads.iter().enumerate() {
        for p in list {
            n += 1;
            if n % 10 != 0 {
                tap.message(ledger.name(c), p);
            }
        }
    }
    let r = ledger.report();
    assert!(!r.is_clean());
    assert_eq!(r.counts.lost_silent, 10);
    assert_eq!(r.counts.lost_signalled, 0);
    assert_eq!(r.counts.delivered, 90);
    assert!(r.to_string().contains("lost silently"), "{r}");
}

#[test]
fn a_gap_between_the_deliveries_around_a_loss_signals_it() {
    let (ledger, tap) = setup(1);
    let p = publish(&ledger, 5).remove(0);
    tap.message(b"c0", &p[0]);
    tap.message(b"c0", &p[1]);
    tap.signal(b"c0", Signal::Gap);
    tap.message(b"c0", &p[4]);
    let r = ledger.report();
    r.assert_clean();
    assert_eq!(r.counts.lost_signalled, 2);
    assert_eq!(r.counts.signals, 1);
    assert_eq!(r.incidents.len(), 1);
    let i = &r.incidents[0];
    assert_eq!((i.lost, i.fate), (2, Fate::Signalled));
    assert!(i.resumed.is_some());
}

#[test]
fn a_signal_after_the_next_delivery_does_not_cover_the_loss() {
    let (ledger, tap) = setup(1);
    let p = publish(&ledger, 3).remove(0);
    tap.message(b"c0", &p[0]);
    tap.message(b"c0", &p[2]);
    tap.signal(b"c0", Signal::Drop); // too late for message 1
    let r = ledger.report();
    assert_eq!(r.counts.lost_silent, 1);
    assert!(!r.is_clean());
}

#[test]
fn a_signal_for_another_channel_does_not_cover_the_loss() {
    let (ledger, tap) = setup(2);
    let p = publish(&ledger, 3);
    tap.message(b"c0", &p[0][0]);
    tap.signal(b"c1", Signal::Gap);
    tap.message(b"c0", &p[0][2]);
    for m in &p[1] {
        tap.message(b"c1", m);
    }
    let r = ledger.report();
    assert_eq!(r.counts.lost_silent, 1);
}

#[test]
fn the_tail_is_lost_signalled_only_with_a_signal_after_the_last_delivery() {
    let (ledger, tap) = setup(2);
    let p = publish(&ledger, 4);
    tap.message(b"c0", &p[0][0]);
    tap.signal(b"c0", Signal::Gap);
    tap.message(b"c1", &p[1][0]);
    let r = ledger.report();
    assert_eq!(r.counts.lost_signalled, 3, "c0's tail");
    assert_eq!(r.counts.lost_silent, 3, "c1's tail");
    assert!(!ledger.caught_up());
    let lag = ledger.lagging(10);
    assert_eq!(lag.len(), 2);
}

#[test]
fn duplicates_and_reorders_are_counted_and_a_reorder_is_no_loss() {
    let (ledger, tap) = setup(1);
    let p = publish(&ledger, 4).remove(0);
    tap.message(b"c0", &p[0]);
    tap.message(b"c0", &p[2]);
    tap.message(b"c0", &p[1]); // late
    tap.message(b"c0", &p[2]); // again
    tap.message(b"c0", &p[3]);
    let r = ledger.report();
    assert_eq!(r.counts.reordered, 1);
    assert_eq!(r.counts.duplicated, 1);
    assert_eq!(r.counts.lost_silent + r.counts.lost_signalled, 0);
    assert_eq!(r.counts.delivered, 3);
    assert!(!r.is_clean());
}

#[test]
fn failed_publishes_are_not_expected_but_may_arrive() {
    let (ledger, tap) = setup(1);
    let mut payloads = Vec::new();
    for i in 0..4 {
        let mut p = Vec::new();
        let s = ledger.stamp(0, &mut p, 0);
        let outcome = if i % 2 == 1 {
            Outcome::Failed("Timeout")
        } else {
            Outcome::Sent
        };
        ledger.outcome(s, outcome);
        payloads.push(p);
    }
    tap.message(b"c0", &payloads[0]);
    tap.message(b"c0", &payloads[1]); // failed, arrived anyway
    tap.message(b"c0", &payloads[2]); // 3 failed and never arrived
    let r = ledger.report();
    r.assert_clean();
    assert_eq!(r.failed.get("Timeout"), Some(&2));
    assert_eq!(r.sent, 2);
    assert_eq!(r.counts.delivered, 2);
    assert_eq!(r.counts.delivered_failed, 1);
    assert!(ledger.caught_up(), "the last expected one is 2");
}

/// Hands `payload` of channel c0 to `tap` from a new thread.
fn on_new_thread(tap: &Arc<Tap>, payload: &[u8]) {
    let (tap, payload) = (tap.clone(), payload.to_vec());
    std::thread::spawn(move || tap.message(b"c0", &payload))
        .join()
        .unwrap();
}

#[test]
fn a_one_way_move_is_a_move_not_a_split() {
    let (ledger, tap) = setup(1);
    let p = publish(&ledger, 3).remove(0);
    tap.message(b"c0", &p[0]);
    let (tap2, rest) = (tap.clone(), p[1..].to_vec());
    std::thread::spawn(move || rest.iter().for_each(|m| tap2.message(b"c0", m)))
        .join()
        .unwrap();
    let r = ledger.report();
    assert_eq!((r.moved, r.split, r.counts.delivered), (1, 0, 3));
    assert!(!r.is_clean(), "no move is allowed by default: {r}");
    ledger.allow_moves(1);
    ledger.report().assert_clean();
}

/// Channel c0's three messages on this thread, then a new one, then back
/// on this one (`back`) or on a third; `allowed` moves.
fn changed_twice(back: bool, allowed: u64) -> Report {
    let (ledger, tap) = setup(1);
    let p = publish(&ledger, 3).remove(0);
    tap.message(b"c0", &p[0]);
    on_new_thread(&tap, &p[1]);
    match back {
        true => tap.message(b"c0", &p[2]),
        false => on_new_thread(&tap, &p[2]),
    }
    ledger.allow_moves(allowed);
    let r = ledger.report();
    assert_eq!((r.moved, r.split), (1, 1), "{r}");
    r
}

#[test]
fn a_return_to_a_thread_left_is_a_split() {
    let r = changed_twice(true, 1);
    assert!(!r.is_clean(), "a return is never allowed: {r}");
    let text = r.to_string();
    assert!(
        text.contains("back on the handler thread it had left"),
        "{r}"
    );
}

#[test]
fn a_third_thread_is_a_split() {
    let r = changed_twice(false, 2);
    assert!(!r.is_clean(), "a second change is never allowed: {r}");
    assert!(r.to_string().contains("on a third handler thread"), "{r}");
}

#[test]
fn a_message_on_the_wrong_channel_or_garbled_is_unexpected() {
    let (ledger, tap) = setup(2);
    let p = publish(&ledger, 1);
    tap.message(b"c1", &p[0][0]);
    tap.message(b"c0", b"short");
    tap.message(b"nope", &p[0][0]);
    tap.message(b"c0", &p[0][0]);
    tap.message(b"c1", &p[1][0]);
    let r = ledger.report();
    assert_eq!(r.counts.unexpected, 3);
    assert_eq!(r.counts.delivered, 2);
    assert!(!r.is_clean());
}

#[test]
fn a_never_published_sequence_is_unexpected() {
    let (ledger, tap) = setup(1);
    let mut p = publish(&ledger, 1).remove(0).remove(0);
    tap.message(b"c0", &p);
    p[0] = 7; // sequence 7 was never published
    tap.message(b"c0", &p);
    assert_eq!(ledger.report().counts.unexpected, 1);
}

#[test]
fn a_tap_expects_only_what_came_after_it_and_only_its_channels() {
    let ledger = Ledger::new(["a", "b"]);
    let early = publish(&ledger, 2);
    let tap = ledger.tap_for("late", &[0]);
    let later = publish(&ledger, 2);
    tap.message(b"a", &early[0][1]); // before its window: allowed
    for m in &later[0] {
        tap.message(b"a", m);
    }
    let r = ledger.report();
    r.assert_clean();
    assert_eq!(r.counts.delivered, 2);
    assert_eq!(r.counts.before_window, 1);
    tap.message(b"b", &later[1][0]);
    let r = ledger.report();
    assert_eq!(r.unwanted, 1);
    assert!(!r.is_clean());
}

#[test]
fn pending_outcomes_are_reported() {
    let (ledger, _tap) = setup(1);
    let mut p = Vec::new();
    let s = ledger.stamp(0, &mut p, 0);
    assert_eq!(ledger.pending(), 1);
    assert!(ledger.wait_outcomes(Duration::from_millis(20)).is_err());
    ledger.outcome(s, Outcome::Acked);
    assert_eq!(ledger.pending(), 0);
    assert!(ledger.wait_outcomes(Duration::from_millis(20)).is_ok());
}

#[test]
fn incidents_are_runs_of_consecutive_losses() {
    let (ledger, tap) = setup(1);
    let p = publish(&ledger, 10).remove(0);
    tap.message(b"c0", &p[0]);
    tap.signal(b"c0", Signal::Gap);
    tap.message(b"c0", &p[3]);
    tap.message(b"c0", &p[4]);
    tap.message(b"c0", &p[7]); // 5, 6 silent
    tap.message(b"c0", &p[9]); // 8 silent
    let r = ledger.report();
    let runs: Vec<(u64, Fate)> = r.incidents.iter().map(|i| (i.lost, i.fate)).collect();
    assert_eq!(
        runs,
        [(2, Fate::Signalled), (2, Fate::Silent), (1, Fate::Silent)]
    );
    assert_eq!(tap.signals_for(b"c0"), 1);
    assert_eq!(tap.signalled_since(Duration::ZERO), vec![0]);
    assert_eq!(tap.gapped_since(Duration::ZERO), vec![0]);
    let (_, other) = setup(2);
    other.signal(b"c1", Signal::Drop);
    assert_eq!(other.signalled_since(Duration::ZERO), vec![1]);
    assert!(other.gapped_since(Duration::ZERO).is_empty());
    assert_eq!(tap.messages(), 5);
}

#[test]
fn fresh_means_a_message_published_after_the_mark() {
    let (ledger, tap) = setup(2);
    let old = publish(&ledger, 1);
    tap.message(b"c0", &old[0][0]);
    tap.message(b"c1", &old[1][0]);
    std::thread::sleep(Duration::from_millis(2)); // the clock ticks at 100 µs
    let mark = ledger.elapsed();
    assert_eq!(ledger.stale(mark, 10).len(), 2);
    let new = publish(&ledger, 1);
    tap.message(b"c0", &new[0][0]);
    assert_eq!(ledger.stale(mark, 10), [("t".to_string(), b"c1".to_vec())]);
    assert!(ledger.wait_fresh(mark, Duration::from_millis(20)).is_err());
    tap.message(b"c1", &new[1][0]);
    assert!(ledger.wait_fresh(mark, Duration::from_millis(20)).is_ok());
}

#[test]
fn on_a_recoverable_channel_only_an_unrecoverable_event_excuses_a_loss() {
    let (ledger, tap) = setup(2);
    ledger.mark_recoverable(&[1]);
    assert!(ledger.is_recoverable(1) && !ledger.is_recoverable(0));
    let p = publish(&ledger, 4);
    // The same stream on both: a gap, then messages 1 and 2 missing.
    for (c, list) in p.iter().enumerate() {
        let name = ledger.name(c).to_vec();
        tap.message(&name, &list[0]);
        tap.signal(&name, Signal::Gap);
        tap.message(&name, &list[3]);
    }
    let r = ledger.report();
    assert_eq!(r.counts.lost_signalled, 2, "the plain channel: signalled");
    assert_eq!(r.counts.lost_silent, 2, "the recoverable one: lost");
    assert_eq!(r.recoverable.lost_silent, 2);
    assert!(!r.is_clean());
    // An unrecoverable event covers the next loss (message 4), and
    // only that one.
    let p = publish(&ledger, 2);
    tap.message(b"c0", &p[0][0]);
    tap.message(b"c0", &p[0][1]);
    tap.signal(b"c1", Signal::Unrecoverable);
    tap.message(b"c1", &p[1][1]);
    let r = ledger.report();
    assert_eq!(r.recoverable.lost_unrecoverable, 1);
    assert_eq!(r.recoverable.lost_silent, 2);
    assert_eq!(r.recoverable.signals, 2);
    assert_eq!(tap.unrecoverable(), 1);
    let fates: Vec<(u64, Fate)> = r
        .incidents
        .iter()
        .filter(|i| i.channel == 1)
        .map(|i| (i.lost, i.fate))
        .collect();
    assert_eq!(fates, [(2, Fate::Silent), (1, Fate::Unrecoverable)]);
    assert!(r.to_string().contains("lost_unrecoverable 1"), "{r}");
}

#[test]
fn a_sequence_past_the_range_is_garbled_not_a_signal() {
    let (ledger, tap) = setup(1);
    let mut p = publish(&ledger, 1).remove(0).remove(0);
    p[0..8].copy_from_slice(&u64::from(u32::MAX - 1).to_le_bytes());
    tap.message(b"c0", &p);
    let r = ledger.report();
    assert_eq!(r.counts.signals, 0);
    assert_eq!(r.counts.unexpected, 1);
}
