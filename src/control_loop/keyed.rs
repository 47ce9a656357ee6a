//! Plain commands on a cluster, routed by key: to the owner of the key's
//! slot over that primary's publish connection, following `MOVED`, `ASK`,
//! `TRYAGAIN` and `CLUSTERDOWN` within the publish path's bounds
//! ([`PubSubBuilder::max_redirects`](crate::PubSubBuilder::max_redirects),
//! [`PubSubBuilder::retry_window`](crate::PubSubBuilder::retry_window)).
//!
//! It runs on the caller's thread and blocks (the I/O threads never wait
//! for a route): each attempt up to the request timeout, a wait for a
//! route or a retry up to the retry window.

use std::sync::Arc;
use std::time::Duration;

use resp::Value;
use topology::ClusterError;

use crate::control_loop::shared::Shared;
use crate::engine::wait::Deadline;
use crate::engine::{clock, Engine};
use crate::error::Error;

/// Longest wait between looks at the routes while a slot has no owner or
/// a `MOVED` target is not yet a route (a new map wakes the wait sooner).
const ROUTE_POLL: Duration = Duration::from_millis(10);

/// Waits for the routes to change, at most [`ROUTE_POLL`].
fn await_routes(shared: &Shared) {
    shared
        .active
        .sleep_until(Deadline::after(ROUTE_POLL).instant());
}

/// Sends `args` to the owner of `key`'s slot and returns its reply.
///
/// # Errors
///
/// The reply's or the connection's error; [`Error::Cluster`] when the slot
/// has no reachable owner within the retry window, or the redirects ran
/// out.
pub(crate) fn command(shared: &Arc<Shared>, key: &[u8], args: &[Vec<u8>]) -> Result<Value, Error> {
    let slot = shardcore::key_slot(key);
    let fail = |reason: String| Error::Cluster {
        slot,
        reason: reason.into(),
    };
    let window = shared.config.retry_window;
    let policy = shared.config.retry_policy();
    // The first wait for an owner or refusal for now: the retry window's
    // start.
    let mut first_wait: Option<control::Time> = None;
    let (mut redirects, mut tries) = (0u32, 0u32);
    // Where the next attempt goes: the slot's route, or the node a
    // redirect named (with `ASKING` first for `ASK`); the routes follow a
    // `MOVED` only after the refresh it asks for.
    let mut redirected: Option<(Arc<Engine>, bool)> = None;
    loop {
        let (engine, asking) = match redirected.take() {
            Some((e, ask)) => (Some(e), ask),
            None => (shared.routes.read().engine_of(slot), false),
        };
        let Some(engine) = engine else {
            if shared.closing.load(std::sync::atomic::Ordering::Acquire) {
                return Err(Error::Shutdown);
            }
            shared.request_refresh();
            let since = *first_wait.get_or_insert_with(clock::now);
            if clock::now().since(since) >= window {
                return Err(fail(format!("no known owner within {window:?}")));
            }
            await_routes(shared);
            continue;
        };
        let r = if asking {
            engine.asking_command_pending(args).wait()
        } else {
            engine.command_pending(0, args).wait()
        };
        let Err(Error::Reply { addr, message }) = &r else {
            return r;
        };
        let host = addr.host();
        let Some(error) = topology::parse_cluster_error(message.as_bytes(), host.as_deref()) else {
            return r;
        };
        let ask = matches!(error, ClusterError::Ask { .. });
        match error {
            ClusterError::Moved { addr: to, .. } | ClusterError::Ask { addr: to, .. } => {
                if let Err(e) = policy.redirect(&mut redirects) {
                    return Err(fail(format!("{e}, last: {message}")));
                }
                if !ask {
                    shared.request_refresh();
                }
                // An unknown endpoint (`?:port`): the refreshed routes say.
                let Some(to) = to else {
                    await_routes(shared);
                    continue;
                };
                match wait_for_engine(shared, &to, window) {
                    Some(e) => redirected = Some((e, ask)),
                    None => return Err(fail(format!("{message}: no connection to {to}"))),
                }
            }
            ClusterError::TryAgain | ClusterError::ClusterDown => {
                // The publishes' schedule (20 ms doubling to 500 ms).
                let now = clock::now();
                let since = *first_wait.get_or_insert(now);
                let Ok(at) = policy.retry(now, since, &mut tries) else {
                    return r;
                };
                std::thread::sleep(at.since(now));
            }
        }
    }
}

/// A publish engine of the primary at `to` (`host:port`), once the routes
/// have one; `None` after `window`.
fn wait_for_engine(
    shared: &Shared,
    to: &topology::NodeAddr,
    window: Duration,
) -> Option<Arc<Engine>> {
    let want = crate::control_loop::topo::resolve(&*shared.resolver, to)?;
    let deadline = Deadline::after(window);
    loop {
        let found = shared
            .routes
            .read()
            .engines
            .iter()
            .find(|e| e.servers().first().and_then(|a| a.tcp()) == Some(want))
            .cloned();
        if found.is_some() || deadline.passed() {
            return found;
        }
        await_routes(shared);
    }
}
