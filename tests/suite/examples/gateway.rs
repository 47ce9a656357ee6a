//! The chat gateway (`examples/gateway`) in a real browser, on a cluster
//! with replicas (Redis 7 and Valkey 9): two gateway processes, a headless
//! Chromium on each one's page, both pages in the same three rooms. Each
//! page types its messages into the rooms' forms; halfway through, the
//! primary of one room is failed over (`CLUSTER FAILOVER`) while they keep
//! typing. At the end every message either page sent must be in both
//! pages exactly once, each sender's in the order it sent them, and the
//! two pages must show each room in the same order: missing, duplicated,
//! reordered, foreign and disagreeing rooms are counted and must all be 0.
//! The failover must have given both pages a gap (which they answer with a
//! history reload), and both gateways must shut down cleanly on SIGTERM. A
//! screenshot of one page is left at `target/gateway-screenshot-KIND.png`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::{kinds, ChildGuard, Cluster, ServerKind};

use crate::support::browser::{target_file, Browser, Page};
use crate::support::examples::bin_of;

/// The rooms both pages join; the failover hits the first one's primary.
const ROOMS: [&str; 3] = ["lobby", "ops", "random"];

/// Messages each page sends to each room.
const PER_ROOM: u32 = 40;

/// Rounds (one message per page and room) sent before the failover.
const BEFORE: u32 = 10;

/// Pace of the rounds sent while the failover runs.
const PACE: Duration = Duration::from_millis(40);

/// The gateways' partitions, so that the test knows each room's slot.
const PARTITIONS: u32 = 16;

/// How long starting, joining and the final delivery may take.
const BOUND: Duration = Duration::from_secs(60);

/// A page in a browser of its own, on its own gateway.
struct Client {
    name: &'static str,
    browser: Browser,
    page: Page,
}

impl Client {
    fn eval(&mut self, js: &str) -> Value {
        self.browser.eval(&self.page, js)
    }

    fn wait(&mut self, what: &str, condition: &str) {
        let waited = self.browser.wait_for(&self.page, condition, BOUND);
        let report = self.eval("chatReport()");
        assert!(
            waited.is_ok(),
            "{}: {what}: not within {BOUND:?}: {report}",
            self.name
        );
    }

    /// Types `text` into `room`'s form and submits it, as a person would.
    fn type_message(&mut self, room: &str, text: &str) {
        self.eval(&format!(
            "(f => {{ f.elements.text.value = {}; f.requestSubmit(); }})\
             (document.querySelector('section[data-room=\"{room}\"] form'))",
            json!(text)
        ));
    }

    /// Sends round `n`: one message to each room (its text names the
    /// room, so that one shown in another room counts as foreign).
    fn send_round(&mut self, n: u32) {
        for room in ROOMS {
            self.type_message(room, &format!("{room} #{n}"));
        }
    }
}

/// One gateway process, stopped on drop.
struct Gateway {
    url: String,
    lines: mpsc::Receiver<String>,
    process: ChildGuard,
}

impl Gateway {
    fn start(bin: &Path, seed: SocketAddr, name: &str) -> Gateway {
        let child = Command::new(bin)
            .args(["--cluster", &seed.to_string(), "--listen", "127.0.0.1:0"])
            .args(["--name", name, "--partitions", &PARTITIONS.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the gateway starts");
        let mut process = ChildGuard::new(child, None);
        let stdout = process.child().stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let first = lines.recv_timeout(BOUND).unwrap_or_default();
        let url = first
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("{name}: expected `listening on URL`, got {first:?}"))
            .to_string();
        Gateway {
            url,
            lines,
            process,
        }
    }

    /// SIGTERM: it must disconnect its pages, close its instance, say
    /// `closed` and exit within the grace period.
    fn stop(mut self, name: &str) {
        let graceful = self.process.stop();
        let said: Vec<String> = self.lines.try_iter().collect();
        assert!(
            graceful && said.iter().any(|l| l == "closed"),
            "{name}: no clean shutdown on SIGTERM (graceful={graceful}, printed {said:?})"
        );
    }
}

#[test]
fn gateway_pages_get_every_message_in_order_across_a_failover() {
    let bin = bin_of("shardsub-gateway", "shardsub-gateway");
    for kind in kinds() {
        run(kind, &bin);
    }
}

fn run(kind: ServerKind, bin: &Path) {
    let started = Instant::now();
    let mut cluster = Cluster::start(kind, 3, 1).expect("cluster");
    let seed = cluster.seed_addrs()[0];
    let names = ["east", "west"];
    let gateways = names.map(|name| Gateway::start(bin, seed, name));
    let mut clients: Vec<Client> = names
        .iter()
        .zip(&gateways)
        .map(|(&name, gateway)| {
            let mut browser = Browser::start(&format!("{kind:?}-{name}"), (1000, 720));
            let page = browser.open(&gateway.url);
            Client {
                name,
                browser,
                page,
            }
        })
        .collect();

    // Each page joins the rooms through its join form, with its own name.
    for c in &mut clients {
        c.wait("the WebSocket open", "chatReport().socket === 'open'");
        for room in ROOMS {
            c.eval(&format!(
                "(f => {{ f.elements.nick.value = '{}'; f.elements.room.value = '{room}'; \
                 f.requestSubmit(); }})(document.getElementById('join'))",
                c.name
            ));
        }
        c.wait(
            "the rooms joined and loaded",
            &format!(
                "(r => Object.keys(r.rooms).length === {} && Object.values(r.rooms)\
                 .every(x => x.joined && !x.reloading))(chatReport())",
                ROOMS.len()
            ),
        );
    }

    // The primary that has the first room, and its replica.
    let partitions = shardcore::Partitions::new(PARTITIONS).unwrap();
    let channel = format!("room:{}", ROOMS[0]);
    let slot = partitions.slot(partitions.partition_of(channel.as_bytes()));
    let primary = cluster.owner_of_slot(slot).expect("an owner");
    let replica = cluster.replicas_of(primary)[0];

    for n in 0..BEFORE {
        for c in &mut clients {
            c.send_round(n);
        }
    }
    for c in &mut clients {
        c.wait("the first rounds sent", "chatReport().pending === 0");
    }
    // The failover runs on a thread while both pages keep typing.
    let mut n = BEFORE;
    let failover_took = std::thread::scope(|s| {
        let failover = s.spawn(|| {
            let t = Instant::now();
            cluster.failover(replica).expect("failover");
            t.elapsed()
        });
        while n < PER_ROOM {
            for c in &mut clients {
                c.send_round(n);
            }
            n += 1;
            if failover.is_finished() {
                break;
            }
            std::thread::sleep(PACE);
        }
        failover.join().expect("the failover thread")
    });
    let during = n - BEFORE;
    for n in n..PER_ROOM {
        for c in &mut clients {
            c.send_round(n);
        }
    }

    // Everything sent (acknowledged) and in both pages, or the bound.
    let expected = 2 * PER_ROOM as usize;
    let done = format!(
        "(r => r.pending === 0 && Object.values(r.rooms)\
         .every(x => !x.reloading && x.messages.length >= {expected}))(chatReport())"
    );
    // One deadline for both pages: a failing run ends within BOUND.
    let deadline = Instant::now() + BOUND;
    let mut waited = Vec::new();
    for c in &mut clients {
        let left = deadline.saturating_duration_since(Instant::now());
        waited.push(c.browser.wait_for(&c.page, &done, left));
    }
    let reports: Vec<Value> = clients.iter_mut().map(|c| c.eval("chatReport()")).collect();

    // A picture of the first page, left for people to look at.
    let shot = target_file(&format!(
        "gateway-screenshot-{}.png",
        format!("{kind:?}").to_lowercase()
    ));
    let east = &mut clients[0];
    east.browser.screenshot(&east.page, &shot);
    eprintln!("{kind:?}: screenshot of the east page: {}", shot.display());

    let check = Check::of(&names, &reports);
    eprintln!(
        "{kind:?}: {} messages per page ({during} rounds during the failover of node \
         {primary}, which took {failover_took:?}); waits {waited:?}; {check}; counters \
         east {} west {}; {:?} in all",
        ROOMS.len() * expected,
        reports[0]["counters"],
        reports[1]["counters"],
        started.elapsed()
    );
    assert_eq!(check.failed(), 0, "{kind:?}: {check}\n{reports:#?}");
    for (name, report) in names.iter().zip(&reports) {
        let gaps = report["counters"]["gaps"].as_u64().unwrap_or(0);
        assert!(
            gaps >= 1,
            "{kind:?} {name}: the failover gave no gap: {report}"
        );
    }

    drop(clients);
    for (gateway, name) in gateways.into_iter().zip(names) {
        gateway.stop(name);
    }
}

/// What the pages show against what they sent, counted.
#[derive(Debug, Default)]
struct Check {
    /// A message sent that a page does not show.
    missing: usize,
    /// A message a page shows more than once (each copy past the first).
    duplicated: usize,
    /// A message a page shows before one its sender sent earlier.
    reordered: usize,
    /// A line that is no message sent to that room.
    foreign: usize,
    /// Rooms the two pages show in different orders.
    disagreeing: usize,
}

impl Check {
    fn of(names: &[&str; 2], reports: &[Value]) -> Check {
        let mut check = Check::default();
        for room in ROOMS {
            // Each page's (sender, text) lines for the room, in order.
            let lists: Vec<Vec<(String, String)>> = reports
                .iter()
                .map(|r| {
                    let lines = r["rooms"][room]["messages"].as_array().cloned();
                    let line = |m: &Value| {
                        (
                            m[0].as_str().unwrap_or("").into(),
                            m[1].as_str().unwrap_or("").into(),
                        )
                    };
                    lines.unwrap_or_default().iter().map(line).collect()
                })
                .collect();
            for list in &lists {
                check.add(names, room, list);
            }
            if lists[0] != lists[1] {
                check.disagreeing += 1;
            }
        }
        check
    }

    /// One page's list for `room`.
    fn add(&mut self, names: &[&str; 2], room: &str, list: &[(String, String)]) {
        let mut seen: HashMap<(&str, u32), usize> = HashMap::new();
        let mut last: HashMap<&str, u32> = HashMap::new();
        for (from, text) in list {
            let sender = names.iter().find(|&&n| n == from);
            let n = text
                .strip_prefix(room)
                .and_then(|t| t.strip_prefix(" #"))
                .and_then(|t| t.parse::<u32>().ok())
                .filter(|&n| n < PER_ROOM);
            let (Some(&sender), Some(n)) = (sender, n) else {
                self.foreign += 1;
                continue;
            };
            let copies = seen.entry((sender, n)).or_default();
            *copies += 1;
            if *copies > 1 {
                self.duplicated += 1;
                continue;
            }
            if last.get(sender).is_some_and(|&l| n < l) {
                self.reordered += 1;
            }
            last.insert(sender, n);
        }
        self.missing += names.len() * PER_ROOM as usize - seen.len();
    }

    fn failed(&self) -> usize {
        self.missing + self.duplicated + self.reordered + self.foreign + self.disagreeing
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "missing={} duplicated={} reordered={} foreign={} disagreeing_rooms={}",
            self.missing, self.duplicated, self.reordered, self.foreign, self.disagreeing
        )
    }
}
