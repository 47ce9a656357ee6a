//! What an engine's connection runs over: a plain TCP socket or, with the
//! `tls` feature, a TLS session on one ([`tls`]). The plain path reads
//! straight into the core's buffer and writes straight from it.

use std::io::{self, Write};
use std::time::Instant;

use mio::net::TcpStream;

use crate::conn::Connection;
pub(crate) mod tls;

use tls::TlsTarget;

/// What one write turn did.
#[derive(Debug, Default)]
pub(crate) struct Flushed {
    /// Socket writes that took bytes.
    pub(crate) writes: u64,
    /// Bytes the socket took (TLS records, with TLS).
    pub(crate) bytes: u64,
    /// The socket is full: wait for WRITABLE.
    pub(crate) blocked: bool,
}

pub(crate) enum Transport {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<tls::TlsStream>),
}

impl Transport {
    /// Wraps a connecting socket, in TLS when `tls` is given.
    ///
    /// # Errors
    ///
    /// rustls' reason when a session cannot start.
    pub(crate) fn new(socket: TcpStream, tls: Option<&TlsTarget>) -> Result<Transport, String> {
        match tls {
            None => Ok(Transport::Plain(socket)),
            #[cfg(feature = "tls")]
            Some(t) => Ok(Transport::Tls(Box::new(tls::TlsStream::new(socket, t)?))),
            #[cfg(not(feature = "tls"))]
            Some(t) => match *t {},
        }
    }

    /// Plain TCP (no TLS session).
    pub(crate) fn is_plain(&self) -> bool {
        matches!(self, Transport::Plain(_))
    }

    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.tcp(),
        }
    }

    pub(crate) fn tcp_mut(&mut self) -> &mut TcpStream {
        match self {
            Transport::Plain(s) => s,
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.tcp_mut(),
        }
    }

    /// Whether the last read left the socket's receive queue empty: a short
    /// read on plain TCP (epoll's edge fires again for anything that
    /// arrives after it). TLS may hold decrypted bytes back, so it never
    /// says so.
    pub(crate) fn drained<T>(&self, core: &Connection<T>) -> bool {
        matches!(self, Transport::Plain(_)) && core.last_read_was_short()
    }

    /// One read into the core's input buffer.
    pub(crate) fn read_into<T>(
        &mut self,
        core: &mut Connection<T>,
        now: Instant,
    ) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => core.read_from(s, now),
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.read_into(core, now),
        }
    }

    /// Writes what the core has due until the socket is full.
    pub(crate) fn write_from<T>(&mut self, core: &mut Connection<T>, now: Instant) -> Flushed {
        match self {
            Transport::Plain(s) => write_plain(s, core, now),
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.write_from(core, now),
        }
    }

    /// The reason of a TLS failure behind the last read error (always
    /// `None` on plain TCP).
    pub(crate) fn take_tls_error(&mut self) -> Option<String> {
        match self {
            Transport::Plain(_) => None,
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.take_error(),
        }
    }

    /// Output that is not the core's waits for the socket (TLS handshake
    /// messages and records; never on plain TCP).
    pub(crate) fn has_output(&self) -> bool {
        match self {
            Transport::Plain(_) => false,
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.has_output(),
        }
    }

    /// A TLS handshake is still under way (never on plain TCP).
    pub(crate) fn is_handshaking(&self) -> bool {
        match self {
            Transport::Plain(_) => false,
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.is_handshaking(),
        }
    }

    /// Ends the session politely where there is one (TLS `close_notify`).
    pub(crate) fn close(&mut self) {
        match self {
            Transport::Plain(_) => {}
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.close(),
        }
    }
}

/// Plain TCP: the core's output buffer goes to the socket as it is.
fn write_plain<T>(socket: &mut TcpStream, core: &mut Connection<T>, now: Instant) -> Flushed {
    let mut done = Flushed::default();
    while let Some(out) = core.poll_transmit(now) {
        match socket.write(out) {
            Ok(0) => {
                core.handle_io_error(io::ErrorKind::WriteZero, now);
                break;
            }
            Ok(n) => {
                done.writes += 1;
                done.bytes += n as u64;
                core.advance_transmit(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                done.blocked = true;
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                core.handle_io_error(e.kind(), now);
                break;
            }
        }
    }
    done
}
