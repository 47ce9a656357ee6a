//! Running a table's commands: builds loudly, measuring steps with their
//! stdout both shown and captured, each under a time limit.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::registry::{Cmd, Program};
use crate::run::{self, cargo, root};

/// Where the commands run and what wraps the measuring ones.
pub struct Context {
    /// `flock -x` this file around each measuring step.
    pub lock: Option<PathBuf>,
    target: PathBuf,
    peers_target: PathBuf,
}

impl Context {
    pub fn new(lock: Option<PathBuf>) -> Self {
        let custom = std::env::var_os("CARGO_TARGET_DIR").map(|d| root().join(d));
        Self {
            lock,
            target: custom.clone().unwrap_or_else(|| root().join("target")),
            peers_target: custom.unwrap_or_else(|| root().join("benches/peers/target")),
        }
    }

    /// The root workspace's target directory.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Where callgrind files go: `<target>/xtask-bench`.
    pub fn scratch(&self) -> PathBuf {
        self.target.join("xtask-bench")
    }

    fn arg(&self, arg: &str) -> String {
        arg.replace("{peers_target}", &self.peers_target.display().to_string())
            .replace("{scratch}", &self.scratch().display().to_string())
    }

    fn command(&self, cmd: &Cmd, env: &[(&'static str, String)], measured: bool) -> Command {
        let mut inner = match &cmd.program {
            Program::Cargo => cargo(),
            Program::Target(path) => Command::new(self.target.join(path)),
            Program::Script(path) => Command::new(root().join(path)),
            Program::Callgrind { out, binary, extra } => {
                let mut c = Command::new("valgrind");
                c.arg("--tool=callgrind")
                    .arg(format!(
                        "--callgrind-out-file={}",
                        self.scratch().join(out).display()
                    ))
                    .args(*extra)
                    .arg(self.target.join(binary));
                c
            }
        };
        inner.args(cmd.args.iter().map(|a| self.arg(a)));
        let mut command = match (&self.lock, measured) {
            (Some(lock), true) => {
                let mut c = Command::new("flock");
                c.arg("-x")
                    .arg(lock)
                    .arg(inner.get_program())
                    .args(inner.get_args());
                c
            }
            _ => inner,
        };
        command
            .current_dir(root())
            .stdin(Stdio::null())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .envs(cmd.env.iter().map(|(k, v)| (*k, v.as_str())));
        command
    }

    /// The command line as it will run (extra environment first).
    pub fn show(&self, cmd: &Cmd, measured: bool) -> String {
        let command = self.command(cmd, &[], measured);
        let env: String = cmd.env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
        format!("{env}{}", run::show(&command))
    }

    /// Runs a build command, output shown.
    ///
    /// # Errors
    ///
    /// It could not start or failed.
    pub fn build(&self, cmd: &Cmd, env: &[(&'static str, String)]) -> Result<(), String> {
        run::status(&mut self.command(cmd, env, false))
    }

    /// Runs a measuring step, showing and returning its stdout; past
    /// `limit` it is killed with every process it started.
    ///
    /// # Errors
    ///
    /// It could not start, failed, or ran past the limit.
    pub fn measure(
        &self,
        cmd: &Cmd,
        env: &[(&'static str, String)],
        limit: Duration,
    ) -> Result<String, String> {
        let mut command = self.command(cmd, env, true);
        let line = self.show(cmd, true);
        println!("xtask: $ {line}");
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("`{line}` could not run: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut all = String::new();
            for text in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("{text}");
                let _ = std::io::stdout().flush();
                all.push_str(&text);
                all.push('\n');
            }
            let _ = tx.send(all);
        });
        let captured = match rx.recv_timeout(limit) {
            Ok(text) => text,
            Err(_) => {
                kill_tree(child.id());
                let _ = child.wait();
                return Err(format!(
                    "`{line}` ran past its {} s limit and was killed",
                    limit.as_secs()
                ));
            }
        };
        let status = child
            .wait()
            .map_err(|e| format!("`{line}`: wait failed: {e}"))?;
        if status.success() {
            Ok(captured)
        } else {
            Err(format!("`{line}` failed ({status})"))
        }
    }
}

/// The parent PID from a `/proc/<pid>/stat` line (after the `(comm)`).
fn parent_of(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// SIGKILL to `pid` and all its descendants (found in `/proc`), by PID.
fn kill_tree(pid: u32) {
    let mut parents = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(p) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(ppid) = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|s| parent_of(&s))
            {
                parents.push((p, ppid));
            }
        }
    }
    let mut tree = vec![pid];
    let mut index = 0;
    while let Some(&p) = tree.get(index) {
        tree.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        index += 1;
    }
    let ids: Vec<String> = tree.iter().map(u32::to_string).collect();
    eprintln!("xtask: killing {}", ids.join(" "));
    let _ = Command::new("kill").arg("-KILL").args(&ids).status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_parent_pid_past_the_command_name() {
        assert_eq!(parent_of("42 (a b) c) S 7 42 42 0"), Some(7));
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn a_step_past_its_limit_is_killed() {
        let ctx = Context::new(None);
        let cmd = Cmd {
            program: Program::Script("/bin/sh"),
            args: vec!["-c".into(), "echo '| a |'; sleep 30".into()],
            env: Vec::new(),
        };
        let started = std::time::Instant::now();
        let err = ctx
            .measure(&cmd, &[], Duration::from_millis(300))
            .unwrap_err();
        assert!(err.contains("limit"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10));
        let ok = Cmd {
            args: vec!["-c".into(), "echo '| a |'".into()],
            ..cmd
        };
        assert_eq!(
            ctx.measure(&ok, &[], Duration::from_secs(10)).unwrap(),
            "| a |\n"
        );
    }
}
