//! The gateway's shared state: which browser connection is in which room,
//! and the fan-out of every delivery (a message, a room's gap, a server
//! going down or up) to the connections that should see it. It subscribes
//! a room's channel when the first connection of this process joins it,
//! and unsubscribes when the last one leaves. It does no I/O of its own:
//! each connection has a bounded queue of JSON frames that its socket task
//! writes (see `socket.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{json, Value};
use shardsub::PubSub;
use tokio::sync::mpsc;

/// The channel of room `name` (every room is a recoverable channel: the
/// gateway turns history on for this prefix).
pub const ROOM_PREFIX: &str = "room:";

/// Frames one browser connection may have queued before it is dropped as
/// too slow (its page reconnects and reloads its rooms' history).
pub const QUEUE: usize = 4096;

/// One browser connection's number, unique in this process.
pub type ConnId = u64;

/// Rooms, connections and the instance they share.
pub struct Hub {
    /// The gateway's name, shown in the page and carried by each message.
    pub name: String,
    /// The one shardsub instance of this process.
    pub ps: Arc<PubSub>,
    inner: Mutex<Inner>,
    /// Dropped with the last handle on the hub (every task that holds
    /// one has ended): `main` awaits that before closing the instance.
    _alive: mpsc::Sender<()>,
}

#[derive(Default)]
struct Inner {
    next: ConnId,
    /// Each connection's queue of frames (dropped to disconnect it).
    conns: HashMap<ConnId, mpsc::Sender<String>>,
    /// Each room's connections.
    rooms: HashMap<String, HashSet<ConnId>>,
}

impl Hub {
    /// The hub, and a receiver that ends when the hub is gone.
    pub fn new(name: String, ps: Arc<PubSub>) -> (Hub, mpsc::Receiver<()>) {
        let (alive, gone) = mpsc::channel(1);
        let hub = Hub {
            name,
            ps,
            inner: Mutex::default(),
            _alive: alive,
        };
        (hub, gone)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves maps that are still whole.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new connection and the queue its socket task writes from.
    pub fn connect(&self) -> (ConnId, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let mut inner = self.lock();
        inner.next += 1;
        let id = inner.next;
        inner.conns.insert(id, tx);
        (id, rx)
    }

    /// Forgets a connection and leaves its rooms.
    pub fn disconnect(&self, id: ConnId) {
        let mut inner = self.lock();
        inner.conns.remove(&id);
        let rooms: Vec<String> = inner
            .rooms
            .iter()
            .filter(|(_, members)| members.contains(&id))
            .map(|(room, _)| room.clone())
            .collect();
        for room in rooms {
            self.leave_locked(&mut inner, id, &room);
        }
    }

    /// Disconnects every browser (at shutdown): their socket tasks close.
    pub fn disconnect_all(&self) {
        let mut inner = self.lock();
        inner.conns.clear();
        let rooms: Vec<String> = inner.rooms.drain().map(|(room, _)| room).collect();
        let channels: Vec<String> = rooms.iter().map(|r| channel(r)).collect();
        let _ = self.ps.unsubscribe(&channels);
    }

    /// Puts connection `id` in `room`, subscribing the room's channel if
    /// it is the first here. Under the lock, so that a join and a leave
    /// of the same room reach the instance in the order they happened.
    pub fn join(&self, id: ConnId, room: &str) -> Result<(), shardsub::Error> {
        let mut inner = self.lock();
        let members = inner.rooms.entry(room.to_string()).or_default();
        let first = members.is_empty();
        members.insert(id);
        if first {
            if let Err(e) = self.ps.subscribe([channel(room)]) {
                self.leave_locked(&mut inner, id, room);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Takes connection `id` out of `room`.
    pub fn leave(&self, id: ConnId, room: &str) {
        let mut inner = self.lock();
        self.leave_locked(&mut inner, id, room);
    }

    fn leave_locked(&self, inner: &mut Inner, id: ConnId, room: &str) {
        let Some(members) = inner.rooms.get_mut(room) else {
            return;
        };
        members.remove(&id);
        if members.is_empty() {
            inner.rooms.remove(room);
            let _ = self.ps.unsubscribe([channel(room)]);
        }
    }

    /// Queues `frame` for connection `id`. One whose queue is full is
    /// disconnected rather than waited for: a slow browser must not hold
    /// up the others (its page reconnects and reloads).
    pub fn send(&self, id: ConnId, frame: &Value) {
        let mut inner = self.lock();
        Self::send_locked(&mut inner, id, frame.to_string());
    }

    fn send_locked(inner: &mut Inner, id: ConnId, frame: String) {
        let full = match inner.conns.get(&id) {
            Some(tx) => tx.try_send(frame).is_err(),
            None => false,
        };
        if full {
            inner.conns.remove(&id);
        }
    }

    /// Queues `frame` for every connection in `room`.
    pub fn to_room(&self, room: &str, frame: &Value) {
        let mut inner = self.lock();
        let members: Vec<ConnId> = match inner.rooms.get(room) {
            Some(m) => m.iter().copied().collect(),
            None => return,
        };
        let text = frame.to_string();
        for id in members {
            Self::send_locked(&mut inner, id, text.clone());
        }
    }

    /// Queues `frame` for every connection.
    pub fn to_all(&self, frame: &Value) {
        let mut inner = self.lock();
        let ids: Vec<ConnId> = inner.conns.keys().copied().collect();
        let text = frame.to_string();
        for id in ids {
            Self::send_locked(&mut inner, id, text.clone());
        }
    }

    /// The `servers` frame: each server's subscribe connections, up or not
    /// (`PubSub::health`), and what just happened (`None` for a new page).
    pub fn servers_frame(&self, event: Option<String>) -> Value {
        let servers: Vec<Value> = self
            .ps
            .health()
            .iter()
            .map(|h| {
                json!({
                    "server": h.server,
                    "connected": h.connected,
                    "lastError": h.last_error,
                })
            })
            .collect();
        json!({ "type": "servers", "servers": servers, "event": event })
    }
}

/// The channel of room `room`.
pub fn channel(room: &str) -> String {
    format!("{ROOM_PREFIX}{room}")
}

/// The room of `channel`, if it is one.
pub fn room_of(channel: &[u8]) -> Option<&str> {
    std::str::from_utf8(channel).ok()?.strip_prefix(ROOM_PREFIX)
}

/// Whether `room` is a room name this gateway accepts.
pub fn valid_room(room: &str) -> bool {
    (1..=40).contains(&room.len())
        && room
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// A message as the page gets it: the JSON the gateway published, or for a
/// payload something else published, its text with its text as the id
/// (so a reload still shows it once).
pub fn message(payload: &[u8]) -> Value {
    match serde_json::from_slice::<Value>(payload) {
        Ok(v) if v.get("id").is_some_and(Value::is_string) => v,
        _ => {
            let text = String::from_utf8_lossy(payload);
            json!({ "id": format!("raw:{text}"), "from": "?", "text": text })
        }
    }
}
