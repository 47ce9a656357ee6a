//! Certificates for the TLS tests, generated at test time with `rcgen`: a
//! CA, a server certificate for `localhost` and `127.0.0.1`, and a client
//! certificate, written as PEM files to a scratch directory removed on
//! drop. Plus a Redis server that listens for TLS with them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use testkit::{Server, ServerKind, TlsAuthClients, TlsFiles};

/// One CA and what it signed, as PEM text and files.
pub struct Pki {
    dir: PathBuf,
    /// The CA certificate.
    pub ca_pem: String,
    /// A client certificate the CA signed, and its key.
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).expect("CA certificate");
    (cert, key)
}

fn leaf(
    names: &[&str],
    usage: &[ExtendedKeyUsagePurpose],
    ca: &(rcgen::Certificate, KeyPair),
) -> (String, String) {
    let key = KeyPair::generate().expect("leaf key");
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    // rcgen reads "127.0.0.1" as an IP address SAN, "localhost" as a DNS one.
    let mut params = CertificateParams::new(names).expect("leaf params");
    params
        .distinguished_name
        .push(DnType::CommonName, "shardsub test");
    params.extended_key_usages = usage.to_vec();
    let cert = params.signed_by(&key, &ca.0, &ca.1).expect("leaf");
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    /// A fresh CA with a server certificate for `localhost` and
    /// `127.0.0.1` and a client certificate.
    pub fn new(label: &str) -> Pki {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "shardsub-tls-{label}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let authority = ca("shardsub test CA");
        let (server_cert, server_key) = leaf(
            &["localhost", "127.0.0.1"],
            // Cluster nodes also show it as clients of each other's bus.
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            &authority,
        );
        let (client_cert_pem, client_key_pem) = leaf(
            &["shardsub-client"],
            &[ExtendedKeyUsagePurpose::ClientAuth],
            &authority,
        );
        let ca_pem = authority.0.pem();
        for (name, text) in [
            ("ca.crt", &ca_pem),
            ("server.crt", &server_cert),
            ("server.key", &server_key),
            ("client.crt", &client_cert_pem),
            ("client.key", &client_key_pem),
        ] {
            std::fs::write(dir.join(name), text).expect("write PEM");
        }
        Pki {
            dir,
            ca_pem,
            client_cert_pem,
            client_key_pem,
        }
    }

    /// Where the PEM files are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's files, asking clients for certificates as `auth`.
    pub fn server_files(&self, auth: TlsAuthClients) -> TlsFiles {
        TlsFiles {
            cert: self.dir.join("server.crt"),
            key: self.dir.join("server.key"),
            ca: self.dir.join("ca.crt"),
            auth_clients: auth,
        }
    }

    /// A Redis server listening for TLS with these certificates (and on
    /// a plain port for testkit's client). Redis only: the Valkey binary
    /// installed here is built without TLS (`tls_unavailable_on_valkey`).
    pub fn redis(&self, auth: TlsAuthClients) -> Server {
        Server::builder(ServerKind::Redis)
            .tls(self.server_files(auth))
            .start()
            .expect("a Redis server with TLS")
    }

    /// `127.0.0.1:<tls port>` of `server`, as a builder address.
    pub fn addr(server: &Server) -> String {
        server.tls_addr().expect("a TLS server").to_string()
    }
}

/// The PEM of a CA that signed nothing the servers use.
pub fn unrelated_ca_pem() -> String {
    ca("someone else's CA").0.pem()
}
