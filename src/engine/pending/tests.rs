use super::*;

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

#[test]
fn poll_wakes_once_on_completion_and_then_is_ready() {
    let (mut p, slot) = Pending::<i64>::new();
    let (count, waker) = testkit::counting_waker();
    let mut cx = Context::from_waker(&waker);
    assert!(Pin::new(&mut p).poll(&mut cx).is_pending());
    assert!(Pin::new(&mut p).poll(&mut cx).is_pending());
    assert_eq!(count.wakes(), 0);
    slot.complete(Ok(7));
    assert_eq!(count.wakes(), 1);
    slot.complete(Ok(8)); // ignored, no second wake
    assert_eq!(count.wakes(), 1);
    assert!(matches!(Pin::new(&mut p).poll(&mut cx), Poll::Ready(Ok(7))));
    assert!(matches!(
        Pin::new(&mut p).poll(&mut cx),
        Poll::Ready(Err(Error::InvalidArgument(_)))
    ));
}

#[test]
fn the_last_poller_is_woken_when_the_future_moves_between_tasks() {
    let (mut p, slot) = Pending::<i64>::new();
    let (first, w1) = testkit::counting_waker();
    let (second, w2) = testkit::counting_waker();
    assert!(Pin::new(&mut p)
        .poll(&mut Context::from_waker(&w1))
        .is_pending());
    assert!(Pin::new(&mut p)
        .poll(&mut Context::from_waker(&w2))
        .is_pending());
    slot.complete(Err(Error::Shutdown));
    assert_eq!((first.wakes(), second.wakes()), (0, 1));
    let r = Pin::new(&mut p).poll(&mut Context::from_waker(&w2));
    assert!(matches!(r, Poll::Ready(Err(Error::Shutdown))), "{r:?}");
}

#[test]
fn a_ready_pending_needs_no_wake() {
    let mut p = Pending::ready(Ok(3));
    let (count, waker) = testkit::counting_waker();
    let r = Pin::new(&mut p).poll(&mut Context::from_waker(&waker));
    assert!(matches!(r, Poll::Ready(Ok(3))));
    assert_eq!(count.wakes(), 0);
}

#[test]
fn no_wakeup_is_lost_when_completion_races_the_poll() {
    // Each round completes from another thread while this one polls; this
    // thread sleeps only until the waker unparks it: a lost wake-up shows
    // as the 10 s bound passing.
    for round in 0..2000i64 {
        let (p, slot) = Pending::<i64>::new();
        let t = std::thread::spawn(move || slot.complete(Ok(round)));
        let got = testkit::block_on(p, Duration::from_secs(10));
        assert_eq!(got.expect("wake-up lost").unwrap(), round);
        t.join().unwrap();
    }
}

#[test]
fn a_pooled_slot_is_reused_reset_whichever_holder_lets_go_last() {
    // Unit tests share the pool: look for the slot among the next few.
    let reused = |addr: *const Slot<i64>| {
        let held: Vec<_> = (0..64).map(|_| Pending::pooled()).collect();
        let found = held.iter().find(|(_, s)| std::ptr::eq(&**s, addr));
        found.map(|(p, _)| p.is_done())
    };
    // The completer lets go last (a callback taken first).
    let (p, slot) = Pending::pooled();
    let addr: *const Slot<i64> = &*slot;
    p.then(|_| {});
    slot.complete(Ok(1));
    drop(slot);
    assert_eq!(reused(addr), Some(false), "reused, and not done");
    // The handle lets go last (awaited or waited on after the reply).
    let (p, slot) = Pending::pooled();
    let addr: *const Slot<i64> = &*slot;
    slot.complete(Ok(2));
    drop(slot);
    assert_eq!(p.wait().unwrap(), 2);
    assert_eq!(reused(addr), Some(false), "reused, and not done");
    // A slot still held is never handed out again.
    let (p, slot) = Pending::pooled();
    let addr: *const Slot<i64> = &*slot;
    drop(p);
    assert_eq!(reused(addr), None);
    slot.complete(Ok(3));
}

#[test]
fn a_reused_pooled_slot_completes_with_its_new_value() {
    // Unit tests share the pool: take slots until the one let go comes back.
    let reuse = |addr: *const Slot<i64>| {
        let mut held: Vec<_> = (0..64).map(|_| Pending::pooled()).collect();
        let at = held.iter().position(|(_, s)| std::ptr::eq(&**s, addr));
        at.map(|i| held.swap_remove(i))
    };
    // Completes a reused slot with `value` (the completer lets go first).
    let fresh = |(p, slot): (Pending<i64>, SlotRef<i64>), value| {
        slot.complete(Ok(value));
        drop(slot);
        assert!(p.is_done(), "done once completed");
        p
    };
    // The old round's value taken (waited on), then reused.
    let (p, slot) = Pending::pooled();
    let addr: *const Slot<i64> = &*slot;
    slot.complete(Ok(1));
    drop(slot);
    assert_eq!(p.wait().unwrap(), 1);
    let p = fresh(reuse(addr).expect("the slot comes back"), 2);
    let got = p.wait_timeout(Duration::from_secs(5));
    assert_eq!(got.ok(), Some(2), "waited for: the new round's value");
    // The old round's value never taken (its handle dropped first), then
    // reused and awaited.
    let (p, slot) = Pending::pooled();
    let addr: *const Slot<i64> = &*slot;
    drop(p);
    slot.complete(Ok(3));
    drop(slot);
    let p = fresh(reuse(addr).expect("the slot comes back"), 4);
    let got = testkit::block_on(p, Duration::from_secs(5)).expect("woken");
    assert_eq!(got.ok(), Some(4), "awaited: the new round's value");
    // A callback's round, then reused with a callback again.
    let (p, slot) = Pending::pooled();
    let addr: *const Slot<i64> = &*slot;
    p.then(|_| {});
    slot.complete(Ok(5));
    drop(slot);
    let (p, slot) = reuse(addr).expect("the slot comes back");
    let (tx, rx) = std::sync::mpsc::channel();
    p.then(move |r| tx.send(r.ok()).unwrap());
    slot.complete(Ok(6));
    assert_eq!(
        rx.try_recv().ok(),
        Some(Some(6)),
        "the callback: the new value"
    );
}

#[test]
fn a_kept_request_fails_with_connection_lost_only_when_it_may_have_run() {
    let addr = ServerAddr::from(std::net::SocketAddr::from(([127, 0, 0, 1], 7000)));
    let lost = || Error::ConnectionLost {
        addr,
        reason: crate::conn::ConnError::Closed,
    };
    let kept = Completion::Kept;
    // Written: the outcome is unknown, whoever closed the connection.
    assert!(matches!(
        kept.closed_error(addr, lost(), true),
        Error::ConnectionLost { .. }
    ));
    assert!(matches!(
        kept.closed_error(addr, Error::Shutdown, true),
        Error::ConnectionLost { .. }
    ));
    // Never written: nothing was sent (the layer above may send it again).
    assert!(matches!(
        kept.closed_error(addr, lost(), false),
        Error::NotConnected { .. }
    ));
    assert!(matches!(
        kept.closed_error(addr, Error::Shutdown, false),
        Error::Shutdown
    ));
    // Other requests keep the connection's error.
    assert!(matches!(
        Completion::Publish.closed_error(addr, lost(), false),
        Error::ConnectionLost { .. }
    ));
}
