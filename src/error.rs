//! The engine's error type: what failed, where, and what the caller can do.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::addr::ServerAddr;
use crate::conn::ConnError;

/// Everything that can go wrong between a call into the engine and its reply.
///
/// Cheap to clone: when a connection dies, every request pending on it gets
/// a copy of the same error.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub enum Error {
    /// A builder setting is invalid (the text says which and why). Fix the
    /// configuration; retrying will not help.
    Config(Arc<str>),
    /// The OS refused a local resource while starting: a poller, its waker,
    /// or a thread. The configuration is fine and no server was at fault;
    /// building again may succeed once the process has room (fewer
    /// threads or file descriptors in use, a higher limit). Nothing is left
    /// running.
    Runtime {
        /// What could not be created (`"poller"`, `"I/O thread"`…).
        what: &'static str,
        /// The OS error's kind.
        kind: io::ErrorKind,
        /// The OS error's text.
        reason: Arc<str>,
    },
    /// A method was called with an argument it cannot use (a server or
    /// connection index out of range; the text says which). This is a bug in
    /// the calling code, not a setting or a server fault; nothing was sent.
    InvalidArgument(Arc<str>),
    /// An address could not be resolved to a socket address. Check the
    /// `host:port` spelling.
    Resolve {
        /// The address as given.
        addr: Arc<str>,
        /// What the resolver said.
        reason: Arc<str>,
    },
    /// The TCP connection could not be made (refused, unreachable…). Check
    /// that the server runs and listens on this address.
    Connect {
        /// The server.
        addr: ServerAddr,
        /// The socket error's kind.
        kind: io::ErrorKind,
        /// The socket error's text.
        reason: Arc<str>,
    },
    /// TLS with the server failed (the `tls` feature): its certificate is
    /// not trusted or not for the name asked (SNI), it wants a client
    /// certificate that was not given or refuses it, the server does not
    /// speak TLS on this port, or a record did not decrypt. The reason is
    /// rustls'. Fix the TLS settings (`TlsConfig`) or
    /// the server's; retrying will not help.
    Tls {
        /// The server.
        addr: ServerAddr,
        /// What rustls (or the server's alert) said.
        reason: Arc<str>,
    },
    /// Connecting (TCP and handshake) took longer than the connect timeout.
    ConnectTimeout {
        /// The server.
        addr: ServerAddr,
        /// The timeout.
        after: Duration,
    },
    /// The server refused the credentials (`AUTH` / `HELLO … AUTH`). Check
    /// the user name and password; retrying will not help.
    Auth {
        /// The server.
        addr: ServerAddr,
        /// The server's error text.
        message: Arc<str>,
    },
    /// The server refused a handshake step other than authentication (for
    /// example `CLIENT SETNAME`).
    Handshake {
        /// The server.
        addr: ServerAddr,
        /// The server's error text.
        message: Arc<str>,
    },
    /// The server is not a primary where one was needed: a master a
    /// Sentinel named, which `ROLE` says is a replica (a Sentinel's answer
    /// can be stale during a failover). The Sentinels are asked again at
    /// the connection's next attempt.
    NotPrimary {
        /// The server.
        addr: ServerAddr,
        /// What `ROLE` says it is (`slave`, `sentinel`, …).
        role: Arc<str>,
    },
    /// The server answered with an error reply (`-ERR …`, `-WRONGTYPE …`).
    /// The connection is fine; the command was wrong for the server.
    Reply {
        /// The server.
        addr: ServerAddr,
        /// The error text, code first.
        message: Arc<str>,
    },
    /// The reply had a type the call cannot use (for example a `PUBLISH`
    /// reply that is not an integer).
    UnexpectedReply {
        /// The server.
        addr: ServerAddr,
        /// What was expected.
        expected: &'static str,
    },
    /// No reply arrived within the request timeout. The connection is then
    /// restarted (replies are matched in order, so it cannot be trusted);
    /// the command may or may not have run.
    Timeout {
        /// The server.
        addr: ServerAddr,
        /// The request timeout.
        after: Duration,
    },
    /// The server sent bytes that are not valid RESP; the connection was
    /// closed and is being re-established. The command may or may not have run.
    Protocol {
        /// The server.
        addr: ServerAddr,
        /// What the parser found.
        error: resp::ParseError,
    },
    /// The connection broke before the reply arrived; it is being
    /// re-established. The command may or may not have run. A cluster
    /// publish written on a connection this side then closed (a topology
    /// change retired its node, or a shutdown's wait for replies ran out)
    /// gets it too, with reason [`ConnError::Aborted`]: it may have run,
    /// and nothing reconnects.
    ///
    /// A publish that fails with it is not sent again, in any placement
    /// (a publish hold included): it may have been delivered, and a copy
    /// would reach subscribers as a new message. Publish it again only if
    /// a duplicate is acceptable, or on a recoverable channel after reading
    /// its history ([`PubSub::history`](crate::PubSub::history)) to see
    /// whether it was applied.
    ConnectionLost {
        /// The server.
        addr: ServerAddr,
        /// How it broke.
        reason: ConnError,
    },
    /// The connection to this server is down and reconnecting; nothing was
    /// sent. Retry later.
    NotConnected {
        /// The server.
        addr: ServerAddr,
    },
    /// The connection's send buffer stayed full (the server is not keeping
    /// up with the submitters) for as long as a request may wait; nothing
    /// was sent. Slow down or add servers / connections.
    Backpressure {
        /// The server.
        addr: ServerAddr,
        /// How long the call waited for room.
        waited: Duration,
    },
    /// The engine has been shut down; nothing was sent. (A request other
    /// than a cluster publish that was already written when a shutdown's
    /// wait for replies ran out gets it too, though it may have run; a
    /// cluster publish gets [`Error::ConnectionLost`] then.)
    Shutdown,
    /// The I/O thread serving this connection stopped because it panicked
    /// (logged, and counted in `thread_panics`). Its connections are
    /// closed for good; build a new instance (on a new
    /// [`Runtime`](crate::Runtime) if it shared one) to recover.
    RuntimeStopped,
    /// The cluster could not serve a slot within the redirect and retry
    /// bounds (too many `MOVED`/`ASK`, `TRYAGAIN`/`CLUSTERDOWN` past the
    /// retry window, or no known owner). The topology is being refreshed;
    /// retry later.
    Cluster {
        /// The hash slot.
        slot: u16,
        /// What happened, with the last server error if any.
        reason: Arc<str>,
    },
    /// The server refused to subscribe this channel (an ACL denial, say:
    /// `NOPERM …`), or closed the connection each time it was subscribed
    /// alone (see [`Event::Refused`](crate::pubsub::Event::Refused)). The
    /// other channels of the same command were subscribed on their own;
    /// this one stays refused until it is subscribed again.
    SubscribeRefused {
        /// The channel.
        channel: Arc<[u8]>,
        /// The server's error text.
        message: Arc<str>,
    },
    /// A cluster publish was held because its slot's owner could not be
    /// reached (connection down, the primary killed, no owner known), and
    /// no reachable owner appeared within
    /// [`PubSubBuilder::publish_hold`](crate::PubSubBuilder::publish_hold).
    /// Nothing was delivered by this library after the hold (a publish whose
    /// connection broke may have run before it was held). Retry later, or
    /// raise the hold above the cluster's failover time.
    OwnerUnreachable {
        /// The hash slot.
        slot: u16,
        /// How long it was held.
        held: Duration,
    },
    /// A cluster publish to a slot whose owner is unreachable could not be
    /// held: the hold already had its most messages or bytes
    /// ([`PubSubBuilder::publish_hold_limit`](crate::PubSubBuilder::publish_hold_limit)).
    /// Nothing was sent. Slow down while the cluster fails over, or raise
    /// the limit.
    HoldFull {
        /// The hash slot.
        slot: u16,
        /// The message limit.
        messages: usize,
        /// The byte limit.
        bytes: usize,
    },
    /// [`Pending::wait_timeout`](crate::Pending::wait_timeout) gave up; the
    /// request itself is still in flight and will complete or fail on its own.
    WaitTimeout {
        /// How long the wait was.
        after: Duration,
    },
    /// [`PubSub::wait_active`](crate::PubSub::wait_active) gave up while
    /// some servers could not be reached: each is named (`host:port`) with
    /// why its last connection ended or failed to open. The instance keeps
    /// trying; the channels are subscribed once their server answers.
    Unreachable {
        /// How long the wait was.
        after: Duration,
        /// The servers not connected now, each with its last error.
        servers: Arc<[(Arc<str>, Arc<str>)]>,
    },
    /// A cluster `build` got no usable slot map within
    /// [`PubSubBuilder::discovery_timeout`](crate::PubSubBuilder::discovery_timeout):
    /// each seed asked is named with why it failed (none when every
    /// answer was a map without owners). Nothing is left running.
    Discovery {
        /// The bound.
        after: Duration,
        /// The seeds (and nodes) that failed, each with its last error.
        seeds: Arc<[(Arc<str>, Arc<str>)]>,
    },
    /// An input too large for the servers: a message, or a channel name
    /// or pattern (its subscribe reply carries it), that the subscribers'
    /// output buffer could not hold (the server would disconnect the
    /// subscriber, and every channel it carries), or an argument longer
    /// than the server reads (it would close the connection). Nothing was
    /// sent. Split the payload, shorten the name, or raise the server's
    /// limit (and
    /// [`PubSubBuilder::max_message_size`](crate::PubSubBuilder::max_message_size)).
    TooLarge {
        /// What was too large, in words (`a message (channel, payload
        /// and frame)`, `a channel name's subscribe reply (name and
        /// frame)`, `a pattern's …`, `a command argument`).
        what: &'static str,
        /// Its size in bytes: a message's or a subscribe reply's at a
        /// subscriber, or the argument's.
        size: usize,
        /// The most allowed.
        limit: usize,
        /// What sets the limit, in words.
        source: Arc<str>,
    },
    /// A channel's history keys hold something the history scripts did not
    /// write (another program uses the key names, or they were edited by
    /// hand): the text says what. Rename the channel's prefix or delete the
    /// keys; retrying will not help.
    History(Arc<str>),
}

impl Error {
    /// The error for a local resource the OS refused.
    pub(crate) fn runtime(what: &'static str, e: &io::Error) -> Self {
        Error::Runtime {
            what,
            kind: e.kind(),
            reason: e.to_string().into(),
        }
    }

    /// The error for a request that was pending on a connection that ended.
    pub(crate) fn from_conn(addr: ServerAddr, error: ConnError, connect_timeout: Duration) -> Self {
        match error {
            ConnError::Protocol(error) => Error::Protocol { addr, error },
            ConnError::Timeout(after) => Error::Timeout { addr, after },
            ConnError::HandshakeTimeout(_) => Error::ConnectTimeout {
                addr,
                after: connect_timeout,
            },
            ConnError::Auth(message) => Error::Auth { addr, message },
            ConnError::Handshake(message) => Error::Handshake { addr, message },
            ConnError::NotPrimary(role) => Error::NotPrimary { addr, role },
            ConnError::Aborted => Error::Shutdown,
            reason => Error::ConnectionLost { addr, reason },
        }
    }

    /// True when the same call may succeed later: the failure was the
    /// connection's, not the command's. Whether a retry may then run the
    /// request twice (a publish delivered twice) is
    /// [`Error::may_have_run`]'s answer.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Connect { .. }
                | Error::ConnectTimeout { .. }
                | Error::Timeout { .. }
                | Error::Protocol { .. }
                | Error::ConnectionLost { .. }
                | Error::NotConnected { .. }
                | Error::Backpressure { .. }
                | Error::OwnerUnreachable { .. }
                | Error::HoldFull { .. }
                | Error::WaitTimeout { .. }
                | Error::Unreachable { .. }
                | Error::Discovery { .. }
                | Error::NotPrimary { .. }
        )
    }

    /// True when the request may have run on the server though it failed
    /// (`Timeout`, `ConnectionLost`, `Protocol`: written, and no reply
    /// read). The library never sends such a request again; a caller that
    /// does may deliver a publish twice (see the guide's "Publishing").
    ///
    /// ```
    /// use shardsub::Error;
    /// assert!(!Error::Shutdown.may_have_run());
    /// ```
    pub fn may_have_run(&self) -> bool {
        matches!(
            self,
            Error::Timeout { .. } | Error::ConnectionLost { .. } | Error::Protocol { .. }
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(what) => write!(f, "invalid configuration: {what}"),
            Error::Runtime { what, reason, .. } => write!(
                f,
                "cannot create the {what}: {reason} (a local resource limit; \
                 the configuration is fine, building again may succeed)"
            ),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::Resolve { addr, reason } => {
                write!(f, "cannot resolve server address {addr:?}: {reason}")
            }
            Error::Connect { addr, reason, .. } => write!(
                f,
                "cannot connect to {addr}: {reason} (is the server running and listening there?)"
            ),
            Error::Tls { addr, reason } => write!(
                f,
                "TLS with {addr} failed: {reason} (check the CA roots, the server name \
                 and the client certificate, and that the port speaks TLS)"
            ),
            Error::ConnectTimeout { addr, after } => {
                write!(f, "connecting to {addr} took longer than {after:?}")
            }
            Error::Auth { addr, message } => write!(
                f,
                "{addr} refused the credentials: {message} (check username and password)"
            ),
            Error::Handshake { addr, message } => {
                write!(f, "{addr} refused the connection handshake: {message}")
            }
            Error::NotPrimary { addr, role } => write!(
                f,
                "{addr} is not a primary (ROLE says {role}), though a Sentinel named it \
                 the master; the Sentinels are asked again"
            ),
            Error::Reply { addr, message } => write!(f, "{addr} replied with an error: {message}"),
            Error::UnexpectedReply { addr, expected } => {
                write!(f, "{addr} sent a reply that is not {expected}")
            }
            Error::Timeout { addr, after } => write!(
                f,
                "no reply from {addr} within {after:?}; the connection is being restarted \
                 and the command may or may not have run"
            ),
            Error::Protocol { addr, error } => write!(
                f,
                "{addr} sent invalid RESP ({error}); the connection is being restarted"
            ),
            Error::ConnectionLost {
                addr,
                reason: ConnError::Aborted,
            } => write!(
                f,
                "connection to {addr} closed by this client before the reply; \
                 the command may or may not have run"
            ),
            Error::ConnectionLost { addr, reason } => write!(
                f,
                "connection to {addr} lost before the reply ({reason}); reconnecting, \
                 the command may or may not have run"
            ),
            Error::NotConnected { addr } => {
                write!(
                    f,
                    "not connected to {addr} (reconnecting); nothing was sent, retry later"
                )
            }
            Error::Backpressure { addr, waited } => write!(
                f,
                "the send buffer for {addr} stayed full for {waited:?} (the server is not \
                 keeping up); nothing was sent"
            ),
            Error::Cluster { slot, reason } => {
                write!(f, "the cluster could not serve slot {slot}: {reason}")
            }
            Error::SubscribeRefused { channel, message } => write!(
                f,
                "the server refused the subscription to {:?}: {message}",
                String::from_utf8_lossy(channel)
            ),
            Error::OwnerUnreachable { slot, held } => write!(
                f,
                "the owner of slot {slot} was unreachable for the whole publish hold \
                 ({held:?}); the publish was not sent"
            ),
            Error::HoldFull {
                slot,
                messages,
                bytes,
            } => write!(
                f,
                "slot {slot}'s owner is unreachable and the publish hold is full \
                 ({messages} messages or {bytes} bytes); the publish was not sent"
            ),
            Error::Shutdown => f.write_str("the engine has been shut down"),
            Error::RuntimeStopped => f.write_str(
                "the I/O thread serving this connection panicked and stopped \
                 (see thread_panics and the log); build a new instance",
            ),
            Error::History(what) => write!(f, "unreadable channel history: {what}"),
            Error::WaitTimeout { after } => write!(
                f,
                "gave up waiting after {after:?}; the request is still in flight"
            ),
            Error::TooLarge {
                what,
                size,
                limit,
                source,
            } => write!(
                f,
                "{what} of {size} bytes is over the {limit} allowed by {source}; nothing \
                 was sent (make it smaller, or raise the limit and \
                 PubSubBuilder::max_message_size)"
            ),
            Error::Discovery { after, seeds } => discovery(f, *after, seeds),
            Error::Unreachable { after, servers } => unreachable(f, *after, servers),
        }
    }
}

/// [`Error::Discovery`]'s message: each seed with why it gave no map.
fn discovery(
    f: &mut fmt::Formatter<'_>,
    after: Duration,
    seeds: &[(Arc<str>, Arc<str>)],
) -> fmt::Result {
    write!(f, "no seed gave a usable slot map within {after:?}")?;
    match seeds.is_empty() {
        true => f.write_str(" (the seeds answered, but no slot had an owner)")?,
        false => {
            f.write_str(": ")?;
            reasons(f, seeds)?;
        }
    }
    f.write_str("; check the seeds, or raise discovery_timeout")
}

/// [`Error::Unreachable`]'s message: each server with why it is down.
fn unreachable(
    f: &mut fmt::Formatter<'_>,
    after: Duration,
    servers: &[(Arc<str>, Arc<str>)],
) -> fmt::Result {
    write!(f, "gave up waiting after {after:?}: cannot reach ")?;
    reasons(f, servers)?;
    f.write_str(" (still trying)")
}

/// `name (why)` for each pair, separated by `; `.
fn reasons(f: &mut fmt::Formatter<'_>, pairs: &[(Arc<str>, Arc<str>)]) -> fmt::Result {
    for (i, (name, why)) in pairs.iter().enumerate() {
        let sep = if i == 0 { "" } else { "; " };
        write!(f, "{sep}{name} ({why})")?;
    }
    Ok(())
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layered_errors_say_what_failed_and_what_to_do() {
        let config = Error::Config("io_threads must be at least 1".into());
        assert_eq!(
            config.to_string(),
            "invalid configuration: io_threads must be at least 1"
        );
        let os = io::Error::new(
            io::ErrorKind::WouldBlock,
            "Resource temporarily unavailable",
        );
        let runtime = Error::runtime("I/O thread", &os);
        assert!(
            matches!(
                runtime,
                Error::Runtime {
                    what: "I/O thread",
                    kind: io::ErrorKind::WouldBlock,
                    ..
                }
            ),
            "{runtime:?}"
        );
        assert_eq!(
            runtime.to_string(),
            "cannot create the I/O thread: Resource temporarily unavailable (a local \
             resource limit; the configuration is fine, building again may succeed)"
        );
        let misuse = Error::InvalidArgument("server index 3 out of range (2 servers)".into());
        assert_eq!(
            misuse.to_string(),
            "invalid argument: server index 3 out of range (2 servers)"
        );
        let tls = Error::Tls {
            addr: "127.0.0.1:6380".parse().unwrap(),
            reason: "invalid peer certificate: UnknownIssuer".into(),
        };
        assert_eq!(
            tls.to_string(),
            "TLS with 127.0.0.1:6380 failed: invalid peer certificate: UnknownIssuer \
             (check the CA roots, the server name and the client certificate, and that \
             the port speaks TLS)"
        );
        for e in [config, runtime, misuse, tls] {
            assert!(!e.is_transient(), "{e:?} is not a connection's failure");
        }
    }
}
