//! A TLS cluster (the `tls` feature): Redis nodes with `--tls-port`,
//! `tls-cluster yes` and `tls-replication yes`, certificates generated at
//! test time. Every connection the cluster control opens (topology fetch,
//! subscribe, publish) must reach the nodes' TLS ports (Redis 7 answers
//! `CLUSTER SLOTS` on a TLS connection with the TLS ports; the
//! `CLUSTER SHARDS` choice between `port` and `tls-port` is covered in the
//! topology crate's tests). Delivery is counted by the accounting checker,
//! in the sharded and the classic mode.
//!
//! Redis only: the Valkey binary installed here is built without TLS.

use std::sync::Arc;
use std::time::Duration;

use shardsub::cluster::Mode;
use shardsub::{PubSub, TlsConfig};
use testkit::accounting::Ledger;
use testkit::{kinds, Cluster, ServerKind, TlsAuthClients};

use crate::support::accounted;
use crate::support::accounted::Accounted;
use crate::support::channels;
use crate::support::tls::Pki;

const BOUND: Duration = Duration::from_secs(30);

/// `CLIENT LIST` entries of node `i` named `shardsub-*`, as (name, local port).
fn our_clients(cluster: &Cluster, i: usize) -> Vec<(String, u16)> {
    let v = cluster.node(i).cmd(&[b"CLIENT", b"LIST"]).unwrap();
    let text = testkit::values::text(&v).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let field = |k: &str| l.split(' ').find_map(|f| f.strip_prefix(k));
            let name = field("name=")?;
            let port = field("laddr=")?.rsplit_once(':')?.1.parse().ok()?;
            name.starts_with("shardsub-")
                .then(|| (name.to_string(), port))
        })
        .collect()
}

#[test]
fn a_tls_cluster_delivers_over_tls_connections_only() {
    if !kinds().contains(&ServerKind::Redis) {
        return;
    }
    let pki = Pki::new("cluster");
    let cluster = Cluster::start_tls(
        ServerKind::Redis,
        2,
        1,
        pki.server_files(TlsAuthClients::Yes),
    )
    .expect("a TLS cluster");
    let tls =
        TlsConfig::ca_pem(&pki.ca_pem).client_cert_pem(&pki.client_cert_pem, &pki.client_key_pem);
    for mode in [Mode::Sharded, Mode::Classic] {
        let chans = channels(&format!("tls-{mode:?}"), 500);
        let ledger = Arc::new(Ledger::new(&chans));
        let handler = Accounted::new(&ledger, "sub");
        let ps = Arc::new(
            PubSub::builder()
                .seeds(cluster.tls_seed_addrs().iter().map(|a| a.to_string()))
                .mode(mode)
                .tls(tls.clone())
                .workers(2)
                .queue_capacity(1 << 16)
                .handler_arc(handler.clone())
                .build()
                .unwrap_or_else(|e| panic!("{mode:?}: {e}")),
        );
        ps.subscribe(&chans).unwrap();
        ps.wait_active(&chans, BOUND)
            .unwrap_or_else(|e| panic!("{mode:?}: {e}; {:?}", ps.cluster_metrics()));
        let publish = accounted::via_cluster(ps.clone());
        for _ in 0..5 {
            accounted::round(&ledger, &*publish);
        }
        let what = format!("TLS cluster {mode:?}");
        let report = accounted::settle_and_check(&ledger, BOUND, &what);
        assert_eq!(report.counts.delivered, 5 * 500, "{what}");
        assert_eq!(report.failed_total(), 0, "{what}: {report}");
        // Every connection of ours sits on a node's TLS port.
        let mut subscribers = 0;
        for i in cluster.live() {
            let tls_port = cluster.node(i).tls_addr().unwrap().port();
            for (name, port) in our_clients(&cluster, i) {
                assert_eq!(port, tls_port, "{what}: {name} on node {i}'s plain port");
                subscribers += usize::from(name == "shardsub-sub");
            }
        }
        assert!(subscribers >= 1, "{what}: no subscribe connection found");
        ps.shutdown();
    }
}
