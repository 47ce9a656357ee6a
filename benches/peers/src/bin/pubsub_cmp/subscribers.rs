//! The subscribers under test, each subscribed to every channel and
//! handing each message to a [`Delivery`], the one thing a handler does.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use testkit::Server;

use crate::load::{channel, now_us, parse_stamp, BOUND, CHANNELS};

/// What a subscriber's handler records: every message, and each stamped
/// one's lag (publish to handler) by its sequence number.
pub struct Delivery {
    seen: AtomicU64,
    /// Lag in µs plus one of stamped message `seq`; 0 while not delivered.
    lags: Box<[AtomicU32]>,
}

impl Delivery {
    /// Room for the lags of stamped messages `0..stamped`.
    pub fn new(stamped: usize) -> Arc<Delivery> {
        Arc::new(Delivery {
            seen: AtomicU64::new(0),
            lags: (0..stamped).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// The handler's work: count the message, and keep its lag if stamped.
    #[inline]
    pub fn record(&self, payload: &[u8]) {
        std::hint::black_box(payload);
        if let Some((seq, at)) = parse_stamp(payload) {
            let lag = now_us().saturating_sub(at).min(u64::from(u32::MAX - 1));
            if let Some(slot) = self.lags.get(seq as usize) {
                slot.store(lag as u32 + 1, Ordering::Relaxed);
            }
        }
        self.seen.fetch_add(1, Ordering::Relaxed);
    }

    /// Messages handled so far.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// The lag of every stamped message delivered, in µs, sorted.
    pub fn lags_us(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .lags
            .iter()
            .map(|l| l.load(Ordering::Relaxed))
            .filter(|&l| l > 0)
            .map(|l| l - 1)
            .collect();
        v.sort_unstable();
        v
    }
}

/// Which subscriber a row runs, and how it is set up.
#[derive(Clone, Copy)]
pub enum Who {
    /// shardsub's `PubSub` with its defaults but for what is given: 2
    /// workers and a 65,536-message queue in the full-speed table
    /// (`tuned`), the library's defaults otherwise.
    Shardsub {
        connections: usize,
        protocol: shardsub::Protocol,
        delay: Option<Duration>,
        tuned: bool,
    },
    /// The `redis` crate's async Pub/Sub, one connection, tokio with 2
    /// worker threads; RESP2 (its default) or RESP3.
    Redis { resp3: bool },
}

/// A running subscriber; [`Subscriber::stop`] ends it.
pub enum Subscriber {
    Shardsub(shardsub::PubSub),
    Redis {
        rt: tokio::runtime::Runtime,
        task: tokio::task::JoinHandle<()>,
    },
}

impl Who {
    /// shardsub with the library's defaults, but for `delay` where given.
    pub const fn shardsub_default(delay: Option<Duration>) -> Who {
        Who::Shardsub {
            connections: 1,
            protocol: shardsub::Protocol::Resp3,
            delay,
            tuned: false,
        }
    }

    /// Subscribes to every channel, counting into `delivery`; returns once
    /// the subscriptions are confirmed to the client.
    pub fn start(self, server: &Server, delivery: &Arc<Delivery>) -> Subscriber {
        match self {
            Who::Shardsub {
                connections,
                protocol,
                delay,
                tuned,
            } => {
                let d = delivery.clone();
                let mut b = shardsub::PubSub::builder();
                if let Some(delay) = delay {
                    b = b.delivery_delay(delay);
                }
                if tuned {
                    b = b.workers(2).queue_capacity(1 << 16);
                }
                let ps = b
                    .address(server.addr().to_string())
                    .subscribe_connections(connections)
                    .protocol(protocol)
                    .handler(move |_: &[u8], p: &[u8]| d.record(p))
                    .build()
                    .expect("shardsub connects");
                let chans: Vec<String> = (0..CHANNELS).map(channel).collect();
                ps.subscribe(&chans).unwrap();
                ps.wait_active(&chans, BOUND).unwrap();
                Subscriber::Shardsub(ps)
            }
            Who::Redis { resp3 } => redis_start(server, resp3, delivery),
        }
    }
}

fn redis_start(server: &Server, resp3: bool, delivery: &Arc<Delivery>) -> Subscriber {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let protocol = if resp3 { "?protocol=resp3" } else { "" };
    let url = format!("redis://{}/{protocol}", server.addr());
    let d = delivery.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let task = rt.spawn(async move {
        let client = redis::Client::open(url).unwrap();
        let mut pubsub = client.get_async_pubsub().await.unwrap();
        let chans: Vec<String> = (0..CHANNELS).map(channel).collect();
        pubsub.subscribe(&chans).await.unwrap();
        ready_tx.send(()).unwrap();
        let mut stream = pubsub.on_message();
        while let Some(msg) = stream.next().await {
            d.record(msg.get_payload_bytes());
        }
    });
    ready_rx
        .recv_timeout(BOUND)
        .expect("redis crate subscribed");
    Subscriber::Redis { rt, task }
}

impl Subscriber {
    /// Messages shardsub dropped (a worker's queue full, signalled); 0 for
    /// the crate, which has no bound.
    pub fn dropped(&self) -> u64 {
        match self {
            Subscriber::Shardsub(ps) => ps.metrics().dropped.total(),
            Subscriber::Redis { .. } => 0,
        }
    }

    /// Unsubscribes by closing the subscriber's connections.
    pub fn stop(self) {
        match self {
            Subscriber::Shardsub(ps) => ps.shutdown(),
            Subscriber::Redis { rt, task } => {
                task.abort();
                rt.shutdown_timeout(Duration::from_secs(2));
            }
        }
    }
}
