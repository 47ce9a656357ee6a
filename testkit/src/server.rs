//! One real `redis-server` / `valkey-server` process on a free loopback port.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::process::{self, TempDir};
use crate::tls::TlsFiles;
use crate::values::{expect_text, info_field, text};
use crate::{Client, Error, ServerKind, Value};

/// How long a server gets to answer `PING` after being spawned.
pub const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Cluster bus timeout given to cluster nodes: short, so failovers are quick.
pub const CLUSTER_NODE_TIMEOUT_MS: u32 = 2000;
const PORT_ATTEMPTS: usize = 5;

/// Configures a [`Server`] before starting it.
#[derive(Clone, Debug)]
#[must_use]
pub struct ServerBuilder {
    kind: ServerKind,
    args: Vec<String>,
    cluster: bool,
    port: Option<u16>,
    start_timeout: Duration,
    tls: Option<TlsFiles>,
    unix_socket: bool,
}

impl ServerBuilder {
    /// Also listens on a Unix socket in its scratch directory
    /// ([`Server::unix_socket`]). The TCP port stays open for testkit's
    /// own client.
    pub fn unix_socket(mut self) -> Self {
        self.unix_socket = true;
        self
    }

    /// Also listens for TLS, on a second free port ([`Server::tls_addr`]),
    /// with these files. The plain port stays open for testkit's own
    /// client.
    pub fn tls(mut self, files: TlsFiles) -> Self {
        self.tls = Some(files);
        self
    }

    /// Appends one command-line argument (`--maxclients`, `100`, …).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends command-line arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Starts the server in cluster mode (`--cluster-enabled yes`, its own
    /// `nodes.conf`, node timeout [`CLUSTER_NODE_TIMEOUT_MS`]).
    pub fn cluster(mut self, on: bool) -> Self {
        self.cluster = on;
        self
    }

    /// Uses this port instead of a free one chosen by the OS.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// How long to wait for the server to answer `PING` (default [`START_TIMEOUT`]).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Spawns the server and waits until it answers `PING`. Without a fixed
    /// port, a port taken by someone else in the meantime is retried with
    /// another one.
    ///
    /// # Errors
    ///
    /// [`Error::BinaryNotFound`], [`Error::StartFailed`] with the server's
    /// log, or [`Error::Io`].
    pub fn start(self) -> Result<Server, Error> {
        let mut server = Server {
            kind: self.kind,
            port: 0,
            binary: self.kind.binary()?,
            args: self.args,
            cluster: self.cluster,
            start_timeout: self.start_timeout,
            child: None,
            pid: 0,
            client: Mutex::new(None),
            dir: TempDir::new(self.kind.name())?,
            tls: self.tls,
            tls_port: 0,
            unix_socket: self.unix_socket,
        };
        let mut attempt = 1;
        loop {
            server.port = match self.port {
                Some(port) => port,
                None => process::free_port(server.cluster)?,
            };
            if server.tls.is_some() {
                server.tls_port = process::free_port(false)?;
            }
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e)
                    if self.port.is_none() && is_port_conflict(&e) && attempt < PORT_ATTEMPTS =>
                {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

fn is_port_conflict(e: &Error) -> bool {
    matches!(e, Error::StartFailed { log, .. } if log.contains("Address already in use"))
}

/// A running server on `127.0.0.1`, started with `--save "" --appendonly no
/// --enable-debug-command yes` in a scratch directory.
///
/// Dropping it (also while a test panics) stops the process — SIGTERM, then
/// SIGKILL after [`STOP_GRACE`](crate::STOP_GRACE) — and removes the directory.
#[derive(Debug)]
pub struct Server {
    kind: ServerKind,
    port: u16,
    binary: PathBuf,
    args: Vec<String>,
    cluster: bool,
    start_timeout: Duration,
    child: Option<Child>,
    pid: u32,
    client: Mutex<Option<Client>>,
    dir: TempDir,
    tls: Option<TlsFiles>,
    /// The TLS port (0 without TLS).
    tls_port: u16,
    /// Also listening on `dir/server.sock`.
    unix_socket: bool,
}

impl Server {
    /// Starts a standalone server of `kind` on a free port.
    ///
    /// # Errors
    ///
    /// As [`ServerBuilder::start`].
    pub fn start(kind: ServerKind) -> Result<Server, Error> {
        Server::builder(kind).start()
    }

    /// A builder for a server with extra arguments, cluster mode or a fixed port.
    pub fn builder(kind: ServerKind) -> ServerBuilder {
        ServerBuilder {
            kind,
            args: Vec::new(),
            cluster: false,
            port: None,
            start_timeout: START_TIMEOUT,
            tls: None,
            unix_socket: false,
        }
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `127.0.0.1:tls-port` for a server started with
    /// [`ServerBuilder::tls`], else `None`.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls
            .is_some()
            .then(|| SocketAddr::from((Ipv4Addr::LOCALHOST, self.tls_port)))
    }

    /// The Unix socket's path, for a server started with
    /// [`ServerBuilder::unix_socket`], else `None`.
    pub fn unix_socket(&self) -> Option<PathBuf> {
        self.unix_socket.then(|| self.dir().join("server.sock"))
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id (of the last started process, even if it has died since).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Redis or Valkey.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// Whether it runs in cluster mode.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// Its scratch directory (working directory, log, `nodes.conf`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether the process is still alive.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// Sends one command over a cached connection (opened on first use,
    /// reopened after an error) and returns the reply.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] / [`Error::Protocol`] on connection trouble,
    /// [`Error::Reply`] when the server answers with an error.
    pub fn cmd(&self, args: &[&[u8]]) -> Result<Value, Error> {
        let mut cached = self.cached_client();
        let client = match cached.as_mut() {
            Some(client) => client,
            None => cached.insert(Client::connect(self.addr())?),
        };
        let result = client.cmd(args);
        if matches!(result, Err(Error::Io { .. } | Error::Protocol(_))) {
            *cached = None;
        }
        result
    }

    /// Like [`Server::cmd`], with string arguments.
    ///
    /// # Errors
    ///
    /// As [`Server::cmd`].
    pub fn cmd_str(&self, args: &[&str]) -> Result<Value, Error> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.cmd(&args)
    }

    /// The `calls=` of `cmdstat_<command>` in `INFO commandstats`, with
    /// `command` as the server lists it (lower case, `client|list` for a
    /// subcommand); 0 before its first call.
    ///
    /// # Errors
    ///
    /// As [`Server::cmd`], and [`Error::Unexpected`] when the reply is not
    /// text.
    pub fn command_calls(&self, command: &str) -> Result<u64, Error> {
        let info = expect_text(&self.cmd(&[b"INFO", b"commandstats"])?, "INFO commandstats")?;
        Ok(info_field(&info, &format!("cmdstat_{command}"))
            .and_then(|f| {
                f.split(',')
                    .find_map(|kv| kv.strip_prefix("calls=")?.parse().ok())
            })
            .unwrap_or(0))
    }

    /// A new connection of its own (for subscribing, `HELLO 3`, pipelining).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the connection cannot be made.
    pub fn connect(&self) -> Result<Client, Error> {
        Client::connect(self.addr())
    }

    /// Kills the process with SIGKILL (a crash, not a shutdown). Waits for it.
    pub fn kill(&mut self) {
        *self.cached_client() = None;
        if let Some(child) = self.child.as_mut() {
            process::kill(child);
        }
    }

    /// Freezes the process (SIGSTOP): it holds its sockets and reads
    /// nothing until [`Server::thaw`].
    pub fn freeze(&mut self) {
        if let Some(pid) = self.running_pid() {
            process::signal(pid, "-STOP");
        }
    }

    /// Lets a frozen process run again (SIGCONT).
    pub fn thaw(&mut self) {
        if let Some(pid) = self.running_pid() {
            process::signal(pid, "-CONT");
        }
    }

    /// The pid if the process is still running.
    pub(crate) fn running_pid(&mut self) -> Option<u32> {
        self.is_running().then_some(self.pid)
    }

    /// Stops the process gracefully (SIGTERM, then SIGKILL after a bound).
    pub fn stop(&mut self) {
        *self.cached_client() = None;
        if let Some(child) = self.child.as_mut() {
            process::stop(child);
        }
    }

    /// Stops the process if it runs and starts it again on the same port with
    /// the same arguments and directory (a cluster node keeps its id).
    ///
    /// # Errors
    ///
    /// [`Error::StartFailed`] with the log, e.g. when the port was taken meanwhile.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.stop();
        self.spawn()
    }

    /// The server's log file and its stdout/stderr.
    pub fn log(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir().join(name)).unwrap_or_default();
        let mut log = read("server.log");
        let stdio = read("stdio.log");
        if !stdio.trim().is_empty() {
            log.push_str("--- stdout/stderr ---\n");
            log.push_str(&stdio);
        }
        log
    }

    fn log_tail(&self) -> String {
        let mut tail = process::tail(&self.dir().join("server.log"), 40);
        let stdio = process::tail(&self.dir().join("stdio.log"), 20);
        if !stdio.trim().is_empty() {
            tail.push_str("\n--- stdout/stderr ---\n");
            tail.push_str(&stdio);
        }
        tail
    }

    fn cached_client(&self) -> MutexGuard<'_, Option<Client>> {
        // A panic while holding the lock leaves a usable Option behind.
        self.client.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn command(&self) -> Command {
        let dir = self.dir();
        let mut command = Command::new(&self.binary);
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "yes", "--daemonize", "no"])
            // Replicas sync at once instead of after the default 5 s batching delay.
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(dir.join("server.log"));
        if self.cluster {
            command
                .args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(dir.join("nodes.conf"))
                .arg("--cluster-node-timeout")
                .arg(CLUSTER_NODE_TIMEOUT_MS.to_string());
        }
        if let Some(tls) = &self.tls {
            let bus = self
                .cluster
                .then(|| self.port.checked_add(10_000))
                .flatten();
            command.args(tls.args(self.tls_port, bus));
        }
        if let Some(path) = self.unix_socket() {
            command
                .arg("--unixsocket")
                .arg(path)
                .args(["--unixsocketperm", "700"]);
        }
        command.args(&self.args).current_dir(dir);
        command
    }

    fn spawn(&mut self) -> Result<(), Error> {
        let stdio = File::create(self.dir().join("stdio.log"))
            .map_err(|e| Error::io("create stdio.log", e))?;
        let stderr = stdio
            .try_clone()
            .map_err(|e| Error::io("clone stdio.log", e))?;
        let child = self
            .command()
            .stdin(Stdio::null())
            .stdout(stdio)
            .stderr(stderr)
            .spawn()
            .map_err(|e| Error::io(format!("spawn {}", self.binary.display()), e))?;
        self.pid = child.id();
        self.child = Some(child);
        process::spawn_watchdog(self.pid, Some(self.dir.path()));
        if let Err(reason) = self.await_ready() {
            if let Some(child) = self.child.as_mut() {
                process::kill(child);
            }
            return Err(Error::StartFailed {
                kind: self.kind,
                port: self.port,
                reason,
                log: self.log_tail(),
            });
        }
        Ok(())
    }

    /// Until the process we spawned (checked by pid, so not a stranger on the
    /// same port) answers `PING`.
    fn await_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + self.start_timeout;
        let mut pause = Duration::from_millis(2);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("process exited with {status}"));
                }
            }
            if self.answers_as_ours() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("no PONG within {:?}", self.start_timeout));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    fn answers_as_ours(&self) -> bool {
        let Ok(mut client) = Client::connect(self.addr()) else {
            return false;
        };
        if client.set_timeout(Duration::from_millis(500)).is_err() {
            return false;
        }
        let pong = matches!(client.cmd(&[b"PING"]), Ok(Value::Simple(ref s)) if s == b"PONG");
        let pid = client
            .cmd(&[b"INFO", b"server"])
            .ok()
            .as_ref()
            .and_then(text)
            .and_then(|info| info_field(&info, "process_id"));
        pong && pid == Some(self.pid.to_string())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
