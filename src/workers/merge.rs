//! One incident, one gap event: a worker merges the gap events of one
//! server that it finds in the same batch (the control core sends one per
//! partition), without moving any signal past a message it must stay on
//! the right side of.
//!
//! A gap event for channel `c` must come after every message of `c`
//! received before the loss and before every message of `c` received
//! after it. So a later gap event `G2` may join an earlier one `G1` of the
//! same server (move earlier) only when no item between them concerns a
//! channel of `G2` (a message, an active or refused event, a drop) and the
//! two name different channels; otherwise `G2` stays where it is and later
//! ones may join it.

use std::collections::{HashSet, VecDeque};

use crate::addr::ServerAddr;
use crate::workers::queue::Item;

/// An open gap event: where it is in the output, the channels it names,
/// and the channels of the items queued after it.
struct Open {
    server: Option<ServerAddr>,
    /// A gap event of patterns (one of channels never joins it).
    patterns: bool,
    at: usize,
    named: HashSet<Vec<u8>>,
    since: HashSet<Vec<u8>>,
}

/// Merges the gap events of `items` where that keeps every signal in
/// order (see the module docs). Batches with fewer than two gap events
/// are left alone (no allocation).
pub(super) fn gaps(items: &mut VecDeque<Item>) {
    if items
        .iter()
        .filter(|i| matches!(i, Item::Gap { .. }))
        .nth(1)
        .is_none()
    {
        return;
    }
    let mut out: VecDeque<Item> = VecDeque::with_capacity(items.len());
    let mut open: Vec<Open> = Vec::new();
    for item in items.drain(..) {
        if let Item::Server { addr, .. } = &item {
            // No later gap of the server moves before its connection
            // event.
            open.retain(|o| o.server != *addr);
        }
        let Item::Gap {
            server,
            channels,
            patterns,
        } = item
        else {
            note(&item, &mut open);
            out.push_back(item);
            continue;
        };
        let same = |o: &&mut Open| o.server == server && o.patterns == patterns;
        if let Some(o) = open.iter_mut().find(same) {
            let clear = channels
                .iter()
                .all(|c| !o.since.contains(c) && !o.named.contains(c));
            if clear {
                if let Some(Item::Gap { channels: into, .. }) = out.get_mut(o.at) {
                    for c in channels.iter() {
                        into.push(c);
                        o.named.insert(c.to_vec());
                    }
                    continue;
                }
            }
            // Stays where it is; later events may join this one.
            o.at = out.len();
            o.named = channels.iter().map(<[u8]>::to_vec).collect();
            o.since.clear();
        } else {
            open.push(Open {
                server,
                patterns,
                at: out.len(),
                named: channels.iter().map(<[u8]>::to_vec).collect(),
                since: HashSet::new(),
            });
        }
        out.push_back(Item::Gap {
            server,
            channels,
            patterns,
        });
    }
    *items = out;
}

/// Records the channels `item` concerns in every open gap event.
fn note(item: &Item, open: &mut [Open]) {
    if open.is_empty() {
        return;
    }
    let mut add = |c: &[u8]| {
        for o in open.iter_mut() {
            if !o.since.contains(c) {
                o.since.insert(c.to_vec());
            }
        }
    };
    match item {
        Item::Message {
            buf, channel_len, ..
        } => add(buf.get(..*channel_len).unwrap_or_default()),
        // Its pattern: a name of either kind only keeps events apart.
        Item::PMessage {
            buf, pattern_len, ..
        } => add(buf.get(..*pattern_len).unwrap_or_default()),
        Item::Active { buf, .. } | Item::Refused { buf, .. } | Item::Recovered { buf, .. } => {
            add(buf)
        }
        Item::Dropped { channels, .. } => channels.iter().for_each(add),
        Item::Gap { .. } | Item::Server { .. } | Item::Marker(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::ChannelList;

    fn gap(server: u16, names: &[&str]) -> Item {
        let mut channels = ChannelList::default();
        for n in names {
            channels.push(n.as_bytes());
        }
        let server = Some(ServerAddr::from(std::net::SocketAddr::from((
            [127, 0, 0, 1],
            server,
        ))));
        Item::Gap {
            server,
            channels,
            patterns: false,
        }
    }

    fn msg(channel: &str) -> Item {
        Item::Message {
            buf: channel.as_bytes().to_vec(),
            channel_len: channel.len(),
            sent_us: 0,
            at: None,
        }
    }

    /// The batch as text: `m:ch` for messages, `g<port>:a,b` for gaps.
    fn show(items: &VecDeque<Item>) -> Vec<String> {
        items
            .iter()
            .map(|i| match i {
                Item::Message {
                    buf, channel_len, ..
                } => format!("m:{}", String::from_utf8_lossy(&buf[..*channel_len])),
                Item::Gap {
                    server, channels, ..
                } => {
                    let names: Vec<String> = channels
                        .iter()
                        .map(|c| String::from_utf8_lossy(c).into_owned())
                        .collect();
                    format!(
                        "g{}:{}",
                        server.and_then(|s| s.tcp()).map_or(0, |s| s.port()),
                        names.join(",")
                    )
                }
                _ => "other".into(),
            })
            .collect()
    }

    fn merged(items: Vec<Item>) -> Vec<String> {
        let mut q: VecDeque<Item> = items.into();
        gaps(&mut q);
        show(&q)
    }

    #[test]
    fn one_servers_events_merge_across_other_channels_messages() {
        let got = merged(vec![
            msg("x"),
            gap(1, &["a"]),
            msg("y"),
            gap(1, &["b"]),
            gap(2, &["c"]),
            gap(1, &["d"]),
            msg("a"),
        ]);
        assert_eq!(got, ["m:x", "g1:a,b,d", "m:y", "g2:c", "m:a"]);
    }

    #[test]
    fn an_event_never_moves_past_a_message_of_its_channels() {
        // `b`'s message came between: its gap must stay after it.
        let got = merged(vec![
            gap(1, &["a"]),
            msg("b"),
            gap(1, &["b"]),
            gap(1, &["c"]),
        ]);
        assert_eq!(got, ["g1:a", "m:b", "g1:b,c"]);
        // A channel named twice is two signals.
        let got = merged(vec![gap(1, &["a"]), gap(1, &["a", "b"])]);
        assert_eq!(got, ["g1:a", "g1:a,b"]);
    }

    #[test]
    fn pattern_gaps_merge_only_with_pattern_gaps() {
        let pgap = |names: &[&str]| {
            let Item::Gap {
                server, channels, ..
            } = gap(1, names)
            else {
                unreachable!()
            };
            Item::Gap {
                server,
                channels,
                patterns: true,
            }
        };
        let mut q: VecDeque<Item> =
            vec![gap(1, &["a"]), pgap(&["p*"]), gap(1, &["b"]), pgap(&["q*"])].into();
        gaps(&mut q);
        let kinds: Vec<(bool, usize)> = q
            .iter()
            .map(|i| match i {
                Item::Gap {
                    channels, patterns, ..
                } => (*patterns, channels.len()),
                _ => (false, 0),
            })
            .collect();
        assert_eq!(kinds, [(false, 2), (true, 2)]);
    }

    #[test]
    fn a_single_event_is_left_alone() {
        let got = merged(vec![msg("a"), gap(1, &["a"]), msg("a")]);
        assert_eq!(got, ["m:a", "g1:a", "m:a"]);
    }
}
