//! shardsub inside a tokio server, through the async API only, on a
//! current-thread runtime (one thread: anything that blocks it stalls
//! everything): a tiny TCP line server whose `PUBLISH channel payload`
//! lines are published with `publish_pending().await`, and one task that
//! reads every delivery as a `Stream` (`StreamExt::next`). The instance is
//! built with `build_pending().await`, waited on with `active().await`,
//! and closed with `close().await`; the library brings no runtime (tokio
//! is only the example's, a dev-dependency).
//!
//! ```text
//! cargo run --example tokio_server -- --server 127.0.0.1:6379
//! cargo run --example tokio_server -- --server 127.0.0.1:7000 --server 127.0.0.1:7001
//! cargo run --example tokio_server -- --cluster 127.0.0.1:30001 --channels 32 --messages 500
//! cargo run --example tokio_server -- --server 127.0.0.1:6379 --handler-ms 5
//! ```
//!
//! It listens on a loopback port, then plays its own clients: one TCP
//! connection per channel sends `--messages` numbered lines and reads each
//! reply (the receiver count). The reading task checks that each
//! channel's numbers arrive in order, with a jump only after a drop or
//! gap event that names the channel. `--handler-ms N` makes the handler
//! (on the library's worker threads) take N ms per message, and drops
//! the last handle while messages are still being handled. Every call
//! into the library and every poll of its futures is timed: `polls`
//! counts them, `slow_polls` those over 1 ms, `max_poll_us` is the longest
//! any of them held the runtime's thread, `drop_us` how long the drop (or
//! the `close` call) took. It ends with one line, `result: ok published=…
//! acked=… received=… dropped=… … max_poll_us=… drop_us=…` (exit 0) or
//! `result: fail …` (exit 1); `tests/suite/examples/tokio_server.rs` runs
//! it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardsub::pubsub::{Delivery, Receiver};
use shardsub::{handler_fn, Handler, PubSub};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::StreamExt;

/// How long any one phase may take before the example gives up.
const BOUND: Duration = Duration::from_secs(30);

/// How long the handler takes with the last message under `--handler-ms`.
const END_HANDLER: Duration = Duration::from_millis(500);

/// What the reading task saw.
#[derive(Debug, Default)]
struct Seen {
    received: u64,
    /// Messages a drop event said were lost.
    dropped: u64,
    gaps: u64,
    /// A number not above the channel's last one.
    reordered: u64,
    /// A jump with no drop or gap event for the channel before it.
    silent: u64,
    /// Every channel's last number, for the final check.
    last: HashMap<Vec<u8>, u64>,
}

/// The longest time, in µs, any call into the library or poll of one of
/// its futures held the runtime's only thread.
static MAX_POLL_US: AtomicU64 = AtomicU64::new(0);

/// Calls and polls timed, and those over 1 ms (a busy machine can preempt
/// the thread in the middle of any of them).
static POLLS: AtomicU64 = AtomicU64::new(0);
static SLOW_POLLS: AtomicU64 = AtomicU64::new(0);

/// Runs `f` (a call into the library), timing it.
fn call<T>(f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    note(t);
    out
}

/// Awaits a library future, timing each of its polls.
async fn timed<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        let t = Instant::now();
        let r = f.as_mut().poll(cx);
        note(t);
        r
    })
    .await
}

fn note(since: Instant) {
    let us = u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX);
    MAX_POLL_US.fetch_max(us, Ordering::Relaxed);
    POLLS.fetch_add(1, Ordering::Relaxed);
    if us > 1000 {
        SLOW_POLLS.fetch_add(1, Ordering::Relaxed);
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    match run().await {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            println!("result: fail error={e}");
            std::process::exit(1);
        }
    }
}

async fn run() -> Result<bool, Box<dyn std::error::Error>> {
    // Arguments: `--server ADDR` (repeat for client-side shards) or
    // `--cluster SEED`, then `--channels N`, `--messages N` and
    // `--handler-ms N`.
    let (mut servers, mut seeds) = (Vec::new(), Vec::new());
    let (mut channels, mut messages, mut handler_ms) = (16usize, 200u64, 0u64);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--server" => servers.push(value()?),
            "--cluster" => seeds.push(value()?),
            "--channels" => channels = value()?.parse()?,
            "--messages" => messages = value()?.parse()?,
            "--handler-ms" => handler_ms = value()?.parse()?,
            _ => return Err(format!("unexpected argument {a:?}").into()),
        }
    }
    let builder = match (servers.is_empty(), seeds.is_empty()) {
        (false, true) => PubSub::builder().addresses(servers),
        (true, false) => PubSub::builder().seeds(seeds),
        _ => return Err("give --server ADDR… or --cluster SEED".into()),
    };

    // Every message and event goes to one bounded queue that a task reads:
    // room for all of them here, so none should be dropped (a drop would
    // still be signalled, and counted below). With `--handler-ms`, the
    // handler takes that long per message before queueing it.
    let total = channels as u64 * messages;
    let capacity = usize::try_from(total).unwrap_or(usize::MAX).max(1);
    let (queue, rx) = shardsub::pubsub::receiver(capacity);
    let queue = Arc::new(queue);
    let events = queue.clone();
    let handling_end = Arc::new(AtomicBool::new(false));
    let in_end = handling_end.clone();
    let handler = handler_fn(move |channel, payload| {
        if payload == b"end" {
            // The last message's call is long: the handle is dropped
            // while it runs.
            in_end.store(true, Ordering::Release);
            std::thread::sleep(END_HANDLER);
        } else {
            std::thread::sleep(Duration::from_millis(handler_ms));
        }
        queue.on_message(channel, payload);
    })
    .on_event(move |event| events.on_event(event));
    // Connecting (and a cluster's discovery) runs on a helper thread.
    let ps = timed(call(|| builder.handler(handler).build_pending())).await?;
    let ps = Arc::new(ps);

    // Subscribe, and await the confirmations (no thread blocks on them).
    let names: Vec<String> = (0..channels).map(|i| format!("tokio:{i}")).collect();
    call(|| ps.subscribe(&names))?;
    tokio::time::timeout(BOUND, timed(call(|| ps.active(&names)))).await??;

    // The reading task: every delivery, in order, until all are accounted.
    let reader = tokio::spawn(read_all(rx, total));

    // The server: one task per connection, one publish per line.
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(serve(listener, ps.clone()));

    // The clients: one connection per channel, numbered lines, each reply
    // read before the next line (so a channel's order is the send order).
    let mut clients = Vec::new();
    for name in names.clone() {
        clients.push(tokio::spawn(client(addr, name, messages)));
    }
    let mut acked = 0;
    for c in clients {
        acked += tokio::time::timeout(BOUND, c).await???;
    }
    server.abort();
    let _ = server.await;

    let seen = reader.await?;
    let ps = Arc::into_inner(ps).ok_or("the instance is still shared")?;
    let drop_us = if handler_ms > 0 {
        // One more message, whose handler call takes long; once it runs,
        // drop the last handle: that must not wait for it (the shutdown
        // finishes in the background).
        let end = timed(call(|| ps.publish_pending(&names[0], "end")));
        tokio::time::timeout(BOUND, end).await??;
        let deadline = Instant::now() + BOUND;
        while !handling_end.load(Ordering::Acquire) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let t = Instant::now();
        drop(ps);
        t.elapsed().as_micros()
    } else {
        // Close and await the shutdown: its joins run on a helper thread.
        let t = Instant::now();
        let closing = ps.close();
        let took = t.elapsed().as_micros();
        tokio::time::timeout(BOUND, timed(closing)).await??;
        took
    };

    let complete = seen.last.values().filter(|&&n| n + 1 == messages).count();
    let ok = acked == total
        && seen.received + seen.dropped == total
        && seen.reordered == 0
        && seen.silent == 0
        && (seen.dropped > 0 || complete == channels);
    println!(
        "result: {} published={total} acked={acked} received={} dropped={} gaps={} \
         reordered={} silent={} channels={channels} complete={complete} polls={} \
         slow_polls={} max_poll_us={} drop_us={drop_us}",
        if ok { "ok" } else { "fail" },
        seen.received,
        seen.dropped,
        seen.gaps,
        seen.reordered,
        seen.silent,
        POLLS.load(Ordering::Relaxed),
        SLOW_POLLS.load(Ordering::Relaxed),
        MAX_POLL_US.load(Ordering::Relaxed),
    );
    Ok(ok)
}

/// Serves `PUBLISH channel payload` lines: each is published with
/// `publish_pending().await` and answered `:receivers` or `-error`.
async fn serve(listener: TcpListener, ps: Arc<PubSub>) {
    while let Ok((conn, _)) = listener.accept().await {
        let ps = ps.clone();
        tokio::spawn(async move {
            let (read, mut write) = conn.into_split();
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut words = line.splitn(3, ' ');
                let reply = match (words.next(), words.next(), words.next()) {
                    (Some("PUBLISH"), Some(channel), Some(payload)) => {
                        // Returns at once (or after at most the request
                        // timeout when the server is not keeping up); the
                        // await takes no thread.
                        match timed(call(|| ps.publish_pending(channel, payload))).await {
                            Ok(n) => format!(":{n}\n"),
                            Err(e) => format!("-{e}\n"),
                        }
                    }
                    _ => "-ERR expected PUBLISH channel payload\n".to_string(),
                };
                if write.write_all(reply.as_bytes()).await.is_err() {
                    break;
                }
            }
        });
    }
}

/// Sends `messages` numbered lines for `channel`; returns how many were
/// acknowledged with at least one receiver.
async fn client(
    addr: std::net::SocketAddr,
    channel: String,
    messages: u64,
) -> Result<u64, std::io::Error> {
    let conn = TcpStream::connect(addr).await?;
    let (read, mut write) = conn.into_split();
    let mut replies = BufReader::new(read).lines();
    let mut acked = 0;
    for seq in 0..messages {
        write
            .write_all(format!("PUBLISH {channel} {seq}\n").as_bytes())
            .await?;
        match replies.next_line().await? {
            Some(r) if r.strip_prefix(':').and_then(|n| n.parse::<i64>().ok()) >= Some(1) => {
                acked += 1;
            }
            Some(r) => eprintln!("{channel} #{seq}: {r}"),
            None => break,
        }
    }
    Ok(acked)
}

/// Reads deliveries until `total` messages are accounted for (received,
/// or lost in a drop event), the receiver ends, or [`BOUND`] passes.
async fn read_all(mut rx: Receiver, total: u64) -> Seen {
    let mut seen = Seen::default();
    // Channels named by a drop or gap event since their last message.
    let mut signalled: HashMap<Vec<u8>, bool> = HashMap::new();
    let deadline = tokio::time::sleep(BOUND);
    tokio::pin!(deadline);
    while seen.received + seen.dropped < total {
        let d = tokio::select! {
            biased;
            () = &mut deadline => break,
            d = timed(rx.next()) => match d {
                Some(d) => d,
                None => break,
            },
        };
        match d {
            Delivery::Message { channel, payload } => {
                seen.received += 1;
                let Some(n) = std::str::from_utf8(&payload)
                    .ok()
                    .and_then(|p| p.parse::<u64>().ok())
                else {
                    seen.silent += 1;
                    continue;
                };
                let jumped = signalled.remove(&channel).unwrap_or(false);
                match seen.last.insert(channel, n) {
                    Some(last) if n <= last => seen.reordered += 1,
                    Some(last) if n > last + 1 && !jumped => seen.silent += 1,
                    None if n > 0 && !jumped => seen.silent += 1,
                    _ => {}
                }
            }
            Delivery::Dropped { channels, messages } => {
                seen.dropped += messages;
                for c in channels.iter() {
                    signalled.insert(c.to_vec(), true);
                }
            }
            Delivery::Gap { channels, .. } => {
                seen.gaps += 1;
                for c in channels.iter() {
                    signalled.insert(c.to_vec(), true);
                }
            }
            _ => {}
        }
    }
    seen
}
