//! The connection's vocabulary: its settings, the requests it is handed,
//! the events it gives back and why it ends. The state machine in
//! `mod.rs` and the handshake both speak it; it names neither.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use resp::{Limits, Parsed};

/// The protocol spoken on a connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// RESP2: no pushes, no attributes; Pub/Sub messages arrive as arrays.
    Resp2,
    /// RESP3 (negotiated with `HELLO 3`).
    Resp3,
}

/// What a connection is used for; it decides how RESP2 arrays are read.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Ordinary commands: in RESP2 every frame is a reply.
    Command,
    /// Pub/Sub: in RESP2, arrays shaped like `message`, `smessage`,
    /// `unsubscribe`… are pushes, as they would be in RESP3.
    Subscribe,
}

/// Which subscribe command a [`ReplyKind::Subscribe`] request is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SubscribeKind {
    /// `SUBSCRIBE`.
    Channel,
    /// `PSUBSCRIBE`.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    Pattern,
    /// `SSUBSCRIBE`.
    Shard,
}

/// How a request's reply arrives.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    /// One reply frame (or one error).
    Single,
    /// A subscribe command: `confirmations` confirmation frames (one per
    /// channel or pattern) of the matching kind, or one error.
    Subscribe {
        /// Which subscribe command.
        kind: SubscribeKind,
        /// Confirmations still expected (at least 1).
        confirmations: u32,
    },
    /// `(S|P)UNSUBSCRIBE` followed by a `PING`, sent as one request: its
    /// confirmations are pushes, so the `PING`'s reply finishes it. An
    /// error reply before that one (the unsubscribe refused: `MOVED` for a
    /// slot the node no longer owns, say) is passed over, so the queue
    /// stays in step.
    Unsubscribe,
}

/// A request handed to the core: the caller's token and how its reply comes.
#[derive(Debug)]
pub struct Request<T> {
    /// Given back in the [`Event`] that completes or fails the request.
    pub user: T,
    /// How its reply arrives.
    pub kind: ReplyKind,
}

impl<T> Request<T> {
    /// A request answered by one reply frame.
    pub fn single(user: T) -> Self {
        Request {
            user,
            kind: ReplyKind::Single,
        }
    }
}

/// Settings of one connection.
#[derive(Clone, Debug)]
pub struct ConnConfig {
    /// RESP3 (try `HELLO 3`, fall back to RESP2 when refused) or plain RESP2.
    pub protocol: Protocol,
    /// What the connection carries.
    pub role: Role,
    /// ACL user name for `AUTH` (`default` is assumed when only a password is set).
    pub username: Option<Vec<u8>>,
    /// Password for `AUTH`.
    pub password: Option<Vec<u8>>,
    /// Name set with `SETNAME` / `CLIENT SETNAME`.
    pub client_name: Option<Vec<u8>>,
    /// How long commands submitted while others await replies may be held
    /// back so they leave in one write; zero flushes at once.
    pub flush_delay: Duration,
    /// A held batch leaves at once when it reaches this many bytes: the
    /// flush delay exists to gather small writes, not to slow big ones.
    pub flush_batch_bytes: usize,
    /// The longest a request may wait for its reply (for a subscribe, all
    /// its confirmations), counted from when its bytes were written; zero
    /// disables it. Replies to other requests and pushes do not extend it.
    pub request_timeout: Duration,
    /// The longest the handshake may take.
    pub handshake_timeout: Duration,
    /// Parser limits.
    pub limits: Limits,
    /// Scripts to `SCRIPT LOAD` as the handshake's last step, so that every
    /// `EVALSHA` of them sent on the connection finds them (a server that
    /// restarted, or a new primary, holds none). A refusal is logged, not
    /// fatal: the `EVALSHA` then meets `NOSCRIPT`.
    pub load_scripts: Vec<&'static str>,
    /// Ask `ROLE` as the handshake's last step and fail the connection
    /// with [`ConnError::NotPrimary`] unless the server says `master` (a
    /// server found through Sentinel, whose answer can be stale).
    pub require_primary: bool,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            protocol: Protocol::Resp3,
            role: Role::Command,
            username: None,
            password: None,
            client_name: None,
            flush_delay: Duration::from_micros(100),
            flush_batch_bytes: 16 * 1024,
            request_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(5),
            limits: Limits::default(),
            load_scripts: Vec::new(),
            require_primary: false,
        }
    }
}

/// Why a connection ended. Every request pending on it fails with this.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnError {
    /// The server sent bytes that are not valid RESP.
    Protocol(resp::ParseError),
    /// A reply arrived while no request was waiting for one.
    UnexpectedReply,
    /// A request's reply did not come within the request timeout of its
    /// write.
    Timeout(Duration),
    /// The handshake did not finish in time.
    HandshakeTimeout(Duration),
    /// The server refused the credentials (its error text).
    Auth(Arc<str>),
    /// The server refused a handshake step for another reason (its error text).
    Handshake(Arc<str>),
    /// The server is not a primary, where one was required (what `ROLE`
    /// said it is: `slave`, `sentinel`, …): a Sentinel named a master
    /// that was a replica by then.
    NotPrimary(Arc<str>),
    /// The peer closed the connection.
    Closed,
    /// A socket error of this kind.
    Io(io::ErrorKind),
    /// The caller closed the connection.
    Aborted,
}

impl std::fmt::Display for ConnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnError::Protocol(e) => write!(f, "protocol error from server: {e}"),
            ConnError::UnexpectedReply => f.write_str("server sent a reply nobody asked for"),
            ConnError::Timeout(d) => write!(f, "no reply within the request timeout ({d:?})"),
            ConnError::HandshakeTimeout(d) => write!(f, "handshake not finished within {d:?}"),
            ConnError::Auth(m) => write!(f, "server refused the credentials: {m}"),
            ConnError::Handshake(m) => write!(f, "server refused the handshake: {m}"),
            ConnError::NotPrimary(role) => {
                write!(f, "server is not a primary (ROLE says {role})")
            }
            ConnError::Closed => f.write_str("server closed the connection"),
            ConnError::Io(k) => write!(f, "socket error: {k}"),
            ConnError::Aborted => f.write_str("connection closed by the client"),
        }
    }
}

/// Output of [`Connection::poll_event`]. Frames borrow the input buffer until
/// the next call.
#[derive(Debug)]
pub enum Event<'a, T> {
    /// The handshake finished; requests now flow.
    Connected {
        /// The protocol in use.
        protocol: Protocol,
        /// True when RESP3 was asked for but the server refused `HELLO`.
        fell_back: bool,
    },
    /// The reply to a request (possibly an error reply), with its attributes.
    Reply {
        /// The request's token.
        user: T,
        /// The reply.
        reply: Parsed<'a>,
    },
    /// An out-of-band frame (Pub/Sub message, confirmation, invalidation…).
    Push {
        /// The push.
        push: Parsed<'a>,
        /// What it is as a Pub/Sub frame, when it is one (classified once,
        /// here, so no later stage parses it again).
        class: Option<resp::PubSub<'a>>,
        /// The request this push finished: the last confirmation of a
        /// subscribe request.
        completes: Option<T>,
    },
    /// A request failed because the connection ended.
    Failed {
        /// The request's token.
        user: T,
        /// Why.
        error: ConnError,
        /// Whether its bytes may have reached the server: it was written
        /// whole, or its batch was being written when the connection
        /// ended (its own bytes may be among those written). The server
        /// may have run it. False means none of its bytes were written,
        /// so it cannot have run: sending it again is safe.
        sent: bool,
    },
    /// The connection ended (after every pending request got `Failed`).
    Closed {
        /// Why.
        error: ConnError,
    },
}
