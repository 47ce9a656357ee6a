//! Hands a connection core's events to their completions and the
//! observer: on the I/O thread, and on a caller's thread during a lend.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::conn::{Connection, Event};
use crate::engine::backoff::Reconnect;
use crate::engine::kept::Kept;
use crate::engine::pending::{Completion, Later, SlotRef};
use crate::engine::settings::Settings;
use crate::engine::shared::{ConnShared, CLOSED, UP};
use crate::error::Error;
use crate::metrics::add;

/// Tells the observer that the pushes given to it so far are all there
/// is, if any were: at the end of a read, and before a request completes,
/// since a completion may count on the pushes before it having been
/// handed on (a fence's `PING`).
fn pushes_done(unflushed: &mut bool, settings: &Settings, shared: &ConnShared) {
    if std::mem::take(unflushed) {
        settings.observer.on_pushes_done(&shared.info);
    }
}

/// Hands every event of the core to its completion or the observer.
/// Returns the error when the core reports the connection closed. `addr`
/// is the address connected to, passed in so that a read turn takes no
/// lock for it (the I/O thread keeps its own copy).
#[allow(clippy::too_many_arguments)]
pub(crate) fn dispatch(
    core: &mut Connection<Completion>,
    addr: crate::addr::ServerAddr,
    shared: &ConnShared,
    settings: &Settings,
    initial: &mut Option<SlotRef<()>>,
    backoff: &mut Reconnect,
    kept: &mut Kept,
    mut later: Option<&mut Vec<Later>>,
) -> Option<Error> {
    let (mut replies, mut errors, mut pushes, mut failed) = (0u64, 0u64, 0u64, 0u64);
    let mut closed = None;
    // Pushes passed to the observer since its last `on_pushes_done`.
    let mut unflushed = false;
    while let Some(ev) = core.poll_event() {
        match ev {
            Event::Connected {
                protocol,
                fell_back,
            } => {
                {
                    let _staging = shared.staging.lock();
                    if shared.state.load(Ordering::Acquire) != CLOSED {
                        shared.state.store(UP, Ordering::Release);
                    }
                }
                add(&settings.counters.connects, 1);
                if backoff.attempts() > 0 {
                    log::info!("reconnected to {addr} ({protocol:?})");
                } else {
                    log::debug!("connected to {addr} ({protocol:?})");
                }
                if fell_back {
                    log::info!("{addr} refused HELLO 3; using RESP2");
                }
                // Not a reset: only a healthy connection restarts the
                // schedule (a completed request, or time up).
                backoff.connected(Instant::now());
                settings
                    .observer
                    .on_connected(&shared.info, protocol, fell_back);
                if let Some(slot) = initial.take() {
                    slot.complete(Ok(()));
                }
            }
            Event::Reply { user, reply } => {
                replies += 1;
                pushes_done(&mut unflushed, settings, shared);
                if user.complete_or_later(addr, &reply, settings, kept, later.as_deref_mut()) {
                    errors += 1;
                }
            }
            Event::Push {
                push,
                class,
                completes,
            } => {
                pushes += 1;
                unflushed = true;
                settings
                    .observer
                    .on_classified_push(&shared.info, &push, class.as_ref());
                if let Some(user) = completes {
                    replies += 1;
                    pushes_done(&mut unflushed, settings, shared);
                    user.complete(addr, &push, settings, kept);
                }
            }
            Event::Failed { user, error, sent } => {
                failed += 1;
                pushes_done(&mut unflushed, settings, shared);
                let e = Error::from_conn(addr, error, settings.connect_timeout);
                let e = user.closed_error(addr, e, sent);
                user.fail_or_later(e, settings, kept, later.as_deref_mut());
            }
            Event::Closed { error } => {
                closed = Some(Error::from_conn(addr, error, settings.connect_timeout));
            }
        }
    }
    pushes_done(&mut unflushed, settings, shared);
    if replies > 0 {
        backoff.healthy();
    }
    let c = &settings.counters;
    add(&c.replies, replies);
    add(&c.error_replies, errors);
    add(&c.pushes, pushes);
    add(&c.failed, failed);
    closed
}
