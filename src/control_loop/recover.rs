//! The workers' history readers ([`Reader`]): one non-blocking read of a
//! recoverable channel's history, on the publish connections (the
//! channel's server, or its slot's owner on a cluster), with the outcome
//! handed to a callback on the I/O thread. The worker never waits for it
//! and the I/O threads never block on it.

use std::sync::{Arc, Weak};

use resp::Value;

use crate::control_loop::shared::Shared;
use crate::engine::wait::Outcome;
use crate::engine::Engine;
use crate::error::Error;
use crate::history::{keys_into, read, script, History, Position, Rules};
use crate::workers::Reader;

type Done = Box<dyn FnOnce(Result<History, Error>) + Send>;

/// What to do with a read that failed on its first try (a cluster's:
/// follow the slot on a helper thread); `None` finishes it with the error.
type Fallback = Option<Box<dyn FnOnce(Args, Done) + Send>>;

/// Sends the read to `engine`'s server `server`: `EVALSHA`, and `EVAL`
/// after a `NOSCRIPT`; `done` gets the parsed outcome, unless it failed
/// and `fallback` takes it over.
fn send(engine: Weak<Engine>, server: usize, args: Args, done: Done, fallback: Fallback) {
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
            let args = Args { eval: true, ..args };
            send(engine, server, args, done, fallback)
        }
        Err(e) if !matches!(e, Error::Shutdown) && fallback.is_some() => {
            if let Some(f) = fallback {
                f(args, done);
            }
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
        send(self.engine.clone(), server, args, done, None);
    }
}

/// A cluster: the owner of the channel's partition slot, as the publish
/// routes know it now. A read that fails there (a redirect, a connection
/// down, no owner known) is tried again on a short-lived helper thread
/// that follows the slot as [`PubSub::command`](crate::PubSub::command)
/// does (redirects and the retry window); the I/O threads never wait.
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
        let args = Args::new(&base, since, limit, s.config.envelope);
        let weak = self.shared.clone();
        let fallback: Fallback = Some(Box::new(move |args, done| follow(weak, args, done)));
        let engine = s.routes.read().engine_of(slot);
        match engine {
            Some(engine) => send(Arc::downgrade(&engine), 0, args, done, fallback),
            None => follow(self.shared.clone(), args, done),
        }
    }
}

/// The blocking, redirect-following read, on a helper thread.
fn follow(shared: Weak<Shared>, args: Args, done: Done) {
    // Completed by the thread, or by the error path when it cannot start.
    let outcome = Arc::new(Outcome::new());
    outcome.then(done);
    let finish = outcome.clone();
    let spawned = std::thread::Builder::new()
        .name("shardsub-history-read".into())
        .spawn(move || {
            let r = match shared.upgrade() {
                Some(s) => {
                    let run = |c: &[Vec<u8>]| {
                        crate::control_loop::keyed::command(&s, &args.meta, c.to_vec()).wait()
                    };
                    let (since, envelope) = (Some(args.since), args.envelope);
                    read::read(run, &args.meta, &args.stream, since, args.limit, envelope)
                }
                None => Err(Error::Shutdown),
            };
            finish.complete(r);
        });
    if let Err(e) = spawned {
        outcome.complete(Err(Error::runtime("history read thread", &e)));
    }
}
