//! A scripted fake server: plays exact byte sequences on loopback, for input
//! a real server will not produce (hostile replies, exact interleavings).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::Error;

/// How long one [`Step::Expect`] waits for its bytes.
pub const EXPECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`FakeServer::finish`] waits for running scripts to end.
const FINISH_TIMEOUT: Duration = Duration::from_secs(10);
/// How often waiting steps look at the stop flag.
const POLL: Duration = Duration::from_millis(20);

/// One step of a [`FakeServer`] script, played per accepted connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Read exactly these bytes from the client (within [`EXPECT_TIMEOUT`]);
    /// anything else is a script failure and closes the connection.
    Expect(Vec<u8>),
    /// Write these bytes to the client.
    Send(Vec<u8>),
    /// Wait this long (cut short when the server is finished).
    Delay(Duration),
    /// Close the connection.
    Close,
    /// Go silent: read and discard everything, answer nothing, keep the
    /// connection open until the client closes it or the server is finished.
    /// A script that runs out of steps behaves the same way.
    Silence,
    /// Write these bytes again and again, as fast as the client reads them,
    /// until the client closes the connection (not a failure) or the server
    /// is finished: a reply that never ends.
    Flood(Vec<u8>),
}

impl Step {
    /// [`Step::Expect`] of these bytes.
    pub fn expect(bytes: impl AsRef<[u8]>) -> Step {
        Step::Expect(bytes.as_ref().to_vec())
    }

    /// [`Step::Send`] of these bytes.
    pub fn send(bytes: impl AsRef<[u8]>) -> Step {
        Step::Send(bytes.as_ref().to_vec())
    }
}

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    accepted: AtomicUsize,
    sent: AtomicU64,
    failures: Mutex<Vec<String>>,
    handlers: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn fail(&self, msg: String) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(msg);
    }
}

/// A loopback listener that plays a script of [`Step`]s on each connection.
///
/// Call [`FakeServer::finish`] at the end of the test to learn whether every
/// script played as written; dropping an unfinished server with failures
/// panics (unless the thread is already panicking).
///
/// ```
/// use testkit::{Client, FakeServer, Step, Value};
///
/// // A server that answers PING with a reply no real server sends.
/// let fake = FakeServer::start(vec![
///     Step::expect("*1\r\n$4\r\nPING\r\n"),
///     Step::send("+PONG\r\n>2\r\n$4\r\npong\r\n_\r\n"),
///     Step::Close,
/// ])?;
/// let mut client = Client::connect(fake.addr())?;
/// assert_eq!(client.cmd(&[b"PING"])?, Value::Simple(b"PONG".to_vec()));
/// assert_eq!(
///     client.read_value()?,
///     Value::Push(vec![Value::Bulk(b"pong".to_vec()), Value::Null])
/// );
/// fake.finish()?;
/// # Ok::<(), testkit::Error>(())
/// ```
#[derive(Debug)]
pub struct FakeServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl FakeServer {
    /// Every accepted connection plays `script`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the listener cannot be bound.
    pub fn start(script: Vec<Step>) -> Result<FakeServer, Error> {
        FakeServer::spawn(move |_| Some(Plan::Fixed(script.clone())))
    }

    /// Connection `k` plays `scripts[k]`; connections beyond them are closed
    /// at once and count as a failure.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the listener cannot be bound.
    pub fn start_each(scripts: Vec<Vec<Step>>) -> Result<FakeServer, Error> {
        FakeServer::spawn(move |k| scripts.get(k).cloned().map(Plan::Fixed))
    }

    /// Each connection plays the first script not yet taken whose first
    /// step, a [`Step::Expect`], is what the client sends first: for
    /// connections that open in no fixed order (a client's publish and
    /// subscribe connections, told apart by their handshakes). A
    /// connection whose first bytes match no script left is a failure, as
    /// is a script whose first step is not an `Expect`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the listener cannot be bound.
    pub fn start_matched(scripts: Vec<Vec<Step>>) -> Result<FakeServer, Error> {
        let pool = Arc::new(Mutex::new(scripts.into_iter().map(Some).collect()));
        FakeServer::spawn(move |_| Some(Plan::Matched(Arc::clone(&pool))))
    }

    fn spawn(
        script_for: impl Fn(usize) -> Option<Plan> + Send + 'static,
    ) -> Result<FakeServer, Error> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| Error::io("bind fake server", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("fake server address", e))?;
        let shared = Arc::new(Shared::default());
        let accept_shared = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("fake-server-accept".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if accept_shared.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let k = accept_shared.accepted.fetch_add(1, Ordering::SeqCst);
                    let Some(script) = script_for(k) else {
                        accept_shared.fail(format!("unexpected connection #{k}"));
                        continue;
                    };
                    let shared = Arc::clone(&accept_shared);
                    let handler = thread::Builder::new()
                        .name(format!("fake-server-conn-{k}"))
                        .spawn(move || match script {
                            Plan::Fixed(script) => play(stream, k, &script, 0, &shared),
                            Plan::Matched(pool) => play_matched(stream, k, &pool, &shared),
                        });
                    match handler {
                        Ok(h) => accept_shared
                            .handlers
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(h),
                        Err(e) => accept_shared.fail(format!("spawn handler: {e}")),
                    }
                }
            })
            .map_err(|e| Error::io("spawn fake server thread", e))?;
        Ok(FakeServer {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The address to connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many connections were accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Bytes written to clients so far, on every connection together.
    pub fn bytes_sent(&self) -> u64 {
        self.shared.sent.load(Ordering::SeqCst)
    }

    /// The failures recorded so far.
    pub fn failures(&self) -> Vec<String> {
        self.shared
            .failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Stops accepting, lets running scripts end (silent connections are
    /// closed; pending `Expect` steps still get their timeout), and reports.
    ///
    /// # Errors
    ///
    /// [`Error::Script`] with every failure, [`Error::Timeout`] when a
    /// script does not end within its bound.
    pub fn finish(mut self) -> Result<(), Error> {
        self.shutdown()?;
        let failures = self.failures();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Error::Script(failures))
        }
    }

    fn shutdown(&mut self) -> Result<(), Error> {
        let Some(accept) = self.accept.take() else {
            return Ok(());
        };
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        let _ = accept.join();
        let handlers = std::mem::take(
            &mut *self
                .shared
                .handlers
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let deadline = Instant::now() + FINISH_TIMEOUT;
        for handler in handlers {
            while !handler.is_finished() {
                if Instant::now() >= deadline {
                    return Err(Error::Timeout {
                        what: "fake server scripts to end".into(),
                        waited: FINISH_TIMEOUT,
                    });
                }
                thread::sleep(Duration::from_millis(5));
            }
            let _ = handler.join();
        }
        Ok(())
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        if self.accept.is_none() {
            return;
        }
        let result = self.shutdown();
        let failures = self.failures();
        if !thread::panicking() && (result.is_err() || !failures.is_empty()) {
            panic!("FakeServer dropped with script failures: {failures:?} {result:?}");
        }
    }
}

/// What an accepted connection plays.
enum Plan {
    Fixed(Vec<Step>),
    /// The scripts of [`FakeServer::start_matched`] (taken ones are `None`).
    Matched(Arc<Mutex<Vec<Option<Vec<Step>>>>>),
}

/// Takes the first script of `pool` whose first `Expect` the client sends
/// and plays the rest of it.
fn play_matched(
    mut stream: TcpStream,
    k: usize,
    pool: &Mutex<Vec<Option<Vec<Step>>>>,
    shared: &Shared,
) {
    let fail = |msg: String| shared.fail(format!("connection #{k}, step 0: {msg}"));
    let firsts: Vec<Vec<u8>> = {
        let pool = pool.lock().unwrap_or_else(PoisonError::into_inner);
        pool.iter()
            .flatten()
            .filter_map(|s| match s.first() {
                Some(Step::Expect(want)) => Some(want.clone()),
                _ => None,
            })
            .collect()
    };
    let Some(shortest) = firsts.iter().map(Vec::len).min() else {
        return fail("no script left (or none left starts with an Expect)".into());
    };
    let mut got = match read_exact_within(&mut stream, shortest) {
        Ok(got) => got,
        Err(msg) => return fail(msg),
    };
    let first_expect = |s: &Option<Vec<Step>>| match s.as_ref().and_then(|s| s.first()) {
        Some(Step::Expect(want)) => Some(want.clone()),
        _ => None,
    };
    let script = loop {
        let mut pool = pool.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = pool
            .iter_mut()
            .find(|s| first_expect(s).as_deref() == Some(&got[..]))
        {
            break slot.take().unwrap_or_default();
        }
        // The shortest script start that the bytes so far begin.
        let longer = pool
            .iter()
            .filter_map(first_expect)
            .filter(|w| w.len() > got.len() && w.starts_with(&got))
            .map(|w| w.len())
            .min();
        drop(pool);
        let Some(want) = longer else {
            return fail(format!("\"{}\" begins no script left", got.escape_ascii()));
        };
        match read_exact_within(&mut stream, want - got.len()) {
            Ok(more) => got.extend_from_slice(&more),
            Err(msg) => return fail(msg),
        }
    };
    play(stream, k, script.get(1..).unwrap_or_default(), 1, shared);
}

/// Plays `script` on one connection (`first`: the number of its first
/// step, for the failure messages).
fn play(mut stream: TcpStream, k: usize, script: &[Step], first: usize, shared: &Shared) {
    let fail = |i: usize, msg: String| {
        let i = i + first;
        shared.fail(format!("connection #{k}, step {i}: {msg}"))
    };
    for (i, step) in script.iter().enumerate() {
        match step {
            Step::Expect(want) => match read_exact_within(&mut stream, want.len()) {
                Ok(got) if got == *want => {}
                Ok(got) => {
                    fail(
                        i,
                        format!(
                            "expected \"{}\", got \"{}\"",
                            want.escape_ascii(),
                            got.escape_ascii()
                        ),
                    );
                    return;
                }
                Err(msg) => {
                    fail(i, format!("expected \"{}\": {msg}", want.escape_ascii()));
                    return;
                }
            },
            Step::Send(bytes) => {
                if let Err(e) = stream.write_all(bytes).and_then(|()| stream.flush()) {
                    fail(i, format!("send failed: {e}"));
                    return;
                }
                shared.sent.fetch_add(bytes.len() as u64, Ordering::SeqCst);
            }
            Step::Flood(bytes) => return flood(&mut stream, bytes, shared),
            Step::Delay(d) => {
                let end = Instant::now() + *d;
                while Instant::now() < end && !shared.stop.load(Ordering::SeqCst) {
                    thread::sleep(POLL.min(end.saturating_duration_since(Instant::now())));
                }
            }
            Step::Close => return,
            Step::Silence => break,
        }
    }
    silence(stream, shared);
}

/// Writes `bytes` in a loop until the client closes or the server stops.
fn flood(stream: &mut TcpStream, bytes: &[u8], shared: &Shared) {
    if bytes.is_empty() || stream.set_write_timeout(Some(POLL)).is_err() {
        return;
    }
    let mut at = 0;
    while !shared.stop.load(Ordering::SeqCst) {
        match stream.write(&bytes[at..]) {
            Ok(0) => return,
            Ok(n) => {
                shared.sent.fetch_add(n as u64, Ordering::SeqCst);
                at = (at + n) % bytes.len();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // The client closed: the flood is over.
            Err(_) => return,
        }
    }
}

/// Reads `n` bytes or fails with what came (or why not) within [`EXPECT_TIMEOUT`].
fn read_exact_within(stream: &mut TcpStream, n: usize) -> Result<Vec<u8>, String> {
    let deadline = Instant::now() + EXPECT_TIMEOUT;
    let mut got = Vec::with_capacity(n);
    let mut buf = [0u8; 4096];
    while got.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "timed out after {EXPECT_TIMEOUT:?} with \"{}\"",
                got.escape_ascii()
            ));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let want = (n - got.len()).min(buf.len());
        match stream.read(&mut buf[..want]) {
            Ok(0) => return Err(format!("client closed after \"{}\"", got.escape_ascii())),
            Ok(m) => got.extend_from_slice(&buf[..m]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(got)
}

/// Reads and discards until the client closes or the server stops.
fn silence(mut stream: TcpStream, shared: &Shared) {
    if stream.set_read_timeout(Some(POLL)).is_err() {
        return;
    }
    let mut buf = [0u8; 4096];
    while !shared.stop.load(Ordering::SeqCst) {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}
