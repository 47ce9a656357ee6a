//! What an engine's connection runs over: a plain TCP socket, a Unix
//! socket or, with the `tls` feature, a TLS session on TCP ([`tls`]). The
//! plain paths read straight into the core's buffer and write straight
//! from it.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};

use crate::addr::ServerAddr;

use crate::conn::Connection;

mod flushed;
pub(crate) mod tls;

pub(crate) use flushed::Flushed;
use tls::TlsTarget;

pub(crate) enum Transport {
    Plain(TcpStream),
    Unix(UnixStream),
    #[cfg(feature = "tls")]
    Tls(Box<tls::TlsStream>),
}

/// Why a connection could not start.
pub(crate) enum StartError {
    /// The socket could not be made (the OS's reason).
    Io(io::Error),
    /// A TLS session could not start (rustls' reason).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Tls(String),
}

impl Transport {
    /// Starts connecting to `addr` (non-blocking), in TLS when `tls` is
    /// given. TLS over a Unix socket is refused when the engine is built,
    /// so it never comes here.
    ///
    /// # Errors
    ///
    /// The socket's error, or rustls' reason when a session cannot start.
    pub(crate) fn connect(
        addr: ServerAddr,
        tls: Option<&TlsTarget>,
    ) -> Result<Transport, StartError> {
        let socket = match addr {
            ServerAddr::Tcp(a) => TcpStream::connect(a).map_err(StartError::Io)?,
            ServerAddr::Unix(p) => {
                return UnixStream::connect(p)
                    .map(Transport::Unix)
                    .map_err(StartError::Io)
            }
        };
        match tls {
            None => Ok(Transport::Plain(socket)),
            #[cfg(feature = "tls")]
            Some(t) => Ok(Transport::Tls(Box::new(
                tls::TlsStream::new(socket, t).map_err(StartError::Tls)?,
            ))),
            #[cfg(not(feature = "tls"))]
            Some(t) => match *t {},
        }
    }

    /// No TLS session: the bytes go to the socket as they are.
    pub(crate) fn is_plain(&self) -> bool {
        matches!(self, Transport::Plain(_) | Transport::Unix(_))
    }

    /// The socket, for its registration with the I/O thread's poll.
    pub(crate) fn source_mut(&mut self) -> &mut dyn Source {
        match self {
            Transport::Plain(s) => s,
            Transport::Unix(s) => s,
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.tcp_mut(),
        }
    }

    /// The socket's descriptor.
    pub(crate) fn raw_fd(&self) -> RawFd {
        match self {
            Transport::Plain(s) => s.as_raw_fd(),
            Transport::Unix(s) => s.as_raw_fd(),
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.tcp().as_raw_fd(),
        }
    }

    /// Whether a connect under way has finished: `Ok(true)` once
    /// connected (TCP with `TCP_NODELAY`), `Ok(false)` while it is still
    /// under way.
    ///
    /// # Errors
    ///
    /// Why the connect failed.
    pub(crate) fn finish_connect(&self) -> io::Result<bool> {
        let (error, peer) = match self {
            Transport::Unix(s) => (s.take_error(), s.peer_addr().map(drop)),
            Transport::Plain(_) => self.tcp_state(),
            #[cfg(feature = "tls")]
            Transport::Tls(_) => self.tcp_state(),
        };
        if let Ok(Some(e)) | Err(e) = error {
            return Err(e);
        }
        match peer {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A TCP socket's pending error and whether it has a peer; once it has
    /// one, `TCP_NODELAY` is set on it.
    fn tcp_state(&self) -> (io::Result<Option<io::Error>>, io::Result<()>) {
        let tcp = match self {
            Transport::Plain(s) => s,
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.tcp(),
            Transport::Unix(_) => return (Ok(None), Ok(())),
        };
        let peer = tcp.peer_addr().map(drop);
        if peer.is_ok() {
            if let Err(e) = tcp.set_nodelay(true) {
                log::warn!("TCP_NODELAY: {e}");
            }
        }
        (tcp.take_error(), peer)
    }

    /// Whether the last read left the socket's receive queue empty: a short
    /// read on a plain socket (epoll's edge fires again for anything that
    /// arrives after it). TLS may hold decrypted bytes back, so it never
    /// says so.
    pub(crate) fn drained<T>(&self, core: &Connection<T>) -> bool {
        self.is_plain() && core.last_read_was_short()
    }

    /// One read into the core's input buffer.
    pub(crate) fn read_into<T>(
        &mut self,
        core: &mut Connection<T>,
        now: Instant,
    ) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => core.read_from(s, now),
            Transport::Unix(s) => core.read_from(s, now),
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.read_into(core, now),
        }
    }

    /// Writes what the core has due until the socket is full.
    pub(crate) fn write_from<T>(&mut self, core: &mut Connection<T>, now: Instant) -> Flushed {
        match self {
            Transport::Plain(s) => write_plain(s, core, now),
            Transport::Unix(s) => write_plain(s, core, now),
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.write_from(core, now),
        }
    }

    /// The reason of a TLS failure behind the last read error (always
    /// `None` on plain TCP).
    pub(crate) fn take_tls_error(&mut self) -> Option<String> {
        match self {
            Transport::Plain(_) | Transport::Unix(_) => None,
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.take_error(),
        }
    }

    /// Output that is not the core's waits for the socket (TLS handshake
    /// messages and records; never on plain TCP).
    pub(crate) fn has_output(&self) -> bool {
        match self {
            Transport::Plain(_) | Transport::Unix(_) => false,
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.has_output(),
        }
    }

    /// A TLS handshake is still under way (never on plain TCP).
    pub(crate) fn is_handshaking(&self) -> bool {
        match self {
            Transport::Plain(_) | Transport::Unix(_) => false,
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.is_handshaking(),
        }
    }

    /// Ends the session politely where there is one (TLS `close_notify`).
    pub(crate) fn close(&mut self) {
        match self {
            Transport::Plain(_) | Transport::Unix(_) => {}
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.close(),
        }
    }
}

/// A plain socket: the core's output buffer goes to it as it is.
fn write_plain<T>(socket: &mut impl Write, core: &mut Connection<T>, now: Instant) -> Flushed {
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
