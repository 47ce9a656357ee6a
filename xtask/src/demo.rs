//! `cargo xtask demo`: a local 3-master cluster per server kind, its slot
//! map, and a RESP3 reply carrying an attribute, parsed by `resp`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use resp::{Limits, Status, Value};
use testkit::values::{info_field, int, items, text};
use testkit::{Cluster, ServerKind};

use crate::install;

pub fn run() -> Result<(), String> {
    install::servers()?;
    for kind in testkit::kinds() {
        demo_kind(kind).map_err(|e| format!("{kind} demo: {e}"))?;
    }
    Ok(())
}

fn demo_kind(kind: ServerKind) -> Result<(), String> {
    let start = Instant::now();
    println!("\n== {kind}: starting a 3-master cluster on loopback …");
    let cluster = Cluster::start(kind, 3, 0).map_err(|e| e.to_string())?;
    let seed = cluster.node(cluster.masters()[0]);
    let info = seed
        .cmd(&[b"INFO", b"server"])
        .ok()
        .as_ref()
        .and_then(text)
        .unwrap_or_default();
    let version = info_field(&info, "valkey_version")
        .or_else(|| info_field(&info, "redis_version"))
        .unwrap_or_else(|| "?".into());
    println!(
        "{kind} {version}: cluster_state:ok after {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let slots = seed
        .cmd(&[b"CLUSTER", b"SLOTS"])
        .map_err(|e| e.to_string())?;
    println!("CLUSTER SLOTS (asked {}):", seed.addr());
    print_slot_map(&slots)?;
    println!(
        "\nRESP3 (HELLO 3) reply of DEBUG PROTOCOL attrib, from {}:",
        seed.addr()
    );
    let (raw, value) = attrib_reply(seed.addr()).map_err(|e| format!("DEBUG PROTOCOL: {e}"))?;
    println!("  bytes:  {}", raw.escape_ascii());
    println!("  parsed: {}", render(&value));
    if let Value::Attributed { attributes, value } = &value {
        for (key, val) in attributes {
            println!("  attribute {} = {}", render(key), render(val));
        }
        println!("  value     {}", render(value));
    }
    drop(cluster);
    println!("{kind}: cluster stopped");
    Ok(())
}

/// One line per slot range: range, size, master, replicas.
fn print_slot_map(reply: &Value) -> Result<(), String> {
    let ranges = items(reply).ok_or("CLUSTER SLOTS is not an array")?;
    for range in ranges {
        let fields = items(range).ok_or("slot range is not an array")?;
        let bound = |i: usize| fields.get(i).and_then(int).ok_or("bad slot range");
        let (first, last) = (bound(0)?, bound(1)?);
        let nodes: Vec<String> = fields
            .iter()
            .skip(2)
            .filter_map(|node| {
                let node = items(node)?;
                let host = node.first().and_then(text)?;
                let port = node.get(1).and_then(int)?;
                let id = node.get(2).and_then(text).unwrap_or_default();
                Some(format!("{host}:{port} ({})", id.get(..8).unwrap_or(&id)))
            })
            .collect();
        let (master, replicas) = nodes.split_first().ok_or("slot range without a master")?;
        let replicas = if replicas.is_empty() {
            String::new()
        } else {
            format!("  replicas {}", replicas.join(", "))
        };
        println!(
            "  slots {first:>5}..={last:<5} {:>5} slots  master {master}{replicas}",
            last - first + 1
        );
    }
    Ok(())
}

/// `HELLO 3`, then `DEBUG PROTOCOL attrib` over a plain socket, parsed with
/// `resp::parse`. Returns the raw reply bytes and the parsed value.
fn attrib_reply(addr: std::net::SocketAddr) -> Result<(Vec<u8>, Value), String> {
    let mut stream =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    resp::encode_command(&mut out, ["HELLO", "3"]);
    resp::encode_command(&mut out, ["DEBUG", "PROTOCOL", "attrib"]);
    stream.write_all(&out).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut replies = Vec::new();
    while replies.len() < 2 {
        match resp::parse(&buf, &Limits::default()).map_err(|e| e.to_string())? {
            Status::Complete(parsed) => {
                let consumed = parsed.consumed;
                replies.push((buf[..consumed].to_vec(), parsed.to_value()));
                buf.drain(..consumed);
            }
            Status::Incomplete => {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err("server closed the connection".into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
    replies.pop().ok_or_else(|| "no reply".into())
}

/// A compact, readable rendering of a value.
fn render(value: &Value) -> String {
    let list = |open: &str, close: &str, vs: &[Value]| {
        let inner: Vec<String> = vs.iter().map(render).collect();
        format!("{open}{}{close}", inner.join(", "))
    };
    let pairs = |open: &str, close: &str, ps: &[(Value, Value)]| {
        let inner: Vec<String> = ps
            .iter()
            .map(|(k, v)| format!("{}: {}", render(k), render(v)))
            .collect();
        format!("{open}{}{close}", inner.join(", "))
    };
    match value {
        Value::Simple(s) => format!("+{}", s.escape_ascii()),
        Value::Error(s) => format!("-{}", s.escape_ascii()),
        Value::Integer(i) => i.to_string(),
        Value::Bulk(s) => format!("\"{}\"", s.escape_ascii()),
        Value::Null => "null".into(),
        Value::Double(d) => format!("{d:?}"),
        Value::Boolean(b) => b.to_string(),
        Value::BlobError(s) => format!("!\"{}\"", s.escape_ascii()),
        Value::Verbatim { format, text } => {
            format!("{}:\"{}\"", format.escape_ascii(), text.escape_ascii())
        }
        Value::BigNumber(n) => format!("({})", n.escape_ascii()),
        Value::Array(vs) => list("[", "]", vs),
        Value::Set(vs) => list("~{", "}", vs),
        Value::Push(vs) => list(">[", "]", vs),
        Value::Map(ps) => pairs("{", "}", ps),
        Value::Attributed { attributes, value } => {
            format!("{} {}", pairs("|{", "}", attributes), render(value))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_shows_attributes_before_the_value() {
        let value = Value::Attributed {
            attributes: vec![(
                Value::Bulk(b"key-popularity".to_vec()),
                Value::Array(vec![Value::Bulk(b"key:123".to_vec()), Value::Integer(90)]),
            )],
            value: Box::new(Value::Bulk(b"reply".to_vec())),
        };
        assert_eq!(
            render(&value),
            "|{\"key-popularity\": [\"key:123\", 90]} \"reply\""
        );
        assert_eq!(render(&Value::Map(vec![])), "{}");
        assert_eq!(render(&Value::Null), "null");
    }
}
