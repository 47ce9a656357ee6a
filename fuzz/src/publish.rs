//! The publish side's sans-IO decisions (`shardsub-control`'s
//! [`control::Gates`] and [`control::RetryPolicy`]) under operations read
//! from fuzz bytes (`publish_gates`).
//!
//! Input: a header byte (the retry policy's redirect bound, 0 to 15), then
//! operations of 3 bytes: a kind, a pick (of a gate closed so far, taken
//! modulo how many there are) and a time step (× 1 ms, times 2 for the
//! kind's high bit): close a gate (forwarding or not), answer or fail its
//! barrier, return or refuse a marker, let time pass (the driver's
//! `handle_timeout` at `poll_timeout`), redirect or retry a publish.
//!
//! Invariants: no panic; every gate opens exactly once, and nothing is
//! asked for it after it opened; a gate is open at the latest its timeout
//! after it closed once the driver has looked then; after
//! `handle_timeout(now)`, `poll_timeout` lies after `now`; a forwarding
//! gate whose barrier was answered sends a marker before it opens (unless
//! it timed out); the gates hold no more than the gates closed and not
//! opened; a publish is redirected at most the bound, and its retries come
//! strictly later each time and never past its window plus the longest
//! delay.

use core::time::Duration;
use std::collections::BTreeMap;

use control::{GateCommand, Gates, RetryPolicy, Time};

use crate::input::Input;

const TIMEOUT: Duration = Duration::from_secs(1);
const MARKER_EVERY: Duration = Duration::from_millis(20);
const WINDOW: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Seen {
    closed_at: Time,
    forwards: bool,
    barrier_ok: bool,
    markers: u32,
    open: bool,
}

/// Runs the operations `data` describes; panics on a broken invariant.
pub fn check(data: &[u8]) {
    let mut input = Input::new(data);
    let max_redirects = u32::from(input.u8() % 16);
    let policy = RetryPolicy::new(max_redirects, WINDOW);
    let mut gates: Gates<u64> = Gates::new(TIMEOUT, MARKER_EVERY);
    let mut seen: BTreeMap<u64, Seen> = BTreeMap::new();
    let mut tokens: Vec<u64> = Vec::new();
    let mut now = Time::ZERO;
    let (mut redirects, mut tries) = (0u32, 0u32);
    let mut first_retry: Option<Time> = None;
    let mut last_retry_at = Time::ZERO;
    while !input.is_empty() {
        let kind = input.u8();
        let pick = usize::from(input.u8());
        let step = u64::from(input.u8()) * if kind & 0x80 != 0 { 2 } else { 1 };
        now = now + Duration::from_millis(step);
        let token = (!tokens.is_empty()).then(|| tokens[pick % tokens.len()]);
        match (kind & 0x7f) % 9 {
            0 | 1 => {
                let forwards = kind % 9 == 1;
                let t = gates.close(now, pick as u64, forwards);
                assert!(!seen.contains_key(&t), "token {t} given twice");
                assert_eq!(gates.route(t), Some(&(pick as u64)));
                seen.insert(
                    t,
                    Seen {
                        closed_at: now,
                        forwards,
                        ..Seen::default()
                    },
                );
                tokens.push(t);
            }
            2 | 3 => {
                if let Some(t) = token {
                    let ok = kind % 9 == 2;
                    if let Some(s) = seen.get_mut(&t) {
                        s.barrier_ok |= ok && !s.open;
                    }
                    gates.handle_barrier(now, t, ok);
                }
            }
            4 => {
                if let Some(t) = token {
                    gates.handle_marker(t);
                }
            }
            5 | 6 => {
                // The driver's timer.
                if gates.poll_timeout().is_some_and(|t| t <= now) {
                    gates.handle_timeout(now);
                    if let Some(t) = gates.poll_timeout() {
                        assert!(t > now, "poll_timeout {t} not after {now}");
                    }
                    drain(&mut gates, &mut seen, now);
                    // Once the driver looked, no gate is closed past its
                    // timeout.
                    for (t, s) in &seen {
                        assert!(s.open || now < s.closed_at + TIMEOUT, "gate {t} still closed");
                    }
                }
            }
            7 => {
                let before = redirects;
                match policy.redirect(&mut redirects) {
                    Ok(()) => assert!(redirects <= max_redirects),
                    Err(_) => {
                        assert_eq!(before, max_redirects.min(before));
                        redirects = 0; // the next publish
                    }
                }
            }
            _ => {
                // A publish is refused again no sooner than its retry.
                now = now.max(last_retry_at);
                let first = *first_retry.get_or_insert(now);
                match policy.retry(now, first, &mut tries) {
                    Ok(at) => {
                        assert!(at > now && at > last_retry_at, "retry at {at}");
                        assert!(at <= first + WINDOW + policy.longest_delay());
                        last_retry_at = at;
                    }
                    Err(_) => {
                        assert!(now.since(first) >= WINDOW);
                        (first_retry, tries, last_retry_at) = (None, 0, Time::ZERO);
                    }
                }
            }
        }
        drain(&mut gates, &mut seen, now);
    }
    // Time enough for every gate: each is open once the driver looked.
    let end = now + TIMEOUT;
    while let Some(t) = gates.poll_timeout() {
        assert!(t <= end, "a gate still waits at {t}, past {end}");
        gates.handle_timeout(t);
        drain(&mut gates, &mut seen, t);
    }
    assert!(gates.is_empty());
    for (t, s) in &seen {
        assert!(s.open, "gate {t} never opened");
    }
}

fn drain(gates: &mut Gates<u64>, seen: &mut BTreeMap<u64, Seen>, now: Time) {
    while let Some(cmd) = gates.poll_command() {
        let (GateCommand::Barrier { token }
        | GateCommand::Marker { token }
        | GateCommand::Open { token, .. }) = cmd;
        let s = seen.get_mut(&token).expect("a command for a gate never closed");
        assert!(!s.open, "{cmd:?} after gate {token} opened");
        match cmd {
            GateCommand::Barrier { .. } => {}
            GateCommand::Marker { .. } => {
                assert!(s.forwards && s.barrier_ok, "a marker before its barrier");
                s.markers += 1;
            }
            GateCommand::Open { timed_out, .. } => {
                s.open = true;
                if timed_out {
                    assert!(now.since(s.closed_at) >= TIMEOUT, "timed out early");
                } else if s.forwards && s.barrier_ok {
                    assert!(s.markers > 0, "opened before a marker went out");
                }
            }
        }
    }
    let closed = seen.values().filter(|s| !s.open).count();
    assert_eq!(gates.len(), closed);
}
