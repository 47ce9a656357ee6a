//! What the servers allow, read once at build: whether a server given as a
//! plain address is a cluster node, and the largest message a subscriber
//! can be sent before the server cuts it off (its `client-output-buffer-limit`
//! for Pub/Sub clients) or a publish's argument is refused
//! (`proto-max-bulk-len`).

use std::sync::Arc;

use resp::Value;

use crate::error::Error;

/// Bytes a message's frame adds to its channel and payload at a
/// subscriber (`>3`, `message`, the lengths, the partition tag), rounded
/// up.
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

    /// `Err` when a message of `channel` and `payload` is over the limit.
    pub(crate) fn check(&self, channel: &[u8], payload: &[u8]) -> Result<(), Error> {
        let size = channel.len() + payload.len() + FRAME;
        if size <= self.bytes {
            return Ok(());
        }
        Err(Error::TooLarge {
            size,
            limit: self.bytes,
            source: self.source.clone(),
        })
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

/// The limit `server`'s configuration sets, from its replies to
/// `CONFIG GET client-output-buffer-limit` and `CONFIG GET
/// proto-max-bulk-len` (`None` where a reply says nothing usable: an error
/// such as an ACL denial, or a limit of 0, which means none).
pub(crate) fn from_config(
    server: &str,
    buffers: Option<&Value>,
    bulk: Option<&Value>,
) -> Option<MessageLimit> {
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
            source: format!("proto-max-bulk-len of {server}").into(),
        });
    MessageLimit::min(pubsub_hard, bulk)
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
        let l = from_config("s:1", Some(&buffers), Some(&bulk_len)).unwrap();
        assert_eq!(l.bytes, 33554432);
        assert!(
            l.source.contains("client-output-buffer-limit"),
            "{}",
            l.source
        );
        assert!(l.check(b"c", &[0; 1000]).is_ok());
        let err = l.check(b"c", &vec![0; 33554432]).unwrap_err();
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
        let l = from_config("s:1", Some(&none), Some(&bulk_len)).unwrap();
        assert_eq!(l.bytes, 536870912);
        let denied = Value::Error(b"NOPERM".to_vec());
        assert!(from_config("s:1", Some(&denied), None).is_none());
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
