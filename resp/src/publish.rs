//! Encoders for the commands that publish: `PUBLISH` and `SPUBLISH`, and
//! the head of a script call (`EVALSHA sha numkeys` or `EVAL body
//! numkeys`) for a publish that runs as a script. A channel name or a
//! payload may come in parts (a prefix and a name, a header and a
//! payload): they are written one after another as one bulk string, with
//! no copy into a buffer first.
//!
//! Like every encoder here, these append to a caller's `Vec<u8>` and
//! allocate nothing but by growing it.

use alloc::vec::Vec;

use crate::encode::{encode_bulk, encode_bulk_header, encode_bulk_u64, encode_command_header};

/// Which publish command.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PublishKind {
    /// `PUBLISH`: classic Pub/Sub, every node of a cluster sees it.
    Publish,
    /// `SPUBLISH`: sharded Pub/Sub, to the node that owns the channel's
    /// slot.
    Spublish,
}

impl PublishKind {
    /// `Spublish` when `sharded`, else `Publish`.
    pub const fn of(sharded: bool) -> PublishKind {
        if sharded {
            PublishKind::Spublish
        } else {
            PublishKind::Publish
        }
    }

    /// The command's head on the wire: the array header of three and
    /// the command's name.
    const fn head(self) -> &'static [u8] {
        match self {
            PublishKind::Publish => b"*3\r\n$7\r\nPUBLISH\r\n",
            PublishKind::Spublish => b"*3\r\n$8\r\nSPUBLISH\r\n",
        }
    }

    /// The command's name: `PUBLISH` or `SPUBLISH`.
    pub const fn command(self) -> &'static [u8] {
        match self {
            PublishKind::Publish => b"PUBLISH",
            PublishKind::Spublish => b"SPUBLISH",
        }
    }
}

/// Appends one bulk string whose bytes are `parts` one after another, and
/// returns where those bytes start in `out`.
///
/// ```
/// let mut out = Vec::new();
/// let at = resp::encode_bulk_parts(&mut out, &[b"{7}.", b"news"]);
/// assert_eq!(out, b"$8\r\n{7}.news\r\n");
/// assert_eq!(&out[at..at + 8], b"{7}.news");
/// ```
pub fn encode_bulk_parts(out: &mut Vec<u8>, parts: &[&[u8]]) -> usize {
    let len = parts_len(parts);
    out.reserve(len + BULK_OVERHEAD);
    push_bulk_parts(out, parts, len)
}

/// The bytes a bulk string adds to its data at most: `$`, 20 digits and
/// two line ends.
const BULK_OVERHEAD: usize = 1 + 20 + 2 + 2;

#[inline]
fn parts_len(parts: &[&[u8]]) -> usize {
    parts.iter().fold(0usize, |n, p| n.saturating_add(p.len()))
}

/// [`encode_bulk_parts`] with the length known and room reserved.
#[inline]
fn push_bulk_parts(out: &mut Vec<u8>, parts: &[&[u8]], len: usize) -> usize {
    encode_bulk_header(out, len);
    let at = out.len();
    for p in parts {
        out.extend_from_slice(p);
    }
    out.extend_from_slice(b"\r\n");
    at
}

/// Appends `PUBLISH channel payload` or `SPUBLISH channel payload`, the
/// channel's name and the payload each given in parts (`&[name]` for a
/// name in one piece), and returns where the channel's name starts in
/// `out`.
///
/// ```
/// use resp::PublishKind;
/// let mut out = Vec::new();
/// let at = resp::encode_publish(&mut out, PublishKind::Spublish, &[b"{a}.", b"ch"], &[b"hi"]);
/// assert_eq!(out, b"*3\r\n$8\r\nSPUBLISH\r\n$6\r\n{a}.ch\r\n$2\r\nhi\r\n");
/// assert_eq!(&out[at..at + 6], b"{a}.ch");
/// ```
#[inline]
pub fn encode_publish(
    out: &mut Vec<u8>,
    kind: PublishKind,
    channel: &[&[u8]],
    payload: &[&[u8]],
) -> usize {
    // The hot path of every publish: one reservation, the head as one
    // constant, then the two bulk strings.
    let (channel_len, payload_len) = (parts_len(channel), parts_len(payload));
    let head = kind.head();
    out.reserve(
        head.len()
            .saturating_add(channel_len)
            .saturating_add(payload_len)
            .saturating_add(2 * BULK_OVERHEAD),
    );
    out.extend_from_slice(head);
    let at = push_bulk_parts(out, channel, channel_len);
    push_bulk_parts(out, payload, payload_len);
    at
}

/// The script a script call runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Script<'a> {
    /// `EVALSHA` with the script's SHA1 (lowercase hex), cached on the
    /// server.
    Sha(&'a [u8]),
    /// `EVAL` with the script's source (the server caches it).
    Source(&'a [u8]),
}

/// Appends the head of a script call: the array header for `keys + args`
/// more arguments, `EVALSHA sha` or `EVAL source`, and the key count
/// `keys`. The caller then appends exactly `keys` keys and `args`
/// arguments with [`encode_bulk`] (or [`encode_bulk_parts`]).
///
/// ```
/// let mut out = Vec::new();
/// resp::encode_script_head(&mut out, resp::Script::Sha(b"abc"), 1, 1);
/// resp::encode_bulk(&mut out, b"k");
/// resp::encode_bulk(&mut out, b"v");
/// assert_eq!(out, b"*5\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$1\r\nk\r\n$1\r\nv\r\n");
/// ```
pub fn encode_script_head(out: &mut Vec<u8>, script: Script<'_>, keys: usize, args: usize) {
    encode_command_header(out, keys.saturating_add(args).saturating_add(3));
    let (command, body) = match script {
        Script::Sha(sha) => (&b"EVALSHA"[..], sha),
        Script::Source(source) => (&b"EVAL"[..], source),
    };
    encode_bulk(out, command);
    encode_bulk(out, body);
    encode_bulk_u64(out, keys as u64);
}

#[cfg(test)]
mod tests {
    use alloc::vec;
    use alloc::vec::Vec;

    use super::*;
    use crate::{encode_command, parse, Limits, Status, Value};

    /// Parses `wire` with this crate's parser: one whole frame, nothing
    /// left over.
    fn parse_whole(wire: &[u8]) -> Value {
        match parse(wire, &Limits::default()) {
            Ok(Status::Complete(p)) => {
                assert_eq!(p.consumed, wire.len(), "one frame, nothing left");
                p.frame.to_value()
            }
            other => panic!("{other:?}"),
        }
    }

    fn bulks(args: &[&[u8]]) -> Value {
        Value::Array(args.iter().map(|a| Value::Bulk(a.to_vec())).collect())
    }

    #[test]
    fn publish_round_trips_for_every_kind_and_split() {
        let payloads: [&[u8]; 4] = [b"", b"x", &[0, b'\r', b'\n', 255], &[b'p'; 1000]];
        for kind in [PublishKind::Publish, PublishKind::Spublish] {
            for payload in payloads {
                for split in 0..=payload.len().min(3) {
                    let mut out = b"+prior\r\n".to_vec();
                    let at = encode_publish(
                        &mut out,
                        kind,
                        &[b"{12}.", b"room"],
                        &[&payload[..split], &payload[split..]],
                    );
                    assert_eq!(out.get(at..at + 9), Some(&b"{12}.room"[..]));
                    let wire = &out[8..];
                    assert_eq!(
                        parse_whole(wire),
                        bulks(&[kind.command(), b"{12}.room", payload])
                    );
                    // The same bytes as the general command encoder.
                    let mut general = Vec::new();
                    encode_command(&mut general, [kind.command(), b"{12}.room", payload]);
                    assert_eq!(wire, &general[..]);
                }
            }
        }
        assert_eq!(PublishKind::of(true), PublishKind::Spublish);
        assert_eq!(PublishKind::of(false).command(), b"PUBLISH");
    }

    #[test]
    fn script_heads_round_trip() {
        for (script, name) in [
            (
                Script::Sha(b"f411789b495b7c000fae68c7d443417a6e2dc903"),
                &b"EVALSHA"[..],
            ),
            (Script::Source(b"return 1"), b"EVAL"),
        ] {
            for keys in [0usize, 2, 12] {
                let mut out = Vec::new();
                encode_script_head(&mut out, script, keys, 1);
                let key_args: Vec<Vec<u8>> = (0..keys)
                    .map(|k| vec![b'k', b'0' + (k % 10) as u8])
                    .collect();
                for k in &key_args {
                    encode_bulk(&mut out, k);
                }
                encode_bulk_parts(&mut out, &[b"SPU", b"BLISH"]);
                let body = match script {
                    Script::Sha(b) | Script::Source(b) => b,
                };
                let count = alloc::format!("{keys}");
                let mut want: Vec<&[u8]> = vec![name, body, count.as_bytes()];
                want.extend(key_args.iter().map(Vec::as_slice));
                want.push(b"SPUBLISH");
                assert_eq!(parse_whole(&out), bulks(&want));
            }
        }
    }
}
