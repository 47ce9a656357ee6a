use super::*;
use crate::workers::queue::Item;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Count(AtomicUsize, Mutex<Vec<u32>>);
impl Handler for Count {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        assert_eq!(channel, b"ch");
        self.0.fetch_add(1, Ordering::Relaxed);
        self.1
            .lock()
            .push(u32::from_le_bytes(payload.try_into().unwrap()));
    }
}

#[test]
fn delivers_in_order_and_drops_when_full() {
    let h = Arc::new(Count(AtomicUsize::new(0), Mutex::new(Vec::new())));
    let counters = Arc::new(Counters::default());
    let pool = Pool::start(1, 4, h.clone(), counters.clone()).unwrap();
    let q = pool.queues()[0].clone();
    // Hold the worker out of its queue by filling while it is parked:
    // whatever is accepted must come out in order.
    let mut accepted = 0;
    for i in 0..1000u32 {
        accepted += usize::from(q.push_message(b"ch", &i.to_le_bytes(), 0));
    }
    let start = std::time::Instant::now();
    while h.0.load(Ordering::Relaxed) < accepted {
        assert!(start.elapsed().as_secs() < 5, "worker stuck");
        std::thread::yield_now();
    }
    let seen = h.1.lock().clone();
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    pool.shutdown();
    assert_eq!(
        counters.delivered.load(Ordering::Relaxed) as usize,
        accepted
    );
    assert!(!q.push_message(b"ch", b"late", 0), "closed queue refuses");
}

/// Records messages and drop events in order; the first message waits
/// at a gate, so the test knows what the worker holds.
#[derive(Default)]
struct Gated {
    entered: AtomicBool,
    open: AtomicBool,
    log: Mutex<Vec<String>>,
}
impl Handler for Gated {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        self.entered.store(true, Ordering::Release);
        let start = std::time::Instant::now();
        while !self.open.load(Ordering::Acquire) && start.elapsed().as_secs() < 10 {
            std::thread::yield_now();
        }
        let text = format!("{}{}", String::from_utf8_lossy(channel), payload[0]);
        self.log.lock().push(text);
    }
    fn on_event(&self, event: Event<'_>) {
        if let Event::Dropped { channels, messages } = event {
            let names: Vec<String> = channels
                .iter()
                .map(|c| String::from_utf8_lossy(c).to_string())
                .collect();
            self.log
                .lock()
                .push(format!("dropped {messages} {}", names.join(",")));
        }
    }
}

#[test]
fn drops_are_named_once_after_the_messages_queued_before_them() {
    let h = Arc::new(Gated::default());
    let counters = Arc::new(Counters::default());
    let pool = Pool::start(1, 4, h.clone(), counters).unwrap();
    let q = pool.queues()[0].clone();
    assert!(q.push_message(b"a", &[0], 0));
    let start = std::time::Instant::now();
    while !h.entered.load(Ordering::Acquire) {
        assert!(start.elapsed().as_secs() < 5, "worker never started");
        std::thread::yield_now();
    }
    // The worker holds a0 at the gate; four fit, the rest drop.
    for (c, n) in [(b"a", 1), (b"b", 1), (b"a", 2), (b"b", 2)] {
        assert!(q.push_message(c, &[n], 0));
    }
    for (c, n) in [(&b"a"[..], 3), (b"b", 3), (b"c", 1), (b"a", 4)] {
        assert!(!q.push_message(c, &[n], 0));
    }
    h.open.store(true, Ordering::Release);
    // After the batch the queue takes messages again.
    let start = std::time::Instant::now();
    while h.log.lock().len() < 6 {
        assert!(start.elapsed().as_secs() < 5, "{:?}", h.log.lock());
        std::thread::yield_now();
    }
    assert!(q.push_message(b"a", &[5], 0));
    let start = std::time::Instant::now();
    while h.log.lock().len() < 7 {
        assert!(start.elapsed().as_secs() < 5, "{:?}", h.log.lock());
        std::thread::yield_now();
    }
    pool.shutdown();
    assert_eq!(
        *h.log.lock(),
        ["a0", "a1", "b1", "a2", "b2", "dropped 4 a,b,c", "a5"]
    );
}

/// A stage's origin for connection `conn`: channel "b" is of lane 1,
/// every other of lane 0.
fn origin(conn: u64, owners: Arc<LaneOwners>, lost: Arc<std::sync::atomic::AtomicU64>) -> Origin {
    Origin {
        conn,
        pattern_lane: None,
        owners,
        lost,
        lane_of: Arc::new(|c: &[u8]| usize::from(c == b"b")),
    }
}

#[test]
fn a_stage_queues_a_partial_batch_only_when_flushed_and_keeps_order() {
    // Queues without workers: what they hold is exactly what was queued.
    let queues: Vec<Arc<Queue>> = (0..2).map(|_| Arc::new(Queue::new(1024))).collect();
    let mut stage = Stage::new(2, origin(7, Arc::new(LaneOwners::new(1)), Arc::default()));
    let names: Vec<Vec<u8>> = (0..10).map(|i| format!("ch{i}").into_bytes()).collect();
    // More than one batch per worker: the full ones are queued early.
    let total = 300u32;
    let mut per_worker = [0usize; 2];
    for seq in 0..total {
        let ch = &names[seq as usize % names.len()];
        let w = shardcore::worker_of(ch, 2) as usize;
        per_worker[w] += 1;
        assert_eq!(
            stage.message(&queues, w, ch, &seq.to_le_bytes(), 0, None),
            0
        );
    }
    // Each worker's last batch (1 to STAGE messages) waits for the flush.
    for (q, &n) in queues.iter().zip(&per_worker) {
        let staged = if n == 0 { 0 } else { (n - 1) % STAGE + 1 };
        assert_eq!(q.depth(), n - staged);
    }
    assert!(per_worker.iter().all(|&n| n % STAGE != 0 && n > STAGE));
    assert_eq!(stage.flush(&queues), 0);
    assert!(stage.is_empty());
    let mut seen: Vec<(Vec<u8>, u32)> = Vec::new();
    for (q, &n) in queues.iter().zip(&per_worker) {
        assert_eq!(q.depth(), n);
        for item in q.inner.lock().items.drain(..) {
            let Item::Message {
                buf, channel_len, ..
            } = item
            else {
                panic!("only messages were staged");
            };
            let (c, p) = buf.split_at(channel_len);
            seen.push((c.to_vec(), u32::from_le_bytes(p.try_into().unwrap())));
        }
    }
    for ch in &names {
        let seqs: Vec<u32> = seen.iter().filter(|(c, _)| c == ch).map(|m| m.1).collect();
        let want: Vec<u32> = (0..total)
            .filter(|s| &names[*s as usize % 10] == ch)
            .collect();
        assert_eq!(seqs, want, "{ch:?}");
    }
}

#[test]
fn a_flush_into_a_full_queue_drops_the_rest_and_names_them_after() {
    let h = Arc::new(Gated::default());
    let counters = Arc::new(Counters::default());
    let pool = Pool::start(1, 4, h.clone(), counters).unwrap();
    let queues = pool.queues().to_vec();
    assert!(queues[0].push_message(b"a", &[0], 0));
    let start = std::time::Instant::now();
    while !h.entered.load(Ordering::Acquire) {
        assert!(start.elapsed().as_secs() < 5, "worker never started");
        std::thread::yield_now();
    }
    // The worker holds a0: of eight staged, four fit.
    let mut stage = Stage::new(1, origin(7, Arc::new(LaneOwners::new(1)), Arc::default()));
    let staged = [
        (&b"a"[..], 1),
        (b"b", 1),
        (b"a", 2),
        (b"b", 2),
        (b"a", 3),
        (b"c", 1),
        (b"b", 3),
        (b"a", 4),
    ];
    for (c, n) in staged {
        assert_eq!(stage.message(&queues, 0, c, &[n], 0, None), 0);
    }
    assert_eq!(stage.flush(&queues), 4);
    h.open.store(true, Ordering::Release);
    let start = std::time::Instant::now();
    while h.log.lock().len() < 6 {
        assert!(start.elapsed().as_secs() < 5, "{:?}", h.log.lock());
        std::thread::yield_now();
    }
    pool.shutdown();
    assert_eq!(
        *h.log.lock(),
        ["a0", "a1", "b1", "a2", "b2", "dropped 4 a,c,b"]
    );
}

#[test]
fn a_lane_that_moved_takes_no_more_messages_from_its_old_connection() {
    // Connection 7 carries lanes 0 and 1 when it reads; lane 1 moves to
    // connection 8 before the read is queued (8's messages may already
    // be in): 7's lane-1 messages are dropped and noted, lane 0's kept
    // in order.
    let queue = Arc::new(Queue::new(1024));
    let queues = [queue.clone()];
    let owners = Arc::new(LaneOwners::new(2));
    owners.set(0, Some(7));
    owners.set(1, Some(7));
    owners.confirm(0, 7);
    owners.confirm(1, 7);
    let lost7 = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut old = Stage::new(1, origin(7, owners.clone(), lost7.clone()));
    let mut new = Stage::new(1, origin(8, owners.clone(), Arc::default()));
    // "a" is of lane 0, "b" of lane 1 (see `origin`).
    let staged = [(&b"a"[..], 1u8), (b"b", 1), (b"a", 2), (b"b", 2), (b"a", 3)];
    for (c, n) in staged {
        assert_eq!(old.message(&queues, 0, c, &[n], 0, None), 0);
    }
    // As the control thread does: the move, then the loser's count.
    assert_eq!(owners.set(1, Some(8)), Some(7));
    lost7.fetch_add(1, Ordering::Release);
    assert_eq!(new.message(&queues, 0, b"b", &[3], 0, None), 0);
    assert_eq!(new.flush(&queues), 0);
    assert_eq!(old.flush(&queues), 0);
    assert_eq!(owners.late(), 2);
    // A moved lane's messages are refused from the start of a batch
    // too, and a lane nobody carries takes none.
    assert_eq!(owners.set(0, None), Some(7));
    lost7.fetch_add(1, Ordering::Release);
    assert_eq!(old.message(&queues, 0, b"a", &[4], 0, None), 0);
    assert_eq!(old.flush(&queues), 0);
    assert_eq!(owners.late(), 3);
    let mut g = queue.inner.lock();
    let got: Vec<(Vec<u8>, u8)> = g
        .items
        .drain(..)
        .map(|item| match item {
            Item::Message {
                buf, channel_len, ..
            } => (buf[..channel_len].to_vec(), buf[channel_len]),
            _ => panic!("only messages were staged"),
        })
        .collect();
    let want: Vec<(Vec<u8>, u8)> = [(&b"b"[..], 3), (b"a", 1), (b"a", 2), (b"a", 3)]
        .iter()
        .map(|(c, n)| (c.to_vec(), *n))
        .collect();
    assert_eq!(got, want);
    assert_eq!(g.messages, 4);
    let (channels, n) = g.drops.take().expect("the drops are noted");
    assert_eq!(n, 3);
    let names: Vec<&[u8]> = channels.iter().collect();
    assert_eq!(names, [&b"b"[..], b"a"]);
}

#[test]
fn a_lane_given_back_takes_its_old_messages_only_after_the_new_confirmation() {
    // Lane 0 moves from 7 to 8 and back to 7 while 7 still holds a
    // message of its first subscription: that one is dropped, and 7's
    // messages are delivered again once it read its new confirmation.
    let queue = Arc::new(Queue::new(1024));
    let queues = [queue.clone()];
    let owners = Arc::new(LaneOwners::new(1));
    let lost7 = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut seven = Stage::new(1, origin(7, owners.clone(), lost7.clone()));
    let mut eight = Stage::new(1, origin(8, owners.clone(), Arc::default()));
    assert_eq!(owners.set(0, Some(7)), None);
    owners.confirm(0, 7);
    assert_eq!(seven.message(&queues, 0, b"a", &[1], 0, None), 0);
    assert_eq!(seven.flush(&queues), 0);
    assert_eq!(seven.message(&queues, 0, b"a", &[2], 0, None), 0);
    assert_eq!(owners.set(0, Some(8)), Some(7));
    lost7.fetch_add(1, Ordering::Release);
    owners.confirm(0, 8);
    assert_eq!(eight.message(&queues, 0, b"a", &[3], 0, None), 0);
    assert_eq!(eight.flush(&queues), 0);
    // Back to 7 before its old message is queued.
    assert_eq!(owners.set(0, Some(7)), Some(8));
    // Giving a lane to its owner again changes nothing.
    assert_eq!(owners.set(0, Some(7)), None);
    assert_eq!(seven.flush(&queues), 0);
    assert_eq!(owners.late(), 1);
    owners.confirm(0, 7);
    assert_eq!(seven.message(&queues, 0, b"a", &[4], 0, None), 0);
    assert_eq!(seven.flush(&queues), 0);
    assert_eq!(owners.late(), 1);
    let got: Vec<u8> = queue
        .inner
        .lock()
        .items
        .drain(..)
        .map(|item| match item {
            Item::Message {
                buf, channel_len, ..
            } => buf[channel_len],
            _ => panic!("only messages were staged"),
        })
        .collect();
    assert_eq!(got, [1, 3, 4]);
}

#[test]
fn a_panicking_handler_does_not_kill_the_worker() {
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    let h = move |_: &[u8], p: &[u8]| {
        n2.fetch_add(1, Ordering::Relaxed);
        assert_ne!(p, b"boom");
    };
    let pool = Pool::start(1, 16, Arc::new(h), Arc::new(Counters::default())).unwrap();
    let q = &pool.queues()[0];
    assert!(q.push_message(b"c", b"boom", 0));
    assert!(q.push_message(b"c", b"ok", 0));
    let start = std::time::Instant::now();
    while n.load(Ordering::Relaxed) < 2 {
        assert!(start.elapsed().as_secs() < 5);
        std::thread::yield_now();
    }
    pool.shutdown();
}

/// Counts every message, whatever its channel.
#[derive(Default)]
struct Tally(AtomicUsize);
impl Handler for Tally {
    fn on_message(&self, _channel: &[u8], _payload: &[u8]) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Waits up to 5 s for `cond`; false if it never held.
fn within_5s(cond: impl Fn() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !cond() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    true
}

/// A worker pool of one with a queue of `capacity`, its worker parked.
fn parked(capacity: usize) -> (Pool, Arc<Queue>, Arc<Tally>) {
    let h = Arc::new(Tally::default());
    let pool = Pool::start(1, capacity, h.clone(), Arc::default()).unwrap();
    let q = pool.queues()[0].clone();
    assert!(
        within_5s(|| q.inner.lock().waiting),
        "the worker never waited"
    );
    (pool, q, h)
}

/// Stages `n` messages for worker 0 the way one read does; the caller
/// flushes (the read's end).
fn stage_read(q: &Arc<Queue>, n: usize) -> Stage {
    let queues = std::slice::from_ref(q);
    let mut stage = Stage::new(1, origin(1, Arc::new(LaneOwners::new(1)), Arc::default()));
    for i in 0..n as u32 {
        assert_eq!(
            stage.message(queues, 0, b"ch", &i.to_le_bytes(), 0, None),
            0
        );
    }
    stage
}

#[test]
fn a_long_read_wakes_its_worker_once_at_its_end_not_per_full_batch() {
    let (pool, q, h) = parked(4096);
    let n = 3 * STAGE + 1;
    let mut stage = stage_read(&q, n);
    assert_eq!(q.wakes(), 0, "a full batch mid-read woke the worker");
    assert_eq!(stage.flush(std::slice::from_ref(&q)), 0);
    assert_eq!(q.wakes(), 1);
    assert!(within_5s(|| h.0.load(Ordering::Relaxed) == n));
    pool.shutdown();
}

#[test]
fn a_quarter_full_queue_wakes_its_worker_in_the_middle_of_a_read() {
    // A quarter of 256 is one full batch.
    let (pool, q, h) = parked(4 * STAGE);
    let mut stage = stage_read(&q, STAGE + 1);
    assert_eq!(
        q.wakes(),
        1,
        "the quarter-full queue waited for the read's end"
    );
    assert_eq!(stage.flush(std::slice::from_ref(&q)), 0);
    assert!(within_5s(|| h.0.load(Ordering::Relaxed) == STAGE + 1));
    pool.shutdown();
}
