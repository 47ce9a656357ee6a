//! The awaitable forms of [`PubSub::wait_active`](crate::PubSub::wait_active),
//! [`PubSub::wait_patterns_active`](crate::PubSub::wait_patterns_active)
//! and of shutdown: futures for any executor, woken by the same wake-ups
//! that end a blocked `wait_active`, with no thread and no timer of their
//! own.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::control_loop::ClusterPubSub;
use crate::engine::Pending;
use crate::error::Error;
use crate::front::Placement;

/// The future [`PubSub::active`](crate::PubSub::active) and
/// [`PubSub::patterns_active`](crate::PubSub::patterns_active) return:
/// ready once every channel (or pattern) it names is active (confirmed on
/// a connection that is up; a pattern on every server), or with the first
/// refusal, or at shutdown.
///
/// It has no deadline of its own (the library has no timer): wrap it in
/// the executor's timeout (`tokio::time::timeout`, say) when a channel may
/// never become active. Polling never blocks; a confirmation, a
/// refusal, a connection coming up, a topology change or shutdown wakes
/// the task that polled last.
#[must_use = "futures do nothing unless polled"]
pub struct Active<'a> {
    sub: &'a ClusterPubSub,
    channels: Vec<Vec<u8>>,
    /// They are patterns.
    patterns: bool,
    /// Channels before this one are known to be active.
    next: usize,
    /// The waker registration, from the first poll that found work left.
    registration: Option<u64>,
}

impl std::fmt::Debug for Active<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Active")
            .field("channels", &self.channels.len())
            .field("active", &self.next)
            .finish_non_exhaustive()
    }
}

impl<'a> Active<'a> {
    /// Waits for `channels` (`patterns`: they are patterns).
    pub(crate) fn new<C: AsRef<[u8]>>(
        sub: &'a ClusterPubSub,
        channels: &[C],
        patterns: bool,
    ) -> Self {
        Active {
            sub,
            channels: channels.iter().map(|c| c.as_ref().to_vec()).collect(),
            patterns,
            next: 0,
            registration: None,
        }
    }

    /// One look, after the waker is registered (so a change after the look
    /// wakes the task).
    fn look(&mut self) -> Poll<Result<(), Error>> {
        let p = self.sub;
        if let Err(e) = p.check_open() {
            return Poll::Ready(Err(e));
        }
        let active = |c: &[u8]| match self.patterns {
            true => p.shared.is_pattern_active(c),
            false => p.is_active(c),
        };
        while self.channels.get(self.next).is_some_and(|c| active(c)) {
            self.next += 1;
        }
        let refusal = |c: &[u8]| match self.patterns {
            true => p.shared.pattern_refusal(c),
            false => p.front().refusal(p.lane_of(c), c),
        };
        match self.channels.get(self.next) {
            None => Poll::Ready(Ok(())),
            Some(c) => match refusal(c) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
        }
    }
}

impl Future for Active<'_> {
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let wait = &this.sub.front().active;
        wait.register(&mut this.registration, cx.waker());
        let r = this.look();
        if r.is_ready() {
            wait.unregister(&mut this.registration);
        }
        r
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.sub.front().active.unregister(&mut self.registration);
    }
}

/// Runs `f` on a helper thread named after `what` and completes the
/// returned handle with its result: how a blocking call (a build, a
/// shutdown, a cluster command that follows redirects) becomes a future
/// that never blocks an executor thread.
pub(crate) fn off_thread<T, F>(what: &'static str, f: F) -> Pending<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, Error> + Send + 'static,
{
    let (pending, slot) = Pending::new();
    let spawned = std::thread::Builder::new()
        .name(format!("shardsub-{what}"))
        .spawn(move || slot.complete(f()));
    match spawned {
        Ok(_) => pending,
        Err(e) => Pending::ready(Err(Error::runtime("helper thread", &e))),
    }
}
