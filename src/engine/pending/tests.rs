use super::*;
use std::task::Waker;

#[test]
fn wait_gets_the_result_from_another_thread() {
    let (p, slot) = Pending::<i64>::new();
    let t = std::thread::spawn(move || slot.complete(Ok(5)));
    assert_eq!(p.wait().unwrap(), 5);
    t.join().unwrap();
}

#[test]
fn wait_timeout_gives_up() {
    let (p, _slot) = Pending::<i64>::new();
    let err = p.wait_timeout(Duration::from_millis(10)).unwrap_err();
    assert!(matches!(err, Error::WaitTimeout { .. }));
}

#[test]
fn then_runs_now_or_later() {
    let (tx, rx) = std::sync::mpsc::channel();
    Pending::ready(Ok(1)).then({
        let tx = tx.clone();
        move |r| tx.send(r.unwrap()).unwrap()
    });
    assert_eq!(rx.try_recv().unwrap(), 1);
    let (p, slot) = Pending::<i64>::new();
    p.then(move |r| tx.send(r.unwrap()).unwrap());
    assert!(rx.try_recv().is_err());
    slot.complete(Ok(2));
    slot.complete(Ok(3)); // ignored
    assert_eq!(rx.try_recv().unwrap(), 2);
}

#[test]
fn try_take() {
    let (mut p, slot) = Pending::<i64>::new();
    assert!(p.try_take().is_none());
    assert!(!p.is_done());
    slot.complete(Err(Error::Shutdown));
    assert!(p.is_done());
    assert!(matches!(p.try_take(), Some(Err(Error::Shutdown))));
}

/// A waker that counts its wakes.
#[derive(Default)]
struct CountWake(std::sync::atomic::AtomicUsize);
impl std::task::Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}
fn counting() -> (Arc<CountWake>, Waker) {
    let c = Arc::new(CountWake::default());
    (c.clone(), Waker::from(c))
}
fn wakes(c: &CountWake) -> usize {
    c.0.load(std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn poll_wakes_once_on_completion_and_then_is_ready() {
    let (mut p, slot) = Pending::<i64>::new();
    let (count, waker) = counting();
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut p).poll(&mut cx).is_pending());
    assert!(Pin::new(&mut p).poll(&mut cx).is_pending());
    assert_eq!(wakes(&count), 0);
    slot.complete(Ok(7));
    assert_eq!(wakes(&count), 1);
    slot.complete(Ok(8)); // ignored, no second wake
    assert_eq!(wakes(&count), 1);
    assert!(matches!(Pin::new(&mut p).poll(&mut cx), Poll::Ready(Ok(7))));
    assert!(matches!(
        Pin::new(&mut p).poll(&mut cx),
        Poll::Ready(Err(Error::InvalidArgument(_)))
    ));
}

#[test]
fn the_last_poller_is_woken_when_the_future_moves_between_tasks() {
    let (mut p, slot) = Pending::<i64>::new();
    let (first, w1) = counting();
    let (second, w2) = counting();
    assert!(Pin::new(&mut p)
        .poll(&mut Context::from_waker(&w1))
        .is_pending());
    assert!(Pin::new(&mut p)
        .poll(&mut Context::from_waker(&w2))
        .is_pending());
    slot.complete(Err(Error::Shutdown));
    assert_eq!((wakes(&first), wakes(&second)), (0, 1));
    let r = Pin::new(&mut p).poll(&mut Context::from_waker(&w2));
    assert!(matches!(r, Poll::Ready(Err(Error::Shutdown))), "{r:?}");
}

#[test]
fn a_ready_pending_needs_no_wake() {
    let mut p = Pending::ready(Ok(3));
    let (count, waker) = counting();
    let r = Pin::new(&mut p).poll(&mut Context::from_waker(&waker));
    assert!(matches!(r, Poll::Ready(Ok(3))));
    assert_eq!(wakes(&count), 0);
}

/// A waker that unparks the thread that polls.
struct Unpark(std::thread::Thread);
impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

#[test]
fn no_wakeup_is_lost_when_completion_races_the_poll() {
    // Each round completes from another thread while this one polls;
    // this thread sleeps only on park (woken by the waker), with a
    // 10 s bound per round: a lost wake-up shows as a timeout.
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    for round in 0..2000i64 {
        let (mut p, slot) = Pending::<i64>::new();
        let t = std::thread::spawn(move || slot.complete(Ok(round)));
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = loop {
            if let Poll::Ready(r) = Pin::new(&mut p).poll(&mut cx) {
                break r;
            }
            std::thread::park_timeout(deadline.saturating_duration_since(Instant::now()));
            // Polled again only when woken (or spuriously) before the bound.
            assert!(Instant::now() < deadline, "round {round}: wake-up lost");
        };
        assert_eq!(got.unwrap(), round);
        t.join().unwrap();
    }
}
