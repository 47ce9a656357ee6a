//! INTERIM: a minimal RESP reader until `resp::parse` works; then this file
//! goes away and the client reads with `resp::parse`.

use resp::Value;

/// Parses one value from the start of `buf`: `Ok(Some((value, consumed)))`,
/// `Ok(None)` if more bytes are needed, `Err` for invalid input.
/// Streamed forms are not supported here.
pub(crate) fn parse(buf: &[u8]) -> Result<Option<(Value, usize)>, String> {
    parse_at(buf, 0, 0)
}

fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], at + end + 2))
}

fn int(bytes: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad integer {:?}", String::from_utf8_lossy(bytes)))
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Value, usize)>, String> {
    if depth > 64 {
        return Err("nesting too deep".into());
    }
    let Some(&tag) = buf.get(at) else {
        return Ok(None);
    };
    let Some((body, next)) = line(buf, at + 1) else {
        return Ok(None);
    };
    let text = || body.to_vec();
    let value = match tag {
        b'+' => Value::Simple(text()),
        b'-' => Value::Error(text()),
        b':' => Value::Integer(int(body)?),
        b'_' => Value::Null,
        b'#' => Value::Boolean(body == b"t"),
        b',' => Value::Double(
            std::str::from_utf8(body)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or("bad double")?,
        ),
        b'(' => Value::BigNumber(text()),
        b'$' | b'!' | b'=' => {
            let len = int(body)?;
            if len < 0 {
                return Ok(Some((Value::Null, next)));
            }
            let len = usize::try_from(len).map_err(|_| "bad length")?;
            let end = next + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            let data = buf[next..end].to_vec();
            let value = match tag {
                b'$' => Value::Bulk(data),
                b'!' => Value::BlobError(data),
                _ => {
                    let mut format = [0u8; 3];
                    format.copy_from_slice(data.get(..3).ok_or("short verbatim")?);
                    Value::Verbatim {
                        format,
                        text: data.get(4..).unwrap_or_default().to_vec(),
                    }
                }
            };
            return Ok(Some((value, end + 2)));
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let count = int(body)?;
            if count < 0 {
                return Ok(Some((Value::Null, next)));
            }
            let pairs = matches!(tag, b'%' | b'|');
            let n = usize::try_from(count).map_err(|_| "bad length")? * if pairs { 2 } else { 1 };
            let mut items = Vec::new();
            let mut pos = next;
            for _ in 0..n {
                match parse_at(buf, pos, depth + 1)? {
                    Some((v, p)) => {
                        items.push(v);
                        pos = p;
                    }
                    None => return Ok(None),
                }
            }
            let pair_up = |items: Vec<Value>| {
                let mut out = Vec::new();
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    out.push((k, v));
                }
                out
            };
            let value = match tag {
                b'*' => Value::Array(items),
                b'~' => Value::Set(items),
                b'>' => Value::Push(items),
                b'%' => Value::Map(pair_up(items)),
                _ => {
                    let attributes = pair_up(items);
                    return match parse_at(buf, pos, depth + 1)? {
                        Some((v, p)) => Ok(Some((
                            Value::Attributed {
                                attributes,
                                value: Box::new(v),
                            },
                            p,
                        ))),
                        None => Ok(None),
                    };
                }
            };
            return Ok(Some((value, pos)));
        }
        other => return Err(format!("unknown type byte {other:#04x} at {at}")),
    };
    Ok(Some((value, next)))
}
