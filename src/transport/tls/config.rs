//! [`TlsConfig`]: what a TLS connection trusts, shows and names, turned
//! into one rustls `ClientConfig` per builder.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

/// Where PEM text comes from.
#[derive(Clone)]
enum Pem {
    File(PathBuf),
    Bytes(Arc<[u8]>),
}

impl Pem {
    fn describe(&self) -> String {
        match self {
            Pem::File(p) => format!("PEM file {}", p.display()),
            Pem::Bytes(_) => "PEM bytes".into(),
        }
    }

    fn certs(&self) -> Result<Vec<CertificateDer<'static>>, String> {
        let read: Result<Vec<_>, _> = match self {
            Pem::File(p) => CertificateDer::pem_file_iter(p)
                .map_err(|e| format!("{}: {e}", self.describe()))?
                .collect(),
            Pem::Bytes(b) => CertificateDer::pem_slice_iter(b).collect(),
        };
        let certs = read.map_err(|e| format!("{}: {e}", self.describe()))?;
        if certs.is_empty() {
            return Err(format!("{}: no CERTIFICATE section", self.describe()));
        }
        Ok(certs)
    }

    fn key(&self) -> Result<PrivateKeyDer<'static>, String> {
        match self {
            Pem::File(p) => PrivateKeyDer::from_pem_file(p),
            Pem::Bytes(b) => PrivateKeyDer::from_pem_slice(b),
        }
        .map_err(|e| format!("{}: no usable private key ({e})", self.describe()))
    }
}

#[derive(Clone)]
enum Roots {
    /// The operating system's store (`rustls-native-certs`).
    System,
    /// Only these CA certificates.
    Ca(Pem),
}

/// TLS settings for every connection of a builder (the `tls` cargo
/// feature): which certificate authorities to trust, an optional client
/// certificate, and the name the server's certificate must carry.
///
/// Give it to [`Builder::tls`](crate::engine::Builder::tls) or
/// [`PubSubBuilder::tls`](crate::PubSubBuilder::tls); a `rediss://` or
/// `valkeys://` URL turns TLS on with [`TlsConfig::system_roots`] when no
/// config was given. Nothing is read until `build`, which fails with
/// [`Error::Config`](crate::Error::Config) for a file that cannot be read
/// or holds no certificate or key.
///
/// The server name (SNI, and the name the certificate is checked against)
/// is by default the host of each address: `cache.example:6380` asks for
/// `cache.example`, `127.0.0.1:6380` for the IP address `127.0.0.1` (the
/// certificate then needs that IP address as a subject alternative name).
/// Cluster nodes are reached at the addresses the cluster reports, usually
/// IP addresses; set [`TlsConfig::server_name`] when the nodes' certificates
/// carry one shared DNS name instead.
///
/// ```
/// use shardsub::TlsConfig;
///
/// // Trust one CA, show a client certificate, check the name `cache`.
/// let tls = TlsConfig::ca_pem_file("/etc/redis/ca.crt")
///     .client_cert_pem_files("/etc/redis/client.crt", "/etc/redis/client.key")
///     .server_name("cache");
/// let builder = shardsub::PubSub::builder().address("10.0.0.5:6380").tls(tls);
/// # drop(builder);
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    roots: Roots,
    client_cert: Option<(Pem, Pem)>,
    server_name: Option<String>,
    custom: Option<Arc<ClientConfig>>,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig::system_roots()
    }
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let roots = match (&self.custom, &self.roots) {
            (Some(_), _) => "given ClientConfig".to_string(),
            (None, Roots::System) => "system".to_string(),
            (None, Roots::Ca(p)) => p.describe(),
        };
        f.debug_struct("TlsConfig")
            .field("roots", &roots)
            .field("client_cert", &self.client_cert.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsConfig {
    /// Trusts the operating system's root certificates (the default). A
    /// system without any fails `build` with a config error.
    pub fn system_roots() -> Self {
        TlsConfig {
            roots: Roots::System,
            client_cert: None,
            server_name: None,
            custom: None,
        }
    }

    /// Trusts only the CA certificates in this PEM file (one or more
    /// `CERTIFICATE` sections), as `tls-ca-cert-file` does on the server.
    pub fn ca_pem_file(path: impl Into<PathBuf>) -> Self {
        TlsConfig {
            roots: Roots::Ca(Pem::File(path.into())),
            ..TlsConfig::system_roots()
        }
    }

    /// Trusts only the CA certificates in this PEM text.
    pub fn ca_pem(pem: impl AsRef<[u8]>) -> Self {
        TlsConfig {
            roots: Roots::Ca(Pem::Bytes(pem.as_ref().into())),
            ..TlsConfig::system_roots()
        }
    }

    /// Uses this rustls configuration as it is (roots, client
    /// certificate, protocol versions, crypto provider, ALPN…): the
    /// escape hatch for what the other settings do not cover. Only
    /// [`TlsConfig::server_name`] still applies.
    pub fn from_client_config(config: Arc<ClientConfig>) -> Self {
        TlsConfig {
            custom: Some(config),
            ..TlsConfig::system_roots()
        }
    }

    /// Shows this client certificate (PEM chain, leaf first) and proves it
    /// with this private key (PEM: PKCS#8, PKCS#1 or SEC1), for a server
    /// with `tls-auth-clients yes` or `optional`.
    pub fn client_cert_pem_files(
        mut self,
        chain: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.client_cert = Some((Pem::File(chain.into()), Pem::File(key.into())));
        self
    }

    /// Like [`TlsConfig::client_cert_pem_files`], from PEM text.
    pub fn client_cert_pem(mut self, chain: impl AsRef<[u8]>, key: impl AsRef<[u8]>) -> Self {
        self.client_cert = Some((
            Pem::Bytes(chain.as_ref().into()),
            Pem::Bytes(key.as_ref().into()),
        ));
        self
    }

    /// The name to send as SNI and to check the server's certificate
    /// against, for every server of the builder (default: each address's
    /// host). A DNS name or an IP address.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// These settings with their rustls configuration built (so it is
    /// built, and its files read, once per builder).
    ///
    /// # Errors
    ///
    /// As [`TlsConfig::client_config`].
    pub(crate) fn prepared(&self) -> Result<TlsConfig, String> {
        Ok(TlsConfig {
            custom: Some(self.client_config()?),
            ..self.clone()
        })
    }

    /// The rustls configuration these settings describe.
    ///
    /// # Errors
    ///
    /// A sentence naming the file or setting that could not be used.
    pub(crate) fn client_config(&self) -> Result<Arc<ClientConfig>, String> {
        if let Some(c) = &self.custom {
            return Ok(c.clone());
        }
        let mut roots = RootCertStore::empty();
        match &self.roots {
            Roots::System => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    let why = found
                        .errors
                        .first()
                        .map_or_else(|| "none found".to_string(), ToString::to_string);
                    return Err(format!(
                        "TLS: no system root certificate could be loaded ({why}); \
                         give the CA with TlsConfig::ca_pem_file"
                    ));
                }
            }
            Roots::Ca(pem) => {
                for cert in pem.certs()? {
                    roots
                        .add(cert)
                        .map_err(|e| format!("TLS CA in {}: {e}", pem.describe()))?;
                }
            }
        }
        // rustls 0.23.48 deprecates the ring provider (ring has no
        // post-quantum key exchange; aws-lc-rs, which has, needs a C and
        // CMake toolchain to build). It is still rustls' ring provider, with
        // the classical key exchanges every Redis and Valkey TLS build
        // offers; `TlsConfig::from_client_config` takes any other one.
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots);
        let config = match &self.client_cert {
            None => builder.with_no_client_auth(),
            Some((chain, key)) => builder
                .with_client_auth_cert(chain.certs()?, key.key()?)
                .map_err(|e| {
                    format!(
                        "TLS client certificate ({}, key {}): {e}",
                        chain.describe(),
                        key.describe()
                    )
                })?,
        };
        Ok(Arc::new(config))
    }

    /// The server name for `addr` (`host:port`, `[v6]:port`).
    ///
    /// # Errors
    ///
    /// A sentence when the name is neither a DNS name nor an IP address.
    pub(crate) fn name_for(&self, addr: &str) -> Result<ServerName<'static>, String> {
        let host = match &self.server_name {
            Some(n) => n.as_str(),
            None => host_of(addr),
        };
        ServerName::try_from(host.to_string()).map_err(|e| {
            format!("TLS server name {host:?} (for {addr}) is neither a DNS name nor an IP address: {e}")
        })
    }
}

/// The host part of `host:port` or `[v6]:port`.
pub(crate) fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// One server's TLS setup: the builder's rustls configuration and the
/// name to ask that server for.
pub(crate) struct TlsTarget {
    pub(crate) config: std::sync::Arc<rustls::ClientConfig>,
    pub(crate) name: rustls::pki_types::ServerName<'static>,
}

/// The TLS target of every address (all `None` without TLS).
///
/// # Errors
///
/// A sentence for a config that cannot be built or a name that is not
/// valid.
pub(crate) fn targets(
    tls: Option<&TlsConfig>,
    addrs: &[String],
) -> Result<Vec<Option<std::sync::Arc<TlsTarget>>>, String> {
    let Some(tls) = tls else {
        return Ok(addrs.iter().map(|_| None).collect());
    };
    let config = tls.client_config()?;
    addrs
        .iter()
        .map(|a| {
            Ok(Some(std::sync::Arc::new(TlsTarget {
                config: config.clone(),
                name: tls.name_for(a)?,
            })))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_strips_the_port_and_brackets() {
        for (addr, host) in [
            ("cache.example:6380", "cache.example"),
            ("127.0.0.1:6379", "127.0.0.1"),
            ("[::1]:6379", "::1"),
            ("nohost", "nohost"),
        ] {
            assert_eq!(host_of(addr), host, "{addr}");
        }
    }

    #[test]
    fn names_are_dns_names_or_ip_addresses() {
        let tls = TlsConfig::system_roots();
        assert!(matches!(
            tls.name_for("127.0.0.1:1"),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            tls.name_for("[::1]:1"),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            tls.name_for("cache.example:1"),
            Ok(ServerName::DnsName(_))
        ));
        let e = tls.clone().server_name("bad name!").name_for("h:1");
        assert!(e.unwrap_err().contains("\"bad name!\""));
    }

    #[test]
    fn unreadable_pem_is_a_sentence_naming_it() {
        let e = TlsConfig::ca_pem_file("/nonexistent/ca.pem")
            .client_config()
            .unwrap_err();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
        let e = TlsConfig::ca_pem("not pem").client_config().unwrap_err();
        assert!(e.contains("no CERTIFICATE section"), "{e}");
    }
}
