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
            let now = Instant::now();
            assert!(now < deadline, "round {round}: wake-up lost");
            std::thread::park_timeout(deadline - now);
        };
        assert_eq!(got.unwrap(), round);
        t.join().unwrap();
    }
}

mod kept {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex as StdMutex;

    use super::*;
    use crate::cluster::publish::{Done, NewMsg, Staged, Stamp};

    /// What reached the sink: a message's sequence number, its outcome
    /// and its bytes.
    type Reached = (u64, Result<i64, Error>, Vec<u8>);

    #[derive(Default)]
    struct Sink(StdMutex<Vec<Reached>>);

    impl KeptSink for Sink {
        fn kept(self: Arc<Self>, msg: PubMsg, result: Result<i64, Error>) {
            self.0.lock().unwrap().push((msg.seq, result, msg.data));
        }
    }

    fn settings(sink: Option<&Arc<Sink>>) -> Settings {
        Settings {
            conn: crate::conn::ConnConfig::default(),
            max_buffered: 1 << 20,
            connect_timeout: Duration::from_secs(1),
            backoff_base: Duration::from_millis(1),
            backoff_max: Duration::from_millis(1),
            observer: Arc::new(crate::observer::NoObserver),
            counters: Default::default(),
            degraded: false,
            kept: sink.map(|s| Arc::downgrade(s) as std::sync::Weak<dyn KeptSink>),
            lendable: false,
            lease: Duration::ZERO,
            read_pause: Duration::ZERO,
        }
    }

    /// A new publish whose bytes lie at `at` in the staged bytes.
    fn new(seq: u64, at: std::ops::Range<usize>, done: Option<Done>) -> KeptMsg {
        KeptMsg::New(NewMsg {
            staged: Staged::of(at).unwrap(),
            wire_len: 1,
            payload_len: 1,
            slot: 7,
            seq,
            done,
        })
    }

    /// A publish sent again, with bytes of its own.
    fn again(seq: u64, data: &[u8], probe: bool, done: Option<Done>) -> KeptMsg {
        KeptMsg::Again(Box::new(PubMsg {
            data: data.to_vec(),
            wire_len: 1,
            payload_len: 1,
            slot: 7,
            redirects: 0,
            retries: 0,
            first: Stamp::UNSET,
            seq,
            held_at: Stamp::UNSET,
            probe,
            done,
        }))
    }

    #[test]
    fn replies_end_kept_publishes_in_order_and_copy_only_what_is_sent_again() {
        let sink = Arc::new(Sink::default());
        let s = settings(Some(&sink));
        let mut kept = Kept::default();
        let staged_bytes = b"aaabbbbcc".to_vec();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let done = Done::Call(Box::new(move |res: Result<i64, Error>| {
            assert_eq!(res.unwrap(), 4);
            r.fetch_add(1, Ordering::SeqCst);
        }));
        let mut staged: VecDeque<KeptMsg> = [
            new(0, 0..3, Some(done)),
            new(1, 3..7, None),
            new(2, 7..9, None),
        ]
        .into();
        kept.take(&mut staged, &staged_bytes);
        assert!(staged.is_empty());
        assert_eq!(kept.size(), (3, 1, 0), "three waiting in one batch");
        // A plain reply: the callback runs, nothing is copied.
        kept.reply(Ok(4), &s);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(kept.size(), (2, 1, 0));
        // An error reply goes to the sink with a copy of its bytes.
        kept.reply(Err(Error::Shutdown), &s);
        // A failure too, in order; the batch is done, its buffer kept.
        kept.fail(Error::Shutdown, &s);
        assert_eq!(kept.size(), (0, 0, 1));
        let got = sink.0.lock().unwrap();
        let seqs: Vec<_> = got.iter().map(|(q, _, d)| (*q, d.clone())).collect();
        assert_eq!(seqs, vec![(1, b"bbbb".to_vec()), (2, b"cc".to_vec())]);
        drop(got);
        // The next batch reuses the spare buffer; a publish with bytes of
        // its own (a resend) keeps them and waits on no batch.
        let mut staged: VecDeque<KeptMsg> =
            [new(3, 0..2, None), again(4, b"own", false, None)].into();
        kept.take(&mut staged, b"zz");
        assert_eq!(kept.size(), (2, 1, 0), "the spare buffer was taken");
        kept.reply(Err(Error::Shutdown), &s);
        assert_eq!(kept.size(), (1, 0, 1), "only the staged one waited on it");
        kept.reply(Err(Error::Shutdown), &s);
        let got = sink.0.lock().unwrap();
        assert_eq!(got[2].2, b"zz");
        assert_eq!(got[3].2, b"own");
        drop(got);
        // Resends only: no batch kept at all.
        kept.take(&mut [again(5, b"x", false, None)].into(), b"x");
        assert_eq!(kept.size(), (1, 0, 1));
    }

    #[test]
    fn a_probe_reply_goes_to_the_sink_and_a_missing_sink_ends_it() {
        let sink = Arc::new(Sink::default());
        let s = settings(Some(&sink));
        let mut kept = Kept::default();
        kept.take(&mut [again(9, b"p", true, None)].into(), b"");
        kept.reply(Ok(1), &s);
        assert_eq!(sink.0.lock().unwrap().len(), 1, "a probe's reply unparks");
        // No sink (the instance is gone): the callback gets `Shutdown`.
        let none = settings(None);
        let (tx, rx) = std::sync::mpsc::channel();
        let done = Done::Call(Box::new(move |r| tx.send(r).unwrap()));
        kept.take(&mut [new(10, 0..1, Some(done))].into(), b"n");
        kept.fail(
            Error::NotConnected {
                addr: "127.0.0.1:1".parse().unwrap(),
            },
            &none,
        );
        assert!(matches!(rx.try_recv().unwrap(), Err(Error::Shutdown)));
        // A connection that is over fails whatever is still kept, in order.
        kept.take(
            &mut [new(11, 0..1, None), again(12, b"a", false, None)].into(),
            b"n",
        );
        kept.fail_rest(&Error::Shutdown, &s);
        assert_eq!(kept.size(), (0, 0, 1), "one spare buffer, reused");
        let got = sink.0.lock().unwrap();
        let last: Vec<_> = got
            .iter()
            .skip(1)
            .map(|(q, _, d)| (*q, d.clone()))
            .collect();
        assert_eq!(last, vec![(11, b"n".to_vec()), (12, b"a".to_vec())]);
    }

    #[test]
    fn spare_batch_buffers_are_bounded() {
        let s = settings(None);
        let mut kept = Kept::default();
        // Many batches in flight at once, then all answered.
        for i in 0..SPARE_BATCHES as u64 + 5 {
            kept.take(&mut [new(i, 0..1, None)].into(), b"x");
        }
        assert_eq!(kept.size().1, SPARE_BATCHES + 5);
        for _ in 0..SPARE_BATCHES + 5 {
            kept.reply(Ok(1), &s);
        }
        assert_eq!(kept.size(), (0, 0, SPARE_BATCHES));
        // And by their bytes: large batches are not all kept.
        let mut kept = Kept::default();
        let big = vec![b'x'; SPARE_BYTES / 3 + 1];
        for i in 0..4 {
            kept.take(&mut [new(i, 0..1, None)].into(), &big);
        }
        for _ in 0..4 {
            kept.reply(Ok(1), &s);
        }
        assert_eq!(kept.size().2, 2, "two fit in {SPARE_BYTES} bytes");
        assert!(kept.spare_bytes <= SPARE_BYTES);
    }
}

#[test]
fn a_kept_publish_is_small() {
    // Its connection's queue is as long as the publishes in flight (tens
    // of thousands under load): every byte of it is moved twice.
    let n = std::mem::size_of::<KeptMsg>();
    assert!(n <= 56, "{n} bytes");
}
