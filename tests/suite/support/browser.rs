//! A real browser for tests: headless Chromium (Debian's `chromium`
//! package, which `cargo xtask install` installs), driven over its DevTools
//! protocol. [`Browser::start`] runs one with a scratch profile and a
//! DevTools port the kernel picks (read from its stderr), and connects;
//! [`Browser::open`] loads a page in it, [`Page::eval`] runs JavaScript
//! there and returns the value, [`Page::screenshot`] writes a PNG. Every
//! wait is bounded. The browser is closed on drop (`Browser.close`, then
//! SIGTERM and SIGKILL by pid) and its profile removed.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use testkit::ChildGuard;
use tungstenite::{Message, WebSocket};

/// Points the tests at another Chromium binary.
pub const CHROMIUM_ENV: &str = "SHARDSUB_CHROMIUM";

/// How long Chromium may take to start and say where DevTools listens.
const START: Duration = Duration::from_secs(30);

/// How long one DevTools command may take.
const COMMAND: Duration = Duration::from_secs(30);

/// One headless Chromium process and the DevTools connection to it.
pub struct Browser {
    socket: WebSocket<TcpStream>,
    next_id: u64,
    /// Its stderr's last lines, for failure messages.
    log: Arc<Mutex<Vec<String>>>,
    /// Last: the process is stopped (by pid) after the connection is closed.
    _process: ChildGuard,
}

/// A page (a tab) of a [`Browser`]: its DevTools session.
pub struct Page {
    session: String,
}

impl Browser {
    /// Starts headless Chromium (as `SHARDSUB_CHROMIUM`, else `chromium`
    /// on the `PATH`) with a scratch profile and a window of `width` ×
    /// `height` pixels, and connects to it.
    ///
    /// # Panics
    ///
    /// When it cannot be started or does not listen in time.
    pub fn start(label: &str, (width, height): (u32, u32)) -> Browser {
        let binary = std::env::var(CHROMIUM_ENV).unwrap_or_else(|_| "chromium".into());
        let profile =
            std::env::temp_dir().join(format!("shardsub-chromium-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        let child = Command::new(&binary)
            .args([
                "--headless",
                // Tests run as root, where Chromium's sandbox cannot start.
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                // Timers run at full speed in a tab nobody looks at.
                "--disable-background-timer-throttling",
                "--disable-renderer-backgrounding",
                "--remote-debugging-port=0",
                &format!("--window-size={width},{height}"),
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{binary} did not start ({e}): install Debian's chromium \
                     (`cargo xtask install`) or set {CHROMIUM_ENV}"
                )
            });
        let mut process = ChildGuard::new(child, Some(profile));
        // Its stderr is read to the end on a thread (a full pipe would stop
        // it); the DevTools address is passed on, the rest kept for errors.
        let stderr = process.child().stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let keep = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split("DevTools listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
                let mut log = keep.lock().unwrap_or_else(|p| p.into_inner());
                log.push(line);
                let over = log.len().saturating_sub(40);
                log.drain(..over);
            }
        });
        let Ok(url) = rx.recv_timeout(START) else {
            let log = log.lock().unwrap_or_else(|p| p.into_inner()).join("\n");
            panic!("{binary} did not say where DevTools listens within {START:?}:\n{log}");
        };
        let socket = connect(&url);
        Browser {
            socket,
            next_id: 0,
            log,
            _process: process,
        }
    }

    /// Opens `url` in a new page and waits (bounded) until it has loaded.
    pub fn open(&mut self, url: &str) -> Page {
        let target = self.call(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let target_id = target["targetId"]
            .as_str()
            .expect("a target id")
            .to_string();
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
        );
        let page = Page {
            session: attached["sessionId"]
                .as_str()
                .expect("a session")
                .to_string(),
        };
        self.call(Some(&page), "Page.navigate", json!({ "url": url }));
        let loaded = self.wait_for(&page, "document.readyState === 'complete'", COMMAND);
        assert!(loaded.is_ok(), "{url} did not load within {COMMAND:?}");
        page
    }

    /// The value of JavaScript `expression` in `page` (awaited if it is a
    /// promise).
    ///
    /// # Panics
    ///
    /// When it throws, or the browser does not answer in time.
    pub fn eval(&mut self, page: &Page, expression: &str) -> Value {
        let reply = self.call(
            Some(page),
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
        );
        if let Some(e) = reply.get("exceptionDetails") {
            panic!("{expression}: threw {e}");
        }
        reply["result"]["value"].clone()
    }

    /// Evaluates `condition` in `page` until it is `true`, up to `bound`;
    /// returns how long that took, or `Err` with the time waited when it
    /// is still not true after `bound`.
    pub fn wait_for(
        &mut self,
        page: &Page,
        condition: &str,
        bound: Duration,
    ) -> Result<Duration, Duration> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            if self.eval(page, condition) == Value::Bool(true) {
                return Ok(start.elapsed());
            }
            if start.elapsed() >= bound {
                return Err(start.elapsed());
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// Writes a PNG of what `page` shows to `path`.
    pub fn screenshot(&mut self, page: &Page, path: &Path) {
        let shot = self.call(
            Some(page),
            "Page.captureScreenshot",
            json!({ "format": "png" }),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG");
        std::fs::write(path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// Sends one DevTools command (to `page`'s session, or to the browser)
    /// and returns its result, passing over the events that come first.
    fn call(&mut self, page: Option<&Page>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut command = json!({ "id": id, "method": method, "params": params });
        if let Some(page) = page {
            command["sessionId"] = json!(page.session);
        }
        self.socket
            .send(Message::Text(command.to_string().into()))
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        let deadline = Instant::now() + COMMAND;
        loop {
            assert!(
                Instant::now() < deadline,
                "{method}: no answer in {COMMAND:?}; browser log:\n{}",
                self.log_tail()
            );
            let reply = match self.socket.read() {
                Ok(Message::Text(text)) => text,
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(e) => panic!("{method}: {e}; browser log:\n{}", self.log_tail()),
            };
            let reply: Value = serde_json::from_str(reply.as_str()).expect("DevTools sends JSON");
            if reply["id"].as_u64() != Some(id) {
                continue; // an event, or the answer to an earlier command
            }
            if let Some(error) = reply.get("error") {
                panic!("{method}: {error}");
            }
            return reply["result"].clone();
        }
    }

    fn log_tail(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join("\n")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Asked to close, it ends its own child processes; the guard then
        // reaps it (or kills it by pid) and removes the profile.
        let close = json!({ "id": 0, "method": "Browser.close" });
        let _ = self.socket.send(Message::Text(close.to_string().into()));
        let _ = self.socket.close(None);
    }
}

/// Connects to the DevTools WebSocket at `url` (`ws://127.0.0.1:PORT/…`),
/// with a read timeout so that every wait on it stays bounded.
fn connect(url: &str) -> WebSocket<TcpStream> {
    let host = url
        .strip_prefix("ws://")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("unexpected DevTools address {url}"));
    let stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("connect {host}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("read timeout");
    let (socket, _) = tungstenite::client(url, stream).unwrap_or_else(|e| panic!("{url}: {e}"));
    socket
}

/// Where a test writes a file it leaves for people to look at: beside
/// the test binary's target directory (`target/NAME`).
pub fn target_file(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let target = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("target dir");
    target.join(name)
}
