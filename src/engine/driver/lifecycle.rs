//! A connection's life on its I/O thread: connecting, restarting,
//! shutting down and tearing down.

use std::time::{Duration, Instant};

use mio::{Interest, Registry};

use crate::conn::{ConnConfig, Connection, Event};
use crate::engine::resolve::Next;
use crate::engine::shared::{CLOSED, CONNECTING, DOWN, STOPPED};
use crate::error::Error;
use crate::metrics::add;
use crate::transport::{StartError, Transport};

use crate::engine::driver::fail::connect_error;
use crate::engine::driver::phase::Phase;
use crate::engine::driver::ConnDriver;

impl ConnDriver {
    pub(super) fn start_connect(&mut self, registry: &Registry, now: Instant) {
        if self.reconnecting {
            if let Some(named) = &self.shared.named {
                // A server given by name: looked up again (off this
                // thread), its addresses taken in turn.
                let attempt = self.backoff.attempts().max(1);
                match named.next(attempt, self.addr()) {
                    Next::Wait => {
                        self.phase = Phase::Backoff {
                            until: now + LOOKUP_POLL,
                        };
                        return;
                    }
                    Next::Connect(addr) => {
                        if addr != self.addr() {
                            log::info!("{} now resolves to {addr}", self.addr());
                        }
                        *self.shared.current.lock() = addr;
                        self.addr = addr;
                    }
                }
            }
        }
        let addr = self.addr();
        let mut socket = match Transport::connect(addr, self.tls.as_deref()) {
            Ok(s) => s,
            Err(StartError::Io(e)) => return self.teardown(registry, connect_error(addr, &e), now),
            Err(StartError::Tls(reason)) => {
                let err = Error::Tls {
                    addr,
                    reason: reason.into(),
                };
                return self.teardown(registry, err, now);
            }
        };
        if let Err(e) = registry.register(
            socket.source_mut(),
            self.token,
            Interest::READABLE | Interest::WRITABLE,
        ) {
            return self.teardown(registry, connect_error(addr, &e), now);
        }
        let named = self.shared.named.as_ref();
        let config = ConnConfig {
            role: self.shared.info.role,
            require_primary: self.settings.conn.require_primary
                || named.is_some_and(|n| n.is_sentinel_master()),
            ..self.settings.conn.clone()
        };
        self.socket = Some(socket);
        self.hangup = false;
        self.write_interest = true;
        self.write_blocked = false;
        self.core = Some(Connection::new(config, now));
        self.phase = Phase::Connecting {
            deadline: now + self.settings.connect_timeout,
        };
        if !self.shutting_down {
            self.set_state(CONNECTING);
        }
        log::debug!("connecting to {addr}");
    }

    /// Starts a shutdown: refuse new submissions, fail what cannot be sent.
    pub(crate) fn begin_shutdown(&mut self, registry: &Registry, now: Instant) {
        self.reclaim(registry, now, false);
        self.shutting_down = true;
        self.set_state(CLOSED);
        match self.phase {
            Phase::Open => self.drain_staging(now),
            Phase::Closed => self.drain_staging(now),
            Phase::Connecting { .. } | Phase::Backoff { .. } => {
                self.teardown(registry, Error::Shutdown, now);
            }
        }
    }

    /// Closes the connection and reconnects it, its name looked up again
    /// (an answer from before is forgotten), unless it is connected to `to`
    /// already or shutting down: the server behind its name moved (a
    /// Sentinel failover). What is in flight fails as on a lost
    /// connection; one waiting to reconnect reconnects now.
    pub(crate) fn restart(
        &mut self,
        registry: &Registry,
        to: crate::addr::ServerAddr,
        now: Instant,
    ) {
        if self.shutting_down || self.addr == to {
            return;
        }
        if let Some(named) = &self.shared.named {
            named.invalidate();
        }
        match self.phase {
            Phase::Open | Phase::Connecting { .. } => {
                self.reclaim(registry, now, false);
                let addr = self.addr;
                log::info!("{addr}: the server moved to {to}; reconnecting");
                let error = Error::ConnectionLost {
                    addr,
                    reason: crate::conn::ConnError::Aborted,
                };
                self.teardown(registry, error, now);
            }
            Phase::Backoff { .. } => self.phase = Phase::Backoff { until: now },
            Phase::Closed => {}
        }
    }

    /// Ends the connection now: everything pending fails with `Shutdown`.
    pub(crate) fn abort(&mut self, registry: &Registry, now: Instant) {
        self.reclaim(registry, now, false);
        self.shutting_down = true;
        if let Some(core) = &mut self.core {
            core.close();
        }
        self.after_io(registry, now);
        if !self.is_closed() {
            self.teardown(registry, Error::Shutdown, now);
        }
    }

    /// Ends the connection for good after its I/O thread panicked (the
    /// thread has caught the panic and is about to stop): everything
    /// pending fails with [`Error::RuntimeStopped`].
    pub(crate) fn stop_after_panic(&mut self, registry: &Registry, now: Instant) {
        self.reclaim(registry, now, false);
        self.shutting_down = true;
        if !self.is_closed() {
            self.teardown(registry, Error::RuntimeStopped, now);
        }
        self.fail_unserved(Error::RuntimeStopped);
    }

    /// Closes a connection that no thread will serve (never started, or
    /// its thread stopped): staged requests and the first connect's
    /// report fail with `error`; submitters see it closed.
    pub(crate) fn fail_unserved(&mut self, error: Error) {
        self.shutting_down = true;
        self.take_staged(Some(STOPPED));
        self.fail_staged(&error);
        if let Some(initial) = self.initial.take() {
            initial.complete(Err(error));
        }
        self.phase = Phase::Closed;
    }

    /// The connection is over: fail everything on it, then reconnect later
    /// (or stop for good).
    pub(super) fn teardown(&mut self, registry: &Registry, error: Error, now: Instant) {
        // Outcomes held back come before the failures below.
        self.run_later();
        // Connected, but the TLS handshake never finished: the likelier
        // story than a slow server is a port that does not speak TLS (it
        // waits silently for the end of what it takes for a command).
        let handshaking = matches!(self.phase, Phase::Open)
            && self.socket.as_ref().is_some_and(Transport::is_handshaking);
        let error = match error {
            Error::ConnectTimeout { addr, after } if handshaking => Error::Tls {
                addr,
                reason: format!(
                    "no TLS handshake within the connect timeout ({after:?}): \
                         does this port speak TLS?"
                )
                .into(),
            },
            other => other,
        };
        if let Some(mut socket) = self.socket.take() {
            socket.close();
            let _ = registry.deregister(socket.source_mut());
        }
        self.more_to_read = false;
        self.paused_until = None;
        self.last_read = None;
        self.gap_avg = Duration::MAX;
        self.resumed = false;
        self.chain_unit = 0;
        self.write_interest = false;
        self.write_blocked = false;
        if let Some(mut core) = self.core.take() {
            // Anything the core still holds fails with this error.
            core.close();
            let mut failed = 0u64;
            let addr = self.addr();
            while let Some(ev) = core.poll_event() {
                if let Event::Failed { user, sent, .. } = ev {
                    failed += 1;
                    let e = user.closed_error(addr, error.clone(), sent);
                    user.fail(e, &self.settings, &mut self.kept);
                }
            }
            add(&self.counters().failed, failed);
        }
        let retry_first = self.settings.degraded;
        let give_up = (self.initial.is_some() && !retry_first) || self.shutting_down;
        let state = if matches!(error, Error::RuntimeStopped) {
            STOPPED // new calls say why, not just "shut down"
        } else if give_up {
            CLOSED
        } else {
            DOWN
        };
        self.take_staged(Some(state));
        let staged_err = if give_up {
            error.clone()
        } else {
            Error::NotConnected { addr: self.addr() }
        };
        self.fail_staged(&staged_err);
        add(&self.counters().disconnects, 1);
        self.settings
            .observer
            .on_disconnected(&self.shared.info, &error);
        let first = self.initial.take();
        let failed_first = first.is_some();
        if let Some(initial) = first {
            initial.complete(Err(error.clone()));
        }
        if self.shutting_down || (failed_first && !retry_first) {
            self.phase = Phase::Closed;
        } else {
            let delay = self.backoff.next_delay_after(now);
            log::warn!(
                "connection to {} lost ({error}); reconnect attempt {} in {delay:?}",
                self.addr(),
                self.backoff.attempts()
            );
            self.phase = Phase::Backoff { until: now + delay };
            self.reconnecting = true;
        }
    }
}

/// How often a connection waiting for a lookup looks whether it is done.
const LOOKUP_POLL: std::time::Duration = std::time::Duration::from_millis(2);
