//! One TLS session over one non-blocking socket: rustls' sans-IO
//! `ClientConnection` fed from and flushed to the mio `TcpStream`.

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::Instant;

use mio::net::TcpStream;
use rustls::ClientConnection;

use crate::conn::Connection;
use crate::transport::flushed::Flushed;
use crate::transport::tls::config::TlsTarget;

/// A socket with its TLS session. rustls buffers at most 64 KiB of
/// records (its default limit), so the core's backpressure still holds.
pub(crate) struct TlsStream {
    tcp: TcpStream,
    session: ClientConnection,
    /// The TLS failure that ended the last read, for the driver to report.
    error: Option<rustls::Error>,
}

impl TlsStream {
    /// Starts a session on a connecting socket (the ClientHello waits in
    /// rustls until the first write).
    ///
    /// # Errors
    ///
    /// rustls' reason when the configuration cannot start a session.
    pub(crate) fn new(tcp: TcpStream, target: &TlsTarget) -> Result<TlsStream, String> {
        let session = ClientConnection::new(Arc::clone(&target.config), target.name.clone())
            .map_err(|e| e.to_string())?;
        Ok(TlsStream {
            tcp,
            session,
            error: None,
        })
    }

    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    pub(crate) fn tcp_mut(&mut self) -> &mut TcpStream {
        &mut self.tcp
    }

    /// TLS output (handshake messages, records, alerts) waits for the socket.
    pub(crate) fn has_output(&self) -> bool {
        self.session.wants_write()
    }

    /// The TLS handshake has not finished.
    pub(crate) fn is_handshaking(&self) -> bool {
        self.session.is_handshaking()
    }

    /// The TLS failure behind the last read error, once.
    pub(crate) fn take_error(&mut self) -> Option<String> {
        self.error.take().map(|e| e.to_string())
    }

    /// Reads records from the socket and decrypts them into the core's
    /// input buffer. `Ok(0)` is the peer's `close_notify`; a TCP close
    /// without it is `UnexpectedEof`; a TLS failure is `InvalidData` with
    /// the reason kept for [`TlsStream::take_error`]; `WouldBlock` once the
    /// socket is drained.
    pub(crate) fn read_into<T>(
        &mut self,
        core: &mut Connection<T>,
        now: Instant,
    ) -> io::Result<usize> {
        let mut source = Decrypting {
            tcp: &mut self.tcp,
            session: &mut self.session,
            error: &mut self.error,
        };
        core.read_from(&mut source, now)
    }

    /// Moves what the core has to send into rustls and the records rustls
    /// has into the socket, until the socket is full, the core has nothing
    /// due, or rustls holds its limit before the handshake ends (the rest
    /// follows once reads complete it).
    pub(crate) fn write_from<T>(&mut self, core: &mut Connection<T>, now: Instant) -> Flushed {
        let mut done = Flushed::default();
        loop {
            while self.session.wants_write() {
                match self.session.write_tls(&mut self.tcp) {
                    Ok(0) => {
                        core.handle_io_error(io::ErrorKind::WriteZero, now);
                        return done;
                    }
                    Ok(n) => {
                        done.writes += 1;
                        done.bytes += n as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        done.blocked = true;
                        return done;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        core.handle_io_error(e.kind(), now);
                        return done;
                    }
                }
            }
            let Some(out) = core.poll_transmit(now) else {
                return done;
            };
            match self.session.writer().write(out) {
                // rustls' buffer is full and nothing can leave yet.
                Ok(0) => return done,
                Ok(n) => core.advance_transmit(n),
                Err(e) => {
                    core.handle_io_error(e.kind(), now);
                    return done;
                }
            }
        }
    }

    /// Says `close_notify` (best effort: one write, never waits).
    pub(crate) fn close(&mut self) {
        self.session.send_close_notify();
        let _ = self.session.write_tls(&mut self.tcp);
    }
}

/// `io::Read` over the TLS session, for [`Connection::read_from`].
struct Decrypting<'a> {
    tcp: &'a mut TcpStream,
    session: &'a mut ClientConnection,
    error: &'a mut Option<rustls::Error>,
}

impl Read for Decrypting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Each turn either hands over plaintext, ends (EOF, error,
        // WouldBlock from the socket), or consumes socket bytes: bounded by
        // what the socket holds.
        loop {
            match self.session.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            // Ok(0) is the TCP close: rustls notes it, and the reader then
            // says whether a close_notify came first.
            self.session.read_tls(self.tcp)?;
            if let Err(e) = self.session.process_new_packets() {
                let io = io::Error::new(io::ErrorKind::InvalidData, e.to_string());
                *self.error = Some(e);
                return Err(io);
            }
        }
    }
}
