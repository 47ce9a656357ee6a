//! Cluster errors that carry routing news: `MOVED`, `ASK`, `TRYAGAIN`,
//! `CLUSTERDOWN`.

use alloc::string::String;

use crate::slotmap::NodeAddr;

/// What a cluster error reply means for routing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterError {
    /// `MOVED slot host:port`: the slot belongs to another primary for good.
    /// Update the map ([`SlotMap::apply_moved`](crate::SlotMap::apply_moved)),
    /// retry there, and schedule a refresh.
    Moved {
        /// The slot.
        slot: u16,
        /// Its owner; `None` when the server gave no usable host and no
        /// asked host was supplied.
        addr: Option<NodeAddr>,
    },
    /// `ASK slot host:port`: the slot is being migrated; send `ASKING` and
    /// the command to this node once, without changing the map.
    Ask {
        /// The slot.
        slot: u16,
        /// The importing node (as for `Moved`).
        addr: Option<NodeAddr>,
    },
    /// `TRYAGAIN`: a multi-key command hit a slot mid-migration; retry later.
    TryAgain,
    /// `CLUSTERDOWN`: the cluster cannot serve (slots uncovered, no quorum);
    /// back off and retry.
    ClusterDown,
}

/// Classifies an error reply's text (without the leading `-`), such as
/// `MOVED 3999 127.0.0.1:6381`. The host before the last `:` may be empty
/// (the server knows no endpoint to announce: then `asked_host` is used)
/// or an IPv6 address. Returns `None` for any other error.
///
/// ```
/// use topology::{parse_cluster_error, ClusterError};
/// let e = parse_cluster_error(b"MOVED 3999 10.0.0.7:6381", None).unwrap();
/// let ClusterError::Moved { slot, addr } = e else { unreachable!() };
/// assert_eq!((slot, addr.unwrap().to_string().as_str()), (3999, "10.0.0.7:6381"));
/// assert_eq!(parse_cluster_error(b"TRYAGAIN Multiple keys request during rehashing of slot", None), Some(ClusterError::TryAgain));
/// assert_eq!(parse_cluster_error(b"ERR unknown command", None), None);
/// ```
pub fn parse_cluster_error(text: &[u8], asked_host: Option<&str>) -> Option<ClusterError> {
    let text = core::str::from_utf8(text).ok()?;
    let mut words = text.split_ascii_whitespace();
    let kind = words.next()?;
    match kind {
        "TRYAGAIN" => return Some(ClusterError::TryAgain),
        "CLUSTERDOWN" => return Some(ClusterError::ClusterDown),
        "MOVED" | "ASK" => {}
        _ => return None,
    }
    let slot: u16 = words.next()?.parse().ok()?;
    if slot >= shardcore::SLOT_COUNT {
        return None;
    }
    let endpoint = words.next()?;
    let (host, port) = endpoint.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addr = match host {
        "" | "?" => asked_host.map(|h| NodeAddr {
            host: String::from(h),
            port,
        }),
        h => Some(NodeAddr {
            host: String::from(h),
            port,
        }),
    };
    Some(if kind == "MOVED" {
        ClusterError::Moved { slot, addr }
    } else {
        ClusterError::Ask { slot, addr }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(h: &str, port: u16) -> Option<NodeAddr> {
        Some(NodeAddr {
            host: h.into(),
            port,
        })
    }

    #[test]
    fn table() {
        let cases: &[(&[u8], Option<ClusterError>)] = &[
            (
                b"MOVED 0 127.0.0.1:7000",
                Some(ClusterError::Moved {
                    slot: 0,
                    addr: addr("127.0.0.1", 7000),
                }),
            ),
            (
                b"ASK 16383 node3.example:7001",
                Some(ClusterError::Ask {
                    slot: 16383,
                    addr: addr("node3.example", 7001),
                }),
            ),
            (
                b"MOVED 12 ::1:7000",
                Some(ClusterError::Moved {
                    slot: 12,
                    addr: addr("::1", 7000),
                }),
            ),
            (
                b"MOVED 12 [::1]:7000",
                Some(ClusterError::Moved {
                    slot: 12,
                    addr: addr("::1", 7000),
                }),
            ),
            (
                b"MOVED 12 :7000",
                Some(ClusterError::Moved {
                    slot: 12,
                    addr: addr("seed", 7000),
                }),
            ),
            (
                b"CLUSTERDOWN The cluster is down",
                Some(ClusterError::ClusterDown),
            ),
            (b"TRYAGAIN", Some(ClusterError::TryAgain)),
            (b"MOVED 16384 h:1", None),
            (b"MOVED x h:1", None),
            (b"MOVED 1 h", None),
            (b"MOVED 1 h:99999", None),
            (b"MOVED", None),
            (b"moved 1 h:1", None),
            (b"\xff", None),
            (b"", None),
            (b"ERR wrong number of arguments", None),
        ];
        for (text, want) in cases {
            assert_eq!(
                &parse_cluster_error(text, Some("seed")),
                want,
                "{:?}",
                core::str::from_utf8(text)
            );
        }
        assert_eq!(
            parse_cluster_error(b"ASK 5 :7000", None),
            Some(ClusterError::Ask {
                slot: 5,
                addr: None
            })
        );
    }
}
