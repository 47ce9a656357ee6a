//! Reading a channel's history: one atomic `read.lua` call, parsed into a
//! [`History`].

use resp::Value;

use crate::error::Error;
use crate::history::script::{self, READ, READ_SHA};
use crate::history::{History, HistoryMessage, Position};

/// The most messages one read returns.
pub const MAX_LIMIT: usize = 100_000;

/// Reads `limit` messages of the channel whose keys are `meta` and
/// `stream`: the next ones after `since`, or the last ones. `run` sends a
/// command to the channel's server and waits for its reply.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a zero limit or one past [`MAX_LIMIT`];
/// `run`'s errors; [`Error::History`] for a reply the script does not give.
pub(crate) fn read(
    run: impl Fn(&[Vec<u8>]) -> Result<Value, Error>,
    meta: &[u8],
    stream: &[u8],
    since: Option<Position>,
    limit: usize,
    envelope: bool,
) -> Result<History, Error> {
    if limit == 0 || limit > MAX_LIMIT {
        return Err(Error::InvalidArgument(
            format!("history: the limit must be 1 to {MAX_LIMIT}").into(),
        ));
    }
    let args = |eval| command(meta, stream, since, limit, eval);
    let reply = match run(&args(false)) {
        Err(Error::Reply { message, .. }) if script::is_noscript(&message) => run(&args(true))?,
        r => r?,
    };
    parse(reply, since, envelope)
}

/// The read command: `EVALSHA` (or with `eval`, `EVAL`) of the read
/// script.
pub(crate) fn command(
    meta: &[u8],
    stream: &[u8],
    since: Option<Position>,
    limit: usize,
    eval: bool,
) -> Vec<Vec<u8>> {
    let (mode, from, epoch) = match since {
        Some(p) => (&b"since"[..], p.offset, p.epoch),
        None => (&b"last"[..], 0, 0),
    };
    let (name, script) = match eval {
        true => (&b"EVAL"[..], READ.as_bytes()),
        false => (&b"EVALSHA"[..], READ_SHA.as_bytes()),
    };
    vec![
        name.to_vec(),
        script.to_vec(),
        b"2".to_vec(),
        meta.to_vec(),
        stream.to_vec(),
        mode.to_vec(),
        from.to_string().into_bytes(),
        limit.to_string().into_bytes(),
        epoch.to_string().into_bytes(),
    ]
}

fn bad(what: &str) -> Error {
    Error::History(what.to_string().into())
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::Bulk(b) | Value::Simple(b) => Some(b),
        _ => None,
    }
}

fn decimal(v: &Value) -> Option<u64> {
    match v {
        Value::Integer(n) => u64::try_from(*n).ok(),
        v => std::str::from_utf8(bytes(v)?).ok()?.parse().ok(),
    }
}

fn array(v: &Value) -> Option<&[Value]> {
    match v {
        Value::Array(a) => Some(a),
        _ => None,
    }
}

/// One stream entry: `[ "offset-0", ["d", payload] ]`.
fn entry(v: &Value, envelope: bool) -> Option<HistoryMessage> {
    let [id, fields] = array(v)? else {
        return None;
    };
    let id = std::str::from_utf8(bytes(id)?).ok()?;
    let offset = id.strip_suffix("-0")?.parse().ok()?;
    let [name, data] = array(fields)? else {
        return None;
    };
    if bytes(name)? != b"d" {
        return None;
    }
    let data = bytes(data)?;
    let payload = match envelope {
        true => crate::wire::envelope::decode(data).map_or(data, |(_, p)| p),
        false => data,
    };
    Some(HistoryMessage {
        offset,
        payload: payload.to_vec(),
    })
}

/// The read script's reply as a [`History`].
///
/// # Errors
///
/// [`Error::History`] for a reply the script does not give.
pub(crate) fn parse(
    reply: Value,
    since: Option<Position>,
    envelope: bool,
) -> Result<History, Error> {
    let [epoch, top, entries, earlier] = array(&reply).ok_or_else(|| bad("not an array"))? else {
        return Err(bad("not four elements"));
    };
    let earlier = bytes(earlier)
        .and_then(lineage)
        .ok_or_else(|| bad("the earlier epochs are not `epoch:offset ...`"))?;
    let epoch = bytes(epoch).ok_or_else(|| bad("the epoch is not a string"))?;
    let position = match epoch {
        b"" => None,
        e => Some(Position {
            epoch: std::str::from_utf8(e)
                .ok()
                .and_then(|e| e.parse().ok())
                .ok_or_else(|| bad("the epoch is not a decimal number"))?,
            offset: decimal(top).ok_or_else(|| bad("the offset is not a decimal number"))?,
        }),
    };
    let mut messages = array(entries)
        .ok_or_else(|| bad("the entries are not an array"))?
        .iter()
        .map(|e| entry(e, envelope))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| bad("a stream entry is not `offset-0 d payload`"))?;
    if since.is_none() {
        messages.reverse(); // XREVRANGE: newest first
    }
    let mut h = History {
        position,
        messages,
        continuous: false,
        earlier,
    };
    let first = h.messages.first().map(|m| m.offset);
    h.continuous = match (position, since) {
        (None, None) => true,
        (None, Some(_)) => false,
        (Some(now), Some(since)) => match h.resumes(since) {
            None => false,
            Some(from) => match first {
                Some(f) => Some(f) == from.checked_add(1),
                None => now.offset <= from,
            },
        },
        (Some(now), None) => match first {
            Some(f) => f == 1,
            None => now.offset == 0,
        },
    };
    Ok(h)
}

/// The read script's list of earlier epochs: `epoch:offset ` repeated.
fn lineage(text: &[u8]) -> Option<Vec<Position>> {
    let text = std::str::from_utf8(text).ok()?;
    text.split_ascii_whitespace()
        .map(|e| {
            let (epoch, offset) = e.split_once(':')?;
            Some(Position {
                epoch: epoch.parse().ok()?,
                offset: offset.parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &[u8]) -> Value {
        Value::Bulk(s.to_vec())
    }

    fn reply(epoch: &[u8], top: &[u8], offsets: &[u64]) -> Value {
        let entries = offsets
            .iter()
            .map(|o| {
                Value::Array(vec![
                    b(format!("{o}-0").as_bytes()),
                    Value::Array(vec![b(b"d"), b(format!("m{o}").as_bytes())]),
                ])
            })
            .collect();
        Value::Array(vec![b(epoch), b(top), Value::Array(entries), b(b"")])
    }

    fn with_earlier(r: Value, earlier: &[u8]) -> Value {
        let Value::Array(mut a) = r else {
            unreachable!()
        };
        a[3] = b(earlier);
        Value::Array(a)
    }

    #[test]
    fn continuity_is_judged_from_the_epoch_and_the_first_offset() {
        let at = |epoch, offset| Some(Position { epoch, offset });
        let cases: &[(Value, Option<Position>, bool)] = &[
            (reply(b"7", b"5", &[3, 4, 5]), at(7, 2), true),
            (reply(b"7", b"5", &[4, 5]), at(7, 2), false), // 3 trimmed
            (reply(b"8", b"5", &[3, 4, 5]), at(7, 2), false), // new epoch
            (reply(b"7", b"5", &[]), at(7, 5), true),      // nothing new
            (reply(b"7", b"5", &[]), at(7, 3), false),     // all trimmed
            (reply(b"", b"0", &[]), at(7, 3), false),      // history gone
            (reply(b"7", b"2", &[2, 1]), None, true),      // XREVRANGE order
            (reply(b"7", b"9", &[9, 8]), None, false),
        ];
        for (i, (r, since, want)) in cases.iter().enumerate() {
            let h = parse(r.clone(), *since, false).unwrap();
            assert_eq!(h.continuous, *want, "case {i}: {h:?}");
        }
        // Epoch 9 continues 7 (which ended at 4 here) and 8 (at 6).
        let cont =
            |top: &[u8], offsets: &[u64]| with_earlier(reply(b"9", top, offsets), b"7:4 8:6 ");
        let lineage: &[(Value, Option<Position>, bool)] = &[
            (cont(b"8", &[3, 4, 5, 6, 7, 8]), at(7, 2), true),
            (cont(b"8", &[5, 6, 7, 8]), at(7, 4), true),
            (cont(b"8", &[5, 6, 7, 8]), at(7, 5), true), // 7.5 never got here
            (cont(b"8", &[6, 7, 8]), at(7, 4), false),   // 5 trimmed
            (cont(b"8", &[7, 8]), at(8, 6), true),
            (cont(b"8", &[]), at(9, 8), true),
            (cont(b"8", &[3]), at(6, 2), false), // not an earlier epoch
        ];
        for (i, (r, since, want)) in lineage.iter().enumerate() {
            let h = parse(r.clone(), *since, false).unwrap();
            assert_eq!(h.continuous, *want, "lineage case {i}: {h:?}");
        }
        let h = parse(cont(b"8", &[]), None, false).unwrap();
        assert_eq!(h.earlier, [at(7, 4).unwrap(), at(8, 6).unwrap()]);
        assert_eq!(h.epoch_start(), 6);
        assert_eq!(h.resumes(at(7, 5).unwrap()), Some(4));
        assert_eq!(h.resumes(at(7, 3).unwrap()), Some(3));
        assert_eq!(h.resumes(at(6, 3).unwrap()), None);
        let h = parse(reply(b"7", b"2", &[2, 1]), None, false).unwrap();
        let offsets: Vec<u64> = h.messages.iter().map(|m| m.offset).collect();
        assert_eq!(offsets, [1, 2]);
        assert_eq!(h.messages[0].payload, b"m1");
    }

    #[test]
    fn foreign_data_is_an_error_not_a_panic() {
        let bad: Vec<Value> = vec![
            Value::Null,
            Value::Array(vec![b(b"7"), b(b"1")]),
            Value::Array(vec![b(b"7"), b(b"1"), Value::Array(vec![])]),
            Value::Array(vec![b(b"7"), b(b"1"), Value::Array(vec![]), b(b"7:x ")]),
            Value::Array(vec![b(b"x"), b(b"1"), Value::Array(vec![]), b(b"")]),
            Value::Array(vec![
                b(b"7"),
                b(b"1"),
                Value::Array(vec![b(b"1-0")]),
                b(b""),
            ]),
            Value::Array(vec![
                b(b"7"),
                b(b"1"),
                Value::Array(vec![Value::Array(vec![
                    b(b"1-5"),
                    Value::Array(vec![b(b"d"), b(b"x")]),
                ])]),
                b(b""),
            ]),
        ];
        for v in bad {
            assert!(
                matches!(parse(v.clone(), None, false), Err(Error::History(_))),
                "{v:?}"
            );
        }
    }
}
