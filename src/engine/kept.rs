//! Kept requests: requests whose bytes the engine keeps until their reply,
//! so that the layer above can send them again (a redirect, a retry, a
//! hold). A plain integer reply completes one on the I/O thread; anything
//! else (an error reply, a failure, or a reply the request asks to see)
//! goes to the engine's [`KeptSink`] as the whole request, bytes included.
//!
//! The engine does not know what the layer above keeps with each request:
//! it is generic over [`KeptItem`], behind two small trait objects per
//! connection (the staged queue, [`StagedKept`], and the queue in flight,
//! [`Kept`]), created once; nothing is allocated per request. A new
//! request's bytes are not copied unless it needs them again: the I/O
//! thread keeps a copy of each drain's staged bytes while one of its
//! requests waits ([`Staged`] says where).

use std::any::Any;
use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use crate::engine::settings::{AnySink, Settings};
use crate::error::Error;

/// Where a new request's bytes lie in its connection's staged bytes
/// (4 + 4 bytes, so a kept request stays small).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Staged {
    at: u32,
    len: u32,
}

impl Staged {
    /// No bytes.
    pub(crate) const EMPTY: Staged = Staged { at: 0, len: 0 };

    /// `range`, unless it lies past 4 GiB.
    pub(crate) fn of(range: std::ops::Range<usize>) -> Option<Staged> {
        Some(Staged {
            at: u32::try_from(range.start).ok()?,
            len: u32::try_from(range.len()).ok()?,
        })
    }

    pub(crate) fn range(self) -> std::ops::Range<usize> {
        let at = self.at as usize;
        at..at + self.len as usize
    }
}

/// What the layer above keeps with each kept request.
pub(crate) trait KeptItem: Sized + Send + 'static {
    /// The whole request, bytes included, as the sink gets it.
    type Whole: Send + 'static;

    /// Where its bytes lie in the staged bytes; `None` when it has bytes
    /// of its own (sent again).
    fn staged(&self) -> Option<Staged>;

    /// Whether a plain reply goes to the sink too (instead of completing
    /// it on the I/O thread).
    fn wants_reply(&self) -> bool;

    /// A plain reply, `n`: completes it.
    fn complete(&mut self, n: i64);

    /// The whole request; a new one's bytes copied out of `staged`, the
    /// bytes it was encoded into.
    fn into_whole(self, staged: &[u8]) -> Self::Whole;

    /// Ends `whole` when no sink is left to take it (the layer above is
    /// gone): with [`Error::Shutdown`].
    fn orphan(whole: Self::Whole);
}

/// Takes the outcomes of kept requests that need more than completing on
/// the I/O thread: an error (a redirect, a retry, a failure), or a reply
/// the request asked to see.
pub(crate) trait KeptSink<M: KeptItem>: Send + Sync {
    /// The outcome of `msg`, on the I/O thread of its connection (or the
    /// thread that closes a connection no I/O thread serves). A request
    /// the connection refused at once never comes here: the submitter
    /// gets it back.
    fn kept(self: Arc<Self>, msg: M::Whole, result: Result<i64, Error>);
}

/// `sink`, as an engine's settings keep it.
pub(crate) fn any_sink<M: KeptItem>(sink: Weak<dyn KeptSink<M>>) -> AnySink {
    Arc::new(sink)
}

/// Whether `sink` takes kept requests of kind `M`.
pub(crate) fn is_sink_of<M: KeptItem>(sink: Option<&AnySink>) -> bool {
    sink.is_some_and(|s| s.is::<Weak<dyn KeptSink<M>>>())
}

/// Kept requests staged on one connection (the submitters' side), in
/// order among its requests: a `VecDeque<M>` behind `dyn Any`, created at
/// the first (one type check per request, nothing allocated after).
#[derive(Default)]
pub(crate) struct StagedKept {
    queue: Option<Box<dyn Any + Send>>,
    len: usize,
    /// An empty queue in flight for requests of the staged kind.
    in_flight: Option<fn() -> Box<dyn InFlight>>,
}

impl StagedKept {
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Stages `msg` after the kept requests already here.
    ///
    /// # Errors
    ///
    /// `msg` back when requests of another kind are staged here (an
    /// engine keeps one kind).
    // Inlined into the staging closure of every kept publish: the
    // message is built in place in the queue instead of moved through a
    // call (callgrind: 20 instructions per cluster publish).
    #[inline(always)]
    pub(crate) fn stage<M: KeptItem>(&mut self, msg: M) -> Result<(), M> {
        match self.queue_of::<M>() {
            Some(q) => {
                q.push_back(msg);
                Ok(())
            }
            None => Err(msg),
        }
    }

    /// The staged queue of kind `M` (created at the first), counting the
    /// request the caller then pushes on it; `None` when requests of
    /// another kind are staged here.
    #[inline(always)]
    fn queue_of<M: KeptItem>(&mut self) -> Option<&mut VecDeque<M>> {
        if self.in_flight.is_none() {
            self.in_flight = Some(new_in_flight::<M>);
        }
        let q = self
            .queue
            .get_or_insert_with(|| Box::new(VecDeque::<M>::new()))
            .downcast_mut::<VecDeque<M>>()?;
        self.len += 1;
        Some(q)
    }
}

fn new_in_flight<M: KeptItem>() -> Box<dyn InFlight> {
    Box::new(InFlightOf::<M>::default())
}

/// One connection's kept requests in flight, whatever their kind.
pub(crate) trait InFlight: Send {
    /// Takes the requests just staged (`staged`, a `VecDeque` of its
    /// kind, in order), and a copy of `bytes` when any of them has no
    /// bytes of its own.
    fn take(&mut self, staged: &mut dyn Any, bytes: &[u8]);
    /// The next one's reply.
    fn reply(&mut self, result: Result<i64, Error>, settings: &Settings);
    /// The next one's reply, a plain integer (the common case, kept apart
    /// so that no `Result` crosses the dynamic call).
    fn reply_ok(&mut self, n: i64, settings: &Settings);
    /// The next one failed.
    fn fail(&mut self, error: Error, settings: &Settings);
    /// Fails every one still here (the connection is over).
    fn fail_rest(&mut self, error: &Error, settings: &Settings);
    /// Requests waiting, batches kept, and the kept bytes' capacity.
    #[cfg(test)]
    fn size(&self) -> (usize, usize, usize);
}

/// One connection's kept requests in flight: none (and nothing allocated)
/// until the first is taken.
#[derive(Default)]
pub(crate) struct Kept(Option<Box<dyn InFlight>>);

impl Kept {
    /// Takes the kept requests just staged (see [`InFlight::take`]).
    pub(crate) fn take(&mut self, staged: &mut StagedKept, bytes: &[u8]) {
        if staged.is_empty() {
            return;
        }
        let (Some(queue), Some(new)) = (staged.queue.as_mut(), staged.in_flight) else {
            return;
        };
        self.0.get_or_insert_with(new).take(queue.as_mut(), bytes);
        staged.len = 0;
    }

    pub(crate) fn reply(&mut self, result: Result<i64, Error>, settings: &Settings) {
        match &mut self.0 {
            Some(q) => q.reply(result, settings),
            None => debug_assert!(false, "a kept request's reply with none kept"),
        }
    }

    pub(crate) fn reply_ok(&mut self, n: i64, settings: &Settings) {
        match &mut self.0 {
            Some(q) => q.reply_ok(n, settings),
            None => debug_assert!(false, "a kept request's reply with none kept"),
        }
    }

    pub(crate) fn fail(&mut self, error: Error, settings: &Settings) {
        match &mut self.0 {
            Some(q) => q.fail(error, settings),
            None => debug_assert!(false, "a kept request's failure with none kept"),
        }
    }

    pub(crate) fn fail_rest(&mut self, error: &Error, settings: &Settings) {
        if let Some(q) = &mut self.0 {
            q.fail_rest(error, settings);
        }
    }

    /// Requests waiting, batches kept, and the kept bytes' capacity.
    #[cfg(test)]
    pub(crate) fn size(&self) -> (usize, usize, usize) {
        self.0.as_ref().map_or((0, 0, 0), |q| q.size())
    }
}

/// One connection's kept requests of kind `M` after its I/O thread took
/// them: in request order (replies and failures come in that order too),
/// with the staged bytes they were encoded into, kept whole until the last
/// of them is answered. A plain reply copies nothing; a request that needs
/// its bytes again (an error, a reply it asked to see) gets a copy. Owned
/// by the I/O thread: nothing here crosses threads.
///
/// The batches' bytes lie one after another in one buffer, which grows
/// only when more bytes wait than ever before (and is emptied whenever
/// none wait), so how the drains happen to be cut up allocates nothing.
struct InFlightOf<M> {
    queue: VecDeque<M>,
    /// Staged bytes with requests of `queue` in them, oldest first: where
    /// each lies in `bytes`.
    batches: VecDeque<Batch>,
    /// The batches' bytes, from the oldest's `at` on (what lies before it
    /// is done with).
    bytes: Vec<u8>,
}

impl<M> Default for InFlightOf<M> {
    fn default() -> Self {
        InFlightOf {
            queue: VecDeque::new(),
            batches: VecDeque::new(),
            bytes: Vec::new(),
        }
    }
}

/// Where a copy of one drain's staged bytes lies, and how many of its
/// requests wait.
struct Batch {
    at: usize,
    len: usize,
    waiting: usize,
}

/// Capacity the kept bytes of one connection keep once none wait (a
/// drain is about the staged-bytes bound, 4 MiB by default, or less).
pub(crate) const KEPT_BYTES: usize = 16 << 20;

impl<M: KeptItem> InFlight for InFlightOf<M> {
    fn take(&mut self, staged: &mut dyn Any, bytes: &[u8]) {
        let Some(staged) = staged.downcast_mut::<VecDeque<M>>() else {
            debug_assert!(false, "kept requests of two kinds on one connection");
            return;
        };
        let waiting = staged.iter().filter(|m| m.staged().is_some()).count();
        if waiting > 0 {
            self.make_room(bytes.len());
            let at = self.bytes.len();
            self.bytes.extend_from_slice(bytes);
            self.batches.push_back(Batch {
                at,
                len: bytes.len(),
                waiting,
            });
        }
        self.queue.append(staged);
    }

    fn reply(&mut self, result: Result<i64, Error>, settings: &Settings) {
        let Some(mut msg) = self.queue.pop_front() else {
            debug_assert!(false, "a kept request's reply with none kept");
            return;
        };
        match result {
            Ok(n) if !msg.wants_reply() => {
                if msg.staged().is_some() {
                    self.done_with_front();
                }
                msg.complete(n);
            }
            r => {
                let msg = self.whole(msg);
                to_sink::<M>(settings, msg, r);
            }
        }
    }

    fn reply_ok(&mut self, n: i64, settings: &Settings) {
        // `reply` with `Ok(n)`, without building the `Result` (the path of
        // nearly every reply).
        let Some(mut msg) = self.queue.pop_front() else {
            debug_assert!(false, "a kept request's reply with none kept");
            return;
        };
        if msg.wants_reply() {
            let msg = self.whole(msg);
            return to_sink::<M>(settings, msg, Ok(n));
        }
        if msg.staged().is_some() {
            self.done_with_front();
        }
        msg.complete(n);
    }

    fn fail(&mut self, error: Error, settings: &Settings) {
        if let Some(msg) = self.queue.pop_front() {
            let msg = self.whole(msg);
            to_sink::<M>(settings, msg, Err(error));
        } else {
            debug_assert!(false, "a kept request's failure with none kept");
        }
    }

    /// Fails every kept request still here, once their requests are gone
    /// (the connection is over): none is left waiting for an outcome, even
    /// when a callback's panic cut the failing of their requests short.
    fn fail_rest(&mut self, error: &Error, settings: &Settings) {
        while !self.queue.is_empty() {
            self.fail(error.clone(), settings);
        }
    }

    #[cfg(test)]
    fn size(&self) -> (usize, usize, usize) {
        (self.queue.len(), self.batches.len(), self.bytes.capacity())
    }
}

impl<M: KeptItem> InFlightOf<M> {
    /// The oldest kept request as a whole, with a copy of its bytes, for
    /// its next send.
    fn whole(&mut self, msg: M) -> M::Whole {
        let staged = msg.staged().is_some();
        let front = self.batches.front().map_or(0..0, |b| b.at..b.at + b.len);
        let msg = msg.into_whole(&self.bytes[front]);
        if staged {
            self.done_with_front();
        }
        msg
    }

    /// One request of the oldest batch is answered: the batch goes once
    /// none waits.
    #[inline(always)]
    fn done_with_front(&mut self) {
        let Some(b) = self.batches.front_mut() else {
            return;
        };
        b.waiting -= 1;
        if b.waiting == 0 {
            self.batches.pop_front();
            if self.batches.is_empty() {
                self.bytes.clear();
                if self.bytes.capacity() > KEPT_BYTES {
                    self.bytes.shrink_to(KEPT_BYTES);
                }
            }
        }
    }

    /// Makes room for `n` more bytes: moves the bytes still waiting to
    /// the front when the buffer is full, and grows it (to twice what
    /// waits, so that moving stays rare) when that is not enough.
    fn make_room(&mut self, n: usize) {
        if self.bytes.len() + n <= self.bytes.capacity() {
            return;
        }
        let from = self.batches.front().map_or(self.bytes.len(), |b| b.at);
        if from > 0 {
            self.bytes.copy_within(from.., 0);
            self.bytes.truncate(self.bytes.len() - from);
            for b in &mut self.batches {
                b.at -= from;
            }
        }
        let want = 2 * (self.bytes.len() + n);
        if self.bytes.capacity() < want {
            self.bytes.reserve_exact(want - self.bytes.len());
        }
    }
}

/// Hands a kept request's outcome to the engine's sink; with none (its
/// layer above is gone), it ends with [`Error::Shutdown`].
fn to_sink<M: KeptItem>(settings: &Settings, msg: M::Whole, result: Result<i64, Error>) {
    let sink = settings
        .kept
        .as_ref()
        .and_then(|s| s.downcast_ref::<Weak<dyn KeptSink<M>>>())
        .and_then(Weak::upgrade);
    match sink {
        Some(sink) => sink.kept(msg, result),
        None => M::orphan(msg),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    type Done = Box<dyn FnOnce(Result<i64, Error>) + Send>;

    /// A kept request of the tests: its number, where its bytes lie (or its
    /// own bytes), whether it wants its reply, and its callback.
    struct Item {
        seq: u64,
        staged: Option<Staged>,
        own: Vec<u8>,
        probe: bool,
        done: Option<Done>,
    }

    /// The whole request: its number, bytes and callback.
    struct Whole(u64, Vec<u8>, Option<Done>);

    impl KeptItem for Item {
        type Whole = Whole;

        fn staged(&self) -> Option<Staged> {
            self.staged
        }

        fn wants_reply(&self) -> bool {
            self.probe
        }

        fn complete(&mut self, n: i64) {
            if let Some(done) = self.done.take() {
                done(Ok(n));
            }
        }

        fn into_whole(self, staged: &[u8]) -> Whole {
            let bytes = match self.staged {
                Some(s) => staged.get(s.range()).unwrap_or_default().to_vec(),
                None => self.own,
            };
            Whole(self.seq, bytes, self.done)
        }

        fn orphan(mut whole: Whole) {
            if let Some(done) = whole.2.take() {
                done(Err(Error::Shutdown));
            }
        }
    }

    /// What reached the sink: a request's number, its outcome and bytes.
    type Reached = (u64, Result<i64, Error>, Vec<u8>);

    #[derive(Default)]
    struct Sink(Mutex<Vec<Reached>>);

    impl KeptSink<Item> for Sink {
        fn kept(self: Arc<Self>, msg: Whole, result: Result<i64, Error>) {
            self.0.lock().unwrap().push((msg.0, result, msg.1));
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
            kept: sink.map(|s| any_sink::<Item>(Arc::downgrade(s) as Weak<dyn KeptSink<Item>>)),
            lendable: false,
            lease: Duration::ZERO,
            read_pause: Duration::ZERO,
        }
    }

    /// A new request whose bytes lie at `at` in the staged bytes.
    fn new(seq: u64, at: std::ops::Range<usize>, done: Option<Done>) -> Item {
        Item {
            seq,
            staged: Staged::of(at),
            own: Vec::new(),
            probe: false,
            done,
        }
    }

    /// A request sent again, with bytes of its own.
    fn again(seq: u64, data: &[u8], probe: bool, done: Option<Done>) -> Item {
        Item {
            seq,
            staged: None,
            own: data.to_vec(),
            probe,
            done,
        }
    }

    /// `items`, staged.
    fn staged(items: impl IntoIterator<Item = Item>) -> StagedKept {
        let mut s = StagedKept::default();
        for i in items {
            assert!(s.stage(i).is_ok());
        }
        s
    }

    #[test]
    fn replies_end_kept_requests_in_order_and_copy_only_what_is_sent_again() {
        let sink = Arc::new(Sink::default());
        let s = settings(Some(&sink));
        let mut kept = Kept::default();
        let staged_bytes = b"aaabbbbcc".to_vec();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let done: Done = Box::new(move |res: Result<i64, Error>| {
            assert_eq!(res.unwrap(), 4);
            r.fetch_add(1, Ordering::SeqCst);
        });
        let mut queue = staged([
            new(0, 0..3, Some(done)),
            new(1, 3..7, None),
            new(2, 7..9, None),
        ]);
        kept.take(&mut queue, &staged_bytes);
        assert!(queue.is_empty());
        let cap = kept.size().2;
        assert_eq!(kept.size(), (3, 1, cap), "three waiting in one batch");
        assert!(cap >= staged_bytes.len());
        // A plain reply: the callback runs, nothing is copied.
        kept.reply(Ok(4), &s);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(kept.size(), (2, 1, cap));
        // An error reply goes to the sink with a copy of its bytes.
        kept.reply(Err(Error::Shutdown), &s);
        // A failure too, in order; the batch is done, its room kept.
        kept.fail(Error::Shutdown, &s);
        assert_eq!(kept.size(), (0, 0, cap));
        let got = sink.0.lock().unwrap();
        let seqs: Vec<_> = got.iter().map(|(q, _, d)| (*q, d.clone())).collect();
        assert_eq!(seqs, vec![(1, b"bbbb".to_vec()), (2, b"cc".to_vec())]);
        drop(got);
        // The next batch reuses the room; a request with bytes of its own
        // (a resend) keeps them and waits on no batch.
        let mut queue = staged([new(3, 0..2, None), again(4, b"own", false, None)]);
        kept.take(&mut queue, b"zz");
        assert_eq!(kept.size(), (2, 1, cap), "the room was reused");
        kept.reply(Err(Error::Shutdown), &s);
        assert_eq!(kept.size(), (1, 0, cap), "only the staged one waited on it");
        kept.reply(Err(Error::Shutdown), &s);
        let got = sink.0.lock().unwrap();
        assert_eq!(got[2].2, b"zz");
        assert_eq!(got[3].2, b"own");
        drop(got);
        // Resends only: no batch kept at all.
        kept.take(&mut staged([again(5, b"x", false, None)]), b"x");
        assert_eq!(kept.size(), (1, 0, cap));
    }

    #[test]
    fn a_reply_asked_for_goes_to_the_sink_and_a_missing_sink_ends_it() {
        let sink = Arc::new(Sink::default());
        let s = settings(Some(&sink));
        let mut kept = Kept::default();
        kept.take(&mut staged([again(9, b"p", true, None)]), b"");
        kept.reply(Ok(1), &s);
        assert_eq!(sink.0.lock().unwrap().len(), 1, "a probe's reply unparks");
        // No sink (the layer above is gone): the callback gets `Shutdown`.
        let none = settings(None);
        let (tx, rx) = std::sync::mpsc::channel();
        let done: Done = Box::new(move |r| tx.send(r).unwrap());
        kept.take(&mut staged([new(10, 0..1, Some(done))]), b"n");
        kept.fail(
            Error::NotConnected {
                addr: "127.0.0.1:1".parse().unwrap(),
            },
            &none,
        );
        assert!(matches!(rx.try_recv().unwrap(), Err(Error::Shutdown)));
        // A connection that is over fails whatever is still kept, in order.
        kept.take(
            &mut staged([new(11, 0..1, None), again(12, b"a", false, None)]),
            b"n",
        );
        kept.fail_rest(&Error::Shutdown, &s);
        assert_eq!((kept.size().0, kept.size().1), (0, 0), "none left");
        let got = sink.0.lock().unwrap();
        let last: Vec<_> = got
            .iter()
            .skip(1)
            .map(|(q, _, d)| (*q, d.clone()))
            .collect();
        assert_eq!(last, vec![(11, b"n".to_vec()), (12, b"a".to_vec())]);
    }

    /// The batches in flight with `cuts`: `total` bytes cut into drains of
    /// the sizes `cuts` gives in turn, each with one request waiting on
    /// it, and answered in order after `lag` more drains are in flight
    /// (all at the end).
    fn cut_up(kept: &mut Kept, s: &Settings, total: usize, cuts: &[usize], lag: usize) {
        let bytes = vec![b'x'; total];
        let (mut at, mut in_flight) = (0, 0);
        for (i, cut) in cuts.iter().cycle().enumerate() {
            if at >= total {
                break;
            }
            let end = (at + cut).min(total);
            kept.take(&mut staged([new(i as u64, 0..1, None)]), &bytes[at..end]);
            at = end;
            in_flight += 1;
            if in_flight > lag {
                kept.reply(Ok(1), s);
                in_flight -= 1;
            }
        }
        for _ in 0..in_flight {
            kept.reply(Ok(1), s);
        }
        assert_eq!(kept.size().0, 0);
    }

    #[test]
    fn kept_bytes_grow_only_past_their_deepest_however_drains_are_cut() {
        let s = settings(None);
        let mut kept = Kept::default();
        // The deepest round first: all of it in flight at once.
        cut_up(&mut kept, &s, 100_000, &[1_000], usize::MAX);
        let cap = kept.size().2;
        assert!(cap >= 100_000, "{cap}");
        // Then ten times as many bytes, never more than half as deep, in
        // flight as the drains and replies happen to interleave: many
        // small drains, a few large, a mix, up to 50 drains in flight.
        // The room is reused: it neither grows nor is given back.
        for (cuts, lag) in [
            (&[7][..], 50),
            (&[20_000, 3], 1),
            (&[1, 999, 12_345, 64], 3),
            (&[50_000], 0),
            (&[333, 5_000], 8),
        ] {
            cut_up(&mut kept, &s, 1_000_000, cuts, lag);
            assert_eq!(kept.size().2, cap, "cuts {cuts:?}, lag {lag}");
        }
        // A round deeper than the bound: the room it took is let go, down
        // to the bound, once none waits.
        cut_up(&mut kept, &s, KEPT_BYTES * 2, &[1 << 20], usize::MAX);
        assert_eq!(kept.size().2, KEPT_BYTES);
    }

    #[test]
    fn requests_of_another_kind_are_not_staged_and_a_sink_names_its_kind() {
        let mut queue = staged([new(0, 0..1, None)]);
        assert!(queue.stage(7u8).is_err());
        let sink = Arc::new(Sink::default());
        let s = settings(Some(&sink));
        assert!(is_sink_of::<Item>(s.kept.as_ref()));
        assert!(!is_sink_of::<u8>(s.kept.as_ref()));
        assert!(!is_sink_of::<Item>(None));
    }

    /// `u8` as a second kind, for the test above.
    impl KeptItem for u8 {
        type Whole = u8;
        fn staged(&self) -> Option<Staged> {
            None
        }
        fn wants_reply(&self) -> bool {
            false
        }
        fn complete(&mut self, _: i64) {}
        fn into_whole(self, _: &[u8]) -> u8 {
            self
        }
        fn orphan(_: u8) {}
    }
}
