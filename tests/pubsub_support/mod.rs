//! Shared by the Pub/Sub integration tests: a recording handler whose
//! state can be awaited (condition variable, bounded), and payload helpers.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use shardsub::pubsub::{Event, Handler};

/// What a [`Recorder`] saw.
#[derive(Default, Debug)]
pub struct Seen {
    /// Messages per channel.
    pub count: HashMap<Vec<u8>, u64>,
    /// Last sequence number per channel.
    pub last: HashMap<Vec<u8>, u64>,
    /// Messages whose sequence number was not above the channel's last.
    pub out_of_order: u64,
    /// Every message.
    pub total: u64,
    /// Union of channels named by gap events.
    pub gap_channels: HashSet<Vec<u8>>,
    /// Gap events.
    pub gaps: u64,
    /// Channels reported active.
    pub active: HashSet<Vec<u8>>,
    /// Active events received.
    pub active_events: u64,
    /// Which worker thread handled each channel.
    pub thread_of: HashMap<Vec<u8>, std::thread::ThreadId>,
    /// A channel seen on two different threads.
    pub thread_switches: u64,
}

/// Records messages (payload = 8-byte little-endian sequence number, then
/// anything) and events.
#[derive(Default)]
pub struct Recorder {
    pub seen: Mutex<Seen>,
    cond: Condvar,
}

impl Recorder {
    pub fn new() -> Arc<Recorder> {
        Arc::new(Recorder::default())
    }

    /// Waits until `pred` holds, up to `bound`; panics with `what` and the
    /// state's summary otherwise.
    pub fn wait(&self, what: &str, bound: Duration, pred: impl Fn(&Seen) -> bool) {
        let deadline = Instant::now() + bound;
        let mut g = self.seen.lock();
        while !pred(&g) {
            if self.cond.wait_until(&mut g, deadline).timed_out() && !pred(&g) {
                panic!(
                    "timed out after {bound:?} waiting for {what}: total {} gaps {} gap channels {} \
                     out of order {}",
                    g.total,
                    g.gaps,
                    g.gap_channels.len(),
                    g.out_of_order
                );
            }
        }
    }
}

pub fn seq_of(payload: &[u8]) -> u64 {
    payload
        .get(..8)
        .map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().unwrap()))
}

pub fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut p = seq.to_le_bytes().to_vec();
    p.resize(len.max(8), b'x');
    p
}

impl Handler for Recorder {
    fn on_message(&self, channel: &[u8], payload: &[u8]) {
        let seq = seq_of(payload);
        let mut g = self.seen.lock();
        let g = &mut *g;
        g.total += 1;
        *g.count.entry(channel.to_vec()).or_default() += 1;
        match g.last.get_mut(channel) {
            Some(last) if *last >= seq => g.out_of_order += 1,
            Some(last) => *last = seq,
            None => {
                g.last.insert(channel.to_vec(), seq);
            }
        }
        let me = std::thread::current().id();
        match g.thread_of.get(channel) {
            Some(t) if *t != me => g.thread_switches += 1,
            Some(_) => {}
            None => {
                g.thread_of.insert(channel.to_vec(), me);
            }
        }
        self.cond.notify_all();
    }

    fn on_event(&self, event: Event<'_>) {
        let mut g = self.seen.lock();
        match event {
            Event::Gap { channels, .. } => {
                g.gaps += 1;
                for c in channels.iter() {
                    g.gap_channels.insert(c.to_vec());
                }
            }
            Event::Active { channel } => {
                g.active_events += 1;
                g.active.insert(channel.to_vec());
            }
            _ => {}
        }
        self.cond.notify_all();
    }
}

/// `n` channel names with a prefix.
pub fn channels(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}:{i}").into_bytes())
        .collect()
}

/// `PUBSUB NUMSUB` for `channels` on a server, as counts.
pub fn numsub(server: &testkit::Server, channels: &[Vec<u8>]) -> Vec<i64> {
    let mut args: Vec<&[u8]> = vec![b"PUBSUB", b"NUMSUB"];
    args.extend(channels.iter().map(|c| c.as_slice()));
    let reply = server.cmd(&args).expect("PUBSUB NUMSUB");
    let items = match reply {
        testkit::Value::Array(items) => items,
        testkit::Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        other => panic!("NUMSUB reply {other:?}"),
    };
    items
        .chunks(2)
        .map(|kv| match &kv[1] {
            testkit::Value::Integer(n) => *n,
            other => panic!("NUMSUB count {other:?}"),
        })
        .collect()
}
