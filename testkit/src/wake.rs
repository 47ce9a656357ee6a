//! Wakers for tests that poll futures by hand: one that counts its wakes,
//! and [`block_on`], which polls on this thread and sleeps only until the
//! future's waker unparks it.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// How often a [`counting_waker`] was woken.
#[derive(Debug, Default)]
pub struct WakeCount(AtomicUsize);

impl WakeCount {
    /// Wakes so far.
    pub fn wakes(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A waker that counts its wakes, and its count.
pub fn counting_waker() -> (Arc<WakeCount>, Waker) {
    let count = Arc::new(WakeCount::default());
    (count.clone(), Waker::from(count))
}

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// A waker that unparks the calling thread.
pub fn unpark_waker() -> Waker {
    Waker::from(Arc::new(Unpark(std::thread::current())))
}

/// Runs `f` on this thread with no runtime around it: polls it, and
/// between polls sleeps until its waker unparks this thread. `None` when
/// `bound` passes first, so a lost wake-up shows as `None` (the future is
/// not polled again once the bound has passed).
pub fn block_on<F: Future>(f: F, bound: Duration) -> Option<F::Output> {
    let waker = unpark_waker();
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    let deadline = Instant::now() + bound;
    loop {
        if let Poll::Ready(r) = f.as_mut().poll(&mut cx) {
            return Some(r);
        }
        std::thread::park_timeout(deadline.saturating_duration_since(Instant::now()));
        if Instant::now() >= deadline {
            return None;
        }
    }
}
