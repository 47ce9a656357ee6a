//! TLS between the socket and the sans-IO connection (the `tls` cargo
//! feature): [`TlsConfig`] for the builders, one rustls
//! `ClientConnection` per socket in the engine's driver.
//!
//! ```text
//!  conn::Connection ── poll_transmit ──► rustls writer ── write_tls ──► socket
//!  conn::Connection ◄── read_from ◄── rustls reader ◄── read_tls +
//!                                                  process_new_packets ◄── socket
//! ```
//!
//! Without the feature this module holds only the empty [`TlsTarget`], so
//! the driver's plain path is the only one compiled.

#[cfg(feature = "tls")]
mod config;
#[cfg(feature = "tls")]
mod stream;

#[cfg(feature = "tls")]
pub use config::TlsConfig;
#[cfg(feature = "tls")]
pub(crate) use config::{targets, TlsTarget};
#[cfg(feature = "tls")]
pub(crate) use stream::TlsStream;

/// Without the `tls` feature there is no TLS target: every connection is
/// plain TCP.
#[cfg(not(feature = "tls"))]
pub(crate) enum TlsTarget {}

/// Without the `tls` feature no TLS config can exist (the builders keep an
/// always-`None` field of this type).
#[cfg(not(feature = "tls"))]
#[derive(Clone, Debug)]
pub(crate) enum TlsConfig {}

/// The TLS target of every address: all `None` without the feature.
#[cfg(not(feature = "tls"))]
pub(crate) fn targets(
    tls: Option<&TlsConfig>,
    addrs: &[String],
) -> Result<Vec<Option<std::sync::Arc<TlsTarget>>>, String> {
    if let Some(t) = tls {
        match *t {}
    }
    Ok(addrs.iter().map(|_| None).collect())
}

/// The TLS config a builder uses: the one given, else the system roots
/// when its URLs asked for TLS; with its rustls configuration built once,
/// so every engine of an instance (a cluster opens one per node) shares it.
///
/// # Errors
///
/// A sentence naming what could not be read.
pub(crate) fn prepare(
    given: Option<TlsConfig>,
    from_url: bool,
) -> Result<Option<TlsConfig>, String> {
    #[cfg(feature = "tls")]
    {
        let tls = given.or_else(|| from_url.then(TlsConfig::system_roots));
        tls.map(|t| t.prepared()).transpose()
    }
    #[cfg(not(feature = "tls"))]
    {
        // No URL asks for TLS here: `rediss://` is refused while parsing.
        debug_assert!(!from_url);
        Ok(given)
    }
}
