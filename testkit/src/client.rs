//! A small blocking RESP client: enough to drive a server from a test.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use resp::{Decoder, Limits, Status};

use crate::{Error, Value};

/// How long [`Client::connect`] waits for the TCP handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a read or write may block before the call fails.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A blocking connection to one server.
///
/// It speaks whatever protocol the connection is in: after `HELLO 3` replies
/// are RESP3, and [`Client::read_value`] also returns pushes.
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    addr: SocketAddr,
    input: Vec<u8>,
    output: Vec<u8>,
    decoder: Decoder,
}

impl Client {
    /// Connects with [`CONNECT_TIMEOUT`]; reads and writes time out after [`IO_TIMEOUT`].
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the connection cannot be made.
    pub fn connect(addr: SocketAddr) -> Result<Client, Error> {
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .map_err(|e| Error::io(format!("connect to {addr}"), e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| Error::io("set TCP_NODELAY", e))?;
        let mut client = Client {
            stream,
            addr,
            input: Vec::with_capacity(4096),
            output: Vec::with_capacity(256),
            decoder: Decoder::new(Limits::default()),
        };
        client.set_timeout(IO_TIMEOUT)?;
        Ok(client)
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The socket, for tests that want to shut it down or inspect it.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Sets the read and write timeout.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the socket refuses the option (a zero duration does).
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), Error> {
        self.stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| self.stream.set_write_timeout(Some(timeout)))
            .map_err(|e| Error::io("set socket timeout", e))
    }

    /// Sends one command without waiting for its reply (for pipelining or
    /// subscribing).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the write fails.
    pub fn send(&mut self, args: &[&[u8]]) -> Result<(), Error> {
        self.output.clear();
        resp::encode_command(&mut self.output, args.iter());
        self.stream
            .write_all(&self.output)
            .map_err(|e| Error::io(format!("write to {}", self.addr), e))
    }

    /// Sends raw bytes as they are.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the write fails.
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.stream
            .write_all(bytes)
            .map_err(|e| Error::io(format!("write to {}", self.addr), e))
    }

    /// Reads the next value (a reply or a push), error replies included as values.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] on a read error or timeout, [`Error::Protocol`] on invalid
    /// bytes or when the server closes the connection.
    pub fn read_value(&mut self) -> Result<Value, Error> {
        loop {
            match self.decoder.decode(&self.input) {
                Ok(Status::Complete(parsed)) => {
                    let (value, consumed) = (parsed.to_value(), parsed.consumed);
                    self.input.drain(..consumed);
                    return Ok(value);
                }
                Ok(Status::Incomplete) => {}
                Err(e) => {
                    self.decoder.reset();
                    self.input.clear();
                    return Err(Error::Protocol(format!("from {}: {e}", self.addr)));
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self
                .stream
                .read(&mut chunk)
                .map_err(|e| Error::io(format!("read from {}", self.addr), e))?;
            if n == 0 {
                return Err(Error::Protocol(format!(
                    "{} closed the connection ({} unparsed bytes)",
                    self.addr,
                    self.input.len()
                )));
            }
            self.input.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends a command and reads its reply.
    ///
    /// # Errors
    ///
    /// As [`Client::send`] and [`Client::read_value`]; an error reply becomes
    /// [`Error::Reply`].
    pub fn cmd(&mut self, args: &[&[u8]]) -> Result<Value, Error> {
        self.send(args)?;
        into_result(self.read_value()?)
    }
}

/// Turns a top-level error reply into [`Error::Reply`].
pub(crate) fn into_result(value: Value) -> Result<Value, Error> {
    match value {
        Value::Error(msg) | Value::BlobError(msg) => {
            Err(Error::Reply(String::from_utf8_lossy(&msg).into_owned()))
        }
        other => Ok(other),
    }
}
