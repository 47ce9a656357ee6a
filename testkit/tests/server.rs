//! A standalone server: start, command round trip, kill, restart, stop on drop.

use testkit::{Server, ServerKind, Value};

fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn start_cmd_roundtrip_and_stop_on_drop() -> Result<(), testkit::Error> {
    for kind in testkit::kinds() {
        let server = Server::start(kind)?;
        assert_eq!(server.kind(), kind);
        assert_eq!(server.cmd(&[b"PING"])?, Value::Simple(b"PONG".to_vec()));
        assert_eq!(
            server.cmd(&[b"SET", b"k", b"v"])?,
            Value::Simple(b"OK".to_vec())
        );
        assert_eq!(server.cmd(&[b"GET", b"k"])?, Value::Bulk(b"v".to_vec()));
        assert_eq!(server.cmd(&[b"GET", b"missing"])?, Value::Null);
        // The configuration the harness promises.
        let save = server.cmd_str(&["CONFIG", "GET", "save"])?;
        assert_eq!(
            save,
            Value::Array(vec![Value::Bulk(b"save".to_vec()), Value::Bulk(Vec::new())])
        );
        // An error reply is an error, and the cached connection still works.
        assert!(matches!(
            server.cmd(&[b"NOSUCHCOMMAND"]),
            Err(testkit::Error::Reply(_))
        ));
        assert_eq!(server.cmd(&[b"DBSIZE"])?, Value::Integer(1));
        let (pid, dir) = (server.pid(), server.dir().to_path_buf());
        assert!(process_exists(pid) && dir.exists());
        assert!(server.log().contains("Ready to accept connections"));
        drop(server);
        assert!(!process_exists(pid), "{kind}: process {pid} survived drop");
        assert!(!dir.exists(), "{kind}: scratch dir survived drop");
    }
    Ok(())
}

#[test]
fn kill_then_restart_on_the_same_port() -> Result<(), testkit::Error> {
    for kind in testkit::kinds() {
        let mut server = Server::start(kind)?;
        let (port, pid) = (server.port(), server.pid());
        server.kill();
        assert!(!server.is_running());
        assert!(
            server.cmd(&[b"PING"]).is_err(),
            "{kind}: a killed server answered"
        );
        server.restart()?;
        assert_eq!(server.port(), port);
        assert_ne!(server.pid(), pid);
        assert_eq!(server.cmd(&[b"PING"])?, Value::Simple(b"PONG".to_vec()));
    }
    Ok(())
}

#[test]
fn bad_arguments_fail_with_the_log() {
    for kind in testkit::kinds() {
        let err = Server::builder(kind)
            .arg("--no-such-option")
            .arg("1")
            .start()
            .expect_err("a server with a bad option must not start");
        let text = err.to_string();
        assert!(matches!(err, testkit::Error::StartFailed { .. }), "{text}");
        assert!(
            text.contains("no-such-option"),
            "{kind}: log missing from {text}"
        );
    }
}

#[test]
fn servers_are_independent() -> Result<(), testkit::Error> {
    let kind = testkit::kinds()[0];
    let servers = testkit::Servers::start(kind, 3)?;
    assert_eq!(servers.len(), 3);
    let mut addrs = servers.addrs();
    addrs.dedup();
    assert_eq!(addrs.len(), 3);
    servers[0].cmd(&[b"SET", b"only-here", b"1"])?;
    assert_eq!(
        servers[1].cmd(&[b"EXISTS", b"only-here"])?,
        Value::Integer(0)
    );
    assert_eq!(
        servers[0].cmd(&[b"EXISTS", b"only-here"])?,
        Value::Integer(1)
    );
    Ok(())
}

#[test]
fn kinds_resolve_to_binaries() -> Result<(), testkit::Error> {
    for kind in ServerKind::ALL {
        assert!(kind.binary()?.is_file());
    }
    Ok(())
}

#[test]
fn a_taken_fixed_port_fails_with_the_reason_in_the_log() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    for kind in testkit::kinds() {
        let err = Server::builder(kind)
            .port(port)
            .start()
            .expect_err("the port is taken");
        let text = err.to_string();
        assert!(text.contains("Address already in use"), "{kind}: {text}");
    }
}
