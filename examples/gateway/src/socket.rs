//! One browser's WebSocket: it reads the page's requests (JSON text
//! frames: `join`, `leave`, `send`, `history`) and writes the frames the
//! hub queues for it. Nothing that awaits the servers runs in this loop:
//! a join, a history read and the publishes run in tasks of their own,
//! so a slow read never holds up the messages on their way to the page.
//!
//! ```text
//! page ─► {"op":"join","room":"lobby"}                ─► subscribe, await active ─► joined, history
//! page ─► {"op":"send","room","id","from","text"}     ─► publish_pending (in order) ─► sent | failed
//! page ─► {"op":"history","room"}                     ─► await active, history_pending ─► history
//! page ─► {"op":"leave","room"}                       ─► unsubscribe when no one here is in it
//! ```

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::hub::{self, ConnId, Hub};

/// How many of a room's latest messages a history frame carries.
pub const HISTORY_LIMIT: usize = 500;

/// How long a join or a history read waits for the room's subscription to
/// be active (after a gap it is being resubscribed).
const ACTIVE_WAIT: Duration = Duration::from_secs(15);

/// A page's messages waiting for their publish (the page sends one at a
/// time; more are answered `failed`).
const IN_FLIGHT: usize = 64;

/// The longest message text taken, in bytes.
const MAX_TEXT: usize = 2000;

/// Serves one WebSocket until the page goes or the hub drops it.
pub async fn serve(hub: Arc<Hub>, mut socket: WebSocket) {
    let (id, mut frames) = hub.connect();
    hub.send(id, &json!({ "type": "hello", "gateway": hub.name }));
    hub.send(id, &hub.servers_frame(None));
    // The publishes of this page, one at a time in the order it sent
    // them: a room's messages from one page keep their order.
    let (publish, queue) = mpsc::channel(IN_FLIGHT);
    let publisher = tokio::spawn(publish_in_order(hub.clone(), id, queue));
    loop {
        tokio::select! {
            frame = frames.recv() => {
                // None: the hub dropped this page (too slow, or shutting down).
                let Some(frame) = frame else { break };
                if socket.send(Message::Text(frame.into())).await.is_err() {
                    break;
                }
            }
            request = socket.recv() => match request {
                Some(Ok(Message::Text(text))) => handle(&hub, id, text.as_str(), &publish),
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                Some(Ok(_)) => {} // pings are answered by axum; binary is not used
            },
        }
    }
    hub.disconnect(id);
    publisher.abort();
    let _ = socket.send(Message::Close(None)).await;
}

/// One request from the page.
fn handle(hub: &Arc<Hub>, id: ConnId, text: &str, publish: &mpsc::Sender<Value>) {
    let Ok(request) = serde_json::from_str::<Value>(text) else {
        return hub.send(id, &error("not JSON"));
    };
    let field = |name: &str| request.get(name).and_then(Value::as_str).unwrap_or("");
    let room = field("room");
    if !hub::valid_room(room) {
        return hub.send(
            id,
            &error("a room name is 1-40 letters, digits, '-', '_' or '.'"),
        );
    }
    match field("op") {
        "join" => {
            if let Err(e) = hub.join(id, room) {
                return hub.send(
                    id,
                    &json!({ "type": "error", "room": room, "error": e.to_string() }),
                );
            }
            tokio::spawn(after_join(hub.clone(), id, room.to_string()));
        }
        "leave" => hub.leave(id, room),
        "history" => {
            tokio::spawn(send_history(hub.clone(), id, room.to_string()));
        }
        "send"
            if field("id").is_empty()
                || field("id").len() > 64
                || field("text").len() > MAX_TEXT =>
        {
            hub.send(
                id,
                &error("a message has an id (at most 64 bytes) and at most 2000 bytes of text"),
            );
        }
        "send" => {
            let message_id = field("id").to_string();
            if publish.try_send(request).is_err() {
                let busy = "too many messages in flight";
                hub.send(
                    id,
                    &json!({ "type": "failed", "id": message_id, "error": busy }),
                );
            }
        }
        _ => hub.send(id, &error("unknown op")),
    }
}

/// Once the room's subscription is active: `joined`, then its history
/// (messages published before the join, and any that raced it: the page
/// shows each id once).
async fn after_join(hub: Arc<Hub>, id: ConnId, room: String) {
    let channel = hub::channel(&room);
    let active = tokio::time::timeout(ACTIVE_WAIT, hub.ps.active(&[&channel])).await;
    let state = match active {
        Ok(Ok(())) => json!({ "type": "joined", "room": room }),
        Ok(Err(e)) => json!({ "type": "error", "room": room, "error": e.to_string() }),
        Err(_) => json!({ "type": "error", "room": room, "error": "not active yet" }),
    };
    hub.send(id, &state);
    send_history(hub, id, room).await;
}

/// Reads the room's latest [`HISTORY_LIMIT`] messages and sends them as a
/// `history` frame (or an `error` one: the page tries again). After a gap
/// the read waits for the resubscribe, so that nothing published between
/// the read and the subscription's return is missed.
async fn send_history(hub: Arc<Hub>, id: ConnId, room: String) {
    let channel = hub::channel(&room);
    let _ = tokio::time::timeout(ACTIVE_WAIT, hub.ps.active(&[&channel])).await;
    let frame = match hub.ps.history_pending(&channel, None, HISTORY_LIMIT).await {
        Ok(history) => {
            let messages: Vec<Value> = history
                .messages
                .iter()
                .map(|m| hub::message(&m.payload))
                .collect();
            json!({
                "type": "history",
                "room": room,
                "messages": messages,
                // Whether the stream still has the room from its first
                // message (older ones were trimmed or expired otherwise).
                "complete": history.continuous,
            })
        }
        Err(e) => json!({ "type": "history", "room": room, "error": e.to_string() }),
    };
    hub.send(id, &frame);
}

/// Publishes the page's messages one after the other, each awaited, and
/// answers each with `sent` (and how many gateways' subscriptions got it)
/// or `failed` (the page sends it again under the same id: a copy that did
/// go through is shown once).
async fn publish_in_order(hub: Arc<Hub>, id: ConnId, mut queue: mpsc::Receiver<Value>) {
    while let Some(request) = queue.recv().await {
        let field = |name: &str| request.get(name).and_then(Value::as_str).unwrap_or("");
        let payload = json!({
            "id": field("id"),
            "from": field("from"),
            "text": field("text"),
            "via": hub.name,
        });
        let channel = hub::channel(field("room"));
        let reply = match hub.ps.publish_pending(&channel, payload.to_string()).await {
            Ok(receivers) => json!({ "type": "sent", "id": field("id"), "receivers": receivers }),
            Err(e) => json!({ "type": "failed", "id": field("id"), "error": e.to_string() }),
        };
        hub.send(id, &reply);
    }
}

fn error(text: &str) -> Value {
    json!({ "type": "error", "error": text })
}
