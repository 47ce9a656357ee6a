//! The workers' history readers ([`Reader`]): one non-blocking read of a
//! recoverable channel's history, on the publish connections (the
//! channel's server, or its slot's owner on a cluster), with the outcome
//! handed to a callback on the I/O thread. The worker never waits for it
//! and the I/O threads never block on it.

use std::sync::{Arc, Weak};

use resp::Value;

use crate::cluster::shared::Shared;
use crate::engine::Engine;
use crate::error::Error;
use crate::history::{keys_into, read, script, History, Position, Rules};
use crate::workers::Reader;

type Done = Box<dyn FnOnce(Result<History, Error>) + Send>;

/// Sends the read to `engine`'s server `server`: `EVALSHA`, and `EVAL`
/// after a `NOSCRIPT`; `done` gets the parsed outcome.
fn send(engine: Weak<Engine>, server: usize, args: Args, done: Done) {
    let Some(e) = engine.upgrade() else {
        return done(Err(Error::Shutdown));
    };
    let command = read::command(
        &args.meta,
        &args.stream,
        Some(args.since),
        args.limit,
        args.eval,
    );
    e.command_then(server, command, move |r: Result<Value, Error>| match r {
        Err(Error::Reply { message, .. }) if script::is_noscript(&message) && !args.eval => {
            send(engine, server, Args { eval: true, ..args }, done)
        }
        r => done(r.and_then(|v| read::parse(v, Some(args.since), args.envelope))),
    });
}

struct Args {
    meta: Vec<u8>,
    stream: Vec<u8>,
    since: Position,
    limit: usize,
    envelope: bool,
    eval: bool,
}

impl Args {
    fn new(base: &[u8], since: Position, limit: usize, envelope: bool) -> Self {
        let (mut meta, mut stream) = (Vec::new(), Vec::new());
        keys_into(base, &mut meta, &mut stream);
        Args {
            meta,
            stream,
            since,
            limit,
            envelope,
            eval: false,
        }
    }
}

/// Servers (one, or N shards): the channel's server.
pub(crate) struct FixedReader {
    pub(crate) engine: Weak<Engine>,
    pub(crate) rules: Arc<Rules>,
    pub(crate) servers: usize,
    pub(crate) envelope: bool,
}

impl Reader for FixedReader {
    fn recoverable(&self, channel: &[u8]) -> bool {
        self.rules.of(channel).is_some()
    }

    fn read(&self, channel: &[u8], since: Position, limit: usize, done: Done) {
        let server = match self.servers {
            0 | 1 => 0,
            n => shardcore::shard_of(channel, n as u32) as usize,
        };
        let args = Args::new(channel, since, limit, self.envelope);
        send(self.engine.clone(), server, args, done);
    }
}

/// A cluster: the owner of the channel's partition slot, as the publish
/// routes know it now (a redirect fails the read: the channel then gets
/// `Unrecoverable`).
pub(crate) struct ClusterReader {
    pub(crate) shared: Weak<Shared>,
}

impl Reader for ClusterReader {
    fn recoverable(&self, channel: &[u8]) -> bool {
        self.shared
            .upgrade()
            .is_some_and(|s| s.config.history.of(channel).is_some())
    }

    fn read(&self, channel: &[u8], since: Position, limit: usize, done: Done) {
        let Some(s) = self.shared.upgrade() else {
            return done(Err(Error::Shutdown));
        };
        let p = s.parts.partition_of(channel);
        let mut base = Vec::new();
        s.parts.redis_channel_at(p, channel, &mut base);
        let slot = s.parts.slot(p);
        let Some(engine) = s.routes.read().engine_of(slot) else {
            return done(Err(Error::Cluster {
                slot,
                reason: "no known owner for the slot".into(),
            }));
        };
        let args = Args::new(&base, since, limit, s.config.envelope);
        send(Arc::downgrade(&engine), 0, args, done);
    }
}
