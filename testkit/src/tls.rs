//! TLS settings for a test server: `--tls-port` next to the plain port.
//!
//! The plain port stays open so testkit's own [`Client`](crate::Client)
//! (setup, `PING`, `INFO`) works unchanged; the client under test connects
//! to [`Server::tls_addr`](crate::Server::tls_addr). Redis must be built
//! with TLS (the Redis installed here links libssl). The bundled Valkey
//! binary is not: it starts, logs `Failed finding TLS support.`, and exits,
//! which [`ServerBuilder::start`](crate::ServerBuilder::start) reports as
//! [`Error::StartFailed`](crate::Error::StartFailed) with that log line.

use std::path::PathBuf;

/// Whether the server asks clients for a certificate
/// (`--tls-auth-clients`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TlsAuthClients {
    /// `no`: no client certificate is asked for.
    No,
    /// `optional`: one is checked if the client shows it.
    Optional,
    /// `yes`: a client without a certificate signed by the CA is refused.
    Yes,
}

impl TlsAuthClients {
    fn arg(self) -> &'static str {
        match self {
            TlsAuthClients::No => "no",
            TlsAuthClients::Optional => "optional",
            TlsAuthClients::Yes => "yes",
        }
    }
}

/// The PEM files a TLS server uses.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The server's certificate chain (`--tls-cert-file`).
    pub cert: PathBuf,
    /// Its private key (`--tls-key-file`).
    pub key: PathBuf,
    /// The CA that signs client certificates (`--tls-ca-cert-file`).
    pub ca: PathBuf,
    /// Client certificates asked for.
    pub auth_clients: TlsAuthClients,
}

impl TlsFiles {
    /// The server arguments for these files on `port`. With `cluster` the
    /// cluster bus and replication use TLS too (`CLUSTER SHARDS` then names
    /// both ports), and the bus stays on `bus_port` (the plain port +
    /// 10000, checked free; by default it would follow the TLS port).
    pub(crate) fn args(&self, port: u16, cluster: Option<u16>) -> Vec<String> {
        let path = |p: &PathBuf| p.to_string_lossy().into_owned();
        let mut args = vec![
            "--tls-port".to_string(),
            port.to_string(),
            "--tls-cert-file".into(),
            path(&self.cert),
            "--tls-key-file".into(),
            path(&self.key),
            "--tls-ca-cert-file".into(),
            path(&self.ca),
            "--tls-auth-clients".into(),
            self.auth_clients.arg().into(),
        ];
        if let Some(bus_port) = cluster {
            for opt in ["--tls-cluster", "--tls-replication"] {
                args.extend([opt.to_string(), "yes".to_string()]);
            }
            args.extend(["--cluster-port".to_string(), bus_port.to_string()]);
        }
        args
    }
}
