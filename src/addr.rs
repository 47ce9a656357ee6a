//! Where a server listens: a TCP address, or the path of a Unix socket.

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use parking_lot::Mutex;

/// Where a server listens: a TCP address, or the path of a Unix socket
/// (`unix:///path` URLs, [`ServerAddr::unix`]). Errors, events and
/// connection callbacks name servers with it.
///
/// It is `Copy`: a Unix socket's path is kept once per distinct path for
/// the life of the process (a few bytes per socket path ever configured).
/// It prints as the socket address (`127.0.0.1:6379`) or as
/// `unix:/path/to/redis.sock`; `ServerAddr::from(socket_addr)` makes one
/// from a TCP address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServerAddr {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix socket's path.
    Unix(&'static Path),
}

impl ServerAddr {
    /// The Unix socket at `path`.
    pub fn unix(path: impl AsRef<Path>) -> ServerAddr {
        static PATHS: Mutex<BTreeSet<&'static Path>> = parking_lot::const_mutex(BTreeSet::new());
        let path = path.as_ref();
        let mut paths = PATHS.lock();
        if let Some(p) = paths.get(path) {
            return ServerAddr::Unix(p);
        }
        let kept: &'static Path = Box::leak(path.to_path_buf().into_boxed_path());
        paths.insert(kept);
        ServerAddr::Unix(kept)
    }

    /// The TCP address, when it is one.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            ServerAddr::Tcp(a) => Some(*a),
            ServerAddr::Unix(_) => None,
        }
    }

    /// The IP address as text, for a redirect that names no host (`MOVED
    /// 3999 :6381`: the same host); `None` for a Unix socket.
    pub(crate) fn host(&self) -> Option<String> {
        self.tcp().map(|a| a.ip().to_string())
    }

    /// The socket's path, when it is a Unix socket.
    pub fn unix_path(&self) -> Option<&'static Path> {
        match self {
            ServerAddr::Tcp(_) => None,
            ServerAddr::Unix(p) => Some(p),
        }
    }
}

/// The socket path of an address given as `unix:/path` (what a
/// `unix:///path` URL becomes) or as an absolute path; `None` for
/// `host:port`.
pub(crate) fn unix_path(addr: &str) -> Option<&Path> {
    let path = addr.strip_prefix("unix:").unwrap_or(addr);
    path.starts_with('/').then(|| Path::new(path))
}

impl From<SocketAddr> for ServerAddr {
    fn from(a: SocketAddr) -> Self {
        ServerAddr::Tcp(a)
    }
}

impl std::str::FromStr for ServerAddr {
    type Err = std::net::AddrParseError;

    /// `unix:/path` or an absolute path (a Unix socket), otherwise a
    /// socket address (`127.0.0.1:6379`, `[::1]:6379`; no host names).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match unix_path(s) {
            Some(p) => Ok(ServerAddr::unix(p)),
            None => s.parse::<SocketAddr>().map(ServerAddr::Tcp),
        }
    }
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerAddr::Tcp(a) => a.fmt(f),
            ServerAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl fmt::Debug for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_kept_once_and_print_as_unix_urls() {
        let a = ServerAddr::unix("/tmp/shardsub-addr-test.sock");
        let b = ServerAddr::unix(String::from("/tmp/shardsub-addr-test.sock"));
        assert_eq!(a, b);
        match (a, b) {
            (ServerAddr::Unix(p), ServerAddr::Unix(q)) => assert!(std::ptr::eq(p, q)),
            other => panic!("{other:?}"),
        }
        assert_eq!(a.to_string(), "unix:/tmp/shardsub-addr-test.sock");
        let t: SocketAddr = "127.0.0.1:6379".parse().unwrap();
        assert_eq!(ServerAddr::from(t).tcp(), Some(t));
        assert_eq!(ServerAddr::from(t).to_string(), "127.0.0.1:6379");
        assert!(a.tcp().is_none());
    }

    #[test]
    fn unix_addresses_are_told_from_host_port() {
        assert_eq!(
            unix_path("unix:/tmp/r.sock"),
            Some(Path::new("/tmp/r.sock"))
        );
        assert_eq!(unix_path("/tmp/r.sock"), Some(Path::new("/tmp/r.sock")));
        assert_eq!(unix_path("127.0.0.1:6379"), None);
        assert_eq!(unix_path("redis.local:6379"), None);
        assert_eq!(unix_path("[::1]:6379"), None);
        assert_eq!(unix_path("unix:relative.sock"), None);
        let parsed: ServerAddr = "unix:/tmp/r.sock".parse().unwrap();
        assert_eq!(parsed, ServerAddr::unix("/tmp/r.sock"));
        let parsed: ServerAddr = "127.0.0.1:7000".parse().unwrap();
        assert_eq!(parsed.tcp().map(|a| a.port()), Some(7000));
        assert!("redis.local:6379".parse::<ServerAddr>().is_err());
    }
}
