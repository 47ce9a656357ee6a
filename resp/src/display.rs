//! Replies as text, the way `redis-cli -3` prints them in a terminal, plus
//! what `redis-cli` cannot print: attributes and push frames.
//!
//! - strings are quoted with C-style escapes, `(integer) 1`, `(double) 3.141`,
//!   `(true)`, `(nil)`, `(big number) 123…`, `(error) ERR …`; simple strings
//!   and verbatim strings are printed as they are;
//! - arrays number their elements `1) `, sets `1~ `, maps `1# key => value`,
//!   nested aggregates indented under their index;
//! - an attribute is printed as a map whose lines start with `|`, before the
//!   reply it describes; a push is printed as an array whose lines start with
//!   `>`.
//!
//! ```
//! use resp::display::{format_push, format_reply};
//! use resp::Value;
//! let v = Value::Array(vec![Value::Integer(1), Value::Bulk(b"a\n".to_vec())]);
//! assert_eq!(format_reply(&v), "1) (integer) 1\n2) \"a\\n\"\n");
//! let p = Value::Push(vec![Value::Bulk(b"server-cpu-usage".to_vec()), Value::Integer(42)]);
//! assert_eq!(format_push(&p), ">1) \"server-cpu-usage\"\n>2) (integer) 42\n");
//! ```

use alloc::format;
use alloc::string::{String, ToString};
use core::fmt::Write;

use crate::Value;

/// Formats a reply (ending with a newline).
pub fn format_reply(value: &Value) -> String {
    let mut out = String::new();
    tty(value, "", &mut out);
    out
}

/// Formats a push frame: like an array, each line prefixed with `>`.
/// A value that is not a push is formatted as [`format_reply`] would, with
/// the same prefix.
pub fn format_push(value: &Value) -> String {
    let body = match value {
        Value::Push(items) => format_reply(&Value::Array(items.clone())),
        other => format_reply(other),
    };
    prefix_lines(&body, ">")
}

fn prefix_lines(text: &str, mark: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for line in text.split_inclusive('\n') {
        out.push_str(mark);
        out.push_str(line);
    }
    out
}

fn tty(value: &Value, prefix: &str, out: &mut String) {
    match value {
        Value::Simple(s) => {
            out.push_str(&String::from_utf8_lossy(s));
            out.push('\n');
        }
        Value::Error(s) | Value::BlobError(s) => {
            let _ = writeln!(out, "(error) {}", String::from_utf8_lossy(s));
        }
        Value::Integer(n) => {
            let _ = writeln!(out, "(integer) {n}");
        }
        Value::Double(d) => {
            let _ = writeln!(out, "(double) {}", format_double(*d));
        }
        Value::Bulk(s) => {
            repr(s, out);
            out.push('\n');
        }
        Value::Verbatim { text, .. } => {
            out.push_str(&String::from_utf8_lossy(text));
            out.push('\n');
        }
        Value::Null => out.push_str("(nil)\n"),
        Value::Boolean(b) => out.push_str(if *b { "(true)\n" } else { "(false)\n" }),
        Value::BigNumber(digits) => {
            let _ = writeln!(out, "(big number) {}", String::from_utf8_lossy(digits));
        }
        Value::Array(items) => list(items, ')', "(empty array)", prefix, out),
        Value::Set(items) => list(items, '~', "(empty set)", prefix, out),
        Value::Push(items) => list(items, ')', "(empty push)", prefix, out),
        Value::Map(pairs) => map(pairs, '#', prefix, out),
        Value::Attributed { attributes, value } => {
            let mut attr = String::new();
            map(attributes, '#', prefix, &mut attr);
            // Continuation lines already carry `prefix`; mark every line.
            out.push_str(&prefix_lines(&attr, "|"));
            out.push_str(prefix);
            tty(value, prefix, out);
        }
    }
}

fn index_width(n: usize) -> usize {
    let mut width = 1;
    let mut n = n / 10;
    while n > 0 {
        width += 1;
        n /= 10;
    }
    width
}

fn list(items: &[Value], sep: char, empty: &str, prefix: &str, out: &mut String) {
    if items.is_empty() {
        out.push_str(empty);
        out.push('\n');
        return;
    }
    let width = index_width(items.len());
    let child = format!("{prefix}{}", " ".repeat(width + 2));
    for (i, item) in items.iter().enumerate() {
        let p = if i == 0 { "" } else { prefix };
        let _ = write!(out, "{p}{:>width$}{sep} ", i + 1);
        tty(item, &child, out);
    }
}

fn map(pairs: &[(Value, Value)], sep: char, prefix: &str, out: &mut String) {
    if pairs.is_empty() {
        out.push_str("(empty hash)\n");
        return;
    }
    let width = index_width(pairs.len());
    let child = format!("{prefix}{}", " ".repeat(width + 2));
    for (i, (k, v)) in pairs.iter().enumerate() {
        let p = if i == 0 { "" } else { prefix };
        let _ = write!(out, "{p}{:>width$}{sep} ", i + 1);
        tty(k, &child, out);
        if out.ends_with('\n') {
            out.pop();
        }
        out.push_str(" => ");
        if is_multiline(v) {
            out.push('\n');
            out.push_str(&child);
        }
        tty(v, &child, out);
    }
}

/// Whether a value takes several lines (then a map puts it under its key).
fn is_multiline(v: &Value) -> bool {
    match v {
        Value::Array(items) | Value::Set(items) | Value::Push(items) => match items.as_slice() {
            [] => false,
            [one] => is_multiline(one),
            _ => true,
        },
        Value::Map(pairs) => match pairs.as_slice() {
            [] => false,
            [(_, one)] => is_multiline(one),
            _ => true,
        },
        Value::Attributed { .. } => true,
        _ => false,
    }
}

/// Like `redis-cli`: the shortest text that reads back the same, `inf`,
/// `-inf`, `nan`.
fn format_double(d: f64) -> String {
    if d.is_nan() {
        "nan".to_string()
    } else if d.is_infinite() {
        if d > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        format!("{d}")
    }
}

/// A quoted string with C-style escapes (as `redis-cli` prints strings).
fn repr(bytes: &[u8], out: &mut String) {
    out.push('"');
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::boxed::Box;
    use alloc::vec;

    fn bulk(s: &str) -> Value {
        Value::Bulk(s.as_bytes().to_vec())
    }

    #[test]
    fn scalars() {
        let cases = [
            (Value::Simple(b"OK".to_vec()), "OK\n"),
            (Value::Error(b"ERR x".to_vec()), "(error) ERR x\n"),
            (Value::BlobError(b"SYNTAX y".to_vec()), "(error) SYNTAX y\n"),
            (Value::Integer(-3), "(integer) -3\n"),
            (Value::Double(2.5), "(double) 2.5\n"),
            (Value::Double(f64::INFINITY), "(double) inf\n"),
            (Value::Double(f64::NEG_INFINITY), "(double) -inf\n"),
            (Value::Double(f64::NAN), "(double) nan\n"),
            (bulk("Hello World"), "\"Hello World\"\n"),
            (
                Value::Bulk(b"q\"\\\r\t\x07\x08\x01\xff".to_vec()),
                "\"q\\\"\\\\\\r\\t\\a\\b\\x01\\xff\"\n",
            ),
            (Value::Null, "(nil)\n"),
            (Value::Boolean(true), "(true)\n"),
            (Value::Boolean(false), "(false)\n"),
            (Value::BigNumber(b"-123".to_vec()), "(big number) -123\n"),
            (
                Value::Verbatim {
                    format: *b"txt",
                    text: b"a\nb".to_vec(),
                },
                "a\nb\n",
            ),
        ];
        for (v, want) in cases {
            assert_eq!(format_reply(&v), want, "{v:?}");
        }
    }

    #[test]
    fn empty_aggregates() {
        assert_eq!(format_reply(&Value::Array(vec![])), "(empty array)\n");
        assert_eq!(format_reply(&Value::Set(vec![])), "(empty set)\n");
        assert_eq!(format_reply(&Value::Map(vec![])), "(empty hash)\n");
        assert_eq!(format_reply(&Value::Push(vec![])), "(empty push)\n");
    }

    #[test]
    fn nesting_and_index_width_follow_redis_cli() {
        let ints = |n: i64| Value::Array((0..n).map(Value::Integer).collect());
        let v = Value::Array(vec![ints(2), bulk("x")]);
        assert_eq!(
            format_reply(&v),
            "1) 1) (integer) 0\n   2) (integer) 1\n2) \"x\"\n"
        );
        let ten = format_reply(&ints(10));
        assert!(ten.starts_with(" 1) (integer) 0\n 2) "), "{ten}");
        assert!(ten.ends_with("10) (integer) 9\n"), "{ten}");
        // A map value on several lines goes under its key.
        let m = Value::Map(vec![(bulk("a"), ints(2)), (bulk("b"), Value::Integer(1))]);
        assert_eq!(
            format_reply(&m),
            "1# \"a\" => \n   1) (integer) 0\n   2) (integer) 1\n2# \"b\" => (integer) 1\n"
        );
        let s = Value::Set(vec![Value::Integer(0), Value::Integer(1)]);
        assert_eq!(format_reply(&s), "1~ (integer) 0\n2~ (integer) 1\n");
    }

    #[test]
    fn attributes_and_pushes_are_marked() {
        let v = Value::Attributed {
            attributes: vec![(
                bulk("key-popularity"),
                Value::Array(vec![bulk("key:123"), Value::Integer(90)]),
            )],
            value: Box::new(bulk("real")),
        };
        assert_eq!(
            format_reply(&v),
            "|1# \"key-popularity\" => \n|   1) \"key:123\"\n|   2) (integer) 90\n\"real\"\n"
        );
        let p = Value::Push(vec![bulk("message"), bulk("ch"), bulk("hi")]);
        assert_eq!(format_push(&p), ">1) \"message\"\n>2) \"ch\"\n>3) \"hi\"\n");
    }
}
