//! Publishing with history on servers (one, or N shards): the publish
//! script on the channel's server, over the connection a plain publish of
//! the channel would take (so one channel's publishes stay in order).

use std::sync::{Arc, Weak};

use crate::engine::Engine;
use crate::error::Error;
use crate::history::script::{self, PublishArgs};
use crate::history::{keys_into, ttl_arg, HistoryOptions};

/// Publishes `payload` to `channel` with history, and runs `f` with the
/// receiver count or the error. A `NOSCRIPT` answer sends the same
/// command again as `EVAL` (from the I/O thread) before `f` runs.
///
/// One allocation per publish: the command is kept until its reply, for
/// that resend.
///
/// # Errors
///
/// What is known at once ([`Error::NotConnected`], [`Error::Shutdown`],
/// …); `f` has then run with the same error.
pub(crate) fn publish<F>(
    engine: &Arc<Engine>,
    channel: &[u8],
    payload: &[u8],
    o: &HistoryOptions,
    envelope_us: Option<u64>,
    f: F,
) -> Result<(), Error>
where
    F: FnOnce(Result<i64, Error>) + Send + 'static,
{
    let (mut meta, mut stream) = (Vec::new(), Vec::new());
    keys_into(channel, &mut meta, &mut stream);
    let ttl = ttl_arg(o.max_age);
    let mut cmd = Vec::with_capacity(96 + meta.len() * 3 + payload.len());
    script::encode_publish(
        &mut cmd,
        &PublishArgs {
            meta: &meta,
            stream: &stream,
            wire: channel,
            payload,
            envelope_us,
            max_len: o.max_len,
            ttl: &ttl,
            sharded: false,
            cluster: false,
        },
    );
    let cmd: Arc<[u8]> = cmd.into();
    let again = (Arc::downgrade(engine), cmd.clone(), channel.to_vec());
    engine.submit_encoded_then(channel, &cmd, move |r| match r {
        Err(Error::Reply { message, .. }) if script::is_noscript(&message) => {
            resend(again, f);
        }
        r => f(r),
    })
}

/// The `EVAL` form of a command that met `NOSCRIPT`, with its outcome to
/// `f`.
fn resend<F>((engine, cmd, channel): (Weak<Engine>, Arc<[u8]>, Vec<u8>), f: F)
where
    F: FnOnce(Result<i64, Error>) + Send + 'static,
{
    let (Some(engine), Some((eval, _))) = (engine.upgrade(), script::to_eval(&cmd)) else {
        return f(Err(Error::Shutdown));
    };
    // An immediate failure has reached `f` already.
    let _ = engine.submit_encoded_then(&channel, &eval, f);
}
