//! Which topology command to send, from the server's version.

use core::fmt;

use resp::Frame;

/// The server software, as far as its version report says.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Product {
    /// Redis (or a server reporting only `redis_version`).
    Redis,
    /// Valkey (reports `valkey_version`, or `server: valkey` in `HELLO`).
    Valkey,
    /// Another server name in `HELLO` (for example a Redis-compatible store).
    Other,
}

/// A server version, such as Redis 7.0.15 or Valkey 9.1.2.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerVersion {
    /// Which server.
    pub product: Product,
    /// Major version.
    pub major: u16,
    /// Minor version.
    pub minor: u16,
    /// Patch version.
    pub patch: u16,
}

/// The command that reads the cluster's slot map.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TopologyCommand {
    /// `CLUSTER SLOTS`: slot ranges with their nodes. Redis 8 and Valkey 8
    /// can return empty ranges for a failed primary (redis#13422,
    /// valkey#784), so it is used only before version 8.
    ClusterSlots,
    /// `CLUSTER SHARDS`: shards with their slot ranges and every node's role
    /// and health (Redis 7.0+).
    ClusterShards,
}

impl TopologyCommand {
    /// The command's arguments, ready for `resp::encode_command`.
    pub fn args(self) -> [&'static [u8]; 2] {
        match self {
            TopologyCommand::ClusterSlots => [b"CLUSTER", b"SLOTS"],
            TopologyCommand::ClusterShards => [b"CLUSTER", b"SHARDS"],
        }
    }

    /// `"CLUSTER SLOTS"` or `"CLUSTER SHARDS"`.
    pub fn name(self) -> &'static str {
        match self {
            TopologyCommand::ClusterSlots => "CLUSTER SLOTS",
            TopologyCommand::ClusterShards => "CLUSTER SHARDS",
        }
    }
}

/// Picks the topology command for a server: `CLUSTER SHARDS` for Redis and
/// Valkey 8 or later, `CLUSTER SLOTS` before that and for other servers
/// (which may not implement `CLUSTER SHARDS` at all).
///
/// ```
/// use topology::{choose_command, parse_info_version, TopologyCommand};
/// let v = parse_info_version(b"# Server\r\nredis_version:7.2.4\r\nvalkey_version:9.1.2\r\n");
/// assert_eq!(choose_command(v.unwrap()), TopologyCommand::ClusterShards);
/// ```
pub fn choose_command(version: ServerVersion) -> TopologyCommand {
    match version.product {
        Product::Redis | Product::Valkey if version.major >= 8 => TopologyCommand::ClusterShards,
        _ => TopologyCommand::ClusterSlots,
    }
}

/// Reads the version from an `INFO server` (or plain `INFO`) reply's text.
///
/// `valkey_version` wins over `redis_version`: Valkey also reports
/// `redis_version:7.2.4` for compatibility. Returns `None` when neither line
/// is present or its value is not `major.minor.patch`.
pub fn parse_info_version(info: &[u8]) -> Option<ServerVersion> {
    let mut redis = None;
    for line in info.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(v) = line.strip_prefix(b"valkey_version:") {
            return parse_dotted(Product::Valkey, v);
        }
        if let Some(v) = line.strip_prefix(b"redis_version:") {
            redis = parse_dotted(Product::Redis, v);
        }
    }
    redis
}

/// Reads the version from a `HELLO` reply: a RESP3 map or a RESP2 flat
/// key-value array with `server` (`redis`, `valkey`, …) and `version`.
///
/// Returns `None` when the reply is not such an aggregate or `version` is
/// missing or not `major.minor.patch`.
pub fn parse_hello_version(reply: &Frame<'_>) -> Option<ServerVersion> {
    let agg = reply.as_aggregate()?;
    let mut product = Product::Other;
    let mut version = None;
    let mut it = agg.iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        match k.as_bytes()? {
            b"server" => {
                product = match v.as_bytes()? {
                    s if s.eq_ignore_ascii_case(b"redis") => Product::Redis,
                    s if s.eq_ignore_ascii_case(b"valkey") => Product::Valkey,
                    _ => Product::Other,
                }
            }
            b"version" => version = v.as_bytes(),
            _ => {}
        }
    }
    parse_dotted(product, version?)
}

fn parse_dotted(product: Product, text: &[u8]) -> Option<ServerVersion> {
    let mut parts = text.split(|&b| b == b'.');
    let mut next = || -> Option<u16> {
        let p = parts.next()?;
        core::str::from_utf8(p).ok()?.trim().parse().ok()
    };
    let major = next()?;
    let minor = next()?;
    let patch = next().unwrap_or(0);
    Some(ServerVersion {
        product,
        major,
        minor,
        patch,
    })
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.product {
            Product::Redis => "Redis",
            Product::Valkey => "Valkey",
            Product::Other => "server",
        };
        write!(f, "{name} {}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REDIS7: &[u8] = include_bytes!("../tests/fixtures/redis7_info_server.bin");
    const VALKEY9: &[u8] = include_bytes!("../tests/fixtures/valkey9_info_server.bin");

    fn v(product: Product, major: u16, minor: u16, patch: u16) -> ServerVersion {
        ServerVersion {
            product,
            major,
            minor,
            patch,
        }
    }

    #[test]
    fn info_from_real_servers() {
        // The fixtures are raw bulk replies; the header line does not match.
        assert_eq!(
            parse_info_version(REDIS7),
            Some(v(Product::Redis, 7, 0, 15))
        );
        assert_eq!(
            parse_info_version(VALKEY9),
            Some(v(Product::Valkey, 9, 1, 2))
        );
        assert_eq!(
            choose_command(parse_info_version(REDIS7).unwrap()),
            TopologyCommand::ClusterSlots
        );
        assert_eq!(
            choose_command(parse_info_version(VALKEY9).unwrap()),
            TopologyCommand::ClusterShards
        );
    }

    #[test]
    fn info_edge_cases() {
        assert_eq!(parse_info_version(b""), None);
        assert_eq!(parse_info_version(b"redis_version:x.y\r\n"), None);
        assert_eq!(
            parse_info_version(b"redis_version:8.0\n"),
            Some(v(Product::Redis, 8, 0, 0))
        );
        // valkey_version wins even when it comes after redis_version.
        assert_eq!(
            parse_info_version(b"redis_version:7.2.4\r\nvalkey_version:8.0.1\r\n"),
            Some(v(Product::Valkey, 8, 0, 1))
        );
    }

    #[test]
    fn command_choice() {
        use TopologyCommand::*;
        assert_eq!(choose_command(v(Product::Redis, 7, 4, 2)), ClusterSlots);
        assert_eq!(choose_command(v(Product::Redis, 8, 0, 0)), ClusterShards);
        assert_eq!(choose_command(v(Product::Valkey, 7, 2, 4)), ClusterSlots);
        assert_eq!(choose_command(v(Product::Valkey, 8, 0, 0)), ClusterShards);
        assert_eq!(choose_command(v(Product::Other, 9, 0, 0)), ClusterSlots);
    }

    #[test]
    fn hello_replies() {
        let lim = resp::Limits::default();
        let resp3 = b"%3\r\n$6\r\nserver\r\n$6\r\nvalkey\r\n$7\r\nversion\r\n$5\r\n9.1.2\r\n$5\r\nproto\r\n:3\r\n";
        let resp::Status::Complete(p) = resp::parse(resp3, &lim).unwrap() else {
            panic!("incomplete")
        };
        assert_eq!(
            parse_hello_version(&p.frame),
            Some(v(Product::Valkey, 9, 1, 2))
        );
        let resp2 = b"*4\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n";
        let resp::Status::Complete(p) = resp::parse(resp2, &lim).unwrap() else {
            panic!("incomplete")
        };
        assert_eq!(
            parse_hello_version(&p.frame),
            Some(v(Product::Redis, 7, 0, 15))
        );
        assert_eq!(parse_hello_version(&Frame::Integer(3)), None);
    }
}
