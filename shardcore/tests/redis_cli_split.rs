//! `cluster_create_ranges` against the real `redis-cli --cluster create` at
//! 78 masters, the smallest size where its single-precision float cursor
//! lands a cut on the other side of a half slot (master 68 starts at 14284,
//! not the exact 14283). redis-cli prints its plan and then asks for
//! confirmation; with stdin closed it stops there and changes nothing.
//! redis-cli's arithmetic does not depend on the server kind; the loop over
//! kinds only checks that both kinds' nodes are accepted.

use std::process::{Command, Stdio};

use shardcore::{cluster_create_ranges, ideal_ranges};
use testkit::Server;

const MASTERS: u16 = 78;

/// `Master[i] -> Slots a - b` lines, wherever redis-cli's colour codes put them.
fn parse_plan(output: &str) -> Vec<(usize, u16, u16)> {
    let mut plan = Vec::new();
    for line in output.lines() {
        let Some(at) = line.find("Master[") else {
            continue;
        };
        let rest = &line[at + "Master[".len()..];
        let Some((index, rest)) = rest.split_once("] -> Slots ") else {
            continue;
        };
        let Some((a, b)) = rest.split_once(" - ") else {
            continue;
        };
        if let (Ok(i), Ok(a), Ok(b)) = (index.parse(), a.trim().parse(), b.trim().parse()) {
            plan.push((i, a, b));
        }
    }
    plan
}

#[test]
fn float_cursor_quirk_matches_redis_cli() {
    let cli = testkit::redis_cli().expect("redis-cli");
    for kind in testkit::kinds() {
        // Started concurrently: each start waits for its server to answer.
        let servers: Vec<Server> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..MASTERS)
                .map(|_| scope.spawn(move || Server::builder(kind).cluster(true).start()))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .expect("start thread")
                        .expect("start cluster-mode server")
                })
                .collect()
        });
        let output = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(servers.iter().map(|s| s.addr().to_string()))
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli");
        let text = String::from_utf8_lossy(&output.stdout);
        let plan = parse_plan(&text);
        let want: Vec<(usize, u16, u16)> = cluster_create_ranges(MASTERS)
            .into_iter()
            .enumerate()
            .map(|(i, r)| (i, *r.start(), *r.end()))
            .collect();
        assert_eq!(plan, want, "{}: redis-cli printed:\n{text}", kind.name());
        assert_eq!(plan[68].1, 14284);
        assert_eq!(
            *ideal_ranges(MASTERS)[68].start(),
            14283,
            "exact arithmetic differs"
        );
        // Stopped concurrently too.
        std::thread::scope(|scope| {
            for server in servers {
                scope.spawn(move || drop(server));
            }
        });
    }
}
