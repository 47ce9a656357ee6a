//! What the servers allow, read once at build: whether a server given as a
//! plain address is a cluster node, the largest message a subscriber can
//! be sent before the server cuts it off (its `client-output-buffer-limit`
//! for Pub/Sub clients), and the longest argument a server reads before it
//! closes the connection (`proto-max-bulk-len`). Every call that would
//! send more is refused here, before anything is sent: a publish, a
//! channel or pattern name (its subscribe reply carries it), a history
//! read and a command's argument.

use std::sync::Arc;

use resp::Value;

use crate::error::Error;

/// Bytes a message's frame adds to its channel and payload at a
/// subscriber (`>3`, `message`, the lengths, the partition tag), rounded
/// up; a subscribe reply's frame around its name is smaller.
const FRAME: usize = 64;

/// The largest message this instance publishes, and what set it.
#[derive(Clone, Debug)]
pub(crate) struct MessageLimit {
    /// Channel, payload and frame together stay at most this.
    pub(crate) bytes: usize,
    /// What set it, in words (a server's setting, or the builder's).
    pub(crate) source: Arc<str>,
}

impl MessageLimit {
    /// The builder's own limit.
    pub(crate) fn set(bytes: usize) -> Option<MessageLimit> {
        (bytes > 0).then(|| MessageLimit {
            bytes,
            source: "PubSubBuilder::max_message_size".into(),
        })
    }

    /// The smaller of two limits.
    pub(crate) fn min(a: Option<MessageLimit>, b: Option<MessageLimit>) -> Option<MessageLimit> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if b.bytes < a.bytes { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// `Err` when `size` bytes of `what` are over the limit.
    fn check(&self, size: usize, what: &'static str) -> Result<(), Error> {
        if size <= self.bytes {
            return Ok(());
        }
        Err(Error::TooLarge {
            what,
            size,
            limit: self.bytes,
            source: self.source.clone(),
        })
    }
}

/// What the servers allow (see the module's doc), one instance's.
#[derive(Clone, Debug, Default)]
pub(crate) struct Limits {
    /// A message at a subscriber, and a name in its subscribe reply:
    /// the builder's, or the smallest the servers set.
    pub(crate) message: Option<MessageLimit>,
    /// One argument of a command: the smallest `proto-max-bulk-len` the
    /// servers set.
    pub(crate) argument: Option<MessageLimit>,
}

impl Limits {
    /// Each limit the smaller of the two.
    pub(crate) fn min(self, other: Limits) -> Limits {
        Limits {
            message: MessageLimit::min(self.message, other.message),
            argument: MessageLimit::min(self.argument, other.argument),
        }
    }

    /// `Err` when a message of `channel` and `payload` is over the
    /// message limit, or either over the argument limit.
    #[inline]
    pub(crate) fn check_message(&self, channel: &[u8], payload: &[u8]) -> Result<(), Error> {
        if let Some(l) = &self.message {
            l.check(
                channel.len() + payload.len() + FRAME,
                "a message (channel, payload and frame)",
            )?;
        }
        self.check_argument(channel)?;
        self.check_argument(payload)
    }

    /// `Err` when a channel name (or a `pattern`) cannot be subscribed:
    /// its subscribe reply (name and frame) is over the message limit, or
    /// the name over the argument limit.
    pub(crate) fn check_name(&self, name: &[u8], pattern: bool) -> Result<(), Error> {
        let what = match pattern {
            true => "a pattern's subscribe reply (pattern and frame)",
            false => "a channel name's subscribe reply (name and frame)",
        };
        if let Some(l) = &self.message {
            l.check(name.len() + FRAME, what)?;
        }
        self.check_argument(name)
    }

    /// `Err` when one of a command's `args` is over the argument limit.
    pub(crate) fn check_arguments(&self, args: &[Vec<u8>]) -> Result<(), Error> {
        args.iter().try_for_each(|a| self.check_argument(a))
    }

    fn check_argument(&self, arg: &[u8]) -> Result<(), Error> {
        match &self.argument {
            Some(l) => l.check(arg.len(), "a command argument"),
            None => Ok(()),
        }
    }
}

/// The value of `CONFIG GET name`'s reply (RESP2 pairs or a RESP3 map).
fn config_value<'a>(v: &'a Value, name: &str) -> Option<&'a [u8]> {
    match v {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| k.as_bytes() == Some(name.as_bytes()))
            .and_then(|(_, v)| v.as_bytes()),
        Value::Array(items) => items
            .chunks(2)
            .find(|p| p.first().and_then(Value::as_bytes) == Some(name.as_bytes()))
            .and_then(|p| p.get(1))
            .and_then(Value::as_bytes),
        Value::Attributed { value, .. } => config_value(value, name),
        _ => None,
    }
}

/// The limits `server`'s configuration sets, from its replies to
/// `CONFIG GET client-output-buffer-limit` and `CONFIG GET
/// proto-max-bulk-len` (`None` where a reply says nothing usable: an error
/// such as an ACL denial, or a limit of 0, which means none). The message
/// limit is the smaller of the two.
pub(crate) fn from_config(server: &str, buffers: Option<&Value>, bulk: Option<&Value>) -> Limits {
    let pubsub_hard = buffers
        .and_then(|v| config_value(v, "client-output-buffer-limit"))
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| {
            let words: Vec<&str> = t.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "pubsub")?;
            words.get(at + 1)?.parse::<usize>().ok()
        })
        .filter(|&n| n > 0)
        .map(|bytes| MessageLimit {
            bytes,
            source: format!(
                "the Pub/Sub client-output-buffer-limit (hard) of {server}: a subscriber \
                 sent more is disconnected"
            )
            .into(),
        });
    let bulk = bulk
        .and_then(|v| config_value(v, "proto-max-bulk-len"))
        .and_then(|t| std::str::from_utf8(t).ok()?.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .map(|bytes| MessageLimit {
            bytes,
            source: format!(
                "proto-max-bulk-len of {server}: a longer argument closes the connection"
            )
            .into(),
        });
    Limits {
        message: MessageLimit::min(pubsub_hard, bulk.clone()),
        argument: bulk,
    }
}

/// `Err` when `INFO cluster`'s reply says `server` is a cluster node.
pub(crate) fn not_a_cluster_node(server: &str, info: &Value) -> Result<(), Error> {
    let on = info.as_bytes().is_some_and(|t| {
        t.split(|&b| b == b'\n')
            .any(|l| l.strip_suffix(b"\r").unwrap_or(l) == b"cluster_enabled:1")
    });
    if !on {
        return Ok(());
    }
    Err(Error::Config(
        format!(
            "{server} is a cluster node (cluster_enabled:1) but was given as a server: \
             give it with PubSubBuilder::seed, or ?cluster=true in its URL, for sharded \
             Pub/Sub over the whole cluster (as a server it would get classic Pub/Sub on \
             one node, and commands on keys it does not own would answer MOVED)"
        )
        .into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::Bulk(s.as_bytes().to_vec())
    }

    #[test]
    fn the_pubsub_hard_limit_and_the_bulk_limit_bound_a_message() {
        let buffers = Value::Array(vec![
            bulk("client-output-buffer-limit"),
            bulk("normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"),
        ]);
        let bulk_len = Value::Map(vec![(bulk("proto-max-bulk-len"), bulk("536870912"))]);
        let l = from_config("s:1", Some(&buffers), Some(&bulk_len));
        let m = l.message.clone().unwrap();
        assert_eq!(m.bytes, 33554432);
        assert!(
            m.source.contains("client-output-buffer-limit"),
            "{}",
            m.source
        );
        assert_eq!(l.argument.as_ref().unwrap().bytes, 536870912);
        assert!(l.check_message(b"c", &[0; 1000]).is_ok());
        let err = l.check_message(b"c", &vec![0; 33554432]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::TooLarge {
                    limit: 33554432,
                    ..
                }
            ),
            "{err:?}"
        );
        // No Pub/Sub limit (0), a refused read: the other one or none.
        let none = Value::Array(vec![
            bulk("client-output-buffer-limit"),
            bulk("normal 0 0 0 pubsub 0 0 0"),
        ]);
        let l = from_config("s:1", Some(&none), Some(&bulk_len));
        assert_eq!(l.message.unwrap().bytes, 536870912);
        let denied = Value::Error(b"NOPERM".to_vec());
        let l = from_config("s:1", Some(&denied), None);
        assert!(l.message.is_none() && l.argument.is_none());
    }

    #[test]
    fn a_name_counts_in_its_subscribe_reply_and_an_argument_alone() {
        let limits = Limits {
            message: MessageLimit::set(1000),
            argument: Some(MessageLimit {
                bytes: 4000,
                source: "proto-max-bulk-len of s:1".into(),
            }),
        };
        let name = vec![b'n'; 1000 - FRAME];
        assert!(limits.check_name(&name, false).is_ok());
        let long = vec![b'n'; 1000 - FRAME + 1];
        let e = limits.check_name(&long, true).unwrap_err();
        assert!(matches!(e, Error::TooLarge { limit: 1000, .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("pattern") && text.contains("max_message_size"),
            "{text}"
        );
        // Arguments: the bulk limit only (a command's reply is not a
        // subscriber's).
        let args = [b"SET".to_vec(), vec![b'v'; 4000]];
        assert!(limits.check_arguments(&args).is_ok());
        let args = [b"SET".to_vec(), vec![b'v'; 4001]];
        let e = limits.check_arguments(&args).unwrap_err().to_string();
        assert!(e.contains("proto-max-bulk-len"), "{e}");
        // With no message limit (turned off), a name still fits the
        // argument limit.
        let off = Limits {
            message: None,
            ..limits
        };
        assert!(off.check_name(&long, false).is_ok());
        assert!(off.check_name(&vec![b'n'; 4001], false).is_err());
    }

    #[test]
    fn a_cluster_node_is_told_from_a_server() {
        let node = bulk("# Cluster\r\ncluster_enabled:1\r\n");
        let plain = bulk("# Cluster\r\ncluster_enabled:0\r\n");
        assert!(not_a_cluster_node("n:1", &plain).is_ok());
        let e = not_a_cluster_node("n:1", &node).unwrap_err().to_string();
        assert!(
            e.contains("n:1 is a cluster node") && e.contains("seed"),
            "{e}"
        );
    }
}
