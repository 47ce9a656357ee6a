use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use super::*;

const LONG: Duration = Duration::from_secs(10);

#[test]
fn a_wait_ends_with_its_condition_or_at_its_deadline_after_a_last_look() {
    let s = Signal::new(0u32);
    let start = Instant::now();
    let r = s.wait_until(Some(start + Duration::from_millis(20)), None, |n| {
        (*n > 0).then_some(*n)
    });
    assert_eq!(r, None);
    assert!(start.elapsed() >= Duration::from_millis(20));
    // A change without a notification is seen at the last look.
    s.with(|n| *n = 3);
    assert_eq!(
        s.wait_until(Some(Instant::now()), None, |n| (*n > 0).then_some(*n)),
        Some(3)
    );
}

#[test]
fn an_update_from_another_thread_ends_the_wait() {
    let s = Arc::new(Signal::new(false));
    let s2 = s.clone();
    let t = std::thread::spawn(move || s2.update(|b| *b = true));
    let start = Instant::now();
    assert_eq!(
        s.wait_until(Some(start + LONG), None, |b| b.then_some(())),
        Some(())
    );
    assert!(start.elapsed() < LONG / 2);
    t.join().unwrap();
}

#[test]
fn a_recheck_sees_what_changed_without_a_notification() {
    let s = Signal::new(());
    let flag = AtomicBool::new(false);
    let start = Instant::now();
    let r = s.wait_until(Some(start + LONG), Some(Duration::from_millis(5)), |_| {
        // Set (never notified) at the first look: only a recheck sees it.
        flag.swap(true, Ordering::SeqCst).then_some(())
    });
    assert_eq!(r, Some(()));
    assert!(start.elapsed() < LONG / 2);
}

#[test]
fn an_update_while_an_unlocked_look_runs_is_not_lost() {
    // The update comes after the first look has read the flag and before
    // it returns: the wait must look again rather than sleep (it has no
    // recheck, so a lost update shows as the full 10 s deadline).
    let s = Arc::new(Signal::new(()));
    let flag = Arc::new(AtomicBool::new(false));
    let (looked_tx, looked_rx) = mpsc::channel();
    let (updated_tx, updated_rx) = mpsc::channel::<()>();
    let (s2, flag2) = (s.clone(), flag.clone());
    let t = std::thread::spawn(move || {
        looked_rx.recv().unwrap();
        flag2.store(true, Ordering::SeqCst);
        s2.update(|()| ());
        updated_tx.send(()).unwrap();
    });
    let start = Instant::now();
    let mut looks = 0;
    let r = s.wait_until_unlocked(Some(start + LONG), None, || {
        looks += 1;
        let seen = flag.load(Ordering::SeqCst);
        if looks == 1 {
            looked_tx.send(()).unwrap();
            updated_rx.recv().unwrap();
        }
        seen.then_some(())
    });
    assert_eq!(r, Some(()));
    assert_eq!(looks, 2);
    assert!(start.elapsed() < LONG / 2, "{:?}", start.elapsed());
    t.join().unwrap();
}

#[test]
fn an_outcome_is_taken_once_and_a_second_one_is_ignored() {
    let o = Outcome::<i32>::new();
    assert!(!o.is_done());
    assert_eq!(o.try_take(), None);
    o.complete(1);
    o.complete(2);
    assert!(o.is_done());
    assert_eq!(o.wait(Some(Instant::now())), Some(1));
    assert!(!o.is_done());
    let (_, waker) = testkit::counting_waker();
    assert_eq!(o.poll(&mut Context::from_waker(&waker)), Poll::Ready(None));
}

#[test]
fn a_callback_runs_at_once_or_on_the_completing_thread() {
    let (tx, rx) = mpsc::channel();
    let o = Outcome::<i32>::new();
    o.complete(1);
    o.then({
        let tx = tx.clone();
        move |v| tx.send(v).unwrap()
    });
    assert_eq!(rx.try_recv(), Ok(1));
    let o = Arc::new(Outcome::<i32>::new());
    o.then(move |v| tx.send(v).unwrap());
    let o2 = o.clone();
    std::thread::spawn(move || o2.complete(2)).join().unwrap();
    assert_eq!(rx.try_recv(), Ok(2));
    assert!(!o.is_done(), "the callback took it");
}

#[test]
fn the_last_poller_is_woken_once() {
    let o = Outcome::<i32>::new();
    let ((c1, w1), (c2, w2)) = (testkit::counting_waker(), testkit::counting_waker());
    assert!(o.poll(&mut Context::from_waker(&w1)).is_pending());
    assert!(o.poll(&mut Context::from_waker(&w2)).is_pending());
    o.complete(5);
    o.complete(6);
    assert_eq!((c1.wakes(), c2.wakes()), (0, 1));
    assert_eq!(o.poll(&mut Context::from_waker(&w2)), Poll::Ready(Some(5)));
    // Forgotten: a completion wakes nobody.
    o.begin();
    assert!(o.poll(&mut Context::from_waker(&w1)).is_pending());
    o.forget_waker();
    o.complete(7);
    assert_eq!(c1.wakes(), 0);
}

#[test]
fn no_wakeup_is_lost_when_completion_races_the_poll() {
    // Each round completes from another thread while this one polls; this
    // thread sleeps only until the waker unparks it: a lost wake-up shows
    // as the 10 s bound passing.
    let o = Arc::new(Outcome::<u64>::new());
    for round in 0..2000u64 {
        let number = o.begin();
        let o2 = o.clone();
        let t = std::thread::spawn(move || o2.complete_in(number, round));
        let got = testkit::block_on(std::future::poll_fn(|cx| o.poll(cx)), LONG);
        assert_eq!(got.expect("wake-up lost"), Some(round));
        t.join().unwrap();
    }
}

#[test]
fn no_wakeup_is_lost_when_completion_races_a_waiting_thread() {
    let o = Arc::new(Outcome::<u64>::new());
    for round in 0..2000u64 {
        let number = o.begin();
        let o2 = o.clone();
        let t = std::thread::spawn(move || o2.complete_in(number, round));
        let start = Instant::now();
        assert_eq!(o.wait_in(number, Deadline::after(LONG)), Some(round));
        assert!(start.elapsed() < LONG / 2, "round {round}: wake-up lost");
        t.join().unwrap();
    }
}

#[test]
fn an_outcome_of_an_older_round_is_dropped() {
    let o = Outcome::<i32>::new();
    let r1 = o.begin();
    assert_eq!(
        o.wait_in(r1, Deadline::after(Duration::from_millis(1))),
        None
    );
    let r2 = o.begin();
    o.complete_in(r1, 1); // after its waiter gave up
    assert!(!o.is_done());
    assert_eq!(
        o.wait_in(r2, Deadline::after(Duration::from_millis(1))),
        None
    );
    o.complete_in(r2, 2);
    assert_eq!(
        o.wait_in(r1, Deadline::after(Duration::ZERO)),
        None,
        "not round 1's"
    );
    assert_eq!(o.wait_in(r2, Deadline::after(LONG)), Some(2));
}
