//! Servers do not outlive a test process that is killed outright (no
//! destructors run): the per-server watchdog takes them down.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_ENV: &str = "TESTKIT_WATCHDOG_CHILD";

/// Run only as the child of the test below: start a server, report its
/// pid, then wait to be killed (bounded).
#[test]
#[ignore = "run by servers_die_with_a_killed_test_process"]
fn child_holds_a_server() -> Result<(), testkit::Error> {
    if std::env::var_os(CHILD_ENV).is_none() {
        return Ok(());
    }
    let server = testkit::Server::start(testkit::kinds()[0])?;
    println!("server-pid {} {}", server.pid(), server.dir().display());
    std::thread::sleep(Duration::from_secs(30));
    Ok(())
}

#[test]
fn servers_die_with_a_killed_test_process() -> Result<(), testkit::Error> {
    let exe = std::env::current_exe().expect("test binary path");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "child_holds_a_server",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child test");
    let stdout = child.stdout.take().expect("piped stdout");
    let pid = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("server-pid ").map(str::to_string));
    let _ = child.kill(); // SIGKILL: no destructor runs in the child.
    let _ = child.wait();
    let line = pid.expect("the child reported its server's pid");
    let (pid, dir) = line.split_once(' ').expect("pid and dir");
    let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
    testkit::wait_for(
        "the orphaned server to die",
        Duration::from_secs(10),
        || Ok((!proc_dir.exists()).then_some(())),
    )?;
    let dir = std::path::PathBuf::from(dir);
    testkit::wait_for("its scratch dir to go", Duration::from_secs(10), || {
        Ok((!dir.exists()).then_some(()))
    })
}
