//! [`PubSubBuilder::url`]: the placement and credentials from URLs users
//! already know (parsed by `crate::url`), and TLS (`PubSubBuilder::tls`,
//! the `tls` feature).

use crate::pubsub::PubSubBuilder;

/// Configuration by URL (see [`PubSubBuilder::url`]).
impl PubSubBuilder {
    /// Adds a server, or with `?cluster=true` a cluster seed, from a URL
    /// (`redis://user:password@host:port/0?cluster=true`). A URL is another
    /// way to call [`PubSubBuilder::address`] or [`PubSubBuilder::seed`] (and
    /// [`PubSubBuilder::username`] / [`PubSubBuilder::password`]); it mixes
    /// with them freely:
    ///
    /// - `redis://host:port` or `valkey://host:port` (port 6379 when left out)
    ///   adds a server, in call order with `address`: several URLs are several
    ///   client-side shards.
    /// - `…?cluster=true` adds a cluster seed instead, like `seed`. Servers and
    ///   seeds together are refused by `build`, however they were given.
    /// - `user:password@` or `:password@` (the default user) set the
    ///   credentials, percent-decoded (`%40` for `@`). They are one set for
    ///   the whole instance: URLs without credentials use the ones given
    ///   elsewhere, and a URL whose user name or password differs from another
    ///   URL's or from the setter's fails `build` with [`Error::Config`]
    ///   naming both (the password shown as `***`).
    /// - IPv6 addresses in brackets (`redis://[::1]:6379`); a database path of
    ///   `/0` or none (Pub/Sub ignores databases and a cluster has only
    ///   database 0, so any other index is refused rather than ignored).
    /// - `rediss://` and `valkeys://` ask for TLS (the `tls` cargo feature;
    ///   without it they are refused with a sentence saying to enable it):
    ///   TLS then applies to every connection of the instance, with the
    ///   config given to `PubSubBuilder::tls` or else
    ///   `TlsConfig::system_roots`. TLS
    ///   is one setting per instance, so mixing `rediss://` and `redis://`
    ///   URLs fails `build`. Other schemes, query options other than `cluster`, and
    ///   fragments, are refused rather than ignored.
    /// - `unix:///path/to/redis.sock` (also `redis+unix://` and
    ///   `valkey+unix://`, with `user:password@` before the path) is a
    ///   server on a Unix socket: one server or one of N shards, never a
    ///   cluster seed, never TLS (`build` fails with [`Error::Config`] if
    ///   TLS is asked for). Events and errors name it `unix:/path`.
    ///
    /// A URL that cannot be read fails `build` with [`Error::Config`] saying
    /// why (setters cannot fail, so the error waits for `build`).
    ///
    /// ```no_run
    /// use shardsub::PubSub;
    /// let shards = PubSub::builder()
    ///     .urls(["redis://:s3cret@10.0.0.1:6379", "redis://:s3cret@10.0.0.2:6379"])
    ///     .handler(shardsub::handler_fn(|channel, payload| {
    ///         println!("{}: {} bytes", String::from_utf8_lossy(channel), payload.len());
    ///     }))
    ///     .build()?;
    /// let cluster = PubSub::builder()
    ///     .url("valkey://app:s3cret@node-1:7000?cluster=true")
    ///     .handler(shardsub::handler_fn(|_, _| {}))
    ///     .build()?;
    /// # Ok::<(), shardsub::Error>(())
    /// ```
    ///
    /// [`Error::Config`]: crate::Error::Config
    pub fn url(mut self, url: &str) -> Self {
        if let Some(u) = self.urls.read(url) {
            if let Some(master) = u.addr.strip_prefix(crate::pubsub::sentinel::PREFIX) {
                return self.sentinel(u.sentinels, master);
            }
            if u.cluster {
                self.seeds.push(u.addr);
            } else {
                self.servers.push(u.addr);
            }
        }
        self
    }

    /// Adds several URLs, in order (see [`PubSubBuilder::url`]).
    pub fn urls<I, S>(self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        urls.into_iter().fold(self, |b, u| b.url(u.as_ref()))
    }

    /// Connects over TLS with these settings (the `tls` cargo feature):
    /// every connection of the instance, publish and subscribe, on every
    /// server, or on every cluster node (the topology fetches included).
    /// The server name checked is each address's host (for cluster nodes
    /// the address the cluster reports) unless
    /// [`TlsConfig::server_name`](crate::TlsConfig::server_name) sets one.
    /// Without this call, `rediss://` URLs use
    /// [`TlsConfig::system_roots`](crate::TlsConfig::system_roots).
    ///
    /// A TLS failure is [`Error::Tls`](crate::Error::Tls) (on servers
    /// with [`PubSubBuilder::require_all_servers`], from `build`; by
    /// default a server that cannot be reached starts degraded and keeps
    /// retrying, and the failure reaches the observer).
    #[cfg(feature = "tls")]
    pub fn tls(mut self, config: crate::TlsConfig) -> Self {
        self.common.tls = Some(config);
        self
    }
}

#[cfg(test)]
mod tests {
    use crate::{Error, PubSub, PubSubBuilder};

    fn refused(b: PubSubBuilder) -> String {
        match b.handler(crate::handler_fn(|_, _| {})).build() {
            Err(Error::Config(what)) => what.to_string(),
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn urls_choose_the_placement_and_mix_with_the_setters() {
        let b = PubSub::builder()
            .address("a:1")
            .url("redis://b:2")
            .urls(["valkey://[::1]", "redis://c/0"]);
        assert_eq!(b.servers, ["a:1", "b:2", "[::1]:6379", "c:6379"]);
        assert!(b.seeds.is_empty());
        let b = PubSub::builder()
            .url("redis://a:1?cluster=true")
            .seed("b:2");
        assert_eq!(b.seeds, ["a:1", "b:2"]);
        let both = PubSub::builder().seed("a:1").url("redis://b:2");
        assert!(refused(both).starts_with("both server addresses and cluster seeds"));
        let tls = PubSub::builder().url("rediss://:pw@a:1");
        #[cfg(not(feature = "tls"))]
        assert_eq!(
            refused(tls),
            "URL rediss://:***@a:1: rediss:// asks for TLS, which this build leaves \
             out: enable shardsub's `tls` cargo feature (or use redis:// or valkey://)"
        );
        #[cfg(feature = "tls")]
        assert_eq!(tls.servers, ["a:1"]);
        let mixed = PubSub::builder().url("redis://a:1").url("rediss://b:1");
        #[cfg(feature = "tls")]
        assert!(refused(mixed).starts_with("URL rediss://b:1 asks for TLS and URL redis://a:1"));
        #[cfg(not(feature = "tls"))]
        assert!(refused(mixed).starts_with("URL rediss://b:1: rediss:// asks for TLS"));
        let db = PubSub::builder().url("redis://a:1/2");
        assert!(refused(db).starts_with("URL redis://a:1/2: database 2: only database 0"));
        let clash = PubSub::builder().url("redis://:one@a:1").password("two");
        assert!(refused(clash).starts_with(
            "the password of URL redis://:***@a:1 differs from the one of \
                 PubSubBuilder::password"
        ),);
        let half = PubSub::builder().url("redis://a:1").username("app");
        assert_eq!(refused(half), "a username needs a password");
    }
}
