//! How a connection's requests fail, and how a failed connect reads.

use std::collections::VecDeque;
use std::io;

use crate::conn::Request;
use crate::engine::kept::Kept;
use crate::engine::pending::Completion;
use crate::engine::settings::Settings;
use crate::error::Error;
use crate::metrics::add;

pub(super) fn connect_error(addr: crate::addr::ServerAddr, e: &io::Error) -> Error {
    Error::Connect {
        addr,
        kind: e.kind(),
        reason: e.to_string().into(),
    }
}

pub(super) fn fail_all(
    reqs: &mut VecDeque<Request<Completion>>,
    error: &Error,
    settings: &Settings,
    kept: &mut Kept,
) {
    add(&settings.counters.failed, reqs.len() as u64);
    for r in reqs.drain(..) {
        r.user.fail(error.clone(), settings, kept);
    }
}
