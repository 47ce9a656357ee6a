//! Server URLs: `redis://user:password@host:port/0?cluster=true`, read into
//! an address and credentials for the builders
//! ([`PubSubBuilder::url`](crate::PubSubBuilder::url),
//! [`Builder::url`](crate::engine::Builder::url)).
//!
//! Pure: no I/O, no allocation beyond the parts it returns, never a panic
//! (a proptest feeds it arbitrary strings). What it accepts:
//!
//! - schemes `redis` and `valkey` (any case); `rediss` and `valkeys` ask
//!   for TLS: taken with the `tls` cargo feature, refused with a sentence
//!   saying to enable it without;
//! - `user:password@`, `:password@` (the default user), both
//!   percent-decoded; a user name without a password is refused;
//! - a host name, an IPv4 address or a bracketed IPv6 address
//!   (`[::1]`), and a port (default 6379);
//! - a database path of `/0` or none (Pub/Sub ignores databases, and a
//!   cluster has only database 0): any other is refused;
//! - one query option, `cluster=true|false`: whether the URL names a
//!   cluster seed (default false: a server, or one of N shards). Any other
//!   option, and a fragment, is refused rather than ignored;
//! - `unix:///path/to/redis.sock` (also `redis+unix://`, `valkey+unix://`,
//!   with `user:password@` before the path): a server on a Unix socket,
//!   never a cluster seed, never TLS;
//! - `redis+sentinel://host:26379,host2:26379/MASTER` (also
//!   `valkey+sentinel://`, with the master's `user:password@` first): a
//!   master found through Sentinel.

use std::net::Ipv6Addr;

/// The default port when a URL names none.
pub(crate) const DEFAULT_PORT: u16 = 6379;

/// Longest URL accepted (a URL is configuration, not data).
const MAX_LEN: usize = 4096;

/// What a URL says (its `Debug` hides the password).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ServerUrl {
    /// `host:port`, or `[v6]:port`, for the resolver.
    pub(crate) addr: String,
    /// The ACL user name, when the URL has one.
    pub(crate) username: Option<Vec<u8>>,
    /// The password, when the URL has one.
    pub(crate) password: Option<Vec<u8>>,
    /// `?cluster=true`: a cluster seed.
    pub(crate) cluster: bool,
    /// `rediss://` or `valkeys://` (only with the `tls` feature).
    pub(crate) tls: bool,
    /// `redis+sentinel://`: the Sentinels to ask for the master named by
    /// `addr` (`sentinel:NAME`).
    pub(crate) sentinels: Vec<String>,
}

impl std::fmt::Debug for ServerUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerUrl")
            .field("addr", &self.addr)
            .field(
                "username",
                &self.username.as_deref().map(String::from_utf8_lossy),
            )
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("cluster", &self.cluster)
            .field("tls", &self.tls)
            .finish()
    }
}

/// Reads `url`.
///
/// # Errors
///
/// A sentence saying what is wrong (the caller names the URL, with
/// [`redacted`], around it).
pub(crate) fn parse(url: &str) -> Result<ServerUrl, String> {
    if url.len() > MAX_LEN {
        return Err(format!("longer than {MAX_LEN} bytes"));
    }
    if let Some(c) = url.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("contains {c:?} (spaces and control characters are not allowed; percent-encode them in a password)"));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("no scheme (write redis://host:port or valkey://host:port)".into());
    };
    let tls = match scheme.to_ascii_lowercase().as_str() {
        "redis" | "valkey" => false,
        "rediss" | "valkeys" if cfg!(feature = "tls") => true,
        "rediss" | "valkeys" => {
            return Err(format!(
                "{scheme}:// asks for TLS, which this build leaves out: enable \
                 shardsub's `tls` cargo feature (or use redis:// or valkey://)"
            ))
        }
        "unix" | "redis+unix" | "valkey+unix" => return parse_unix(rest),
        "redis+sentinel" | "valkey+sentinel" => return parse_sentinel(rest),
        _ => {
            return Err(format!(
                "unknown scheme {scheme:?} (use redis:// or valkey://)"
            ))
        }
    };
    check_before_at(rest)?;
    if rest.contains('#') {
        return Err("a fragment (#…) means nothing here".into());
    }
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (rest.get(..i).unwrap_or(""), rest.get(i..).unwrap_or("")),
        None => (rest, ""),
    };
    check_database(path)?;
    let cluster = match query {
        Some(q) => parse_query(q)?,
        None => false,
    };
    let ((username, password), hostport) = split_credentials(authority)?;
    let addr = parse_hostport(hostport)?;
    Ok(ServerUrl {
        addr,
        username,
        password,
        cluster,
        tls,
        sentinels: Vec::new(),
    })
}

/// Refuses a `/`, `?` or `#` before the last `@` (in a user name or
/// password they must be percent-encoded; the URL cannot be split
/// safely otherwise, and the error must not repeat them).
fn check_before_at(rest: &str) -> Result<(), String> {
    match rest.rfind('@') {
        Some(at) if rest.get(..at).is_some_and(|u| u.contains(['/', '?', '#'])) => Err(
            "a '/', '?' or '#' before the '@': percent-encode them in a user \
             name or password (%2F, %3F, %23; '@' is %40)"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// A Unix socket's URL after `unix://`: `[user:password@]/path`, with
/// `?cluster=false` at most (a socket is one server, never a seed).
fn parse_unix(rest: &str) -> Result<ServerUrl, String> {
    // The errors below never repeat the URL's text: the part before the
    // path may hold a password (the caller shows the URL redacted).
    if rest.contains('#') {
        return Err("a fragment (#…) means nothing here".into());
    }
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    if let Some(q) = query {
        match parse_query(q) {
            Ok(false) => {}
            Ok(true) => {
                return Err("cluster=true: a Unix socket is one server, not a cluster \
                            seed (cluster nodes are reached over TCP)"
                    .into())
            }
            Err(_) => {
                return Err("a query option other than cluster=false (a Unix socket \
                            takes none)"
                    .into())
            }
        }
    }
    let Some(slash) = rest.find('/') else {
        return Err("no socket path (write unix:///path/to/redis.sock)".into());
    };
    let (authority, path) = rest.split_at(slash);
    let (username, password) = match authority {
        "" => (None, None),
        a => match a.strip_suffix('@') {
            Some(u) => parse_userinfo(u)?,
            None => {
                return Err("a host in a Unix socket URL: write \
                            unix:///path/to/redis.sock (three slashes: no host), \
                            credentials as unix://user:password@/path"
                    .into())
            }
        },
    };
    let path = percent_decode(path).map_err(|e| format!("socket path: {e}"))?;
    if path.contains(&0) {
        return Err("socket path: a NUL byte (%00)".into());
    }
    let path = String::from_utf8(path).map_err(|_| "socket path: not UTF-8".to_string())?;
    if path.len() <= 1 {
        return Err("no socket path (write unix:///path/to/redis.sock)".into());
    }
    Ok(ServerUrl {
        addr: format!("unix:{path}"),
        username,
        password,
        cluster: false,
        tls: false,
        sentinels: Vec::new(),
    })
}

/// A master found through Sentinel, after `redis+sentinel://`:
/// `[user:password@]host:port[,host:port…]/MASTER` (the credentials are
/// the master's; a Sentinel without a port is at 26379).
fn parse_sentinel(rest: &str) -> Result<ServerUrl, String> {
    check_before_at(rest)?;
    if rest.contains(['#', '?']) {
        return Err("no query options or fragment in a Sentinel URL".into());
    }
    let Some((authority, master)) = rest.split_once('/') else {
        return Err("no master name (write redis+sentinel://host:26379/mymaster)".into());
    };
    if master.is_empty() || master.contains('/') {
        return Err(format!(
            "master name {master:?}: write one name after the Sentinels \
             (redis+sentinel://host:26379/mymaster)"
        ));
    }
    let ((username, password), hosts) = split_credentials(authority)?;
    let mut sentinels = Vec::new();
    for h in hosts.split(',') {
        let with_port = match h.rsplit_once(':') {
            Some((_, p)) if !h.ends_with(']') && !p.is_empty() => h.to_string(),
            _ => format!("{h}:26379"),
        };
        sentinels.push(parse_hostport(&with_port).map_err(|e| format!("Sentinel {h:?}: {e}"))?);
    }
    Ok(ServerUrl {
        addr: format!("sentinel:{master}"),
        username,
        password,
        cluster: false,
        tls: false,
        sentinels,
    })
}

fn check_database(path: &str) -> Result<(), String> {
    let db = path.strip_prefix('/').unwrap_or(path);
    if db.is_empty() || db == "0" {
        return Ok(());
    }
    match db.parse::<u64>() {
        Ok(n) => Err(format!(
            "database {n}: only database 0 (or none) is accepted, since Pub/Sub \
             ignores databases and a cluster has only database 0"
        )),
        Err(_) => Err(format!(
            "path {path:?} is not a database index (only /0 or none is accepted)"
        )),
    }
}

fn parse_query(q: &str) -> Result<bool, String> {
    let mut cluster = None;
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "cluster" {
            return Err(format!(
                "unknown option {key:?} (the only one is cluster=true|false)"
            ));
        }
        let on = match value {
            "true" => true,
            "false" => false,
            _ => {
                return Err(format!(
                    "cluster={value:?}: use cluster=true or cluster=false"
                ))
            }
        };
        if cluster.replace(on).is_some_and(|was| was != on) {
            return Err("cluster given twice, differently".into());
        }
    }
    Ok(cluster.unwrap_or(false))
}

type Credentials = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Splits an authority into its credentials (none without a `@`) and
/// what follows them. The password may contain `@` only percent-encoded:
/// the last `@` ends the user info, as in most clients.
fn split_credentials(authority: &str) -> Result<(Credentials, &str), String> {
    match authority.rsplit_once('@') {
        Some((u, rest)) => Ok((parse_userinfo(u)?, rest)),
        None => Ok(((None, None), authority)),
    }
}

fn parse_userinfo(u: &str) -> Result<Credentials, String> {
    let Some((user, pass)) = u.split_once(':') else {
        return Err("a user name without a password (write user:password@, or \
                    :password@ for the default user)"
            .into());
    };
    let user = percent_decode(user).map_err(|e| format!("user name: {e}"))?;
    let pass = percent_decode(pass).map_err(|e| format!("password: {e}"))?;
    if pass.is_empty() {
        return Err("an empty password (leave out user:password@ for none)".into());
    }
    Ok(((!user.is_empty()).then_some(user), Some(pass)))
}

fn parse_hostport(hp: &str) -> Result<String, String> {
    let (host, port) = if let Some(v6) = hp.strip_prefix('[') {
        let Some((inner, after)) = v6.split_once(']') else {
            return Err("an IPv6 address without its closing ']'".into());
        };
        if inner.parse::<Ipv6Addr>().is_err() {
            return Err(format!("[{inner}] is not an IPv6 address"));
        }
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| format!("{p:?} after the IPv6 address (expected :port)"))?,
            ),
        };
        (format!("[{inner}]"), port)
    } else {
        let (host, port) = match hp.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hp, None),
        };
        if host.is_empty() {
            return Err("no host".into());
        }
        if let Some(c) = host
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
        {
            return Err(format!(
                "host {host:?} contains {c:?} (bracket an IPv6 address: [::1])"
            ));
        }
        (host.to_string(), port)
    };
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) if !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) => {
            match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => return Err(format!("port {p} is not in 1..=65535")),
            }
        }
        Some(p) => return Err(format!("port {p:?} is not a number")),
    };
    Ok(format!("{host}:{port}"))
}

/// `%XX` decoding (any byte; `+` stays `+`).
fn percent_decode(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c == b'%' {
            let hex = |j: usize| b.get(j).and_then(|&h| (h as char).to_digit(16));
            match (hex(i + 1), hex(i + 2)) {
                (Some(hi), Some(lo)) => out.push((hi * 16 + lo) as u8),
                _ => return Err(format!("a '%' at byte {i} not followed by two hex digits")),
            }
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    Ok(out)
}

/// `url` with its password, if any, replaced by `***` (for error texts and
/// logs).
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL: it may still hold a secret; show only its length.
        return format!("<{} bytes, no scheme>", url.len());
    };
    // The last '@' anywhere: a password with an unencoded '/', '?' or '#'
    // is still hidden.
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            // No colon: what is there may be a password written alone.
            None => format!("{scheme}://***@{host}"),
        },
        None => url.to_string(),
    }
}

/// The credentials one URL gave, kept until `build` weighs them against
/// the setters and the other URLs (its `Debug` shows only the redacted
/// URL).
#[derive(Clone)]
pub(crate) struct UrlCredentials {
    /// The URL, [`redacted`].
    pub(crate) shown: String,
    pub(crate) username: Option<Vec<u8>>,
    pub(crate) password: Option<Vec<u8>>,
}

impl std::fmt::Debug for UrlCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlCredentials")
            .field("shown", &self.shown)
            .finish_non_exhaustive()
    }
}

/// The settings a builder's `url` calls left behind: credentials to merge
/// and the first URL it could not read.
#[derive(Clone, Debug, Default)]
pub(crate) struct UrlSettings {
    pub(crate) credentials: Vec<UrlCredentials>,
    pub(crate) errors: Vec<String>,
    /// The first `rediss://` / `valkeys://` URL read ([`redacted`]).
    pub(crate) tls_url: Option<String>,
    /// The first plain `redis://` / `valkey://` URL read ([`redacted`]).
    pub(crate) plain_url: Option<String>,
}

impl UrlSettings {
    /// Reads `url`: its address, or the reason it was refused (kept for
    /// `build`, as builders' setters cannot fail).
    pub(crate) fn read(&mut self, url: &str) -> Option<ServerUrl> {
        match parse(url) {
            Ok(u) => {
                let first = if u.tls {
                    &mut self.tls_url
                } else {
                    &mut self.plain_url
                };
                first.get_or_insert_with(|| redacted(url));
                if u.username.is_some() || u.password.is_some() {
                    self.credentials.push(UrlCredentials {
                        shown: redacted(url),
                        username: u.username.clone(),
                        password: u.password.clone(),
                    });
                }
                Some(u)
            }
            Err(e) => {
                self.errors.push(format!("URL {}: {e}", redacted(url)));
                None
            }
        }
    }

    /// Whether the URLs ask for TLS: TLS is one setting for every
    /// connection of a builder, so a `rediss://` and a `redis://` URL in
    /// the same builder are an error naming both.
    ///
    /// # Errors
    ///
    /// The two URLs that disagree.
    pub(crate) fn wants_tls(&self) -> Result<bool, String> {
        match (&self.tls_url, &self.plain_url) {
            (Some(t), Some(p)) => Err(format!(
                "URL {t} asks for TLS and URL {p} does not (TLS is one setting for \
                 every connection of a builder)"
            )),
            (t, _) => Ok(t.is_some()),
        }
    }

    /// Fills `username` and `password` (as the setters of `builder` left
    /// them) from the URLs: a URL without credentials takes the others',
    /// and the credentials given are one set for every connection, so two
    /// that differ are an error naming both.
    ///
    /// # Errors
    ///
    /// The first URL refused, or the two conflicting sources.
    pub(crate) fn merge(
        &self,
        builder: &str,
        username: &mut Option<Vec<u8>>,
        password: &mut Option<Vec<u8>>,
    ) -> Result<(), String> {
        if let Some(e) = self.errors.first() {
            return Err(e.clone());
        }
        let mut user_from = username.is_some().then(|| format!("{builder}::username"));
        let mut pass_from = password.is_some().then(|| format!("{builder}::password"));
        for c in &self.credentials {
            let url = format!("URL {}", c.shown);
            for (what, have, from, given) in [
                ("user name", &mut *username, &mut user_from, &c.username),
                ("password", &mut *password, &mut pass_from, &c.password),
            ] {
                let Some(given) = given else { continue };
                match (have.as_ref(), from.as_ref()) {
                    (Some(h), Some(f)) if h != given => {
                        return Err(format!(
                            "the {what} of {url} differs from the one of {f} \
                             (one set of credentials serves every connection)"
                        ))
                    }
                    (Some(_), _) => {}
                    (None, _) => {
                        *have = Some(given.clone());
                        *from = Some(url.clone());
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
