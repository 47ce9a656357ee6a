//! Reading a cluster's own account of itself: `CLUSTER NODES`, `CLUSTER
//! SLOTS` normalised for comparison, `CLUSTER LINKS`, and redis-cli's slot
//! split.

use std::collections::BTreeMap;

use crate::cluster::{SlotRange, SLOT_COUNT};
use crate::values::{int, items, text};
use crate::{Error, Value};

/// How `redis-cli --cluster create` splits the slots over `masters` masters.
pub(crate) fn create_ranges(masters: usize) -> Vec<SlotRange> {
    let per_node = f64::from(SLOT_COUNT) / masters as f64;
    let mut ranges = Vec::with_capacity(masters);
    let (mut first, mut cursor) = (0u32, 0f64);
    for i in 0..masters {
        let mut last = (cursor + per_node - 1.0).round() as u32;
        if last > SLOT_COUNT - 1 || i == masters - 1 {
            last = SLOT_COUNT - 1;
        }
        last = last.max(first);
        ranges.push(first as u16..=last as u16);
        first = last + 1;
        cursor += per_node;
    }
    ranges
}

/// One node's entry in a `CLUSTER NODES` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableEntry {
    /// `None` for a master, else the id of the master it replicates.
    pub(crate) master: Option<String>,
    pub(crate) slots: Vec<(u16, u16)>,
}

/// Node id → entry, for nodes not failed and not in handshake.
pub(crate) type NodeTable = BTreeMap<String, TableEntry>;
pub(crate) type SlotsView = Vec<(i64, i64, String, Vec<String>)>;

/// Parses `CLUSTER NODES`; returns the healthy nodes and the ids of failed ones.
pub(crate) fn parse_cluster_nodes(text: &str) -> (NodeTable, Vec<String>) {
    let mut table = NodeTable::new();
    let mut failed = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [id, _addr, flags, master, _, _, _, _, slots @ ..] = fields.as_slice() else {
            continue;
        };
        let flags: Vec<&str> = flags.split(',').collect();
        if flags
            .iter()
            .any(|f| matches!(*f, "fail" | "handshake" | "noaddr"))
        {
            failed.push((*id).to_string());
            continue;
        }
        let mut ranges: Vec<(u16, u16)> = slots
            .iter()
            .filter(|s| !s.starts_with('['))
            .filter_map(|s| {
                let (a, b) = s.split_once('-').unwrap_or((s, s));
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .collect();
        ranges.sort_unstable();
        let master = (flags.contains(&"slave") && *master != "-").then(|| (*master).to_string());
        table.insert(
            (*id).to_string(),
            TableEntry {
                master,
                slots: ranges,
            },
        );
    }
    (table, failed)
}

/// One node's cluster bus links as its `CLUSTER LINKS` lists them: the
/// peer ids it has an outbound link to (`direction` `to`: its own
/// connection, listed while still connecting) and those whose inbound link
/// it has bound to their node (`from`: listed only once a full-header
/// message from that peer arrived on it, so a peer it did not know yet
/// when the connection opened stays off the list until its next `PING`).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct BusLinks {
    pub(crate) to: Vec<String>,
    pub(crate) from: Vec<String>,
}

/// Reads a `CLUSTER LINKS` reply.
pub(crate) fn bus_links(reply: &Value) -> Result<BusLinks, Error> {
    let bad = || Error::unexpected("a CLUSTER LINKS reply", reply);
    let mut links = BusLinks::default();
    for link in items(reply).ok_or_else(bad)? {
        let field = |name| link_field(link, name).and_then(text).ok_or_else(bad);
        let node = field("node")?;
        match field("direction")?.as_str() {
            "to" => links.to.push(node),
            "from" => links.from.push(node),
            _ => return Err(bad()),
        }
    }
    Ok(links)
}

/// Field `name` of one `CLUSTER LINKS` entry (a map in RESP3, a flat
/// key/value array in RESP2).
pub(crate) fn link_field<'a>(link: &'a Value, name: &str) -> Option<&'a Value> {
    match link {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| text(k).as_deref() == Some(name))
            .map(|(_, v)| v),
        other => items(other)?
            .chunks(2)
            .find(|kv| text(&kv[0]).as_deref() == Some(name))
            .and_then(|kv| kv.get(1)),
    }
}

/// `CLUSTER SLOTS` as sorted (start, end, master, sorted replicas).
pub(crate) fn slots_view(reply: &Value) -> Result<SlotsView, Error> {
    let bad = || Error::unexpected("a CLUSTER SLOTS reply", reply);
    let mut view = Vec::new();
    for range in items(reply).ok_or_else(bad)? {
        let fields = items(range).ok_or_else(bad)?;
        let (Some(start), Some(end)) = (fields.first().and_then(int), fields.get(1).and_then(int))
        else {
            return Err(bad());
        };
        let mut addrs = fields[2..].iter().map(|node| {
            let node = items(node).ok_or_else(bad)?;
            let host = node.first().and_then(text).ok_or_else(bad)?;
            let port = node.get(1).and_then(int).ok_or_else(bad)?;
            Ok(format!("{host}:{port}"))
        });
        let master = addrs.next().ok_or_else(bad)??;
        let mut replicas = addrs.collect::<Result<Vec<_>, Error>>()?;
        replicas.sort_unstable();
        view.push((start, end, master, replicas));
    }
    view.sort_unstable();
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_ranges_match_redis_cli() {
        assert_eq!(create_ranges(1), vec![0..=16383]);
        assert_eq!(
            create_ranges(3),
            vec![0..=5460, 5461..=10922, 10923..=16383]
        );
        for m in 1..=64 {
            let ranges = create_ranges(m);
            assert_eq!(ranges.len(), m);
            assert_eq!(*ranges[0].start(), 0);
            assert_eq!(*ranges[m - 1].end(), 16383);
            for w in ranges.windows(2) {
                assert_eq!(*w[0].end() + 1, *w[1].start());
            }
        }
    }

    #[test]
    fn cluster_links_are_read_by_direction_in_resp2_and_resp3() {
        let bulk = |s: &str| Value::Bulk(s.as_bytes().to_vec());
        let entry = |dir: &str, node: &str| {
            vec![
                bulk("direction"),
                bulk(dir),
                bulk("node"),
                bulk(node),
                bulk("create-time"),
                Value::Integer(1),
            ]
        };
        // Node 1 of the lost round: a link to both peers, one bound from
        // only one of them.
        let resp2 = Value::Array(vec![
            Value::Array(entry("to", "a")),
            Value::Array(entry("from", "a")),
            Value::Array(entry("to", "c")),
        ]);
        let links = bus_links(&resp2).unwrap();
        assert_eq!(links.to, vec!["a".to_string(), "c".to_string()]);
        assert_eq!(links.from, vec!["a".to_string()]);
        let pairs = |e: Vec<Value>| {
            let mut it = e.into_iter();
            let mut v = Vec::new();
            while let (Some(k), Some(x)) = (it.next(), it.next()) {
                v.push((k, x));
            }
            Value::Map(v)
        };
        let resp3 = Value::Array(vec![pairs(entry("from", "c"))]);
        assert_eq!(bus_links(&resp3).unwrap().from, vec!["c".to_string()]);
        assert!(bus_links(&Value::Array(vec![Value::Array(entry("sideways", "a"))])).is_err());
        assert!(bus_links(&Value::Null).is_err());
    }

    #[test]
    fn cluster_nodes_parsing_skips_failed_and_migrating_entries() {
        let text = "a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [5461->-b]\n\
                    b 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-16383\n\
                    c 127.0.0.1:7002@17002 slave a 0 0 1 connected\n\
                    d 127.0.0.1:7003@17003 master,fail - 0 0 3 disconnected\n";
        let (table, failed) = parse_cluster_nodes(text);
        assert_eq!(failed, vec!["d".to_string()]);
        assert_eq!(table["a"].slots, vec![(0, 5460)]);
        assert_eq!(table["b"].slots, vec![(5461, 16383)]);
        assert_eq!(table["c"].master.as_deref(), Some("a"));
        assert_eq!(table.len(), 3);
    }
}
