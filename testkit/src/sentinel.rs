//! A Sentinel process watching one master, for the Sentinel tests: quorum
//! 1, the master presumed down after [`SENTINEL_DOWN_AFTER_MS`]; and a
//! fake one ([`FakeSentinel`]) that announces a failover on cue.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::client::Client;
use crate::process::{self, ChildGuard, TempDir};
use crate::values::text;
use crate::{Error, ServerKind, Value};

/// How long a master may not answer before the Sentinel presumes it down.
pub const SENTINEL_DOWN_AFTER_MS: u64 = 1000;

/// A running Sentinel (`redis-server` or `valkey-server` in Sentinel mode)
/// on `127.0.0.1`, watching one master. Dropping it stops the process and
/// removes its directory.
#[derive(Debug)]
pub struct Sentinel {
    port: u16,
    /// Its `requirepass`, sent as `AUTH` by [`Sentinel::cmd`].
    password: Option<String>,
    child: ChildGuard,
    _dir: TempDir,
}

impl Sentinel {
    /// Starts a Sentinel of `kind` on a free port that watches `master`
    /// under `name`, and waits until it answers and knows the master.
    ///
    /// # Errors
    ///
    /// [`Error::BinaryNotFound`], [`Error::StartFailed`] with its log, or
    /// [`Error::Io`].
    pub fn start(kind: ServerKind, name: &str, master: SocketAddr) -> Result<Sentinel, Error> {
        Sentinel::start_with(kind, name, master, None)
    }

    /// [`Sentinel::start`] for a Sentinel that asks its clients for
    /// `password` (`requirepass`).
    ///
    /// # Errors
    ///
    /// As [`Sentinel::start`].
    pub fn start_with_password(
        kind: ServerKind,
        name: &str,
        master: SocketAddr,
        password: &str,
    ) -> Result<Sentinel, Error> {
        Sentinel::start_with(kind, name, master, Some(password))
    }

    fn start_with(
        kind: ServerKind,
        name: &str,
        master: SocketAddr,
        password: Option<&str>,
    ) -> Result<Sentinel, Error> {
        let binary = kind.binary()?;
        let dir = TempDir::new("sentinel")?;
        let port = process::free_port(false)?;
        let conf = dir.path().join("sentinel.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\n\
             sentinel monitor {name} {ip} {mport} 1\n\
             sentinel down-after-milliseconds {name} {SENTINEL_DOWN_AFTER_MS}\n\
             sentinel failover-timeout {name} 5000\n\
             sentinel parallel-syncs {name} 1\n{auth}",
            dir = dir.path().display(),
            ip = master.ip(),
            mport = master.port(),
            auth = password.map_or(String::new(), |p| format!("requirepass {p}\n")),
        );
        std::fs::write(&conf, text).map_err(|e| Error::io("write sentinel.conf", e))?;
        let log = File::create(dir.path().join("stdio.log"))
            .map_err(|e| Error::io("create stdio.log", e))?;
        let err = log
            .try_clone()
            .map_err(|e| Error::io("clone stdio.log", e))?;
        let child = Command::new(&binary)
            .arg(&conf)
            .arg("--sentinel")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::io(format!("spawn {}", binary.display()), e))?;
        let sentinel = Sentinel {
            port,
            password: password.map(str::to_owned),
            child: ChildGuard::new(child, None),
            _dir: dir,
        };
        let ready = process::wait_for(
            "the Sentinel to know its master",
            Duration::from_secs(10),
            || Ok(sentinel.master(name).ok()),
        );
        if let Err(e) = ready {
            return Err(Error::StartFailed {
                kind,
                port,
                reason: e.to_string(),
                log: process::tail(&sentinel._dir.path().join("stdio.log"), 20),
            });
        }
        Ok(sentinel)
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Runs one command on a new connection.
    ///
    /// # Errors
    ///
    /// [`Error::Io`], or the Sentinel's error reply.
    pub fn cmd(&self, args: &[&[u8]]) -> Result<Value, Error> {
        let mut c = Client::connect(self.addr())?;
        if let Some(p) = &self.password {
            c.cmd(&[b"AUTH", p.as_bytes()])?;
        }
        c.cmd(args)
    }

    /// Where the Sentinel says master `name` is.
    ///
    /// # Errors
    ///
    /// As [`Sentinel::cmd`]; [`Error::Unexpected`] for an unknown master.
    pub fn master(&self, name: &str) -> Result<SocketAddr, Error> {
        let v = self.cmd(&[b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME", name.as_bytes()])?;
        let parts: Vec<String> = match &v {
            Value::Array(items) => items.iter().filter_map(text).collect(),
            _ => Vec::new(),
        };
        match &parts[..] {
            [ip, port] => format!("{ip}:{port}")
                .parse()
                .map_err(|_| Error::unexpected("a master address", &parts)),
            _ => Err(Error::unexpected(format!("master {name}'s address"), &v)),
        }
    }

    /// Starts a failover of master `name` (`SENTINEL FAILOVER`).
    ///
    /// # Errors
    ///
    /// As [`Sentinel::cmd`] (`NOGOODSLAVE` while no replica is ready).
    pub fn failover(&self, name: &str) -> Result<(), Error> {
        self.cmd(&[b"SENTINEL", b"FAILOVER", name.as_bytes()])
            .map(drop)
    }
}

/// How often a [`FakeSentinel`] connection looks at its stop flag.
const FAKE_TICK: Duration = Duration::from_millis(20);

/// A fake Sentinel on `127.0.0.1`, for what a real one will not do on
/// cue: it names one master (`SENTINEL GET-MASTER-ADDR-BY-NAME`, the
/// address the test sets), takes `SUBSCRIBE`, and publishes
/// `+switch-master` to its subscribers when the test says so. It counts
/// the address questions, so a test can time a push against the asker's
/// own checks. Dropping it stops it.
#[derive(Debug)]
pub struct FakeSentinel {
    addr: SocketAddr,
    shared: Arc<FakeShared>,
    accept: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct FakeShared {
    name: String,
    master: Mutex<SocketAddr>,
    /// The write halves of the connections subscribed to `+switch-master`.
    subscribers: Mutex<Vec<TcpStream>>,
    questions: AtomicUsize,
    stop: AtomicBool,
    handlers: Mutex<Vec<JoinHandle<()>>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FakeSentinel {
    /// Starts one that names `master` as the master called `name`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the listener cannot be bound.
    pub fn start(name: &str, master: SocketAddr) -> Result<FakeSentinel, Error> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| Error::io("bind fake Sentinel", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("fake Sentinel address", e))?;
        let shared = Arc::new(FakeShared {
            name: name.to_string(),
            master: Mutex::new(master),
            subscribers: Mutex::new(Vec::new()),
            questions: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            handlers: Mutex::new(Vec::new()),
        });
        let s = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("fake-sentinel".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if s.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let conn = Arc::clone(&s);
                    let h = thread::Builder::new()
                        .name("fake-sentinel-conn".into())
                        .spawn(move || serve(stream, &conn));
                    if let Ok(h) = h {
                        locked(&s.handlers).push(h);
                    }
                }
            })
            .map_err(|e| Error::io("spawn fake Sentinel thread", e))?;
        Ok(FakeSentinel {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many address questions it answered so far.
    pub fn questions(&self) -> usize {
        self.shared.questions.load(Ordering::SeqCst)
    }

    /// How many connections are subscribed to `+switch-master` now.
    pub fn subscribers(&self) -> usize {
        locked(&self.shared.subscribers).len()
    }

    /// From now on the address questions name `to`.
    pub fn set_master(&self, to: SocketAddr) {
        *locked(&self.shared.master) = to;
    }

    /// Publishes `+switch-master <name> <old> <new>` (old: the address it
    /// names now) to every subscriber; the address questions are left as
    /// they are (see [`FakeSentinel::set_master`]). Returns how many
    /// subscribers it reached.
    pub fn switch_master(&self, to: SocketAddr) -> usize {
        let from = *locked(&self.shared.master);
        let payload = format!(
            "{} {} {} {} {}",
            self.shared.name,
            from.ip(),
            from.port(),
            to.ip(),
            to.port()
        );
        let mut msg = Vec::new();
        resp::encode_command(
            &mut msg,
            [&b"message"[..], b"+switch-master", payload.as_bytes()],
        );
        let mut subs = locked(&self.shared.subscribers);
        subs.retain_mut(|s| s.write_all(&msg).is_ok());
        subs.len()
    }
}

impl Drop for FakeSentinel {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        locked(&self.shared.subscribers).clear();
        for h in std::mem::take(&mut *locked(&self.shared.handlers)) {
            let _ = h.join();
        }
    }
}

/// Answers one connection's commands until it closes or the fake stops.
fn serve(mut stream: TcpStream, shared: &FakeShared) {
    if stream.set_read_timeout(Some(FAKE_TICK)).is_err() {
        return;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !shared.stop.load(Ordering::SeqCst) {
        match resp::parse(&buf, &resp::Limits::default()) {
            Ok(resp::Status::Complete(p)) => {
                let (command, n) = (p.to_value(), p.consumed);
                buf.drain(..n);
                if answer(&mut stream, shared, &command).is_err() {
                    return;
                }
                continue;
            }
            Ok(resp::Status::Incomplete) => {}
            Err(_) => return,
        }
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

/// The reply to one command (a subscribe also registers the connection).
fn answer(stream: &mut TcpStream, shared: &FakeShared, command: &Value) -> std::io::Result<()> {
    let words: Vec<Vec<u8>> = command
        .as_array()
        .unwrap_or_default()
        .iter()
        .map(|w| w.as_bytes().unwrap_or_default().to_ascii_uppercase())
        .collect();
    let arg = |i: usize| {
        command
            .as_array()
            .and_then(|a| a.get(i))
            .and_then(Value::as_bytes)
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    match words.iter().map(Vec::as_slice).collect::<Vec<_>>()[..] {
        [b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME", _] if arg(2) == shared.name.as_bytes() => {
            let master = *locked(&shared.master);
            let (ip, port) = (master.ip().to_string(), master.port().to_string());
            resp::encode_command(&mut out, [ip.as_bytes(), port.as_bytes()]);
            shared.questions.fetch_add(1, Ordering::SeqCst);
        }
        [b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME", _] => out.extend_from_slice(b"*-1\r\n"),
        [b"SUBSCRIBE", ..] => {
            for k in 1..words.len() {
                out.extend_from_slice(b"*3\r\n$9\r\nsubscribe\r\n");
                resp::encode_bulk(&mut out, arg(k));
                out.extend_from_slice(format!(":{k}\r\n").as_bytes());
            }
            stream.write_all(&out)?;
            locked(&shared.subscribers).push(stream.try_clone()?);
            return Ok(());
        }
        [b"PING"] => out.extend_from_slice(b"+PONG\r\n"),
        _ => out.extend_from_slice(b"-ERR the fake Sentinel knows no such command\r\n"),
    }
    stream.write_all(&out)
}
