//! Servers found through Sentinel: a server given as `sentinel:NAME` is
//! the master Sentinel knows by `NAME`. Its address is asked of the
//! Sentinels whenever a connection to it opens ([`Sentinels`] is the
//! instance's resolver for such names, so the engine's lookups before
//! every reconnect ask them), and a [`Watcher`] subscribed to
//! `+switch-master` moves the instance's connections at a failover.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use resp::{Limits, Status, Value};

use crate::engine::resolve::{lookup, Resolver};
use crate::error::Error;
use crate::threads::PanicCount;

/// The prefix of a server address that names a Sentinel master.
pub(crate) const PREFIX: &str = "sentinel:";

/// How long one question to one Sentinel may take (connect, then reply).
const ASK_TIMEOUT: Duration = Duration::from_millis(500);

/// How long the watcher's read waits before it looks at its stop flag.
const WATCH_TICK: Duration = Duration::from_millis(200);

/// Reads one reply may take (a Sentinel's replies are a few hundred bytes).
const MAX_READS: usize = 64;

/// Ticks between two checks of every master while subscribed (a switch
/// whose message was missed is found within this: about 5 s).
const RECHECK_TICKS: u32 = 25;

/// Whether `name` can be a Sentinel master name here (not an IP address,
/// which would be taken for one).
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.parse::<std::net::IpAddr>().is_err()
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b':' | b'/' | b'@' | b','))
}

/// `AUTH` for the Sentinels themselves
/// ([`PubSubBuilder::sentinel_password`](crate::PubSubBuilder::sentinel_password)).
#[derive(Clone, Debug, Default)]
pub(crate) struct Auth {
    /// The ACL user (none: `AUTH password`, the default user).
    pub(crate) username: Option<Vec<u8>>,
    pub(crate) password: Option<Vec<u8>>,
}

/// The instance's resolver: a master's name (port 0, as `sentinel:NAME`
/// splits) is asked of its Sentinels; anything else goes to `inner`.
pub(crate) struct Sentinels {
    inner: Arc<dyn Resolver>,
    /// Master name → its Sentinels (`host:port`).
    masters: BTreeMap<String, Vec<String>>,
    auth: Auth,
}

impl Sentinels {
    pub(crate) fn new(
        inner: Arc<dyn Resolver>,
        masters: BTreeMap<String, Vec<String>>,
        auth: Auth,
    ) -> Self {
        Sentinels {
            inner,
            masters,
            auth,
        }
    }

    /// A connection to `sentinel`, authenticated when
    /// [`Auth::password`] is set.
    fn link(&self, sentinel: &str, timeout: Duration) -> Result<Link, String> {
        let mut link = Link::open(&*self.inner, sentinel, timeout)?;
        let Some(password) = &self.auth.password else {
            return Ok(link);
        };
        match &self.auth.username {
            Some(user) => link.send(&[b"AUTH", user, password])?,
            None => link.send(&[b"AUTH", password])?,
        }
        match link.next()? {
            Some(Value::Error(e) | Value::BlobError(e)) => Err(format!(
                "refused the credentials: {}",
                String::from_utf8_lossy(&e)
            )),
            Some(_) => Ok(link),
            None => Err(format!("no reply to AUTH within {timeout:?}")),
        }
    }

    /// Where the Sentinels say master `name` is now: the first that
    /// answers.
    ///
    /// # Errors
    ///
    /// Every Sentinel and why it did not answer, in words.
    pub(crate) fn master(&self, name: &str) -> Result<SocketAddr, String> {
        let Some(sentinels) = self.masters.get(name) else {
            return Err(format!("no Sentinels for master {name:?}"));
        };
        let mut why = Vec::new();
        for s in sentinels {
            match self.ask(s, name) {
                Ok(a) => return Ok(a),
                Err(e) => why.push(format!("{s}: {e}")),
            }
        }
        Err(format!(
            "no Sentinel named the master {name:?} ({})",
            why.join("; ")
        ))
    }

    fn ask(&self, sentinel: &str, name: &str) -> Result<SocketAddr, String> {
        let mut link = self.link(sentinel, ASK_TIMEOUT)?;
        link.send(&[b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME", name.as_bytes()])?;
        match link.next()? {
            Some(Value::Null) => Err(format!("does not know a master named {name:?}")),
            Some(Value::Error(e) | Value::BlobError(e)) => {
                Err(format!("refused: {}", String::from_utf8_lossy(&e)))
            }
            Some(v) => master_addr(&v).ok_or_else(|| format!("unexpected reply {v:?}")),
            None => Err(format!("no reply within {ASK_TIMEOUT:?}")),
        }
    }

    /// The distinct Sentinels of every master, in order.
    fn all(&self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for s in self.masters.values().flatten() {
            if !all.contains(s) {
                all.push(s.clone());
            }
        }
        all
    }
}

impl Resolver for Sentinels {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        if port == 0 && self.masters.contains_key(host) {
            return self.master(host).map(|a| vec![a]).map_err(io::Error::other);
        }
        self.inner.resolve(host, port)
    }
}

/// `[ip, port]` as Sentinel answers.
fn master_addr(v: &Value) -> Option<SocketAddr> {
    match v.as_array()? {
        [ip, port] => {
            let ip = ip.as_str()?.parse().ok()?;
            let port = port.as_str()?.parse().ok()?;
            Some(SocketAddr::new(ip, port))
        }
        _ => None,
    }
}

/// One blocking connection to a Sentinel (RESP2, no handshake).
struct Link {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Link {
    fn open(resolver: &dyn Resolver, sentinel: &str, timeout: Duration) -> Result<Link, String> {
        let mut last = String::from("no address");
        for addr in lookup(resolver, sentinel)? {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(stream) => {
                    stream
                        .set_read_timeout(Some(timeout))
                        .and_then(|()| stream.set_write_timeout(Some(timeout)))
                        .map_err(|e| e.to_string())?;
                    return Ok(Link {
                        stream,
                        buf: Vec::new(),
                    });
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    fn send(&mut self, args: &[&[u8]]) -> Result<(), String> {
        let mut out = Vec::new();
        resp::encode_command(&mut out, args);
        self.stream.write_all(&out).map_err(|e| e.to_string())
    }

    /// The next whole reply or push; `None` when no read brought a byte
    /// within the read timeout. A reply still incomplete after
    /// [`MAX_READS`] reads fails (a Sentinel trickling bytes cannot hold
    /// the thread).
    fn next(&mut self) -> Result<Option<Value>, String> {
        for _ in 0..MAX_READS {
            match resp::parse(&self.buf, &Limits::default()) {
                Ok(Status::Complete(p)) => {
                    let (v, n) = (p.to_value(), p.consumed);
                    self.buf.drain(..n);
                    return Ok(Some(v));
                }
                Ok(Status::Incomplete) => {}
                Err(e) => return Err(format!("unreadable reply: {e}")),
            }
            if self.buf.len() > 1 << 20 {
                return Err("a reply over 1 MiB".into());
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("the Sentinel closed the connection".into()),
                Ok(n) => self
                    .buf
                    .extend_from_slice(chunk.get(..n).unwrap_or_default()),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Err(format!("no whole reply in {MAX_READS} reads"))
    }
}

/// A `+switch-master` message: the master's name and its new address.
fn switched(v: &Value) -> Option<(String, SocketAddr)> {
    let [kind, channel, payload] = v.as_array()? else {
        return None;
    };
    if kind.as_bytes()? != b"message" || channel.as_bytes()? != b"+switch-master" {
        return None;
    }
    // "<name> <old ip> <old port> <new ip> <new port>"
    let words: Vec<&str> = payload.as_str()?.split(' ').collect();
    let [name, _, _, ip, port] = words[..] else {
        return None;
    };
    let addr = SocketAddr::new(ip.parse().ok()?, port.parse().ok()?);
    Some((name.to_string(), addr))
}

/// Follows the masters: subscribed to `+switch-master` on one Sentinel
/// at a time (the next when it fails), it calls `on_switch` with a
/// master's name and new address when it moves, and checks every master
/// itself after each (re)subscribe and every few seconds, so a move whose
/// message was missed is followed too. Runs on its own thread until
/// dropped.
pub(crate) struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    panics: PanicCount,
}

impl Watcher {
    /// Starts watching; `known` is where each master is now.
    ///
    /// # Errors
    ///
    /// [`Error::Runtime`] when the OS refuses the thread.
    pub(crate) fn start(
        sentinels: Arc<Sentinels>,
        known: BTreeMap<String, SocketAddr>,
        panics: PanicCount,
        on_switch: impl Fn(&str, SocketAddr) + Send + 'static,
    ) -> Result<Watcher, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = crate::threads::spawn("shardsub-sentinel".into(), panics.clone(), move || {
            watch(&sentinels, known, &s, &on_switch)
        })
        .map_err(|e| Error::runtime("Sentinel watcher thread", &e))?;
        Ok(Watcher {
            stop,
            thread: Some(thread),
            panics,
        })
    }

    /// Stops the thread and joins it (within about [`WATCH_TICK`] plus a
    /// question in flight), except on a thread of the runtime (shared with
    /// other instances): there the thread ends by itself.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if crate::engine::on_runtime_thread() {
            return;
        }
        if let Some(t) = self.thread.take() {
            crate::threads::join(t, &self.panics);
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where each master is, as far as the watcher knows, and whom to tell
/// when one moves.
struct Known<'a> {
    at: BTreeMap<String, SocketAddr>,
    on_switch: &'a dyn Fn(&str, SocketAddr),
}

impl Known<'_> {
    fn moved(&mut self, name: &str, addr: SocketAddr) {
        if self.at.get(name) != Some(&addr) {
            log::info!("Sentinel: master {name} is now at {addr}");
            self.at.insert(name.to_string(), addr);
            (self.on_switch)(name, addr);
        }
    }

    /// Asks where every master is (a move whose message was missed), until
    /// `stop` is set.
    fn check_all(&mut self, sentinels: &Sentinels, stop: &AtomicBool) {
        for name in sentinels.masters.keys() {
            if stop.load(Ordering::Acquire) {
                return;
            }
            if let Ok(a) = sentinels.master(name) {
                self.moved(name, a);
            }
        }
    }
}

fn watch(
    sentinels: &Sentinels,
    known: BTreeMap<String, SocketAddr>,
    stop: &AtomicBool,
    on_switch: &dyn Fn(&str, SocketAddr),
) {
    let all = sentinels.all();
    let mut known = Known {
        at: known,
        on_switch,
    };
    let mut at = 0usize;
    while !stop.load(Ordering::Acquire) {
        let Some(sentinel) = all.get(at % all.len().max(1)) else {
            return;
        };
        at = at.wrapping_add(1);
        let subscribed = sentinels.link(sentinel, WATCH_TICK).and_then(|mut l| {
            l.send(&[b"SUBSCRIBE", b"+switch-master"])?;
            Ok(l)
        });
        let mut link = match subscribed {
            Ok(l) => l,
            Err(e) => {
                log::debug!("Sentinel {sentinel}: {e}; trying the next");
                std::thread::sleep(WATCH_TICK);
                continue;
            }
        };
        known.check_all(sentinels, stop);
        let mut ticks = 0u32;
        while !stop.load(Ordering::Acquire) {
            match link.next() {
                Ok(Some(v)) => {
                    if let Some((name, addr)) = switched(&v) {
                        if sentinels.masters.contains_key(&name) {
                            known.moved(&name, addr);
                        }
                    }
                }
                Ok(None) => {
                    ticks += 1;
                    if ticks >= RECHECK_TICKS {
                        ticks = 0;
                        known.check_all(sentinels, stop);
                    }
                }
                Err(e) => {
                    log::info!("Sentinel {sentinel}: {e}; subscribing on the next");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_messages_are_read_as_sentinel_writes_them() {
        assert!(valid_name("mymaster"));
        assert!(valid_name("cache-1.eu"));
        for bad in ["", "a:b", "a/b", "a b", "a@b", "a,b", "10.0.0.1"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        let bulk = |s: &str| Value::Bulk(s.as_bytes().to_vec());
        let msg = Value::Array(vec![
            bulk("message"),
            bulk("+switch-master"),
            bulk("mymaster 127.0.0.1 7001 127.0.0.1 7002"),
        ]);
        assert_eq!(
            switched(&msg),
            Some(("mymaster".into(), "127.0.0.1:7002".parse().unwrap()))
        );
        let other = Value::Array(vec![bulk("message"), bulk("+sdown"), bulk("x")]);
        assert_eq!(switched(&other), None);
        let reply = Value::Array(vec![bulk("10.0.0.5"), bulk("6380")]);
        assert_eq!(master_addr(&reply), Some("10.0.0.5:6380".parse().unwrap()));
        assert_eq!(master_addr(&Value::Null), None);
    }
}
