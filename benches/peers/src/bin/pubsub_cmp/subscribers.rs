//! The subscribers under test, each subscribed to every channel and
//! handing each message to a [`Delivery`], the one thing a handler does.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use std::net::SocketAddr;

use crate::load::{channel, monotonic_ns, parse_stamp, BOUND};

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
            let lag = (monotonic_ns().saturating_sub(at) / 1000).min(u64::from(u32::MAX - 1));
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
        self.lags_us_in(0..self.lags.len())
    }

    /// The lag of each stamped message of `seqs` delivered, in µs, sorted
    /// (as many as were delivered).
    pub fn lags_us_in(&self, seqs: std::ops::Range<usize>) -> Vec<u32> {
        let mut v: Vec<u32> = self.lags
            [seqs.start.min(self.lags.len())..seqs.end.min(self.lags.len())]
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
    /// The `redis` crate's async Pub/Sub, one connection, RESP2 (its
    /// default) or RESP3, on tokio with `workers` worker threads (0: a
    /// current-thread runtime on a thread of its own).
    Redis { resp3: bool, workers: usize },
    /// `fred`'s client with its defaults (RESP2), one connection, on a
    /// current-thread runtime; its message channel made room for 65,536
    /// (the default 32 loses messages to a lagging receiver).
    Fred,
}

/// A running subscriber; [`Subscriber::stop`] ends it.
pub enum Subscriber {
    Shardsub(shardsub::PubSub),
    Tokio {
        task: tokio::task::AbortHandle,
        driver: Driver,
    },
}

/// What runs a tokio subscriber's task.
pub enum Driver {
    /// A runtime with worker threads.
    Workers(tokio::runtime::Runtime),
    /// A thread of its own in `block_on` on a current-thread runtime.
    Thread(std::thread::JoinHandle<()>),
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

    /// The `redis` crate with its defaults (RESP2) on `workers` worker
    /// threads (0: a current-thread runtime).
    pub const fn redis_default(workers: usize) -> Who {
        Who::Redis {
            resp3: false,
            workers,
        }
    }

    /// Subscribes to the first `channels` channels, counting into
    /// `delivery`; returns once the subscriptions are confirmed to the
    /// client.
    pub fn start(self, addr: SocketAddr, channels: usize, delivery: &Arc<Delivery>) -> Subscriber {
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
                    .address(addr.to_string())
                    .subscribe_connections(connections)
                    .protocol(protocol)
                    .handler(move |_: &[u8], p: &[u8]| d.record(p))
                    .build()
                    .expect("shardsub connects");
                let chans: Vec<String> = (0..channels).map(channel).collect();
                ps.subscribe(&chans).unwrap();
                ps.wait_active(&chans, BOUND).unwrap();
                Subscriber::Shardsub(ps)
            }
            Who::Redis { resp3, workers } => {
                let protocol = if resp3 { "?protocol=resp3" } else { "" };
                let url = format!("redis://{addr}/{protocol}");
                let d = delivery.clone();
                tokio_start(workers, move |ready| async move {
                    let client = redis::Client::open(url).unwrap();
                    let mut pubsub = client.get_async_pubsub().await.unwrap();
                    let chans: Vec<String> = (0..channels).map(channel).collect();
                    pubsub.subscribe(&chans).await.unwrap();
                    ready.send(()).unwrap();
                    let mut stream = pubsub.on_message();
                    while let Some(msg) = stream.next().await {
                        d.record(msg.get_payload_bytes());
                    }
                })
            }
            Who::Fred => {
                let d = delivery.clone();
                tokio_start(0, move |ready| async move {
                    use fred::prelude::{ClientLike, EventInterface, PubsubInterface};
                    use tokio::sync::broadcast::error::RecvError;
                    let config = fred::prelude::Config {
                        server: fred::prelude::ServerConfig::new_centralized(
                            addr.ip().to_string(),
                            addr.port(),
                        ),
                        ..Default::default()
                    };
                    let client = fred::prelude::Builder::from_config(config)
                        .with_performance_config(|p| p.broadcast_channel_capacity = 1 << 16)
                        .build()
                        .unwrap();
                    client.init().await.unwrap();
                    let mut rx = client.message_rx();
                    let chans: Vec<String> = (0..channels).map(channel).collect();
                    client.subscribe(chans).await.unwrap();
                    ready.send(()).unwrap();
                    loop {
                        match rx.recv().await {
                            Ok(msg) => d.record(msg.value.as_bytes().unwrap_or_default()),
                            Err(RecvError::Lagged(_)) => {}
                            Err(RecvError::Closed) => break,
                        }
                    }
                })
            }
        }
    }
}

/// Runs the task `make` returns on tokio with `workers` worker threads (0:
/// a current-thread runtime on a thread of its own); returns once the task
/// says it is subscribed.
fn tokio_start<F, Fut>(workers: usize, make: F) -> Subscriber
where
    F: FnOnce(std::sync::mpsc::Sender<()>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let rt = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    }
    .unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let task = rt.spawn(make(ready_tx));
    let abort = task.abort_handle();
    let driver = if workers == 0 {
        Driver::Thread(
            std::thread::Builder::new()
                .name("tokio-current".into())
                .spawn(move || {
                    let _ = rt.block_on(task);
                    rt.shutdown_timeout(Duration::from_secs(2));
                })
                .unwrap(),
        )
    } else {
        Driver::Workers(rt)
    };
    ready_rx.recv_timeout(BOUND).expect("subscriber subscribed");
    Subscriber::Tokio {
        task: abort,
        driver,
    }
}

impl Subscriber {
    /// Messages shardsub dropped (a worker's queue full, signalled); 0 for
    /// the peers (the crate has no bound; what `fred`'s channel loses to a
    /// lagging receiver shows as not delivered).
    pub fn dropped(&self) -> u64 {
        match self {
            Subscriber::Shardsub(ps) => ps.metrics().dropped.total(),
            Subscriber::Tokio { .. } => 0,
        }
    }

    /// Unsubscribes by closing the subscriber's connections.
    pub fn stop(self) {
        match self {
            Subscriber::Shardsub(ps) => ps.shutdown(),
            Subscriber::Tokio { task, driver } => {
                task.abort();
                match driver {
                    Driver::Workers(rt) => rt.shutdown_timeout(Duration::from_secs(2)),
                    Driver::Thread(thread) => {
                        let _ = thread.join();
                    }
                }
            }
        }
    }
}
