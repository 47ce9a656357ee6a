//! Caller-side writes: a submitter that finds its connection idle writes
//! its request to the socket itself instead of staging it and waking the
//! I/O thread, which then only reads the reply.
//!
//! For a lone caller that waits for each reply this saves the eventfd wake
//! of the I/O thread, that thread's extra turn (and context switch) and
//! the hand-off of the bytes: the request leaves on the caller's own
//! `write`. Everything else is unchanged:
//!
//! - order: only when nothing is staged, nothing is awaited and nothing is
//!   unsent (checked under the `io` and `staging` locks), so the request
//!   is the next one in the core's reply-matching queue either way;
//! - the flush delay: with nothing awaited, the core makes the request due
//!   at once, as it would on the I/O thread (a lone caller is never held;
//!   two or more callers find requests in flight and stage as before, where
//!   they coalesce);
//! - request deadlines: the I/O thread never sleeps longer than the request
//!   timeout while a connection may take a direct write (see
//!   [`Driver::wake_within`](crate::engine::driver::Driver::wake_within)),
//!   so it sees the new deadline in time;
//! - TLS: plain TCP only (the I/O thread's verdict [`Io::idle`] is false
//!   for a TLS session, whose records rustls writes);
//! - a write that does not take every byte (a full socket) or fails leaves
//!   the rest in the core and wakes the I/O thread, which carries on as
//!   with any write of its own;
//! - no allocation: the command is encoded into the (empty) staging buffer,
//!   which is swapped with the core's empty output buffer.
//!
//! Never on an I/O thread (a callback there may run while that thread
//! holds the `io` lock of this very connection).

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::conn::Request;
use crate::engine::pending::Completion;
use crate::engine::runtime;
use crate::engine::shared::{ConnShared, Counters, Io};
use crate::error::Error;

/// What a submission that was not written directly gives back.
type Back<F> = (F, Request<Completion>);
/// A submission's outcome: a refused one gives its request back.
type Submitted = Result<(), (Request<Completion>, Error)>;

impl ConnShared {
    /// Writes the request to the socket on this thread when the connection
    /// is idle. `Ok` with the submission's outcome when it was taken here;
    /// `Err` gives the encoder and the request back for staging.
    pub(crate) fn submit_direct<F>(
        &self,
        encode: F,
        request: Request<Completion>,
    ) -> Result<Submitted, Back<F>>
    where
        F: FnOnce(&mut Vec<u8>),
    {
        if !self.idle_hint.load(Ordering::Acquire) || runtime::on_io_thread() {
            return Err((encode, request));
        }
        // Held by the I/O thread: it is in a turn on this connection and
        // will take a staged request before it sleeps, without a wake.
        let Some(mut guard) = self.io.try_lock() else {
            return Err((encode, request));
        };
        let io: &mut Io = &mut guard;
        let (true, Some(core), Some(socket)) = (io.idle, &mut io.core, &mut io.socket) else {
            return Err((encode, request));
        };
        let mut staging = self.staging.lock();
        let quiet = staging.buf.is_empty()
            && staging.requests.is_empty()
            && !self.wake_pending.load(Ordering::Acquire)
            && core.is_ready()
            && !core.is_closed()
            && core.pending_len() == 0
            && core.unsent_len() == 0;
        if !quiet || self.check_state().is_err() {
            // A state error is the staging path's to report.
            return Err((encode, request));
        }
        // Not idle any more: this request awaits its reply.
        self.idle_hint.store(false, Ordering::Release);
        let now = Instant::now();
        encode(&mut staging.buf);
        core.send_encoded_vec(&mut staging.buf, std::iter::once(request), now);
        // Later submitters stage behind this request (the I/O thread takes
        // their commands under the `io` lock, after this write).
        drop(staging);
        let done = socket.write_from(core, now);
        let counters = &self.settings.counters;
        Counters::add(&counters.requests, 1);
        Counters::add(&counters.writes, done.writes);
        Counters::add(&counters.bytes_written, done.bytes);
        if done.blocked {
            Counters::add(&counters.write_would_block, 1);
        }
        let leftover = done.blocked || core.unsent_len() > 0 || core.is_closed();
        io.idle = false;
        drop(guard);
        if leftover {
            // The rest (or the failure) is the I/O thread's.
            self.notify();
        }
        Ok(Ok(()))
    }
}
