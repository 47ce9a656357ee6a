//! [`PubSub`]: the one public type, whatever the placement.

use std::sync::Arc;
use std::time::Duration;

use crate::control_loop::ClusterPubSub;
use crate::engine::{Engine, Pending, PublishOptions, Runtime};
use crate::error::Error;
use crate::front::{self, Placement};
use crate::metrics::{ClusterMetrics, Metrics};
use crate::pubsub::limits::Limits;
use crate::pubsub::{awaiting, Active, Channels, Fixed};
use resp::Value;

/// Subscriptions, publishing and delivery on one server, N client-side
/// shards or a Redis/Valkey Cluster (the placement, chosen by
/// [`PubSub::builder`]), with the same handler, events, metrics and
/// errors in each. Share it between threads with an `Arc`; every method
/// takes `&self`. Dropping it shuts it down, in the background ([`PubSub::close`]
/// to await that; [`PubSub::shutdown`] to wait for it).
pub struct PubSub {
    /// Shared with a background shutdown when the last handle is dropped.
    pub(super) placed: Arc<Placed>,
    /// What the servers take (see [`PubSubBuilder::max_message_size`](crate::PubSubBuilder::max_message_size)):
    /// every call checks its input against it before sending.
    pub(super) limits: Limits,
}

pub(super) enum Placed {
    Fixed(Fixed),
    Cluster(ClusterPubSub),
}

impl std::fmt::Debug for PubSub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.placed {
            Placed::Fixed(p) => p.fmt(f),
            Placed::Cluster(p) => p.fmt(f),
        }
    }
}

impl PubSub {
    pub(crate) fn fixed(p: Fixed, limits: Limits) -> Self {
        PubSub {
            placed: Arc::new(Placed::Fixed(p)),
            limits,
        }
    }

    pub(crate) fn cluster(p: ClusterPubSub, limits: Limits) -> Self {
        PubSub {
            placed: Arc::new(Placed::Cluster(p)),
            limits,
        }
    }

    /// `Err` when a message is over the limit (nothing is sent).
    #[inline]
    fn fits(&self, channel: &[u8], payload: &[u8]) -> Result<(), Error> {
        self.limits.check_message(channel, payload)
    }

    /// [`Error::InvalidArgument`] on an instance built to publish only.
    fn check_subscribes(&self) -> Result<(), Error> {
        if self.subscriber().shared.config.publish_only {
            return Err(Error::InvalidArgument(
                "this instance was built without a handler and publishes only: give the \
                 builder a handler, on_message or receiver to subscribe"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The subscribe side, the same in every placement.
    fn subscriber(&self) -> &ClusterPubSub {
        match &*self.placed {
            Placed::Fixed(p) => &p.sub,
            Placed::Cluster(p) => p,
        }
    }

    /// Asks for these channels: one (`"room:1"`) or many (an array,
    /// slice, `Vec`, set or iterator of names: see [`Channels`]). Returns
    /// at once; the subscribe commands
    /// leave from the control thread, batched with other calls (by
    /// partition on a cluster). Use [`PubSub::wait_active`] to learn when
    /// they are confirmed.
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`] after shutdown. [`Error::InvalidArgument`] on an
    /// instance built without a handler (it publishes only), and for
    /// a name longer than 4 GiB. [`Error::TooLarge`] for a name the
    /// servers cannot take: its subscribe reply (the name and about 64
    /// bytes) over the subscribers' output buffer limit (the server would
    /// disconnect the connection, and every channel on it), or the name
    /// over `proto-max-bulk-len`, as read at build, or over
    /// [`PubSubBuilder::max_message_size`](crate::PubSubBuilder::max_message_size). A refused name is never sent;
    /// the names after it are not asked for, some before it may be.
    pub fn subscribe(&self, channels: impl Channels) -> Result<(), Error> {
        self.check_subscribes()?;
        front::set_wanted(self.subscriber(), channels.into_channels(), true, |c| {
            self.limits.check_name(c, false)
        })
    }

    /// Gives these channels up. Returns at once, like
    /// [`PubSub::subscribe`], and from then on no message of theirs reaches
    /// the handler (those already received are passed over, and counted in
    /// [`Metrics::unwanted`]) unless they are subscribed again. The
    /// unsubscribe commands leave from the control thread;
    /// [`PubSub::wait_inactive`] learns when the servers have stopped
    /// sending them.
    ///
    /// A channel given up and asked for again starts a new subscription,
    /// as with the server's own commands: what is published between the
    /// server reading the unsubscribe and the new subscribe is not
    /// delivered, and no gap is signalled for it (the channel was given
    /// up). Asked for again before the control thread sent the
    /// unsubscribe, the subscription never lapses. Messages of the old
    /// subscription that arrive after the channel is asked for again are
    /// delivered; if the server drops that old subscription itself (its
    /// slot moves) before reading the unsubscribe, that is a loss and is
    /// signalled as a gap.
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`] after shutdown.
    pub fn unsubscribe(&self, channels: impl Channels) -> Result<(), Error> {
        front::set_wanted(self.subscriber(), channels.into_channels(), false, |_| {
            Ok(())
        })
    }

    /// Blocks until the servers have stopped sending `channels` (given up
    /// with [`PubSub::unsubscribe`] before) and every message of theirs
    /// already received has been passed over, or `timeout` passes: the
    /// unsubscribe is confirmed (a connection that broke meanwhile counts,
    /// since the server forgot its subscriptions). The async form:
    /// [`PubSub::inactive`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a channel that is subscribed (wanted)
    /// now, [`Error::WaitTimeout`] at the deadline, [`Error::Shutdown`]
    /// after shutdown.
    pub fn wait_inactive<C: AsRef<[u8]>>(
        &self,
        channels: &[C],
        timeout: Duration,
    ) -> Result<(), Error> {
        front::wait_inactive(self.subscriber(), channels, timeout)
    }

    /// The awaitable form of [`PubSub::wait_inactive`]: ready once the
    /// servers have stopped sending `channels`. The wait runs on a helper
    /// thread (it ends at the latest when the instance shuts down); it has
    /// no deadline: wrap it in the executor's timeout. Never blocks.
    ///
    /// # Errors
    ///
    /// Through the handle: as [`PubSub::wait_inactive`], less
    /// [`Error::WaitTimeout`].
    pub fn inactive(&self, channels: impl Channels) -> Pending<()> {
        let names: Vec<Vec<u8>> = channels
            .into_channels()
            .map(|c| c.as_ref().to_vec())
            .collect();
        let placed = self.placed.clone();
        awaiting::off_thread("wait", move || {
            let sub = match &*placed {
                Placed::Fixed(p) => &p.sub,
                Placed::Cluster(p) => p,
            };
            // Until the fence completes or the instance shuts down.
            front::wait_inactive(sub, &names, Duration::from_secs(365 * 24 * 3600))
        })
    }

    /// Whether the server has confirmed the channel's subscription on a
    /// connection that is still up.
    pub fn is_active(&self, channel: &[u8]) -> bool {
        self.subscriber().is_active(channel)
    }

    /// Asks for pattern subscriptions (`PSUBSCRIBE`): one pattern
    /// (`"room:*"`) or many, in the server's glob syntax (`*`, `?`,
    /// `[abc]`, `\` escapes). On N shards a pattern is subscribed on every
    /// server (a channel may live on any of them). Returns at once, like
    /// [`PubSub::subscribe`]; [`PubSub::wait_patterns_active`] learns when
    /// every server confirmed.
    ///
    /// Messages arrive through
    /// [`Handler::on_pattern_message`](crate::Handler::on_pattern_message) with the
    /// pattern and the channel (by default passed on to `on_message`), in
    /// the server's order per pattern (one worker per pattern). A channel
    /// also subscribed by name, or matched by several patterns, arrives
    /// once per subscription, as the server sends it. Losses are signalled
    /// per pattern, in order with its messages:
    /// [`Event::PatternGap`](crate::Event::PatternGap) (a connection lost,
    /// naming the server) and
    /// [`Event::PatternDropped`](crate::Event::PatternDropped).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] on a cluster in sharded mode (the
    /// default: sharded Pub/Sub has no patterns; a cluster in
    /// [`Mode::Classic`](crate::cluster::Mode::Classic) takes them), on an
    /// instance built without a handler, and for a pattern longer than
    /// 4 GiB. [`Error::TooLarge`] for a pattern the servers cannot take,
    /// as [`PubSub::subscribe`] for a name (none of the call's patterns
    /// is asked for then). A pattern's message carries the pattern as well
    /// as the channel and payload: publishing checks only the channel and
    /// payload, so keep patterns short next to the limit.
    /// [`Error::Shutdown`] after shutdown.
    pub fn psubscribe(&self, patterns: impl Channels) -> Result<(), Error> {
        self.check_subscribes()?;
        let patterns: Vec<Vec<u8>> = patterns
            .into_channels()
            .map(|p| p.as_ref().to_vec())
            .collect();
        for p in &patterns {
            self.limits.check_name(p, true)?;
        }
        self.subscriber().set_patterns_wanted(&patterns, true)
    }

    /// Gives these patterns up (`PUNSUBSCRIBE` on every server), as
    /// [`PubSub::unsubscribe`] does channels: from then on no message of
    /// theirs reaches the handler.
    ///
    /// # Errors
    ///
    /// As [`PubSub::psubscribe`].
    pub fn punsubscribe(&self, patterns: impl Channels) -> Result<(), Error> {
        let patterns: Vec<Vec<u8>> = patterns
            .into_channels()
            .map(|p| p.as_ref().to_vec())
            .collect();
        self.subscriber().set_patterns_wanted(&patterns, false)
    }

    /// Whether every server has confirmed the pattern's subscription on a
    /// connection that is still up.
    pub fn is_pattern_active(&self, pattern: &[u8]) -> bool {
        self.subscriber().shared.is_pattern_active(pattern)
    }

    /// [`PubSub::wait_active`] for patterns: blocks until every pattern is
    /// confirmed on every server, or `timeout` passes. The async form:
    /// [`PubSub::patterns_active`].
    ///
    /// # Errors
    ///
    /// As [`PubSub::wait_active`] ([`Error::SubscribeRefused`] names the
    /// pattern).
    pub fn wait_patterns_active<C: AsRef<[u8]>>(
        &self,
        patterns: &[C],
        timeout: Duration,
    ) -> Result<(), Error> {
        let sub = self.subscriber();
        sub.wait_patterns_active(patterns, timeout)
            .map_err(|e| sub.unreachable_or(e))
    }

    /// Blocks until every channel in `channels` is active (confirmed), or
    /// `timeout` passes. The async form: [`PubSub::active`].
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] when some channel is still not active at the
    /// deadline and some servers are not connected (naming each with its
    /// last connect error), [`Error::WaitTimeout`] when all are (for
    /// example for a channel that was never subscribed),
    /// [`Error::SubscribeRefused`] for a channel the server refused
    /// (naming it and the server's reason), [`Error::Shutdown`] after
    /// shutdown.
    pub fn wait_active<C: AsRef<[u8]>>(
        &self,
        channels: &[C],
        timeout: Duration,
    ) -> Result<(), Error> {
        let sub = self.subscriber();
        front::wait_active(sub, channels, timeout).map_err(|e| sub.unreachable_or(e))
    }

    /// Each server's subscribe connections now: whether they are up, how
    /// often they failed and why last (one entry per server in a fixed
    /// placement, per primary subscribed on in a cluster). Cheap: one
    /// short lock. [`Event::Disconnected`](crate::Event::Disconnected) and
    /// [`Event::Connected`](crate::Event::Connected) tell the changes as
    /// they happen.
    pub fn health(&self) -> Vec<crate::metrics::ServerHealth> {
        let now = crate::engine::clock::now();
        self.subscriber().shared.health.lock().snapshot(now)
    }

    /// The awaitable form of [`PubSub::wait_active`]: a future, for any
    /// executor, that is ready once every channel in `channels` is active,
    /// or with the first refusal, or at shutdown. It has no deadline:
    /// wrap it in the executor's timeout. Never blocks.
    ///
    /// ```no_run
    /// # async fn f(ps: &shardsub::PubSub) -> Result<(), shardsub::Error> {
    /// ps.subscribe(["news"])?;
    /// ps.active(&["news"]).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::SubscribeRefused`] for a channel the server refused,
    /// [`Error::Shutdown`] after shutdown.
    pub fn active<C: AsRef<[u8]>>(&self, channels: &[C]) -> Active<'_> {
        Active::new(self.subscriber(), channels, false)
    }

    /// The awaitable form of [`PubSub::wait_patterns_active`]: a future,
    /// for any executor, that is ready once every pattern in `patterns` is
    /// confirmed on every server, or with the first refusal, or at
    /// shutdown. It has no deadline: wrap it in the executor's timeout.
    /// Never blocks.
    ///
    /// ```no_run
    /// # async fn f(ps: &shardsub::PubSub) -> Result<(), shardsub::Error> {
    /// ps.psubscribe(["room:*"])?;
    /// ps.patterns_active(&["room:*"]).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::SubscribeRefused`] for a pattern a server refused,
    /// [`Error::Shutdown`] after shutdown.
    pub fn patterns_active<C: AsRef<[u8]>>(&self, patterns: &[C]) -> Active<'_> {
        Active::new(self.subscriber(), patterns, true)
    }

    /// Publishes `payload` to `channel` (anything that is bytes: `&str`,
    /// `String`, `&[u8]`, `Vec<u8>`, `b"…"`), fire-and-forget: on its shard's
    /// server, or with `SPUBLISH` to its slot's owner on a cluster
    /// (following redirects in the background). Allocates nothing in
    /// steady state (on servers, a recoverable channel's publish allocates
    /// its command, kept for a `NOSCRIPT` resend: see
    /// [`PubSubBuilder::history`](crate::PubSubBuilder::history)).
    ///
    /// One contract in every placement: `Ok` means the publish was taken
    /// (written to its connection's next batch, or, on a cluster, held for
    /// an owner that cannot be reached now: see
    /// [`PubSubBuilder::publish_hold`](crate::PubSubBuilder::publish_hold)); `Err` means it was not, and
    /// nothing of it will reach a server. A publish taken and failing
    /// later (its connection broke, its hold expired, redirects ran out)
    /// is counted in [`Metrics::publish_errors`]; use
    /// [`PubSub::publish_pending`] or [`PubSub::publish_wait`] to learn each
    /// outcome.
    ///
    /// It can block only while its connection has
    /// [`Builder::max_buffered_bytes`](crate::engine::Builder::max_buffered_bytes)
    /// queued (backpressure), for at most the request timeout. What the
    /// library sends again on its own (on a cluster: held publishes
    /// released to a new owner, a publish sent on after a reply) never
    /// waits there: it is queued past that bound, which the publish hold's
    /// limits and the publishes in flight bound in turn.
    ///
    /// # Errors
    ///
    /// - [`Error::NotConnected`] while the channel's server (on a cluster,
    ///   its slot's owner, when the publish hold is zero) is not connected;
    /// - [`Error::HoldFull`] (cluster) when the owner cannot be reached and
    ///   the hold is at its cap;
    /// - [`Error::Backpressure`] when the connection stayed full for the
    ///   request timeout;
    /// - [`Error::TooLarge`] when the message (channel, payload and about
    ///   64 bytes of frame) is over what the servers allow: the
    ///   subscribers' output buffer limit or `proto-max-bulk-len`, as read
    ///   at build, or [`PubSubBuilder::max_message_size`](crate::PubSubBuilder::max_message_size);
    /// - [`Error::Shutdown`] after shutdown.
    pub fn publish(
        &self,
        channel: impl AsRef<[u8]>,
        payload: impl AsRef<[u8]>,
    ) -> Result<(), Error> {
        let (channel, payload) = (channel.as_ref(), payload.as_ref());
        self.fits(channel, payload)?;
        match &*self.placed {
            Placed::Fixed(p) => p.publish(channel, payload),
            Placed::Cluster(p) => p.publish(channel, payload),
        }
    }

    /// Publishes and returns a handle to the outcome, the number of
    /// receivers (on a cluster, those on the slot's owner): `.await` it on
    /// any executor, [`wait`](Pending::wait) on it, or hand it a callback
    /// with [`then`](Pending::then) (run on an I/O thread, or at once on
    /// this one when the outcome is already known; keep it short, never
    /// block in it). The same path in every placement; in steady state
    /// nothing is allocated per call (the handle's cell is reused; a
    /// callback is boxed, which allocates unless it captures nothing).
    ///
    /// The call itself returns at once, except when the channel's
    /// connection already buffers its limit of unsent bytes (the server is
    /// not keeping up): then it waits for room, at most the request
    /// timeout ([`PubSubBuilder::request_timeout`](crate::PubSubBuilder::request_timeout), 5 s by default), and
    /// the handle fails with [`Error::Backpressure`] if none came. Dropping
    /// the handle does not withdraw the publish.
    ///
    /// # Errors
    ///
    /// Through the handle: as [`PubSub::publish_wait`], less
    /// [`Error::WaitTimeout`].
    pub fn publish_pending(
        &self,
        channel: impl AsRef<[u8]>,
        payload: impl AsRef<[u8]>,
    ) -> Pending<i64> {
        let (channel, payload) = (channel.as_ref(), payload.as_ref());
        if let Err(e) = self.fits(channel, payload) {
            return Pending::ready(Err(e));
        }
        match &*self.placed {
            Placed::Fixed(p) => p.publish_pending(channel, payload),
            Placed::Cluster(p) => p.publish_pending(channel, payload),
        }
    }

    /// Publishes and waits for the outcome: the number of receivers (on a
    /// cluster, those on the slot's owner). It blocks the calling thread;
    /// the async form: [`PubSub::publish_pending`].
    ///
    /// # Errors
    ///
    /// The publish's failure ([`Error::Reply`], [`Error::Timeout`],
    /// [`Error::NotConnected`], [`Error::Cluster`], …), at once
    /// [`Error::TooLarge`] as [`PubSub::publish`], or
    /// [`Error::WaitTimeout`] when `timeout` passed first.
    pub fn publish_wait(
        &self,
        channel: impl AsRef<[u8]>,
        payload: impl AsRef<[u8]>,
        timeout: Duration,
    ) -> Result<i64, Error> {
        let (channel, payload) = (channel.as_ref(), payload.as_ref());
        self.fits(channel, payload)?;
        match &*self.placed {
            Placed::Fixed(p) => p.publish_wait(channel, payload, timeout),
            Placed::Cluster(p) => p.publish_wait(channel, payload, timeout),
        }
    }

    /// Runs any command on the server that holds `key`, and returns its
    /// reply: for history, presence or any other data kept beside the
    /// channels, with no second client.
    ///
    /// - One server: that server.
    /// - N shards: the server a channel named `key` lives on
    ///   (`shard_of(key, N)`, as [`PubSub::server_of`]), so a key named
    ///   after a channel is kept with its messages.
    /// - A cluster: the owner of `key`'s slot (hash tags apply), following
    ///   `MOVED`, `ASK`, `TRYAGAIN` and `CLUSTERDOWN` within
    ///   [`PubSubBuilder::max_redirects`](crate::PubSubBuilder::max_redirects) and
    ///   [`PubSubBuilder::retry_window`](crate::PubSubBuilder::retry_window). To keep a key in a channel's
    ///   slot, give it the channel's partition tag: with
    ///   [`PubSub::server_channel`] = `{TAG}.ch`, a key `{TAG}.history:ch`
    ///   is in the same slot.
    ///
    /// It blocks the calling thread: up to the request timeout for the
    /// reply (per redirect on a cluster), and on a cluster up to the retry
    /// window while the slot has no reachable owner. On a cluster it
    /// follows the publishes' rules: a `MOVED` moves the slot's route for
    /// the publishes too. The command goes over the publish connection,
    /// pipelined with publishes; keep blocking commands (`BLPOP`, `XREAD
    /// BLOCK`) off it, since replies come in order. Do not call it from a
    /// [`Pending::then`] callback: the thread that runs those completes
    /// the reply. The async form: [`PubSub::command_pending`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), shardsub::Error> {
    /// # let ps = shardsub::PubSub::builder().address("127.0.0.1:6379")
    /// #     .handler(shardsub::handler_fn(|_, _| {})).build()?;
    /// ps.command("presence:room:42", ["SADD", "presence:room:42", "user:7"])?;
    /// let members = ps.command("presence:room:42", ["SMEMBERS", "presence:room:42"])?;
    /// # let _ = members;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The server's error reply ([`Error::Reply`]), the connection's
    /// ([`Error::NotConnected`], [`Error::Timeout`], …),
    /// [`Error::Cluster`] on a cluster when no owner answered in time or
    /// the redirects ran out, [`Error::Shutdown`] after shutdown. At once,
    /// nothing sent: [`Error::InvalidArgument`] for no arguments, and
    /// [`Error::TooLarge`] for an argument longer than the servers'
    /// `proto-max-bulk-len` (read at build: a server closes the
    /// connection on one, failing the publishes pipelined with it).
    pub fn command<I>(&self, key: impl AsRef<[u8]>, args: I) -> Result<Value, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let args = self.command_args(args)?;
        let key = key.as_ref();
        match &*self.placed {
            Placed::Fixed(p) => p.command(key, &args),
            Placed::Cluster(p) => p.command(key, args).wait(),
        }
    }

    /// The awaitable form of [`PubSub::command`]: a future for any
    /// executor that never blocks it. The command is pipelined with the
    /// publishes; the handle completes from the I/O thread, or on a
    /// cluster from the control thread, which follows redirects.
    ///
    /// # Errors
    ///
    /// Through the handle: as [`PubSub::command`].
    pub fn command_pending<I>(&self, key: impl AsRef<[u8]>, args: I) -> Pending<Value>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let args = match self.command_args(args) {
            Ok(args) => args,
            Err(e) => return Pending::ready(Err(e)),
        };
        match &*self.placed {
            Placed::Fixed(p) => p
                .publisher()
                .command_pending(p.server_of(key.as_ref()), args),
            Placed::Cluster(p) => p.command(key.as_ref(), args),
        }
    }

    /// The channel's name on the wire: itself on servers, in classic
    /// cluster mode, with partitions off (`partitions(0)`) and under a
    /// [`raw_names`](crate::PubSubBuilder::raw_names) prefix;
    /// `{tag}.channel` with its partition's tag otherwise.
    pub fn server_channel(&self, channel: &[u8]) -> Vec<u8> {
        match &*self.placed {
            Placed::Fixed(_) => channel.to_vec(),
            Placed::Cluster(p) => p.server_channel(channel),
        }
    }

    /// The app-level partitions (a cluster placement only).
    pub fn partitions(&self) -> Option<&shardcore::Partitions> {
        match &*self.placed {
            Placed::Fixed(_) => None,
            Placed::Cluster(p) => Some(p.partitions()),
        }
    }

    /// Index of the server (builder order) that owns `channel` (servers
    /// only; a cluster's owner is a slot's, and moves).
    pub fn server_of(&self, channel: &[u8]) -> Option<usize> {
        match &*self.placed {
            Placed::Fixed(p) => Some(p.server_of(channel)),
            Placed::Cluster(_) => None,
        }
    }

    /// The publish engine of servers, for other commands
    /// (`command_pending`, …); `None` on a cluster.
    pub fn publisher(&self) -> Option<&Engine> {
        match &*self.placed {
            Placed::Fixed(p) => Some(p.publisher()),
            Placed::Cluster(_) => None,
        }
    }

    /// Rereads a cluster's topology now (nothing on servers, which do not
    /// move).
    pub fn refresh(&self) {
        if let Placed::Cluster(p) = &*self.placed {
            p.refresh();
        }
    }

    /// A snapshot of the counters, queue depths, (with the envelope) lag
    /// quantiles and, on a cluster, its own section
    /// ([`Metrics::cluster`]: topology, redirects, holds, nodes and
    /// connections).
    pub fn metrics(&self) -> Metrics {
        match &*self.placed {
            Placed::Fixed(p) => p.metrics(),
            Placed::Cluster(p) => p.metrics(),
        }
    }

    /// The cluster's section of the metrics: `metrics().cluster`, a
    /// shorthand kept for code written before it was a section (`None` on
    /// servers).
    pub fn cluster_metrics(&self) -> Option<ClusterMetrics> {
        self.metrics().cluster
    }

    /// Appends the metrics to `out` in the Prometheus text exposition
    /// format ([`Metrics::to_prometheus`]: the delivery families and, on a
    /// cluster, the cluster's). Serve `out` with the content type
    /// `text/plain; version=0.0.4` (`examples/metrics_http.rs` does, on
    /// `/metrics`).
    pub fn render_prometheus(&self, out: &mut String) {
        self.metrics().to_prometheus(out);
    }

    /// The runtime whose I/O threads serve this instance (pass it to other
    /// builders to share them).
    pub fn runtime(&self) -> Runtime {
        match &*self.placed {
            Placed::Fixed(p) => p.publisher().runtime().clone(),
            Placed::Cluster(p) => p.runtime().clone(),
        }
    }

    /// Stops: the control thread, every connection, then the workers
    /// (messages still queued are counted as dropped at shutdown), and
    /// returns when all have stopped: it blocks for up to the shutdown
    /// timeout plus a handler call still running. Idempotent. Dropping
    /// the last handle shuts down too, in the background
    /// ([`PubSub::close`] to await that).
    ///
    /// Called from a thread of the [`Runtime`] (a handler, an event
    /// callback, a [`Pending::then`] callback), it returns at once: those
    /// threads are shared with every other instance on the runtime, so
    /// none of them waits for this one. New calls fail with
    /// [`Error::Shutdown`] from then on, and the rest (replies awaited up
    /// to the shutdown timeout, connections closed, queued messages
    /// dropped and counted) finishes in the background. A later
    /// `shutdown` from an application thread waits for the end, as
    /// [`PubSub::close`] does. The async forms: [`PubSub::close`] and
    /// [`PubSub::shutdown_pending`].
    pub fn shutdown(&self) {
        shut_down(&self.placed);
    }

    /// The awaitable form of [`PubSub::shutdown`]: runs it on a helper
    /// thread the library starts (so no executor thread blocks on the
    /// joins) and completes the handle when it has finished. Shutdown
    /// takes about the shutdown timeout at most (replies still awaited),
    /// plus a handler call still running.
    ///
    /// # Errors
    ///
    /// Through the handle: [`Error::Runtime`] when the OS refused the
    /// helper thread (nothing was shut down; dropping the last handle
    /// still shuts down).
    pub fn shutdown_pending(self: &Arc<Self>) -> Pending<()> {
        let ps = self.clone();
        awaiting::off_thread("shutdown", move || {
            ps.shutdown();
            Ok(())
        })
    }

    /// Shuts down on a helper thread and returns a handle that completes
    /// when it has finished: what dropping the instance does, with a way to
    /// await it. Never blocks.
    pub fn close(self) -> Pending<()> {
        let placed = self.placed.clone();
        drop(self); // shuts nothing down: `placed` is still shared
        awaiting::off_thread("shutdown", move || {
            shut_down(&placed);
            Ok(())
        })
    }

    /// Whether [`PubSub::shutdown`] has run (or is running).
    fn is_shut(&self) -> bool {
        self.subscriber().check_open().is_err()
    }

    /// A command's arguments, owned: at least its name, none longer than
    /// the servers take.
    fn command_args<I>(&self, args: I) -> Result<Vec<Vec<u8>>, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let args: Vec<Vec<u8>> = args.into_iter().map(|a| a.as_ref().to_vec()).collect();
        if args.is_empty() {
            return Err(Error::InvalidArgument(
                "a command needs at least its name".into(),
            ));
        }
        self.limits.check_arguments(&args)?;
        Ok(args)
    }
}

/// Shuts `placed` down (blocking).
fn shut_down(placed: &Placed) {
    match placed {
        Placed::Fixed(p) => p.shutdown(),
        Placed::Cluster(p) => p.shutdown(),
    }
}

/// Dropping the last handle never blocks the caller: when it was not shut
/// down yet, the shutdown (joining the control thread and the workers, a
/// handler call still running included) moves to a helper thread and
/// finishes in the background ([`PubSub::close`] returns a handle to await
/// it). Where the OS refuses the thread, it shuts down here.
impl Drop for PubSub {
    fn drop(&mut self) {
        if Arc::strong_count(&self.placed) > 1 || self.is_shut() {
            // Nothing left to do, or another holder (`close`, a helper
            // thread of a `*_pending` call) lets go last: the placement
            // shuts down when dropped, on that thread.
            return;
        }
        let placed = self.placed.clone();
        let mut done = awaiting::off_thread("shutdown", move || {
            shut_down(&placed);
            Ok(())
        });
        // Only a thread the OS refused fails it.
        if let Some(Err(e)) = done.try_take() {
            log::warn!("no background shutdown ({e}); shutting down here");
            shut_down(&self.placed);
        }
    }
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<PubSub>();
    is::<Active<'static>>();
    is::<Pending<i64>>();
    is::<crate::pubsub::Receiver>();
    is::<crate::pubsub::ReceiverHandler>();
    let _ = PublishOptions::classic;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use testkit::{kinds, Server};

    use crate::PubSub;

    const BOUND: Duration = Duration::from_secs(10);

    #[test]
    fn pubsub_metrics_count_its_engines_thread_panics() {
        for kind in kinds() {
            let server = Server::start(kind).unwrap();
            let ps = PubSub::builder()
                .address(server.addr().to_string())
                .workers(1)
                .io_threads(1)
                .handler(|_: &[u8], _: &[u8]| {})
                .build()
                .unwrap();
            assert_eq!(ps.metrics().thread_panics, 0);
            ps.publisher().unwrap().panic_io_thread();
            testkit::wait_for("the panic counted", BOUND, || {
                Ok((ps.metrics().thread_panics == 1).then_some(()))
            })
            .unwrap();
            ps.shutdown();
            assert_eq!(ps.metrics().thread_panics, 1, "{kind:?}: counted once");
        }
    }
}
