//! Sends one command and prints the reply like `redis-cli -3`, plus what
//! `redis-cli` cannot print: attributes (lines starting with `|`) and push
//! frames (lines starting with `>`).
//!
//! ```text
//! cargo run --example cli -- [--addr HOST:PORT] [-3|-2] [--user U] [--pass P] COMMAND ARGS...
//! cargo run --example cli -- DEBUG PROTOCOL attrib
//! ```

use std::io::Write;
use std::process::ExitCode;
use std::sync::{mpsc, Arc, Mutex};

use resp::display::{format_push, format_reply};
use shardsub::engine::{ConnInfo, Engine, Observer};
use shardsub::{Error, Protocol};

/// What the connection received, formatted, in arrival order: pushes come
/// from the observer, the reply from the command's callback; both run on the
/// I/O thread, one after the other.
#[derive(Default)]
struct Received(Mutex<Vec<String>>);

impl Observer for Received {
    fn on_push(&self, _conn: &ConnInfo, push: &resp::Parsed<'_>) {
        let text = format_push(&push.to_value());
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(text);
    }
}

const USAGE: &str =
    "usage: cli [--addr HOST:PORT] [-3|-2] [--user USER] [--pass PASSWORD] COMMAND [ARG...]";

fn main() -> ExitCode {
    // Arguments: options first, then the command and its arguments.
    let mut args = std::env::args().skip(1).peekable();
    let mut addr = "127.0.0.1:6379".to_string();
    let mut protocol = Protocol::Resp3;
    let mut builder = Engine::builder();
    while let Some(a) = args.peek() {
        match a.as_str() {
            "--addr" | "-a" | "--user" | "--pass" => {
                let flag = args.next().unwrap_or_default();
                let Some(value) = args.next() else {
                    eprintln!("{flag} needs a value\n{USAGE}");
                    return ExitCode::from(2);
                };
                match flag.as_str() {
                    "--user" => builder = builder.username(value),
                    "--pass" => builder = builder.password(value),
                    _ => addr = value,
                }
            }
            "-3" => {
                protocol = Protocol::Resp3;
                args.next();
            }
            "-2" => {
                protocol = Protocol::Resp2;
                args.next();
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ => break,
        }
    }
    let command: Vec<String> = args.collect();
    if command.is_empty() {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }

    // One connection on one I/O thread is all a single command needs.
    let received = Arc::new(Received::default());
    let engine = match builder
        .address(addr)
        .protocol(protocol)
        .io_threads(1)
        .observer(received.clone())
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };

    // Error replies print like redis-cli's; connection failures go to stderr.
    let (tx, rx) = mpsc::channel();
    let log = received.clone();
    engine.command_then(0, &command, move |reply| {
        let text = match reply {
            Ok(v) => Ok(format_reply(&v)),
            Err(Error::Reply { message, .. }) => Ok(format!("(error) {message}\n")),
            Err(e) => Err(e),
        };
        if let Ok(t) = &text {
            log.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(t.clone());
        }
        let _ = tx.send(text);
    });
    let outcome = rx.recv();
    // A push may also come right behind the reply (Valkey sends the one of
    // `DEBUG PROTOCOL push` after it): a PING's reply marks the end.
    if matches!(outcome, Ok(Ok(_))) {
        let _ = engine.command(["PING"]);
    }
    let mut out = std::io::stdout().lock();
    for text in received
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain(..)
    {
        let _ = out.write_all(text.as_bytes());
    }
    let _ = out.flush();
    let code = match outcome {
        Ok(Ok(_)) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!("the engine stopped before the reply");
            ExitCode::FAILURE
        }
    };
    engine.shutdown();
    code
}
