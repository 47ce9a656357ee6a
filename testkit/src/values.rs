//! Small readers over [`Value`] used by testkit itself and handy in tests.

use crate::{Error, Value};

/// The bytes of a simple, bulk or verbatim string, as (lossy) UTF-8 text.
pub fn text(value: &Value) -> Option<String> {
    match value {
        Value::Simple(b) | Value::Bulk(b) | Value::Verbatim { text: b, .. } => {
            Some(String::from_utf8_lossy(b).into_owned())
        }
        _ => None,
    }
}

/// Like [`text`], but an error naming what was expected when the shape differs.
///
/// # Errors
///
/// [`Error::Unexpected`] when `value` is not a string.
pub fn expect_text(value: &Value, what: &str) -> Result<String, Error> {
    text(value).ok_or_else(|| Error::unexpected(format!("a string for {what}"), value))
}

/// An integer, or a string that holds one.
pub fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Integer(i) => Some(*i),
        other => text(other)?.trim().parse().ok(),
    }
}

/// The elements of an array, set or push.
pub fn items(value: &Value) -> Option<&[Value]> {
    match value {
        Value::Array(v) | Value::Set(v) | Value::Push(v) => Some(v),
        _ => None,
    }
}

/// `field:value` lookup in the text of an `INFO` or `CLUSTER INFO` reply.
pub fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == field).then(|| value.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_accept_their_shapes_and_reject_others() {
        assert_eq!(text(&Value::Bulk(b"x".to_vec())).as_deref(), Some("x"));
        assert_eq!(text(&Value::Integer(1)), None);
        assert_eq!(int(&Value::Simple(b" 42".to_vec())), Some(42));
        assert_eq!(int(&Value::Null), None);
        assert!(items(&Value::Array(vec![Value::Null])).is_some());
        assert!(expect_text(&Value::Null, "x").is_err());
        let info = "# Cluster\r\ncluster_state:ok\r\ncluster_slots_ok:16384\r\n";
        assert_eq!(info_field(info, "cluster_state").as_deref(), Some("ok"));
        assert_eq!(info_field(info, "cluster_slots").as_deref(), None);
    }
}
