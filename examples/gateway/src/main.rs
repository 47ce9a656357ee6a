//! A WebSocket chat gateway on shardsub: shardsub's "real app" example.
//!
//! Rooms are channels (`room:NAME`), and recoverable ones: the gateway turns
//! history on for the `room:` prefix, so each room keeps its latest
//! messages in a capped stream beside the channel. Browsers load the page
//! (`GET /`), open a WebSocket (`GET /ws`), join rooms and send messages;
//! any number of gateway processes can serve the same rooms, each with one
//! shardsub instance whose subscriptions are the rooms its browsers are in.
//!
//! ```text
//! browser ─ws─► gateway ─ publish_pending ─► room:NAME ─► every gateway's Receiver ─ws─► browsers in NAME
//!                 ▲                                           │ Gap / Dropped / Unrecoverable
//!                 └────── history_pending ◄── the page asks ◄──┘ (and the server health on
//!                                                                Disconnected / Connected)
//! ```
//!
//! What a person sees: a message list per room, a box to send, and a
//! health line (the page's WebSocket, each server's subscribe connections,
//! and the last events). When a room has a gap (a failover, a reconnect, a
//! slot move, a full queue) the page reloads the room's history and merges
//! it with what it has, by message id: the reload never shows a message
//! twice, and a message the gap lost reappears in its place. shardsub also
//! recovers a recoverable channel's missed messages by itself after a gap;
//! the page's reload covers what it cannot (a loss before the room's first
//! message, a page that reconnects, messages its own receiver dropped).
//!
//! It uses shardsub's async API only: `build_pending().await`, deliveries
//! as a `Stream` from a `Receiver`, `active().await`,
//! `publish_pending().await`, `history_pending().await`, `close().await`.
//!
//! ```text
//! cargo run -p shardsub-gateway -- --server 127.0.0.1:6379
//! cargo run -p shardsub-gateway -- --cluster 127.0.0.1:7000 --listen 127.0.0.1:8081 --name east
//! ```
//!
//! It prints `listening on http://ADDR/` once it serves, and stops on
//! SIGINT or SIGTERM: browsers are disconnected, then the instance closes.
//! `tests/suite/examples/gateway.rs` runs two of them on a cluster with a
//! headless Chromium on each.

mod hub;
mod socket;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{State, WebSocketUpgrade};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;
use serde_json::json;
use shardsub::history::HistoryOptions;
use shardsub::pubsub::{Delivery, Receiver};
use shardsub::PubSub;
use tokio_stream::StreamExt;

use hub::Hub;

/// The page: one static file, no build step.
const PAGE: &str = include_str!("page.html");

/// Deliveries the receiver holds for the gateway before it drops (and says
/// so with `Delivery::Dropped`, which the page answers with a reload).
const RECEIVER_CAPACITY: usize = 100_000;

/// How long the pages' tasks get to end at shutdown.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

struct Options {
    servers: Vec<String>,
    seeds: Vec<String>,
    listen: String,
    name: String,
    partitions: Option<u32>,
    history: HistoryOptions,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        servers: Vec::new(),
        seeds: Vec::new(),
        listen: "127.0.0.1:8080".into(),
        name: "gateway".into(),
        partitions: None,
        history: HistoryOptions {
            max_len: 1000,
            max_age: Duration::from_secs(3600),
        },
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--server" => o.servers.push(value()?),
            "--cluster" => o.seeds.push(value()?),
            "--listen" => o.listen = value()?,
            "--name" => o.name = value()?,
            "--partitions" => o.partitions = Some(value()?.parse().map_err(|e| format!("{e}"))?),
            "--history-len" => o.history.max_len = value()?.parse().map_err(|e| format!("{e}"))?,
            _ => return Err(format!("unexpected argument {a:?}")),
        }
    }
    if o.servers.is_empty() == o.seeds.is_empty() {
        return Err("give --server ADDR (repeat for shards) or --cluster SEED".into());
    }
    Ok(o)
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("gateway: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let o = options()?;
    let mut builder = if o.seeds.is_empty() {
        PubSub::builder().addresses(o.servers)
    } else {
        PubSub::builder().seeds(o.seeds)
    };
    if let Some(p) = o.partitions {
        builder = builder.partitions(p);
    }
    let (builder, rx) = builder
        .history(hub::ROOM_PREFIX, o.history)
        .receiver(RECEIVER_CAPACITY);
    // Connecting (and a cluster's discovery) runs on a helper thread.
    let ps = Arc::new(builder.build_pending().await?);
    let (hub, mut hub_gone) = Hub::new(o.name, ps.clone());
    let hub = Arc::new(hub);
    let deliveries = tokio::spawn(deliver(hub.clone(), rx));

    let app = Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/ws", get(upgrade))
        .with_state(hub.clone());
    let listener = tokio::net::TcpListener::bind(&o.listen).await?;
    println!("listening on http://{}/", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(stopped())
        .await?;

    // Browsers first (their WebSockets outlive the server's graceful
    // shutdown, which waits for plain requests only), then the instance,
    // once every task that holds the hub has ended.
    hub.disconnect_all();
    deliveries.abort();
    drop(hub);
    let _ = tokio::time::timeout(CLOSE_WAIT, hub_gone.recv()).await;
    match Arc::try_unwrap(ps) {
        Ok(ps) => ps.close().await?,
        // A task is still at work (a history read, say): shut down anyway.
        Err(ps) => ps.shutdown_pending().await?,
    }
    println!("closed");
    Ok(())
}

async fn upgrade(ws: WebSocketUpgrade, State(hub): State<Arc<Hub>>) -> impl IntoResponse {
    ws.on_upgrade(move |socket| socket::serve(hub, socket))
}

/// Every delivery, in order, to the pages that should see it.
async fn deliver(hub: Arc<Hub>, mut rx: Receiver) {
    while let Some(delivery) = rx.next().await {
        match delivery {
            Delivery::Message { channel, payload } => {
                if let Some(room) = hub::room_of(&channel) {
                    let msg = hub::message(&payload);
                    hub.to_room(
                        room,
                        &json!({ "type": "message", "room": room, "msg": msg }),
                    );
                }
            }
            // The room may have lost messages: the page reloads its history.
            Delivery::Gap { channels, .. } | Delivery::Dropped { channels, .. } => {
                for room in channels.iter().filter_map(hub::room_of) {
                    hub.to_room(room, &json!({ "type": "gap", "room": room }));
                }
            }
            Delivery::Unrecoverable {
                channel, reason, ..
            } => {
                if let Some(room) = hub::room_of(&channel) {
                    let frame = json!({ "type": "unrecoverable", "room": room, "reason": reason });
                    hub.to_room(room, &frame);
                }
            }
            Delivery::Refused { channel, message } => {
                if let Some(room) = hub::room_of(&channel) {
                    let frame = json!({ "type": "error", "room": room, "error": message });
                    hub.to_room(room, &frame);
                }
            }
            Delivery::Disconnected { server, error, .. } => {
                hub.to_all(&hub.servers_frame(Some(format!("{server} down: {error}"))));
            }
            Delivery::Connected { server, .. } => {
                hub.to_all(&hub.servers_frame(Some(format!("{server} up"))));
            }
            _ => {}
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn stopped() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
