//! One I/O thread: a `mio::Poll`, a `Waker`, and the connections it owns.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};

use crate::engine::driver::Driver;
use crate::engine::shared::{Control, ThreadShared};

/// The waker's token; connection `i` uses `Token(i + 1)`.
pub(crate) const WAKER: Token = Token(0);

pub(crate) struct IoThread {
    pub(crate) poll: Poll,
    pub(crate) shared: Arc<ThreadShared>,
    pub(crate) drivers: Vec<Driver>,
}

impl IoThread {
    /// Runs until shutdown has flushed or failed everything.
    pub(crate) fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut notified: Vec<usize> = Vec::new();
        let mut flags = vec![false; self.drivers.len()];
        let mut shutdown_deadline: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let mut next = shutdown_deadline;
            let mut immediate = false;
            for d in &self.drivers {
                immediate |= d.more_to_read;
                if let Some(t) = d.next_deadline() {
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
            let timeout = if immediate {
                Some(Duration::ZERO)
            } else {
                next.map(|t| t.saturating_duration_since(now))
            };
            // epoll's timeout has millisecond resolution, so a flush-delay
            // deadline may be overshot by up to 1 ms when nothing else
            // happens. Holds only happen while written requests await
            // replies, and every reply wakes this wait (and, once all are in,
            // releases the held batch at once), so sleeping precisely, blind
            // to those replies, would be worse.
            let result = self.poll.poll(&mut events, timeout);
            if let Err(e) = result {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    log::error!("I/O thread poll failed: {e}; stopping its connections");
                    let now = Instant::now();
                    let registry = self.poll.registry();
                    for d in &mut self.drivers {
                        d.abort(registry, now);
                    }
                    return;
                }
                events.clear();
            }
            let now = Instant::now();
            let registry = self.poll.registry();
            for ev in events.iter() {
                if ev.token() == WAKER {
                    continue;
                }
                let Some(d) = self.drivers.get_mut(ev.token().0 - 1) else {
                    continue;
                };
                let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                // An error or a closed write side clears a blocked write too,
                // so the next write reports it.
                let writable = ev.is_writable() || ev.is_write_closed() || ev.is_error();
                d.on_socket_event(registry, readable, writable, now);
            }
            for c in std::mem::take(&mut *self.shared.control.lock()) {
                match c {
                    Control::Shutdown(deadline) => {
                        shutdown_deadline = Some(deadline);
                        for d in &mut self.drivers {
                            d.begin_shutdown(registry, now);
                        }
                    }
                    Control::Restart(local) => {
                        if let Some(d) = self.drivers.get_mut(local) {
                            d.restart(registry, now);
                        }
                    }
                    #[cfg(test)]
                    Control::Panic => panic!("I/O thread panic provoked by a test"),
                }
            }
            // Reading can take a while (up to the read budget per
            // connection): timers and the shutdown deadline see the clock.
            let now = Instant::now();
            std::mem::swap(&mut *self.shared.ready.lock(), &mut notified);
            for &i in &notified {
                if let Some(f) = flags.get_mut(i) {
                    *f = true;
                }
            }
            notified.clear();
            for (d, flag) in self.drivers.iter_mut().zip(flags.iter_mut()) {
                d.service(registry, now, std::mem::take(flag));
            }
            if let Some(deadline) = shutdown_deadline {
                if self.drivers.iter().all(Driver::is_quiet) || now >= deadline {
                    for d in &mut self.drivers {
                        d.abort(registry, now);
                    }
                    return;
                }
            }
        }
    }
}
