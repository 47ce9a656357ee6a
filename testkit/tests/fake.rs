//! The scripted fake server plays its script and reports deviations.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use testkit::{Error, FakeServer, Step, Value};

#[test]
fn plays_a_script_and_passes() -> Result<(), Error> {
    let fake = FakeServer::start(vec![
        Step::expect("*1\r\n$4\r\nPING\r\n"),
        Step::send("+PONG\r\n"),
        Step::Delay(Duration::from_millis(5)),
        Step::send(">2\r\n$4\r\npong\r\n$0\r\n\r\n"),
        Step::Close,
    ])?;
    let mut client = testkit::Client::connect(fake.addr())?;
    assert_eq!(client.cmd(&[b"PING"])?, Value::Simple(b"PONG".to_vec()));
    assert_eq!(
        client.read_value()?,
        Value::Push(vec![Value::Bulk(b"pong".to_vec()), Value::Bulk(Vec::new())])
    );
    assert!(
        matches!(client.read_value(), Err(Error::Protocol(_))),
        "closed"
    );
    assert_eq!(fake.accepted(), 1);
    fake.finish()
}

#[test]
fn reports_unexpected_bytes() -> Result<(), Error> {
    let fake = FakeServer::start(vec![Step::expect("PING\r\n"), Step::send("+PONG\r\n")])?;
    let mut stream = TcpStream::connect(fake.addr()).map_err(|e| Error::Io {
        what: "connect".into(),
        source: e,
    })?;
    stream.write_all(b"PONG\r\n").expect("write");
    let mut buf = [0u8; 16];
    // The fake closes the connection instead of answering.
    assert_eq!(stream.read(&mut buf).unwrap_or(0), 0);
    match fake.finish() {
        Err(Error::Script(failures)) => {
            assert_eq!(failures.len(), 1);
            assert!(failures[0].contains("got \"PONG\\r\\n\""), "{failures:?}");
        }
        other => panic!("expected a script failure, got {other:?}"),
    }
    Ok(())
}

#[test]
fn matched_scripts_go_by_what_each_connection_sends_first() -> Result<(), Error> {
    let script = |name: &str, reply: &str| {
        vec![
            Step::expect(format!("*2\r\n$4\r\nECHO\r\n$3\r\n{name}\r\n")),
            Step::send(format!("+{reply}\r\n")),
            Step::Close,
        ]
    };
    let fake = FakeServer::start_matched(vec![script("pub", "P"), script("sub", "S")])?;
    // Opened in the other order than the scripts are listed.
    let mut sub = testkit::Client::connect(fake.addr())?;
    assert_eq!(sub.cmd(&[b"ECHO", b"sub"])?, Value::Simple(b"S".to_vec()));
    let mut publ = testkit::Client::connect(fake.addr())?;
    assert_eq!(publ.cmd(&[b"ECHO", b"pub"])?, Value::Simple(b"P".to_vec()));
    // A third connection finds no script left.
    let mut third = testkit::Client::connect(fake.addr())?;
    third.set_timeout(Duration::from_millis(500))?;
    let _ = third.cmd(&[b"ECHO", b"sub"]);
    testkit::wait_for(
        "the third connection's failure",
        Duration::from_secs(5),
        || Ok((!fake.failures().is_empty()).then_some(())),
    )?;
    let err = fake.finish().expect_err("a third connection is a failure");
    assert!(err.to_string().contains("no script left"), "{err}");
    Ok(())
}

#[test]
fn per_connection_scripts_and_silence() -> Result<(), Error> {
    let fake = FakeServer::start_each(vec![
        vec![Step::send("-ERR first\r\n"), Step::Close],
        vec![Step::Silence],
    ])?;
    let mut first = testkit::Client::connect(fake.addr())?;
    assert_eq!(first.read_value()?, Value::Error(b"ERR first".to_vec()));
    let mut second = testkit::Client::connect(fake.addr())?;
    second.set_timeout(Duration::from_millis(100))?;
    second.send(&[b"PING"])?;
    assert!(
        matches!(second.read_value(), Err(Error::Io { .. })),
        "silence"
    );
    let _third = TcpStream::connect(fake.addr()).expect("connect");
    testkit::wait_for("third connection", Duration::from_secs(5), || {
        Ok((fake.accepted() == 3).then_some(()))
    })?;
    let err = fake.finish().expect_err("a third connection is a failure");
    assert!(
        err.to_string().contains("unexpected connection #2"),
        "{err}"
    );
    Ok(())
}
