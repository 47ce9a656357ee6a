//! A Sentinel process watching one master, for the Sentinel tests: quorum
//! 1, the master presumed down after [`SENTINEL_DOWN_AFTER_MS`].

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
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
        let binary = kind.binary()?;
        let dir = TempDir::new("sentinel")?;
        let port = process::free_port(false)?;
        let conf = dir.path().join("sentinel.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\n\
             sentinel monitor {name} {ip} {mport} 1\n\
             sentinel down-after-milliseconds {name} {SENTINEL_DOWN_AFTER_MS}\n\
             sentinel failover-timeout {name} 5000\n\
             sentinel parallel-syncs {name} 1\n",
            dir = dir.path().display(),
            ip = master.ip(),
            mport = master.port(),
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
        Client::connect(self.addr())?.cmd(args)
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
