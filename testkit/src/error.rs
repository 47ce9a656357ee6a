//! The one error type of testkit.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::ServerKind;

/// What went wrong while starting, driving or stopping test servers.
///
/// Every variant carries enough text to act on: a server that fails to start
/// reports the tail of its log, a timeout says what it waited for.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The server binary for `kind` was not found. Run `cargo xtask install`.
    BinaryNotFound {
        /// Which server.
        kind: ServerKind,
        /// Where it was looked for.
        tried: String,
    },
    /// An I/O operation failed.
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A server process exited or never answered `PING` while starting.
    StartFailed {
        /// Which server.
        kind: ServerKind,
        /// The port it was asked to listen on.
        port: u16,
        /// Why the start was considered failed.
        reason: String,
        /// The tail of the server's log and of its stdout/stderr.
        log: String,
    },
    /// A condition was not reached within its bound.
    Timeout {
        /// What was awaited.
        what: String,
        /// How long it was awaited.
        waited: Duration,
    },
    /// The server sent bytes that are not valid RESP, or closed mid-reply.
    Protocol(String),
    /// The server answered with an error reply (`-ERR …` or a blob error).
    Reply(String),
    /// A reply had an unexpected shape.
    Unexpected {
        /// What was expected.
        expected: String,
        /// What came, printed with `{:?}`.
        got: String,
    },
    /// A cluster operation could not be carried out (bad index, node has slots …).
    Cluster(String),
    /// A [`FakeServer`](crate::FakeServer) script did not play as written.
    Script(Vec<String>),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn unexpected(expected: impl Into<String>, got: impl fmt::Debug) -> Error {
        Error::Unexpected {
            expected: expected.into(),
            got: format!("{got:?}"),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BinaryNotFound { kind, tried } => write!(
                f,
                "{} binary not found (tried {tried}); run `cargo xtask install`",
                kind.name()
            ),
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::StartFailed {
                kind,
                port,
                reason,
                log,
            } => write!(
                f,
                "{} on port {port} failed to start: {reason}\n--- server log (tail) ---\n{log}",
                kind.name()
            ),
            Error::Timeout { what, waited } => {
                write!(f, "timed out after {waited:?} waiting for {what}")
            }
            Error::Protocol(msg) => write!(f, "protocol error: {msg}"),
            Error::Reply(msg) => write!(f, "server replied with an error: {msg}"),
            Error::Unexpected { expected, got } => {
                write!(f, "unexpected reply: expected {expected}, got {got}")
            }
            Error::Cluster(msg) => write!(f, "cluster: {msg}"),
            Error::Script(failures) => {
                write!(f, "fake server script failed: {}", failures.join("; "))
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
