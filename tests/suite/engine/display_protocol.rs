//! Every `DEBUG PROTOCOL` type from real servers, through the engine and
//! `resp::display`, compared as exact text (an empty or truncated
//! output fails); and the `cli` example run as a program for every type.

use std::sync::{mpsc, Arc, Mutex};

use resp::display::{format_push, format_reply};
use shardsub::engine::{ConnInfo, Engine, Observer};
use shardsub::Error;
use testkit::{kinds, Server, ServerKind};

use crate::support::examples::example_binary;

#[derive(Default)]
struct Pushes(Mutex<Vec<String>>);

impl Observer for Pushes {
    fn on_push(&self, _: &ConnInfo, push: &resp::Parsed<'_>) {
        self.0.lock().unwrap().push(format_push(&push.to_value()));
    }
}

/// (type, printed pushes + reply)
const EXPECTED: &[(&str, &str)] = &[
    ("string", "\"Hello World\"\n"),
    ("integer", "(integer) 12345\n"),
    ("double", "(double) 3.141\n"),
    (
        "bignum",
        "(big number) 1234567999999999999999999999999999999\n",
    ),
    ("null", "(nil)\n"),
    ("array", "1) (integer) 0\n2) (integer) 1\n3) (integer) 2\n"),
    ("set", "1~ (integer) 0\n2~ (integer) 1\n3~ (integer) 2\n"),
    (
        "map",
        "1# (integer) 0 => (false)\n2# (integer) 1 => (true)\n3# (integer) 2 => (false)\n",
    ),
    (
        "attrib",
        "|1# \"key-popularity\" => \n|   1) \"key:123\"\n|   2) (integer) 90\n\
         \"Some real reply following the attribute\"\n",
    ),
    ("verbatim", "This is a verbatim\nstring\n"),
    ("true", "(true)\n"),
    ("false", "(false)\n"),
];

const PUSH: &str = ">1) \"server-cpu-usage\"\n>2) (integer) 42\n";
const PUSH_REPLY: &str = "\"Some real reply following the push reply\"\n";

/// What `DEBUG PROTOCOL ty` prints: pushes and reply in arrival order.
/// Redis sends the push of `push` before the reply, Valkey after it.
fn expected(kind: ServerKind, ty: &str) -> String {
    match (ty, kind) {
        ("push", ServerKind::Redis) => format!("{PUSH}{PUSH_REPLY}"),
        ("push", _) => format!("{PUSH_REPLY}{PUSH}"),
        _ => EXPECTED
            .iter()
            .find(|(t, _)| *t == ty)
            .unwrap()
            .1
            .to_string(),
    }
}

const TYPES: &[&str] = &[
    "string", "integer", "double", "bignum", "null", "array", "set", "map", "attrib", "push",
    "verbatim", "true", "false",
];

#[test]
fn every_debug_protocol_type_formats_exactly() {
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        let pushes = Arc::new(Pushes::default());
        let e = Engine::builder()
            .address(server.addr().to_string())
            .io_threads(1)
            .observer(pushes.clone())
            .build()
            .unwrap();
        for ty in TYPES {
            // The reply callback runs on the I/O thread in order with the
            // observer, so the log is in arrival order.
            let (tx, rx) = mpsc::channel();
            let log = pushes.clone();
            e.command_then(0, ["DEBUG", "PROTOCOL", ty], move |r| {
                log.0.lock().unwrap().push(format_reply(&r.unwrap()));
                tx.send(()).unwrap();
            });
            rx.recv().unwrap();
            e.command(["PING"]).unwrap(); // a push right behind the reply
            let got: String = pushes.0.lock().unwrap().drain(..).collect();
            assert_eq!(got, expected(kind, ty), "{kind:?} DEBUG PROTOCOL {ty}");
        }
        // In RESP2 the server refuses `push`; the error reads like redis-cli's.
        let e2 = Engine::builder()
            .address(server.addr().to_string())
            .protocol(shardsub::Protocol::Resp2)
            .build()
            .unwrap();
        let err = e2.command(["DEBUG", "PROTOCOL", "push"]).unwrap_err();
        let Error::Reply { message, .. } = &err else {
            panic!("{kind:?}: {err:?}")
        };
        assert_eq!(&**message, "ERR RESP2 is not supported by this command");
    }
}

#[test]
fn cli_example_prints_attributes_and_pushes() {
    let cli = example_binary("cli");
    for kind in kinds() {
        let server = Server::start(kind).unwrap();
        for &ty in TYPES {
            let out = std::process::Command::new(&cli)
                .args(["--addr", &server.addr().to_string(), "-3"])
                .args(["DEBUG", "PROTOCOL", ty])
                .output()
                .unwrap();
            assert!(out.status.success(), "{kind:?} {ty}: {out:?}");
            let got = String::from_utf8_lossy(&out.stdout).into_owned();
            assert_eq!(got, expected(kind, ty), "{kind:?} cli DEBUG PROTOCOL {ty}");
            assert!(out.stderr.is_empty(), "{kind:?} {ty}: {out:?}");
        }
        let out = std::process::Command::new(&cli)
            .args(["--addr", &server.addr().to_string(), "NOSUCH"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "(error) ERR unknown command 'NOSUCH', with args beginning with: \n",
            "{kind:?}"
        );
    }
    // A server that is not there: a clear message and a failure status.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = std::process::Command::new(&cli)
        .args(["--addr", &format!("127.0.0.1:{port}"), "PING"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let want = format!("cannot connect to 127.0.0.1:{port}: ");
    let hint = " (is the server running and listening there?)\n";
    // The reason between them is the OS's text for a refused connection.
    assert!(
        stderr.starts_with(&want)
            && stderr.ends_with(hint)
            && stderr.len() > want.len() + hint.len(),
        "{stderr:?}"
    );
}
