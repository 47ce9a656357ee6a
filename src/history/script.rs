//! The server-side scripts, and the publish command that runs one.
//!
//! `publish.lua` appends to the stream and publishes (see the module docs
//! of [`crate::history`]); `read.lua` returns `{epoch, last offset,
//! entries}` in one atomic read. Both are sent as `EVALSHA` and, when a
//! server answers `NOSCRIPT`, again as `EVAL` (which caches the script
//! there for the next `EVALSHA`).

use std::sync::LazyLock;

use resp::{PublishKind, Script};

/// The publish script. KEYS: meta, stream. ARGV: server channel, payload,
/// max_len, max_age in seconds, `PUBLISH` or `SPUBLISH`, and `c` on a
/// cluster (the script then compares `CLUSTER MYID` with the node that
/// wrote last, and begins a new epoch on another node), else empty.
/// Returns the receiver count.
pub const PUBLISH: &str = include_str!("publish.lua");
/// SHA1 of [`PUBLISH`], in lowercase hex (as `SCRIPT LOAD` answers).
pub const PUBLISH_SHA: &str = "f411789b495b7c000fae68c7d443417a6e2dc903";

/// The read script. KEYS: meta, stream. ARGV: `since` or `last`, an offset
/// (`since`: exclusive), a count, the offset's epoch. Returns `{epoch,
/// last offset, entries, earlier epochs}`, with an empty epoch when the
/// channel has no history; an offset of an earlier epoch reads on from
/// where that epoch ended on this node, if that is sooner.
pub const READ: &str = include_str!("read.lua");
/// SHA1 of [`READ`].
pub const READ_SHA: &str = "a2270220ed085de19deae5fc6552e607d64f4346";

/// The publish script's keys (meta, stream) and arguments (see
/// [`PUBLISH`]).
const KEYS: usize = 2;
const ARGS: usize = 6;

/// The publish command's fixed start: the array header, `EVALSHA`, the
/// SHA, the key count.
static SHA_HEAD: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut head = Vec::new();
    resp::encode_script_head(&mut head, Script::Sha(PUBLISH_SHA.as_bytes()), KEYS, ARGS);
    head
});

/// What the publish command carries.
pub(crate) struct PublishArgs<'a> {
    pub(crate) meta: &'a [u8],
    pub(crate) stream: &'a [u8],
    /// The channel's name on the server.
    pub(crate) wire: &'a [u8],
    pub(crate) payload: &'a [u8],
    /// The lag envelope's publish time, when it is on.
    pub(crate) envelope_us: Option<u64>,
    pub(crate) max_len: u64,
    /// `EXPIRE` seconds, in decimal.
    pub(crate) ttl: &'a str,
    pub(crate) sharded: bool,
    /// On a cluster: the script checks which node it runs on.
    pub(crate) cluster: bool,
}

/// Appends the whole `EVALSHA` publish command to `out`, and returns where
/// the server channel's name starts in it.
pub(crate) fn encode_publish(out: &mut Vec<u8>, a: &PublishArgs<'_>) -> usize {
    out.extend_from_slice(&SHA_HEAD);
    resp::encode_bulk(out, a.meta);
    resp::encode_bulk(out, a.stream);
    let wire_at = resp::encode_bulk_parts(out, &[a.wire]);
    match a.envelope_us {
        Some(t) => {
            let header = crate::wire::envelope::header(t);
            resp::encode_bulk_parts(out, &[&header, a.payload]);
        }
        None => resp::encode_bulk(out, a.payload),
    }
    resp::encode_bulk_u64(out, a.max_len);
    resp::encode_bulk(out, a.ttl.as_bytes());
    resp::encode_bulk(out, PublishKind::of(a.sharded).command());
    resp::encode_bulk(out, if a.cluster { &b"c"[..] } else { b"" });
    wire_at
}

/// The `EVAL` form of a publish command from [`encode_publish`], and how
/// far every byte after the SHA moved; `None` for anything else.
pub(crate) fn to_eval(command: &[u8]) -> Option<(Vec<u8>, usize)> {
    let rest = command.strip_prefix(&SHA_HEAD[..])?;
    let mut out = Vec::with_capacity(command.len() + PUBLISH.len());
    resp::encode_script_head(&mut out, Script::Source(PUBLISH.as_bytes()), KEYS, ARGS);
    out.extend_from_slice(rest);
    let moved = out.len() - rest.len() - (command.len() - rest.len());
    Some((out, moved))
}

/// Loads the publish script on `engine`'s servers, waiting for each
/// reply: so the first publishes after start meet no `NOSCRIPT` (whose
/// resend as `EVAL` could let a later publish of the same channel, sent
/// while the first waits for its reply, run first). A server that cannot
/// be reached now is passed over (it meets `NOSCRIPT` once, later).
pub(crate) fn preload(engine: &crate::engine::Engine) {
    for i in 0..engine.servers().len() {
        if let Err(e) = engine
            .command_pending(i, [&b"SCRIPT"[..], b"LOAD", PUBLISH.as_bytes()])
            .wait()
        {
            log::info!("history: the publish script is not loaded on server {i} yet ({e})");
        }
    }
}

/// Whether an error reply says the server lacks the script.
pub(crate) fn is_noscript(message: &str) -> bool {
    message.starts_with("NOSCRIPT")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eval_form_keeps_the_arguments_and_moves_the_name() {
        let mut cmd = Vec::new();
        let at = encode_publish(
            &mut cmd,
            &PublishArgs {
                meta: b"m",
                stream: b"s",
                wire: b"{a}.ch",
                payload: b"p",
                envelope_us: None,
                max_len: 100,
                ttl: "60",
                sharded: true,
                cluster: true,
            },
        );
        assert_eq!(&cmd[at..at + 6], b"{a}.ch");
        assert!(cmd.ends_with(b"$3\r\n100\r\n$2\r\n60\r\n$8\r\nSPUBLISH\r\n$1\r\nc\r\n"));
        let (eval, moved) = to_eval(&cmd).unwrap();
        assert_eq!(&eval[at + moved..at + moved + 6], b"{a}.ch");
        assert!(eval.starts_with(b"*11\r\n$4\r\nEVAL\r\n"));
        assert!(eval.ends_with(&cmd[SHA_HEAD.len()..]));
        assert_eq!(to_eval(&eval), None, "an EVAL is never rewritten again");
        assert!(is_noscript("NOSCRIPT No matching script."));
        assert!(!is_noscript("ERR NOSCRIPT"));
    }
}
